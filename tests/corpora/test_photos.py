"""The photo corpus build end to end on packages of pictures the test makes (no network): designs, near
duplicates, splits by photograph, patch pairs, the manifest, reuse, and the one-sentence errors."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_debian_mirror import make_deb

from bpd.config import ImageTaskConfig
from bpd.config.corpora import PhotosOptions
from bpd.config.task import ImageCorpora
from corpora.debian import ArchiveError
from corpora.photos import build as build_mod
from corpora.photos.build import (
    PhotoOptions,
    cut_patches,
    duplicate_groups,
    open_photos,
    photo_patches,
    prepare_photos,
    resize_short_side,
)
from corpora.photos.downsample import area_downsample
from corpora.photos.sources import PhotoSource, _file_path, _kde_design

N_PHOTOS = 14


def _photo(i: int, w: int, h: int) -> Image.Image:
    """A textured picture unlike the others: a gradient in its own direction and colour, plus seeded noise."""
    rng = np.random.default_rng(i)
    yy, xx = np.mgrid[0:h, 0:w] / max(w, h)
    angle = 2 * np.pi * i / N_PHOTOS
    base = 0.5 + 0.5 * np.sin(8 * (np.cos(angle) * xx + np.sin(angle) * yy) + i)
    colour = rng.uniform(0.3, 1.0, 3)
    img = 255 * base[..., None] * colour + rng.normal(0, 12, (h, w, 3))
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))


def _jpeg(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=92)
    return buf.getvalue()


@pytest.fixture
def debs(monkeypatch, tmp_path) -> Path:
    """Two packages: ``snaps`` with one photograph per file, ``walls`` with one design at two resolutions and
    a copy of snaps' photo 0 (a near duplicate across packages)."""
    folder = tmp_path / "debs"
    folder.mkdir()
    snaps = {f"./usr/share/snaps/p{i:02d}.jpg": _jpeg(_photo(i, 200, 120)) for i in range(N_PHOTOS)}
    walls = {"./usr/share/wallpapers/Dune/contents/images/400x240.jpg": _jpeg(_photo(100, 400, 240)),
             "./usr/share/wallpapers/Dune/contents/images/200x120.jpg": _jpeg(_photo(100, 200, 120)),
             "./usr/share/wallpapers/Copy/contents/images/300x180.jpg": _jpeg(_photo(0, 300, 180))}
    make_deb(folder / "snaps_1.0_all.deb", "snaps", "1.0", snaps)
    make_deb(folder / "walls_2.0_all.deb", "walls", "2.0", walls)
    buf = io.BytesIO()
    _photo(200, 60, 40).save(buf, format="PNG")
    make_deb(folder / "heads_3.0_all.deb", "heads", "3.0", {"./usr/share/heads/a/one.png": buf.getvalue(),
                                                            "./usr/share/heads/b/one.png": buf.getvalue()})
    fake = {"snaps": PhotoSource("snaps", "snaps", ("./usr/share/snaps/*.jpg",), "CC0"),
            "walls": PhotoSource("walls", "walls", ("./usr/share/wallpapers/*/contents/images/*.jpg",), "GPL-2+",
                                 design=_kde_design),
            "heads": PhotoSource("heads", "heads", ("./usr/share/heads/*/*.png",), "PD", design=_file_path,
                                 role="faces")}
    monkeypatch.setattr(build_mod, "SOURCES", fake)
    monkeypatch.setattr(build_mod, "REFERENCE_MANIFEST", tmp_path / "no-reference.json")
    return folder


OPTS = PhotoOptions(sources=("snaps", "walls", "heads"), short_sides=(96, 64), dev_frac=0.15, test_frac=0.2)


def test_build_holds_out_by_photograph(debs, tmp_path, capsys):
    folder = prepare_photos(tmp_path / "cache", OPTS, deb_dir=debs, progress=False)
    m = json.loads((folder / "manifest.json").read_text())
    names = [p["name"] for p in m["photo_list"]]
    # one design at two resolutions is one photograph, read from its largest file
    assert names.count("walls/Dune") == 1
    assert next(p for p in m["photo_list"] if p["name"] == "walls/Dune")["size"] == [400, 240]
    assert len(names) == N_PHOTOS + 2
    # the copy of p00 in the other package is its near duplicate, so both are on one side
    assert m["near_duplicates"] == {"walls/Copy": "snaps/p00"}
    split = {p["name"]: p["split"] for p in m["photo_list"]}
    assert split["walls/Copy"] == split["snaps/p00"]
    data = open_photos(folder)
    # the face set: each picture whole, its centred square area-resized to one 32x32 image, never split
    assert m["faces"] == {"heads": 2}
    assert [f["name"] for f in m["face_list"]] == ["heads/heads/a/one", "heads/heads/b/one"]
    face_lr, face_hr = data.pop("faces")
    square = np.asarray(_photo(200, 60, 40).crop((10, 0, 50, 40)).resize((32, 32), Image.Resampling.BOX))
    np.testing.assert_array_equal(face_hr[0], square)
    np.testing.assert_array_equal(face_lr, area_downsample(np.asarray(face_hr), 4))
    seen: dict[str, set[int]] = {}
    for s, (lr, hr) in data.items():
        assert isinstance(hr, np.memmap) and hr.dtype == np.uint8 and hr.shape[1:] == (32, 32, 3)
        assert lr.shape == (len(hr), 8, 8, 3) and len(hr) == m["patches"][s] > 0
        np.testing.assert_array_equal(lr, area_downsample(np.asarray(hr), 4))
        photo = np.load(folder / f"{s}_photo.npy")
        seen[s] = set(photo.tolist())
        assert {m["photo_list"][i]["split"] for i in seen[s]} == {s}
        assert (hr.reshape(len(hr), -1).std(axis=1) >= OPTS.min_std).all()
    assert not (seen["train"] & seen["dev"]) and not (seen["train"] & seen["test"]) and not (seen["dev"] & seen["test"])
    assert len(seen["test"]) >= 2 and len(seen["dev"]) >= 2
    # stored shuffled: the first patches of train come from several photographs
    assert len(set(np.load(folder / "train_photo.npy")[:20].tolist())) > 3
    assert m["packages"]["snaps"]["version"] == "1.0" and len(m["packages"]["walls"]["sha256"]) == 64
    assert sum(m["by_source"]["train"]["patches"].values()) == m["patches"]["train"]
    assert "no reference manifest" in capsys.readouterr().out
    # a second call opens the same build without rebuilding
    assert prepare_photos(tmp_path / "cache", OPTS, deb_dir=debs, progress=False) == folder


def test_same_packages_same_hash_and_resume(debs, tmp_path):
    a = prepare_photos(tmp_path / "a", OPTS, deb_dir=debs, progress=False)
    b_opts_folder = build_mod.corpus_folder(tmp_path / "b", OPTS)
    # a build killed before its manifest: the next run finishes it and gives the same corpus
    (b_opts_folder / ".work").mkdir(parents=True)
    (b_opts_folder / "train_hr.npy").write_bytes(b"half")
    b = prepare_photos(tmp_path / "b", OPTS, deb_dir=debs, progress=False)
    read = [json.loads((f / "manifest.json").read_text()) for f in (a, b)]
    assert read[0]["corpus_hash"] == read[1]["corpus_hash"]
    assert not (b / ".work").exists()


def test_bad_input_gets_one_sentence(debs, tmp_path):
    with pytest.raises(ArchiveError, match="is not a folder"):
        prepare_photos(tmp_path / "c", OPTS, deb_dir=tmp_path / "nope", progress=False)
    with pytest.raises(ValueError, match="choose from"):
        prepare_photos(tmp_path / "c", PhotoOptions(sources=("nope",)), deb_dir=debs, progress=False)
    with pytest.raises(ValueError, match="no photograph source"):
        prepare_photos(tmp_path / "c", PhotoOptions(sources=("heads",)), deb_dir=debs, progress=False)
    with pytest.raises(ArchiveError, match="too few to hold out"):
        prepare_photos(tmp_path / "c", PhotoOptions(sources=("walls",), short_sides=(64,)), deb_dir=debs,
                       progress=False)
    with pytest.raises(ArchiveError, match="make data-sr"):
        open_photos(tmp_path / "nothing")
    with pytest.raises(ValueError, match="task.corpora.photos.fetch"):
        ImageTaskConfig(source="photos", corpora=ImageCorpora(PhotosOptions(fetch="ftp"))).validate()
    with pytest.raises(ValueError, match="drop it for task.source=faces"):
        ImageTaskConfig(source="faces", corpora=ImageCorpora(PhotosOptions(deb_dir="/x"))).validate()


def test_patches_are_cut_on_a_centred_grid_and_never_enlarged():
    img = np.arange(70 * 100 * 3, dtype=np.int64).reshape(70, 100, 3).astype(np.uint8)
    p = cut_patches(img, 32, 32)
    assert p.shape == (2 * 3, 32, 32, 3)
    np.testing.assert_array_equal(p[0], img[3:35, 2:34])  # (70 - 64) // 2, (100 - 96) // 2
    assert cut_patches(img[:20], 32, 32).shape == (0, 32, 32, 3)
    assert resize_short_side(img, 35).shape == (35, 50, 3)
    flat = np.full((64, 64, 3), 7, dtype=np.uint8)
    hr, dropped = photo_patches(flat, PhotoOptions(short_sides=(64, 128)), stride=32)
    assert len(hr) == 0 and dropped == 4  # the 128 side is above the photo's: not enlarged


def test_flatness_per_channel_drops_a_uniform_coloured_patch_and_keys_its_own_corpus(tmp_path, monkeypatch):
    """task.corpora.photos.flat_per_channel: a clear blue sky (three different constants) passes the pooled filter
    and not the per-channel one; a patch that varies in one channel passes both; off, the corpus keeps the key it
    had before the option existed, on, it gets its own; and the task hands the option to the builder."""
    sky = np.empty((64, 64, 3), dtype=np.uint8)
    sky[...] = (90, 150, 230)
    textured = sky.copy()
    textured[..., 2] = np.random.default_rng(0).integers(200, 256, (64, 64))
    pooled, per_channel = PhotoOptions(short_sides=(64,)), PhotoOptions(short_sides=(64,), flat_per_channel=True)
    for img, kept_pooled, kept_per_channel in ((sky, 4, 0), (textured, 4, 4)):
        assert len(photo_patches(img, pooled, stride=32)[0]) == kept_pooled
        assert len(photo_patches(img, per_channel, stride=32)[0]) == kept_per_channel
    blob = json.dumps({**dataclasses.asdict(pooled), "format": build_mod.FORMAT_VERSION}, sort_keys=True)
    old = {k: v for k, v in json.loads(blob).items() if k != "flat_per_channel"}
    import hashlib

    assert pooled.key() == hashlib.sha1(json.dumps(old, sort_keys=True).encode()).hexdigest()[:10]
    assert per_channel.key() != pooled.key()

    from bpd.tasks import image as image_mod

    built = []
    monkeypatch.setattr(image_mod, "prepare_photos", lambda cache, opts, **kw: built.append(opts) or tmp_path)
    image_mod.PhotosCorpus().folder(ImageTaskConfig(source="photos"), PhotosOptions(flat_per_channel=True), tmp_path)
    assert built[0].flat_per_channel


def test_a_default_build_records_the_reference_builds_options():
    """The manifest records the options as the key hashes them: a default build (flat_per_channel false) is
    compared with the committed reference build by hash, not reported as a build of other options."""
    ref = json.loads(build_mod.REFERENCE_MANIFEST.read_text(encoding="utf-8"))
    manifest = {"options": PhotoOptions().recorded(), "corpus_hash": ref["corpus_hash"]}
    assert build_mod.drift_report(manifest).endswith(f"{ref['corpus_hash']}, identical to the reference build")
    assert PhotoOptions(flat_per_channel=True).recorded()["flat_per_channel"] is True


def test_near_duplicates_are_grouped_transitively():
    t = np.array([[0.0] * 4, [5.0] * 4, [9.0] * 4, [100.0] * 4], dtype=np.float32)
    assert duplicate_groups(t, 6.0) == [0, 0, 0, 3]


def task_folder(cache: Path) -> Path:
    """The one photo corpus folder a test built under ``cache``."""
    (folder,) = cache.glob("photos_sr_*")
    return folder


def test_task_serves_the_corpus_and_its_face_set(debs, tmp_path, monkeypatch):
    from bpd.config import DecodeConfig
    from bpd.tasks.image import ImageTask

    cfg = ImageTaskConfig(name="photos_sr", source="photos", lr_size=8, hr_size=32, n_train=None, n_dev=5, n_test=7,
                          corpora=ImageCorpora(PhotosOptions(deb_dir=str(debs))))
    cfg.validate()
    from bpd.tasks import image as image_mod

    monkeypatch.setattr(image_mod, "PhotoOptions", lambda **kw: OPTS)  # the fake packages' sources
    task = ImageTask(cfg, tmp_path / "cache")
    assert len(task.pairs("test")) == 7 and len(task.pairs("dev")) == 5
    assert len(task.pairs("faces:test")) == 2
    assert task.scorer("faces:test", 2).hr.shape == (2, 32, 32, 3)
    # photos:test is the whole test split, which task.n_test caps for test (and for the key)
    whole = np.load(task_folder(tmp_path / "cache") / "test_hr.npy")
    assert len(whole) > 7 and len(task.pairs("photos:test")) == len(whole)
    np.testing.assert_array_equal(task.scorer("photos:test", 2, first=7).hr, whole[7:9])
    DecodeConfig(split="photos:test", ks=[2]).validate(4)
    # the corpus hash is part of the key; where the packages come from is not
    again = ImageTask(dataclasses.replace(cfg, corpora=ImageCorpora(PhotosOptions(fetch="apt"))), tmp_path / "cache")
    assert again.key == task.key
    DecodeConfig(split="faces:test", ks=[2]).validate(4)
    with pytest.raises(ValueError, match="faces:test"):
        DecodeConfig(split="faces:dev", ks=[2]).validate(4)

"""The photo corpus: Debian packages -> photographs -> 32x32 / 8x8 patch pairs held out by photograph.

``prepare_photos`` is what the ``photos`` image source calls. It downloads and unpacks the pinned packages
(:mod:`corpora.photos.sources`) with the Debian text corpus's archive code (apt on Debian bookworm, HTTP from
deb.debian.org elsewhere, or a folder of ``.deb`` files), keeps the largest file of each design, merges near
duplicates (the same picture in two packages, or cropped alike) by their 16x16 grey thumbnails, and deals
whole photographs to train, dev and test. Each photograph is area-resized (Pillow BOX) to a few short sides
and cut into ``hr_size`` patches on a grid (held-out photos without overlap, training photos with stride
``train_stride``); nearly flat patches are dropped; the input is the exact area downsample of each patch
(:func:`corpora.photos.downsample.area_downsample`). The patches are written once, in a seeded shuffled order (so the
first n of a split sample every photo of it), as ``.npy`` files that every run opens memory-mapped, with a
``manifest.json`` (written last) holding every package's version and sha256, the photographs of each split,
counts per source and the hash of each file.

A killed build resumes: packages are downloaded and unpacked once, and each photograph's patches are cached in
the folder's ``.work`` until the arrays are complete.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from corpora.debian import ArchiveError
from corpora.debian.archive import Archive, DebInfo, check_disk, sha256_file
from corpora.debian.build import worker_count
from corpora.debian.mirror import RELEASE, MirrorArchive, open_archive
from corpora.photos.downsample import area_downsample
from corpora.photos.sources import SOURCE_ORDER, SOURCES

#: Bumped when the same packages give other patches.
FORMAT_VERSION = 1
#: The committed manifest of the reference build: a build of the same options is compared against it.
REFERENCE_MANIFEST = Path(__file__).resolve().parents[2] / "results" / "data" / "photos_manifest.json"
#: The patch arrays of a build, per split.
ARRAYS = ("lr", "hr", "photo")
SPLITS = ("train", "dev", "test")
#: The face test set's arrays (``faces_lr.npy`` ...): whole pictures of the ``faces`` sources, never trained on.
FACES = "faces"
THUMB = 16


@dataclass(frozen=True)
class PhotoOptions:
    """What determines the corpus (the folder name carries its hash)."""

    sources: tuple[str, ...] = SOURCE_ORDER
    lr_size: int = 8
    hr_size: int = 32
    # Each photograph at these short sides (never enlarged): large ones give texture, small ones whole objects.
    short_sides: tuple[int, ...] = (360, 240, 160, 96)
    train_stride: int = 16  # held-out photos are cut without overlap (stride hr_size)
    dev_frac: float = 0.05
    test_frac: float = 0.1
    min_std: float = 2.0  # patches whose intensities vary less (sky, flat backgrounds) are dropped
    # How a patch's variation is measured: false, over its R, G and B values pooled, so a uniform coloured patch
    # (a clear blue sky: three different constants) passes; true, in each channel, the patch flat when no channel
    # varies by min_std. Off in the key only when false: the corpora built before it keep their folder.
    flat_per_channel: bool = False
    duplicate_distance: float = 6.0  # mean |difference| of two 16x16 grey thumbnails that marks one photograph
    seed: int = 0

    def recorded(self) -> dict:
        """The options as the key hashes them and the manifest records them: without ``flat_per_channel`` when
        false, so a default build keeps the key, and matches the reference manifest's options, it had before."""
        fields = asdict(self)
        if not self.flat_per_channel:
            del fields["flat_per_channel"]
        return fields

    def key(self) -> str:
        blob = json.dumps({**self.recorded(), "format": FORMAT_VERSION}, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:10]

    def validate(self) -> None:
        unknown = [s for s in self.sources if s not in SOURCES]
        if unknown or not any(SOURCES[s].role == "photos" for s in self.sources):
            raise ValueError(f"unknown photo source(s) {', '.join(unknown) or '(no photograph source given)'}; "
                             f"choose from {', '.join(SOURCE_ORDER)}.")
        if self.lr_size < 1 or self.hr_size % self.lr_size:
            raise ValueError(f"task.hr_size ({self.hr_size}) must be a multiple of task.lr_size ({self.lr_size}).")
        if not self.short_sides or min(self.short_sides) < self.hr_size:
            raise ValueError(f"every short side to cut at must be at least hr_size={self.hr_size} "
                             f"(got {list(self.short_sides)}).")
        if self.train_stride < 1 or not (0 < self.test_frac and 0 < self.dev_frac and self.test_frac
                                         + self.dev_frac < 1):
            raise ValueError("train_stride must be >= 1 and dev_frac, test_frac positive with a sum below 1.")


@dataclass(frozen=True)
class Photo:
    source: str
    design: str
    path: Path  # the file in the unpacked package
    rel: str  # its path in the package, for the manifest
    deb: str  # the .deb it came from (keys its cached patches)
    size: tuple[int, int]  # (width, height)

    @property
    def name(self) -> str:
        return f"{self.source}/{self.design}"


def corpus_folder(cache_dir: Path, opts: PhotoOptions) -> Path:
    return Path(cache_dir) / f"photos_sr_{opts.key()}"


# ---- photographs -----------------------------------------------------------------------------------------


def find_photos(roots: dict[str, Path], infos: dict[str, DebInfo], sources: tuple[str, ...]) -> list[Photo]:
    """The largest file of each design of each source, in source order, then by design name."""
    out: list[Photo] = []
    for name in sources:
        src = SOURCES[name]
        root = roots.get(src.package)
        if root is None:
            continue
        best: dict[str, Photo] = {}
        for f in sorted(root.rglob("*")):
            rel = f.relative_to(root).as_posix()
            # matched as tar matched it when unpacking (``*`` crosses ``/``); a link names a file taken anyway
            if f.is_file() and not f.is_symlink() and any(fnmatch.fnmatchcase("./" + rel, m) for m in src.members):
                with Image.open(f) as im:
                    size = im.size
                p = Photo(name, src.design(rel), f, rel, infos[src.package].filename, size)
                old = best.get(p.design)
                if old is None or size[0] * size[1] > old.size[0] * old.size[1]:
                    best[p.design] = p
        out += [best[d] for d in sorted(best)]
    return out


def load_photo(path: Path, short_side: int) -> np.ndarray:
    """The photograph as (H, W, 3) uint8 RGB; a JPEG is decoded at the smallest DCT scale whose short side is
    still at least ``short_side`` (a 5120x2880 wallpaper decodes 8x faster at an eighth of its size, and every
    patch is cut far below that anyway)."""
    with Image.open(path) as im:
        w, h = im.size
        if im.format == "JPEG" and min(w, h) > short_side:
            s = short_side / min(w, h)
            im.draft("RGB", (max(1, int(w * s)), max(1, int(h * s))))
        return np.asarray(im.convert("RGB"), dtype=np.uint8)


def resize_short_side(img: np.ndarray, short_side: int) -> np.ndarray:
    """Area-resize (Pillow BOX) so that the short side is ``short_side``."""
    h, w = img.shape[:2]
    if min(h, w) == short_side:
        return img
    s = short_side / min(h, w)
    size = (max(short_side, round(w * s)), max(short_side, round(h * s)))
    return np.asarray(Image.fromarray(img).resize(size, Image.Resampling.BOX), dtype=np.uint8)


def thumbnail(img: np.ndarray) -> np.ndarray:
    """A 16x16 grey thumbnail (float32): what near-duplicate photographs share."""
    grey = Image.fromarray(img).convert("L").resize((THUMB, THUMB), Image.Resampling.BOX)
    return np.asarray(grey, dtype=np.float32).reshape(-1)


def cut_patches(img: np.ndarray, size: int, stride: int) -> np.ndarray:
    """Every ``size`` x ``size`` patch on a grid of ``stride``, the grid centred on the image: (N, size, size, 3)."""
    h, w = img.shape[:2]
    if h < size or w < size:
        return np.empty((0, size, size, 3), dtype=np.uint8)
    ny, nx = (h - size) // stride + 1, (w - size) // stride + 1
    y0 = (h - ((ny - 1) * stride + size)) // 2
    x0 = (w - ((nx - 1) * stride + size)) // 2
    out = np.empty((ny * nx, size, size, 3), dtype=np.uint8)
    for i in range(ny):
        for j in range(nx):
            y, x = y0 + i * stride, x0 + j * stride
            out[i * nx + j] = img[y : y + size, x : x + size]
    return out


def photo_patches(img: np.ndarray, opts: PhotoOptions, stride: int) -> tuple[np.ndarray, int]:
    """A photograph's HR patches at every short side it reaches (never enlarged), less the flat ones; and how
    many flat ones were dropped."""
    parts = [cut_patches(resize_short_side(img, s), opts.hr_size, stride)
             for s in sorted(set(opts.short_sides), reverse=True) if s <= min(img.shape[:2])]
    if not parts:
        return np.empty((0, opts.hr_size, opts.hr_size, 3), dtype=np.uint8), 0
    hr = np.concatenate(parts)
    keep = variation(hr, opts.flat_per_channel) >= opts.min_std
    return hr[keep], int((~keep).sum())


def variation(hr: np.ndarray, per_channel: bool) -> np.ndarray:
    """(N,) how much each of the patches ``hr`` (N, H, W, 3) varies: the standard deviation of all its values, or
    with ``per_channel`` the largest of its channels' own standard deviations."""
    if per_channel:
        return hr.reshape(len(hr), -1, hr.shape[-1]).std(axis=1).max(axis=1)
    return hr.reshape(len(hr), -1).std(axis=1)


def face_images(faces: list[Photo], hr_size: int, lr_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(lr, hr) of each face picture: the centred square of its short side, area-resized (Pillow BOX) to
    ``hr_size``; the input is its exact area downsample, as for the patches."""
    hr = np.empty((len(faces), hr_size, hr_size, 3), dtype=np.uint8)
    for i, f in enumerate(faces):
        with Image.open(f.path) as im:
            w, h = im.size
            side = min(w, h)
            box = ((w - side) // 2, (h - side) // 2, (w - side) // 2 + side, (h - side) // 2 + side)
            hr[i] = np.asarray(im.convert("RGB").crop(box).resize((hr_size, hr_size), Image.Resampling.BOX))
    return area_downsample(hr, hr_size // lr_size), hr


def duplicate_groups(thumbs: np.ndarray, distance: float) -> list[int]:
    """For each photograph the index of the first photograph of its near-duplicate group (union-find over every
    pair whose thumbnails differ by less than ``distance`` on average)."""
    n = len(thumbs)
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(n):
        d = np.abs(thumbs[i + 1 :] - thumbs[i]).mean(axis=1) if i + 1 < n else np.empty(0)
        for j in np.nonzero(d < distance)[0]:
            a, b = find(i), find(i + 1 + int(j))
            parent[max(a, b)] = min(a, b)
    return [find(i) for i in range(n)]


def deal_groups(names: list[str], opts: PhotoOptions) -> dict[str, str]:
    """Group name -> split: the groups in the order of a seeded hash of their names, the first ``test_frac`` to
    test, the next ``dev_frac`` to dev. A group's split depends on its name only, not on the other photographs,
    except at the two boundaries."""
    order = sorted(names, key=lambda g: hashlib.sha1(f"{opts.seed}:{g}".encode()).hexdigest())
    n_test = max(1, round(opts.test_frac * len(order)))
    n_dev = max(1, round(opts.dev_frac * len(order)))
    if len(order) < n_test + n_dev + 1:
        raise ArchiveError(f"only {len(order)} distinct photographs were found, too few to hold out dev and test "
                           "ones: add sources (task.photo_sources) or check that the packages were unpacked.")
    return {g: "test" if i < n_test else "dev" if i < n_test + n_dev else "train" for i, g in enumerate(order)}


# ---- the build -------------------------------------------------------------------------------------------


def _fetch(cache_dir: Path, opts: PhotoOptions, deb_dir: Path | None, progress: bool, fetch: str
           ) -> tuple[Archive, dict[str, DebInfo], dict[str, Path], list[str]]:
    archive = open_archive(Path(cache_dir) / "debian_photos", deb_dir=deb_dir, fetch=fetch, progress=progress)
    archive.skipped_files = ()  # the pictures are what this corpus reads
    if isinstance(archive, MirrorArchive):
        print(f"photos: fetching Debian {RELEASE}'s packages over HTTP from {archive.suites[0][0]} (no apt)")
    archive.update()
    wanted = sorted({SOURCES[s].package for s in opts.sources})
    available = archive.candidates(wanted)
    missing = [p for p in wanted if p not in available]
    if missing:
        print(f"photos: {len(missing)} pinned package(s) are not in this release and are skipped: {', '.join(missing)}")
    todo = sum(size for p, (_, size) in available.items() if archive._complete_deb(p) is None)
    check_disk(archive.root, 1.3 * todo / 1e9 + 0.3)
    members = {SOURCES[s].package: list(SOURCES[s].members) for s in opts.sources}
    infos, roots = archive.download_and_extract(available, members, worker_count())
    return archive, infos, roots, missing


def _patch_cache(work: Path, photo: Photo, stride: int) -> Path:
    key = hashlib.sha1(f"{photo.deb}/{photo.rel}/{stride}".encode()).hexdigest()[:12]
    return work / f"{photo.source}_{key}.npz"


def _cut_all(photos: list[Photo], opts: PhotoOptions, work: Path, progress: bool
             ) -> tuple[np.ndarray, dict[int, tuple[Path, Path]]]:
    """Thumbnails of every photograph, and each one's cached patches at both strides (decoded once)."""
    work.mkdir(parents=True, exist_ok=True)
    thumbs = np.empty((len(photos), THUMB * THUMB), dtype=np.float32)
    files: dict[int, tuple[Path, Path]] = {}
    strides = (opts.train_stride, opts.hr_size)
    for i, p in enumerate(tqdm(photos, desc="photos", unit="photo", disable=not progress)):
        paths = tuple(_patch_cache(work, p, s) for s in strides)
        if all(f.is_file() for f in paths):
            with np.load(paths[0]) as z:
                thumbs[i] = z["thumb"]
        else:
            try:
                img = load_photo(p.path, max(opts.short_sides))
            except (OSError, ValueError, Image.DecompressionBombError) as e:
                package_dir = p.path.parents[len(Path(p.rel).parts) - 1]
                raise ArchiveError(f"{p.rel} of {p.deb} could not be decoded ({e}); delete the folder "
                                   f"{package_dir} and run the same command again to unpack it anew.") from e
            thumbs[i] = thumbnail(img)
            for stride, f in zip(strides, paths):
                hr, flat = photo_patches(img, opts, stride)
                tmp = f.with_name(f.name + ".tmp.npz")
                np.savez(tmp, hr=hr, flat=flat, thumb=thumbs[i])
                os.replace(tmp, f)
        files[i] = paths  # type: ignore[assignment]
    return thumbs, files


def _assemble(folder: Path, photos: list[Photo], split_of: list[str], files: dict[int, tuple[Path, Path]],
              opts: PhotoOptions, progress: bool) -> dict:
    """Write each split's arrays in a seeded shuffled order; per-source counts of photographs and patches."""
    counts: dict = {s: {"photos": Counter(), "patches": Counter(), "flat_dropped": Counter()} for s in SPLITS}
    sizes: dict[str, list[tuple[int, int]]] = {s: [] for s in SPLITS}
    for i, p in enumerate(photos):
        s = split_of[i]
        with np.load(files[i][0 if s == "train" else 1]) as z:
            n, flat = len(z["hr"]), int(z["flat"])
        sizes[s].append((i, n))
        counts[s]["photos"][p.source] += 1
        counts[s]["patches"][p.source] += n
        counts[s]["flat_dropped"][p.source] += flat
    factor, hr_size, lr_size = opts.hr_size // opts.lr_size, opts.hr_size, opts.lr_size
    bar = tqdm(total=sum(n for s in SPLITS for _, n in sizes[s]), desc="patches", unit="patch",
               unit_scale=True, disable=not progress)
    for k, split in enumerate(SPLITS):
        total = sum(n for _, n in sizes[split])
        perm = np.random.default_rng([opts.seed, k]).permutation(total)
        tmp = {a: folder / f".{split}_{a}.tmp.npy" for a in ARRAYS}
        hr = np.lib.format.open_memmap(tmp["hr"], "w+", np.uint8, (total, hr_size, hr_size, 3))
        lr = np.lib.format.open_memmap(tmp["lr"], "w+", np.uint8, (total, lr_size, lr_size, 3))
        ph = np.lib.format.open_memmap(tmp["photo"], "w+", np.int32, (total,))
        pos = 0
        for i, n in sizes[split]:
            with np.load(files[i][0 if split == "train" else 1]) as z:
                patches = z["hr"]
            # patch j goes to row perm[pos + j]; written in row order, so the writes walk the file forwards
            order = np.argsort(perm[pos : pos + n])
            at = perm[pos : pos + n][order]
            if n:
                hr[at] = patches[order]
                lr[at] = area_downsample(patches[order], factor)
                ph[at] = i
            pos += n
            bar.update(n)
        for arr in (hr, lr, ph):
            arr.flush()
        del hr, lr, ph
        for a in ARRAYS:
            os.replace(tmp[a], folder / f"{split}_{a}.npy")
    bar.close()
    return {s: {k: dict(v) for k, v in c.items()} for s, c in counts.items()}


def prepare_photos(cache_dir: Path, opts: PhotoOptions, deb_dir: Path | None = None, progress: bool = True,
                   fetch: str = "auto") -> Path:
    """Build (or reuse) the corpus folder for ``opts`` under ``cache_dir`` and return it; ``fetch``: apt, http or
    auto (``corpora.debian.mirror.open_archive``)."""
    opts.validate()
    folder = corpus_folder(cache_dir, opts)
    if is_complete(folder):
        return folder
    t0 = time.perf_counter()
    archive, infos, roots, missing = _fetch(cache_dir, opts, deb_dir, progress, fetch)
    t_fetch = time.perf_counter()
    photos = find_photos(roots, infos, tuple(s for s in opts.sources if SOURCES[s].role == "photos"))
    faces = find_photos(roots, infos, tuple(s for s in opts.sources if SOURCES[s].role == "faces"))
    if not photos:
        raise ArchiveError(f"no photographs were found in the unpacked packages under {archive.pkgs}: delete that "
                           "folder and run the same command again.")
    folder.mkdir(parents=True, exist_ok=True)
    thumbs, files = _cut_all(photos, opts, folder / ".work", progress)
    t_cut = time.perf_counter()
    group = duplicate_groups(thumbs, opts.duplicate_distance)
    deal = deal_groups(sorted({photos[g].name for g in group}), opts)
    split_of = [deal[photos[g].name] for g in group]
    counts = _assemble(folder, photos, split_of, files, opts, progress)
    face_lr, face_hr = face_images(faces, opts.hr_size, opts.lr_size)
    for name, arr in (("lr", face_lr), ("hr", face_hr), ("photo", np.arange(len(faces), dtype=np.int32))):
        np.save(folder / f".{FACES}_{name}.tmp.npy", arr)
        os.replace(folder / f".{FACES}_{name}.tmp.npy", folder / f"{FACES}_{name}.npy")
    t_write = time.perf_counter()
    hashes = {f"{s}_{a}.npy": sha256_file(folder / f"{s}_{a}.npy") for s in (*SPLITS, FACES) for a in ARRAYS}
    patch_hashes = {k: v for k, v in hashes.items() if not k.startswith(FACES)}
    manifest = {
        "options": opts.recorded(),
        "format": FORMAT_VERSION,
        "corpus_hash": _corpus_hash(patch_hashes),  # the photographs' splits: what a model trains and is scored on
        "held_out_hash": _corpus_hash({k: v for k, v in patch_hashes.items() if not k.startswith("train")}),
        "faces_hash": _corpus_hash({k: v for k, v in hashes.items() if k.startswith(FACES)}),
        "files": hashes,
        "patches": {s: int(sum(counts[s]["patches"].values())) for s in SPLITS},
        "photos": {s: int(sum(counts[s]["photos"].values())) for s in SPLITS},
        "by_source": counts,
        "faces": dict(Counter(f.source for f in faces)),
        "face_list": [{"name": f.name, "file": f.rel, "size": list(f.size)} for f in faces],
        "near_duplicates": {photos[i].name: photos[g].name for i, g in enumerate(group) if g != i},
        "photo_list": [{"name": p.name, "file": p.rel, "size": list(p.size), "split": split_of[i]}
                       for i, p in enumerate(photos)],
        "packages": {p: {"version": i.version, "deb": i.filename, "sha256": i.sha256} for p, i in infos.items()},
        "missing_packages": missing,
        "pillow": Image.__version__,
        "seconds": {"download_extract": round(t_fetch - t0, 1), "decode_cut": round(t_cut - t_fetch, 1),
                    "write": round(t_write - t_cut, 1), "hash": round(time.perf_counter() - t_write, 1)},
    }
    tmp = folder / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, folder / "manifest.json")
    shutil.rmtree(folder / ".work", ignore_errors=True)
    print(f"photos: {manifest['photos']['train']} / {manifest['photos']['dev']} / {manifest['photos']['test']} "
          f"photographs give {manifest['patches']['train']:,} / {manifest['patches']['dev']:,} / "
          f"{manifest['patches']['test']:,} train / dev / test patches in {folder} [{time.perf_counter() - t0:.0f} s]")
    per_source = ", ".join(f"{k} {v}" for k, v in manifest["faces"].items()) or "no face source chosen"
    print(f"photos: {len(faces)} face pictures in the face test set ({per_source})")
    print(drift_report(manifest))
    return folder


def is_complete(folder: Path) -> bool:
    """Whether ``folder`` holds a complete build (the manifest is written last)."""
    return (folder / "manifest.json").is_file() and all((folder / f"{s}_{a}.npy").is_file()
                                                         for s in (*SPLITS, FACES) for a in ARRAYS)


def open_photos(folder: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{split: (lr, hr)}`` of a built corpus (train, dev, test and the face test set ``faces``), memory-mapped
    (nothing is read until it is used)."""
    if not is_complete(folder):
        raise ArchiveError(f"{folder} is not a complete photo corpus build: run `make data-sr` (or the same "
                           "command again) to build it.")
    return {s: (np.load(folder / f"{s}_lr.npy", mmap_mode="r"), np.load(folder / f"{s}_hr.npy", mmap_mode="r"))
            for s in (*SPLITS, FACES)}


def corpus_hash(folder: Path) -> str:
    """The hash of a built corpus's train, dev and test arrays, as its manifest records it."""
    return json.loads((Path(folder) / "manifest.json").read_text(encoding="utf-8"))["corpus_hash"]


def _corpus_hash(file_hashes: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{k}={v}\n" for k, v in sorted(file_hashes.items())).encode()).hexdigest()[:16]


def drift_report(manifest: dict, reference: Path | None = None) -> str:
    """One line comparing a build with the committed reference build of the same options."""
    reference = REFERENCE_MANIFEST if reference is None else reference
    if not reference.is_file():
        return f"photos: no reference manifest at {reference}; corpus hash {manifest['corpus_hash']}"
    ref = json.loads(reference.read_text(encoding="utf-8"))
    if ref.get("options") != json.loads(json.dumps(manifest["options"])):
        return f"photos: other options than the reference build; corpus hash {manifest['corpus_hash']}"
    if ref["corpus_hash"] == manifest["corpus_hash"]:
        return f"photos: corpus hash {manifest['corpus_hash']}, identical to the reference build"
    changed = [p for p in manifest["packages"]
               if ref["packages"].get(p, {}).get("sha256") != manifest["packages"][p]["sha256"]]
    held = "the same" if ref.get("held_out_hash") == manifest["held_out_hash"] else "CHANGED"
    return (f"photos: corpus hash {manifest['corpus_hash']} differs from the reference build {ref['corpus_hash']}: "
            f"{len(changed)} package(s) changed ({', '.join(changed) or 'none'}), Pillow {manifest['pillow']} "
            f"(reference {ref.get('pillow')}); dev/test {held}")

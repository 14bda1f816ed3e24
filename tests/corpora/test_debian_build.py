"""The Debian corpus build end to end on a package the test makes (no network): archive, cleaning, held-out
splits, manifest, reuse, resume, and the one-sentence errors."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from corpora.debian import ArchiveError, DebianOptions
from corpora.debian import build as build_mod
from corpora.debian.archive import Archive
from corpora.debian.build import HeldOut, corpus_folder, drift_report, prepare_debian
from corpora.debian.clean import clean_pairs, reject_reason, sentence_pairs
from corpora.debian.sources.base import Document, Source

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")

HANDBOOK = [(f"The handbook explains topic number {i} in detail.", f"Das Handbuch erklärt Thema Nummer {i} genau.")
            for i in range(12)]
REFERENCE = [(f"The reference covers command {i} well.", f"Die Referenz behandelt Befehl {i} gut.")
             for i in range(8)]
TRAIN = [
    ("Open the file.", "Öffnen Sie die Datei."),
    ("Open the file.", "Öffnen Sie die Datei."),  # duplicate
    (HANDBOOK[0][0], "Eine andere Übersetzung."),  # a test English side elsewhere: dropped from train
    ("Saved %s files.", "%s Dateien gespeichert."),  # placeholder
    ("Cancel", "Cancel"),  # untranslated
    ("Quit the program now.", "Das Programm jetzt beenden."),
]


class FakeBooks(Source):
    name = "docbooks"

    def packages(self) -> list[str]:
        return ["fakedoc"]

    def extract(self, roots):
        assert (roots["fakedoc"] / "usr/share/doc/fakedoc/hello.txt").is_file()
        yield Document("debian-handbook/ch1", list(HANDBOOK))
        yield Document("debian-reference/ch1", list(REFERENCE))
        yield Document("fakedoc/page", list(TRAIN))
        yield Document("fakedoc/menu", [("Print the page.", "Die Seite drucken.")], kind="strings")


def _make_deb(folder: Path) -> Path:
    pkg = folder / "pkgsrc"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text(
        "Package: fakedoc\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: test\n")
    (pkg / "usr/share/doc/fakedoc").mkdir(parents=True)
    (pkg / "usr/share/doc/fakedoc/hello.txt").write_text("hello\n")
    debs = folder / "debs"
    debs.mkdir()
    subprocess.run(["dpkg-deb", "--build", str(pkg), str(debs / "fakedoc_1.0_all.deb")], check=True,
                   capture_output=True)
    return debs


@pytest.fixture
def fake(monkeypatch, tmp_path):
    monkeypatch.setattr(build_mod, "SOURCES", {"docbooks": FakeBooks()})
    monkeypatch.setattr(build_mod, "_ding_test", lambda cache: (["Ding sentence one here."], ["Ding Satz eins hier."]))
    monkeypatch.setattr(build_mod, "REFERENCE_MANIFEST", tmp_path / "no-reference.json")
    return _make_deb(tmp_path)


HELD = HeldOut(n_dev=4, n_test=6)


def offline(debs: Path, **options) -> DebianOptions:
    """The docbooks source (and ``options``), built from the .deb files in ``debs``."""
    return DebianOptions(**{"sources": ["docbooks"], "deb_dir": str(debs), **options})


def _read(folder: Path, name: str) -> list[str]:
    return (folder / name).read_text(encoding="utf-8").splitlines()


def test_build_holds_out_by_document_and_cleans(fake, tmp_path, capsys):
    folder = prepare_debian(tmp_path / "cache", offline(fake), HELD, progress=False)
    train, test, dev = _read(folder, "train.src"), _read(folder, "test.src"), _read(folder, "dev.src")
    assert len(test) == 6 and len(dev) == 4
    assert set(test) <= {e for e, _ in HANDBOOK} and set(dev) <= {e for e, _ in REFERENCE}
    assert not set(train) & ({e for e, _ in HANDBOOK} | {e for e, _ in REFERENCE})
    assert train == ["Open the file.", "Quit the program now.", "Print the page."]
    assert _read(folder, "train.tgt")[0] == "Öffnen Sie die Datei."
    assert _read(folder, "test_ding.src") == ["Ding sentence one here."]
    man = json.loads((folder / "manifest.json").read_text())
    assert man["packages"]["fakedoc"]["version"] == "1.0" and len(man["packages"]["fakedoc"]["sha256"]) == 64
    assert man["counts"] == {"train": 3, "dev": 4, "test": 6, "test_ding": 1}
    assert man["clean"]["placeholder"] == 1 and man["clean"]["untranslated"] == 1
    assert man["duplicates"] == 1 and man["held_out_dropped_from_train"] == 1
    # a second run opens the folder without touching the archive
    capsys.readouterr()
    assert prepare_debian(tmp_path / "cache", offline(fake), HELD, progress=False) == folder
    assert "reusing" in capsys.readouterr().out


def test_same_packages_same_corpus_hash_and_drift_report(fake, tmp_path):
    a = prepare_debian(tmp_path / "a", offline(fake), HELD, progress=False)
    b = prepare_debian(tmp_path / "b", offline(fake), HELD, progress=False)
    ma, mb = (json.loads((f / "manifest.json").read_text()) for f in (a, b))
    assert ma["corpus_hash"] == mb["corpus_hash"]
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps(ma))
    assert "identical to the reference" in drift_report(mb, ref)
    in_memory = dict(mb, options={k: tuple(v) if isinstance(v, list) else v for k, v in mb["options"].items()})
    assert "identical to the reference" in drift_report(in_memory, ref)  # the build's own manifest holds tuples
    changed = dict(mb, corpus_hash="x", train_by_package={"fakedoc": [3, "other"]})
    line = drift_report(changed, ref)
    assert "differs" in line and "about 3 training pairs" in line and "dev/test the same" in line


def test_sentences_only_and_direction(fake, tmp_path):
    folder = prepare_debian(tmp_path / "cache", offline(fake, kinds=["sentences"]), HeldOut("de-en", 4, 6),
                            progress=False)
    assert _read(folder, "train.src") == ["Öffnen Sie die Datei.", "Das Programm jetzt beenden."]


def test_resume_after_a_killed_build(fake, tmp_path):
    archive = Archive(tmp_path / "cache" / "debian", deb_dir=fake, progress=False)
    (archive.debs / ".partial").mkdir(parents=True)
    (archive.debs / ".partial" / "fakedoc_1.0_all.deb").write_bytes(b"half")  # a killed download
    archive.pkgs.mkdir(parents=True)
    (archive.pkgs / ".fakedoc.abc").mkdir()  # a killed extraction
    folder = prepare_debian(tmp_path / "cache", offline(fake), HELD, progress=False)
    assert len(_read(folder, "train.src")) == 3
    assert not (archive.debs / ".partial").exists() and not (archive.pkgs / ".fakedoc.abc").exists()


def test_bad_conditions_get_one_sentence(fake, tmp_path, monkeypatch):
    with pytest.raises(ArchiveError, match="is not a folder"):
        prepare_debian(tmp_path / "c1", offline(tmp_path / "nope"), HELD, progress=False)
    with pytest.raises(ValueError, match="unknown Debian corpus source"):
        prepare_debian(tmp_path / "c1", DebianOptions(sources=["docbooks", "nosuch"]), progress=False)
    with pytest.raises(ArchiveError, match="fewer than task.n_test"):
        prepare_debian(tmp_path / "c1", offline(fake), HeldOut(n_test=50), progress=False)

    class Usage:
        free = 10**6

    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage())
    with pytest.raises(ArchiveError, match="GB free but"):
        prepare_debian(tmp_path / "c2", offline(fake), HELD, progress=False)
    assert not (tmp_path / "c2" / "debian" / "debs").exists()  # refused before any download


def test_apt_unreachable_names_the_offline_option(tmp_path, monkeypatch):
    import subprocess as sp

    archive = Archive(tmp_path / "x", progress=False)
    monkeypatch.setattr("corpora.debian.archive.private_apt_config", lambda apt: tmp_path / "apt.conf")
    monkeypatch.setattr("corpora.debian.archive._run",
                        lambda *a, **k: sp.CompletedProcess(a, 100, "", "E: Failed to fetch (network)"))
    with pytest.raises(ArchiveError, match="task.corpora.debian.deb_dir"):
        archive.update()


def test_cleaning_rules():
    assert reject_reason("Saved {0} files", "{0} Dateien gespeichert") == "placeholder"
    assert reject_reason("translator-credits", "Max Mustermann") == "credits"
    assert reject_reason("OK", "OK") == "untranslated"
    assert reject_reason("org.gnome.Settings", "org.gnome.Settings.de") == "identifier"
    assert reject_reason("Open the file in the editor.", "Open the file in the editor now.") == \
        "german side in english"
    assert reject_reason("Open the file in the editor.", "Öffnen Sie die Datei im Editor.") is None
    assert sentence_pairs("One. Two.", "Eins. Zwei.") == [("One.", "Eins."), ("Two.", "Zwei.")]
    assert sentence_pairs("One. Two.", "Eins und zwei.") == [("One. Two.", "Eins und zwei.")]
    stats: Counter[str] = Counter()
    got = list(clean_pairs([("\ufeffA  file&amp;folder was   found.", "Eine Datei  wurde gefunden.")], stats))
    assert got == [("A file&folder was found.", "Eine Datei wurde gefunden.")] and stats["kept"] == 1


def test_the_corpus_folder_keys_are_pinned():
    """One options type (``task.corpora.debian``, read as it is by the builder beside the task's ``HeldOut``) names
    the folders the two types before it named: a built corpus is found again."""
    assert corpus_folder(Path("c"), DebianOptions(), HeldOut()).name == "debian_en_de_a8a185c75b"
    opts = DebianOptions(sources=["docbooks", "qt"], kinds=["sentences"], min_words=2, deb_dir="x", fetch="http")
    assert corpus_folder(Path("c"), opts, HeldOut("de-en", 4, 6)).name == "debian_de_en_daf902ecef"


def test_bad_options_are_refused_where_the_config_is_checked():
    """The builder's checks are the options' own, so a config is refused before any build starts."""
    from bpd.config import TranslationTaskConfig

    for bad, match in (({"sources": ["qt"]}, "keep docbooks in task.corpora.debian.sources"),
                       ({"kinds": ["poems"]}, "task.corpora.debian.kinds must name"),
                       ({"min_words": 0}, "task.corpora.debian.min_words must be >= 1")):
        cfg = TranslationTaskConfig(name="debian_en_de", source="debian")
        cfg.corpora.debian = DebianOptions(**bad)
        with pytest.raises(ValueError, match=match):
            cfg.validate()

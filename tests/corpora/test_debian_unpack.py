"""Unpacking only what the extractors read, two packages at a time, and aligning sources in parallel."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from corpora.debian import build as build_mod
from corpora.debian.archive import Archive
from corpora.debian.sources.base import SOURCES, Document, Source, members_to_unpack

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")

FILES = {
    "usr/share/locale/de/LC_MESSAGES/tool.mo": "de",
    "usr/share/locale/fr/LC_MESSAGES/tool.mo": "fr",
    "usr/share/help/C/tool/index.page": "<page/>",
    "usr/share/help/de/tool/index.page": "<page/>",
    "usr/share/help/C/tool/figures/shot.png": "png",
    "usr/share/man/man1/tool.1": ".TH TOOL 1",
    "usr/share/man/de/man1/tool.1": ".TH TOOL 1",
    "usr/share/share-tool/omni.ja": "zip",
    "usr/bin/tool": "binary",
}


def _make_deb(debs: Path, name: str, files: dict[str, str], links: dict[str, str] | None = None) -> None:
    pkg = debs.parent / f"src-{name}"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: test\n"
    )
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    for rel, target in (links or {}).items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).symlink_to(target)
    debs.mkdir(exist_ok=True)
    subprocess.run(
        ["dpkg-deb", "--build", str(pkg), str(debs / f"{name}_1.0_all.deb")], check=True, capture_output=True
    )


def _files(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if (p.is_file() or p.is_symlink()) and p.name != ".bpd-deb"
    }


def test_only_the_member_wildcards_are_unpacked_and_a_new_list_unpacks_again(tmp_path):
    debs = tmp_path / "debs"
    _make_deb(debs, "tool", FILES, {"usr/lib/tool/omni.ja": "../../share/share-tool/omni.ja"})
    _make_deb(debs, "other", {"usr/share/locale/de/LC_MESSAGES/other.mo": "x", "usr/bin/other": "y"})
    archive = Archive(tmp_path / "cache", deb_dir=debs, progress=False)
    infos = archive.download(archive.candidates(["tool", "other"]))
    members = {
        "tool": ("*/de/LC_MESSAGES/*.mo", "./usr/share/help/C/*", "*/omni.ja", "./usr/share/nothing/*"),
        "other": None,
    }
    roots = archive.extract(infos, members, workers=2)
    assert _files(roots["tool"]) == {
        "usr/share/locale/de/LC_MESSAGES/tool.mo",
        "usr/share/help/C/tool/index.page",
        "usr/lib/tool/omni.ja",
        "usr/share/share-tool/omni.ja",
    }
    assert (roots["tool"] / "usr/lib/tool/omni.ja").read_text() == "zip"  # the link and its target both came
    assert _files(roots["other"]) == {"usr/share/locale/de/LC_MESSAGES/other.mo", "usr/bin/other"}  # all of it
    (roots["tool"] / "marker").write_text("kept")
    assert archive.extract(infos, members)["tool"] == roots["tool"]
    assert (roots["tool"] / "marker").is_file()  # the same list: reused, not unpacked again
    members["tool"] = ("./usr/share/man/*",)
    roots = archive.extract(infos, members)
    assert _files(roots["tool"]) == {"usr/share/man/man1/tool.1", "usr/share/man/de/man1/tool.1"}


def test_members_to_unpack_joins_every_source_of_a_package():
    class A(Source):
        name, members = "a", ("./usr/share/help/C/*",)

        def packages(self):
            return ["p", "q"]

    class B(Source):
        name, members, shared_members = "b", ("*/de/LC_MESSAGES/*.mo",), ("./usr/share/man/man*",)

        def packages(self):
            return ["p"]

    class Everything(Source):
        name = "c"

        def packages(self):
            return ["r"]

    got = members_to_unpack(["p", "q", "r", "s"], [A(), B(), Everything()])
    assert got == {
        "p": ("*/de/LC_MESSAGES/*.mo", "./usr/share/help/C/*", "./usr/share/man/man*"),
        "q": ("./usr/share/help/C/*", "./usr/share/man/man*"),
        "r": None,
        "s": ("./usr/share/man/man*",),
    }


def test_every_registered_source_names_its_members():
    for name, src in SOURCES.items():
        if name != "ddtp":
            assert all(src.package_members(p) for p in src.packages()), name
    docbooks = SOURCES["docbooks"].package_members("debian-handbook")
    assert docbooks == ("./usr/share/doc/debian-handbook/html/de-DE/*", "./usr/share/doc/debian-handbook/html/en-US/*")


class _Numbers(Source):
    def __init__(self, name: str, n: int) -> None:
        self.name, self.n = name, n

    def packages(self):
        return []

    def extract(self, roots):
        for i in range(self.n):
            yield Document(f"{self.name}/doc{i}", [(f"Sentence {i} of {self.name}.", f"Satz {i} von {self.name}.")])


def test_sources_align_in_parallel_processes_into_their_cache_files(tmp_path, monkeypatch):
    monkeypatch.setattr(build_mod, "SOURCES", {"first": _Numbers("first", 3), "second": _Numbers("second", 2)})
    paths = {n: tmp_path / f"{n}.jsonl" for n in ("first", "second")}
    aligner = build_mod._Aligner(["first", "second"], {}, paths, workers=2, progress=False)
    assert aligner.pool is not None
    assert aligner.wait("second") == paths["second"] and aligner.wait("first") == paths["first"]
    aligner.close()
    assert set(aligner.seconds) == {"first", "second"}
    docs = [json.loads(line) for line in paths["first"].read_text().splitlines()]
    assert [d["id"] for d in docs] == ["first/doc0", "first/doc1", "first/doc2"]
    read = list(build_mod._read_aligned(paths["second"]))
    assert read[1] == Document("second/doc1", [("Sentence 1 of second.", "Satz 1 von second.")])


def test_a_wanted_hard_link_to_an_unwanted_file_is_unpacked_with_its_target(tmp_path):
    debs = tmp_path / "debs"
    pkg = tmp_path / "src-book"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text(
        "Package: book\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: test\n"
    )
    for lang in ("ar", "de", "en"):
        (pkg / f"usr/share/book/{lang}").mkdir(parents=True)
    (pkg / "usr/share/book/ar/style.css").write_text("shared")
    for lang in ("de", "en"):  # both wanted copies are hard links to the unwanted Arabic one
        (pkg / f"usr/share/book/{lang}/style.css").hardlink_to(pkg / "usr/share/book/ar/style.css")
        (pkg / f"usr/share/book/{lang}/page.html").write_text(lang)
    debs.mkdir()
    subprocess.run(["dpkg-deb", "--build", str(pkg), str(debs / "book_1.0_all.deb")], check=True, capture_output=True)
    archive = Archive(tmp_path / "cache", deb_dir=debs, progress=False)
    listing = subprocess.run(
        f"dpkg-deb --fsys-tarfile {debs / 'book_1.0_all.deb'} | tar -tv", shell=True, capture_output=True, text=True
    ).stdout
    assert "de/style.css link to" in listing
    infos = archive.download(archive.candidates(["book"]))
    root = archive.extract(infos, {"book": ("./usr/share/book/de/*", "./usr/share/book/en/*")})["book"]
    assert (root / "usr/share/book/de/style.css").read_text() == "shared"
    assert (root / "usr/share/book/en/page.html").read_text() == "en"
    assert not (root / ".bpd-hardlinks").exists()

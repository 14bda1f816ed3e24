"""The Debian corpus without apt: packages fetched over HTTP from a mirror and unpacked in Python.

A local HTTP server plays deb.debian.org (indexes in three suites, a pool of .deb files built here in Python),
so these tests need neither the network nor dpkg; where dpkg-deb exists, the Python unpacker is also checked
against the tar path file for file.
"""

from __future__ import annotations

import bz2
import hashlib
import io
import lzma
import shutil
import tarfile
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from corpora.debian import ArchiveError
from corpora.debian import archive as archive_mod
from corpora.debian import mirror as mirror_mod
from corpora.debian.archive import Archive
from corpora.debian.debfile import unpack_deb
from corpora.debian.mirror import MirrorArchive, compare_versions, open_archive
from corpora.debian.unpack import SKIPPED_FILES, unpack_text

FILES = {
    "./usr/share/help/C/tool/index.page": b"<page>C</page>",
    "./usr/share/help/de/tool/index.page": b"<page>de</page>",
    "./usr/share/help/de/tool/figures/shot.png": b"png",  # skipped everywhere
    "./usr/share/locale/de/LC_MESSAGES/tool.mo": b"mo-de",
    "./usr/share/locale/fr/LC_MESSAGES/tool.mo": b"mo-fr",
    "./usr/share/doc/book/fr/common.css": b"css",  # the target of a wanted hard link, outside the members
    "./usr/bin/tool": b"binary",
}
MEMBERS = ("./usr/share/help/de", "*/de/LC_MESSAGES/*.mo", "./usr/share/doc/book/de/*", "./usr/lib/tool/*")


def _tar_xz(entries: list[tarfile.TarInfo], data: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", format=tarfile.GNU_FORMAT) as tar:
        for ti in entries:
            tar.addfile(ti, io.BytesIO(data[ti.name]) if ti.isfile() else None)
    return buf.getvalue()


def make_deb(path: Path, package: str, version: str, files: dict[str, bytes]) -> Path:
    """A .deb as dpkg-deb --build lays it out (ar: debian-binary, control.tar.xz, data.tar.xz), written in Python,
    with the folders first, a hard link (book/de/common.css -> book/fr/common.css) and a symlink."""
    entries, seen = [], set()
    for name in files:
        parts = name.split("/")
        for i in range(2, len(parts)):
            d = "/".join(parts[:i])
            if d not in seen:
                seen.add(d)
                ti = tarfile.TarInfo(d + "/")
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                entries.append(ti)
    for name, body in files.items():
        ti = tarfile.TarInfo(name)
        ti.size, ti.mode = len(body), 0o644
        entries.append(ti)
    if "./usr/share/doc/book/fr/common.css" in files:
        for d in ("./usr/share/doc/book/de/", "./usr/lib/", "./usr/lib/tool/"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            entries.append(ti)
        link = tarfile.TarInfo("./usr/share/doc/book/de/common.css")
        link.type, link.linkname = tarfile.LNKTYPE, "./usr/share/doc/book/fr/common.css"
        sym = tarfile.TarInfo("./usr/lib/tool/omni.ja")
        sym.type, sym.linkname = tarfile.SYMTYPE, "../../share/locale/de/LC_MESSAGES/tool.mo"
        entries += [link, sym]
    control = tarfile.TarInfo("./control")
    body = f"Package: {package}\nVersion: {version}\nArchitecture: all\nMaintainer: t <t@x>\nDescription: t\n"
    control.size = len(body.encode())
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", _tar_xz([control], {"./control": body.encode()})),
               ("data.tar.xz", _tar_xz(entries, files))]
    out = io.BytesIO()
    out.write(b"!<arch>\n")
    for name, data in members:
        out.write(f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode())
        out.write(data + (b"\n" if len(data) % 2 else b""))
    path.write_bytes(out.getvalue())
    return path


def _tree(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = "-> " + str(p.readlink())
        elif p.is_file():
            out[rel] = p.read_bytes()
    return out


def test_python_unpacks_the_selected_files_and_hard_links(tmp_path):
    deb = make_deb(tmp_path / "tool_1.0_all.deb", "tool", "1.0", FILES)
    out = tmp_path / "py"
    out.mkdir()
    assert unpack_deb(deb, out, MEMBERS, SKIPPED_FILES) is None
    assert _tree(out) == {
        "usr/lib/tool/omni.ja": "-> ../../share/locale/de/LC_MESSAGES/tool.mo",
        "usr/share/doc/book/de/common.css": b"css",  # the link, filled from its target in a second pass
        "usr/share/doc/book/fr/common.css": b"css",  # and its target, as tar's second pass unpacks it
        "usr/share/help/de/tool/index.page": b"<page>de</page>",
        "usr/share/locale/de/LC_MESSAGES/tool.mo": b"mo-de",
    }
    everything = tmp_path / "all"
    everything.mkdir()
    assert unpack_deb(deb, everything, None, SKIPPED_FILES) is None
    assert "usr/bin/tool" in _tree(everything) and not any(p.endswith(".png") for p in _tree(everything))
    (tmp_path / "bad.deb").write_bytes(b"not a deb")
    assert "not an ar archive" in unpack_deb(tmp_path / "bad.deb", everything, None, SKIPPED_FILES)


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="compares with dpkg-deb")
def test_python_and_dpkg_unpack_the_same_folder(tmp_path):
    deb = make_deb(tmp_path / "tool_1.0_all.deb", "tool", "1.0", FILES)
    for members in (MEMBERS, None):
        a, b = tmp_path / f"dpkg{members is None}", tmp_path / f"py{members is None}"
        a.mkdir(), b.mkdir()
        assert unpack_text(deb, a, members) is None
        assert unpack_deb(deb, b, members, SKIPPED_FILES) is None
        assert _tree(a) == _tree(b)


def test_debian_version_order():
    ordered = ["1.0~rc1", "1.0", "1.0-1~bpo1", "1.0-1", "1.0-1+b1", "1.0a", "1.0.0", "1.9", "1.10", "1:0.1"]
    for i, a in enumerate(ordered):
        for j, b in enumerate(ordered):
            assert compare_versions(a, b) == (i > j) - (i < j), (a, b)
    assert compare_versions("0:1.0", "1.0") == 0
    assert compare_versions("2.38.1-5+deb12u3", "2.38.1-5+deb12u1") == 1


@pytest.fixture
def fake_mirror(tmp_path):
    """deb.debian.org's layout under a local HTTP server: main, updates and security indexes, a pool."""
    root = tmp_path / "www"
    debs = {
        ("tool", "1.0-1", "debian"): FILES,
        ("tool", "1.0-1+deb12u1", "debian-security"): {**FILES, "./usr/share/help/de/tool/index.page": b"<p>fix</p>"},
        ("older", "2.0-1", "debian"): {"./usr/share/locale/de/LC_MESSAGES/o.mo": b"o"},
        ("older", "1.5-1", "debian-security"): {"./usr/share/locale/de/LC_MESSAGES/o.mo": b"old"},
        ("trans-de-en", "1.9-1", "debian"): {"./usr/share/trans/de-en": b"Haus :: house\n",
                                              "./usr/share/doc/trans-de-en/README": b"r"},
    }
    blocks: dict[tuple[str, str], list[str]] = {}
    for (pkg, ver, repo), files in debs.items():
        rel = f"pool/main/{pkg[0]}/{pkg}/{pkg}_{ver}_all.deb"
        (root / repo / rel).parent.mkdir(parents=True, exist_ok=True)
        data = make_deb(root / repo / rel, pkg, ver, files).read_bytes()
        suite = "bookworm-security" if repo == "debian-security" else "bookworm"
        blocks.setdefault((repo, suite), []).append(
            f"Package: {pkg}\nVersion: {ver}\nArchitecture: all\nFilename: {rel}\nSize: {len(data)}\n"
            f"SHA256: {hashlib.sha256(data).hexdigest()}\n")
    blocks[("debian", "bookworm-updates")] = []
    for (repo, suite), entries in blocks.items():
        d = root / repo / "dists" / suite / "main"
        (d / "binary-amd64").mkdir(parents=True)
        (d / "binary-amd64" / "Packages.xz").write_bytes(lzma.compress("\n".join(entries).encode()))
        (d / "i18n").mkdir()
        (d / "i18n" / "Translation-en.xz").write_bytes(lzma.compress(f"Package: en-{suite}\n".encode()))
        if suite == "bookworm":
            (d / "i18n" / "Translation-de.bz2").write_bytes(bz2.compress(b"Package: de\n"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    yield url, root
    server.shutdown()


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output clean
        pass


def test_mirror_archive_fetches_the_newest_version_and_unpacks_it(fake_mirror, tmp_path):
    url, _ = fake_mirror
    archive = MirrorArchive(tmp_path / "cache", progress=False, mirror=f"{url}/debian",
                            security=f"{url}/debian-security")
    archive.update()
    # the highest version in any suite, as apt's candidate: security's fix for tool, main's 2.0 for older
    assert {p: v for p, (v, _) in archive.candidates(["tool", "older", "absent"]).items()} == {
        "older": "2.0-1", "tool": "1.0-1+deb12u1"}
    infos, roots = archive.download_and_extract(archive.candidates(["tool", "older"]),
                                                {"tool": MEMBERS, "older": None})
    assert infos["tool"].filename == "tool_1.0-1+deb12u1_all.deb"
    assert (roots["tool"] / "usr/share/help/de/tool/index.page").read_bytes() == b"<p>fix</p>"
    assert (roots["older"] / "usr/share/locale/de/LC_MESSAGES/o.mo").read_bytes() == b"o"
    folder, hashes = archive.translations()  # every suite's English index joined, in apt's file order
    assert (folder / "Translation-en").read_text().count("Package: en-") == 3
    assert (folder / "Translation-de").read_text().startswith("Package: de")
    assert set(hashes) == {"Translation-en", "Translation-de"}


def test_a_corrupt_download_is_refused_and_nothing_is_kept(fake_mirror, tmp_path, monkeypatch):
    url, root = fake_mirror
    archive = MirrorArchive(tmp_path / "cache", progress=False, mirror=f"{url}/debian",
                            security=f"{url}/debian-security")
    archive.update()
    deb = next((root / "debian").rglob("older_2.0-1_all.deb"))
    deb.write_bytes(deb.read_bytes()[:-10] + b"0123456789")  # the index's sha256 no longer matches
    monkeypatch.setattr(mirror_mod.time, "sleep", lambda s: None)  # no back-off between the retries
    with pytest.raises(ArchiveError, match="sha256 .* where the index says"):
        archive.download(archive.candidates(["older"]))
    assert not list((tmp_path / "cache" / "debs").glob("older_*"))


def test_open_archive_picks_apt_only_on_the_reference_release(tmp_path, monkeypatch):
    with pytest.raises(ArchiveError, match="task.corpora.debian.fetch='ftp'"):
        open_archive(tmp_path, fetch="ftp")
    assert isinstance(open_archive(tmp_path, fetch="http"), MirrorArchive)
    monkeypatch.setattr(Archive, "apt_tools_present", staticmethod(lambda: False))
    assert isinstance(open_archive(tmp_path, fetch="auto"), MirrorArchive)
    with pytest.raises(ArchiveError, match="task.corpora.debian.fetch=http"):
        open_archive(tmp_path, fetch="apt")
    monkeypatch.setattr(Archive, "apt_tools_present", staticmethod(lambda: True))
    monkeypatch.setattr(mirror_mod, "system_is_reference_release", lambda: False)
    assert isinstance(open_archive(tmp_path, fetch="auto"), MirrorArchive)  # Ubuntu: other versions
    monkeypatch.setattr(mirror_mod, "system_is_reference_release", lambda: True)
    assert type(open_archive(tmp_path, fetch="auto")) is Archive
    debs = tmp_path / "debs"
    debs.mkdir()
    assert type(open_archive(tmp_path, deb_dir=debs, fetch="http")) is Archive  # a folder of .debs wins
    monkeypatch.setattr(archive_mod.shutil, "which", lambda t: None)
    assert type(open_archive(tmp_path, deb_dir=debs)) is Archive  # no dpkg-deb needed: Python unpacks


def test_the_ding_dictionary_comes_from_the_mirror_without_apt(fake_mirror, tmp_path, monkeypatch):
    from corpora import ding

    url, _ = fake_mirror
    monkeypatch.setattr(mirror_mod, "suites", lambda *a, **k: [(f"{url}/debian", "bookworm"),
                                                               (f"{url}/debian-security", "bookworm-security")])
    got = ding.find_ding_file(None, tmp_path / "ding", system_paths=(),
                              fetchers=(lambda d: None, ding.fetch_ding_from_mirror))
    assert got.read_bytes() == b"Haus :: house\n"
    assert not (tmp_path / "ding" / "mirror").exists()  # the indexes and the package are not kept


def test_a_package_gone_from_the_mirror_refreshes_the_index(fake_mirror, tmp_path):
    url, root = fake_mirror
    archive = MirrorArchive(tmp_path / "cache", progress=False, mirror=f"{url}/debian",
                            security=f"{url}/debian-security")
    archive.update()
    next((root / "debian").rglob("older_2.0-1_all.deb")).unlink()  # replaced upstream since the index was read
    with pytest.raises(ArchiveError, match="gone from the mirror"):
        archive.download(archive.candidates(["older"]))
    assert not (archive.lists_dir() / ".complete").exists()  # the next run reads the index again


def test_the_ding_dictionary_is_bookworms_first_on_any_machine(monkeypatch):
    from corpora import ding

    monkeypatch.setattr(mirror_mod, "system_is_reference_release", lambda: False)
    assert ding.default_fetchers()[0] is ding.fetch_ding_from_mirror  # Ubuntu's apt: another release
    monkeypatch.setattr(mirror_mod, "system_is_reference_release", lambda: True)
    assert ding.default_fetchers()[0] is ding.fetch_ding_with_apt

"""A ``.deb`` unpacked in Python, for machines without ``dpkg-deb`` (macOS, Fedora, a bare container).

A ``.deb`` is an ``ar`` archive whose ``data.tar.{xz,gz,bz2}`` (or plain ``data.tar``) holds the files. This reads
that member straight from the file and unpacks the files ``members`` selects, as ``tar --wildcards --anchored
--wildcards-match-slash`` selects them for :func:`corpora.debian.unpack.unpack_text`: a pattern matches the
whole path from its start, ``*`` crosses ``/``, and a pattern that names a folder takes everything under it. The
two unpackers must give the same folder; ``tests/corpora/test_debian_mirror.py`` checks that on a built package.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import tarfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import BinaryIO

_AR_MAGIC = b"!<arch>\n"
_TAR_MODES = {"data.tar.xz": "r|xz", "data.tar.gz": "r|gz", "data.tar.bz2": "r|bz2", "data.tar": "r|"}


class DebFileError(ValueError):
    """Not a .deb this reader can unpack; the message says which part."""


class _Slice:
    """A read-only stream over ``size`` bytes of ``f`` from its current position (one ar member)."""

    def __init__(self, f: BinaryIO, size: int) -> None:
        self.f, self.left = f, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.f.read(n)
        self.left -= len(data)
        return data


def _data_member(f: BinaryIO, deb: Path) -> tuple[str, int]:
    """Move ``f`` to the start of the data member; its name and size."""
    if f.read(8) != _AR_MAGIC:
        raise DebFileError(f"{deb.name} is not an ar archive")
    while header := f.read(60):
        if len(header) < 60:
            break
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        if name.startswith("data.tar"):
            if name not in _TAR_MODES:
                raise DebFileError(f"{deb.name} stores its files as {name}, which Python cannot read; install "
                                   "dpkg (dpkg-deb) to unpack it")
            return name, size
        f.seek(size + (size & 1), os.SEEK_CUR)  # members are padded to an even length
    raise DebFileError(f"{deb.name} has no data.tar member")


@contextmanager
def _data_tar(deb: Path) -> Iterator[tarfile.TarFile]:
    """The package's data member as a streamed tar archive (read once, front to back)."""
    with open(deb, "rb") as f:
        kind, size = _data_member(f, deb)
        with tarfile.open(fileobj=_Slice(f, size), mode=_TAR_MODES[kind]) as tar:  # type: ignore[call-overload]
            yield tar


def _norm(name: str) -> str:
    """A member name as GNU tar prints it (``./usr/...``): packages are built with a leading ``./``."""
    name = name.rstrip("/")
    return name if name.startswith("./") or name == "." else "./" + name.lstrip("/")


def _selected(name: str, members: Sequence[str] | None, skipped: Sequence[str]) -> bool:
    base = name.rsplit("/", 1)[-1]
    if any(fnmatch.fnmatchcase(base, pat) for pat in skipped):
        return False
    if members is None:
        return True
    parts = name.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]  # a pattern naming a folder takes its files
    return any(fnmatch.fnmatchcase(p, pat) for pat in members for p in prefixes)


def _safe_path(target: Path, name: str) -> Path | None:
    """Where member ``name`` goes under ``target``, or None for a name that would leave it."""
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts:
        return None
    return target.joinpath(*[p for p in rel.parts if p != "."])


def unpack_deb(deb: Path, target: Path, members: Sequence[str] | None, skipped: Sequence[str]) -> str | None:
    """Unpack the files of ``deb`` that ``members`` selects (all when None), less those whose name matches one of
    ``skipped``, into ``target``. None when it worked, else the error.

    Hard links are written as copies of their target's content: a link whose target was not selected is filled
    in a second pass over the archive (the stream cannot seek back), which also unpacks that target, as the tar
    path's second pass does.
    """
    try:
        wanted_links: dict[str, list[Path]] = {}  # link target's name -> where its copies go
        written: dict[str, Path] = {}
        with _data_tar(deb) as tar:
            for ti in tar:
                name = _norm(ti.name)
                if not _selected(name, members, skipped):
                    continue
                path = _safe_path(target, name)
                if path is None:
                    continue
                if ti.isdir():
                    path.mkdir(parents=True, exist_ok=True)
                elif ti.isfile():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    src = tar.extractfile(ti)
                    assert src is not None
                    with open(path, "wb") as out:
                        shutil.copyfileobj(src, out)
                    written[name] = path
                elif ti.islnk():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    link = _norm(ti.linkname)
                    if link in written:
                        shutil.copyfile(written[link], path)
                    else:
                        wanted_links.setdefault(link, []).append(path)
                elif ti.issym():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    if path.is_symlink() or path.exists():
                        path.unlink()
                    os.symlink(ti.linkname, path)
        if wanted_links:
            with _data_tar(deb) as tar:
                for ti in tar:
                    name = _norm(ti.name)
                    paths = wanted_links.pop(name, None)
                    own = _safe_path(target, name)
                    if paths and ti.isfile() and own is not None:
                        src = tar.extractfile(ti)
                        assert src is not None
                        data = src.read()
                        for path in (own, *paths):  # the target too, as tar's second pass unpacks it
                            path.parent.mkdir(parents=True, exist_ok=True)
                            path.write_bytes(data)
                    if not wanted_links:
                        break
            if wanted_links:
                return f"hard link target(s) missing from the archive: {', '.join(sorted(wanted_links)[:3])}"
        return None
    except (OSError, tarfile.TarError, DebFileError, EOFError, ValueError) as e:
        return f"{type(e).__name__}: {e}"

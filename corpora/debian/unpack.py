"""A ``.deb``'s wanted files unpacked into a package folder: ``dpkg-deb`` streams the data and ``tar`` picks the
files, or Python does both where ``dpkg-deb`` is missing (``debfile``).

A folder is unpacked into a hidden name and renamed into place, and a stamp inside it records which ``.deb`` and
which member wildcards it was made from, so a killed build never reads a half folder and a changed member list
unpacks the package again.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from corpora.debian import ArchiveError

#: Files no extractor reads (pictures, sound, fonts, compiled code): left in the archive even where a member
#: wildcard would take them (a help folder's figures).
SKIPPED_FILES = ("*.png", "*.jpg", "*.jpeg", "*.gif", "*.svg", "*.svgz", "*.webp", "*.ico", "*.bmp", "*.xcf",
                 "*.ogg", "*.wav", "*.mp3", "*.flac", "*.ttf", "*.otf", "*.woff", "*.woff2", "*.so", "*.so.*",
                 "*.a", "*.pyc", "*.pdf", "*.eps", "*.wmf")
#: The stamp's name, from when this code lived in bpd: kept, so the folders of earlier builds are reused.
STAMP = ".bpd-deb"
_NOT_FOUND = re.compile(r"^tar: .*: Not found in archive$|^tar: Exiting with failure status due to previous errors$")
_HARD_LINK = re.compile(r"^tar: (.+): Cannot hard link to '(.+)': No such file or directory$")


def _stamp(deb_name: str, members: Sequence[str] | None) -> str:
    """What an unpacked folder was made from: the .deb and the member wildcards (a changed list unpacks again)."""
    return deb_name + "\n" + ("*" if members is None else "\n".join(members)) + "\n"


def clear_stale(pkgs: Path) -> None:
    """Remove the hidden folders a killed build left half unpacked under ``pkgs``."""
    pkgs.mkdir(parents=True, exist_ok=True)
    for stale in pkgs.glob(".*"):
        shutil.rmtree(stale, ignore_errors=True)


def unpacked(target: Path, deb_name: str, members: Sequence[str] | None) -> Path | None:
    """``target`` if it was unpacked from the .deb ``deb_name`` with these members, else None."""
    stamp = target / STAMP
    return target if stamp.is_file() and stamp.read_text() == _stamp(deb_name, members) else None


def unpack_into(deb: Path, target: Path, members: Sequence[str] | None, skipped: Sequence[str] | None) -> Path:
    """Unpack ``deb`` into a hidden folder beside ``target``, then rename it into place (a killed run never leaves
    a half folder). A ``.deb`` that cannot be unpacked is deleted, so the next run downloads it anew."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    error = unpack_text(deb, tmp, members, skipped)
    if error is not None:
        shutil.rmtree(tmp, ignore_errors=True)
        deb.unlink(missing_ok=True)
        raise ArchiveError(f"{deb.name} could not be unpacked ({error[:200]}); it was deleted: "
                           "run the same command again to download it anew.")
    (tmp / STAMP).write_text(_stamp(deb.name, members))
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return target


def _tar_x(deb: Path, target: Path, options: str) -> subprocess.CompletedProcess[str]:
    cmd = (f"set -o pipefail; dpkg-deb --fsys-tarfile {shlex.quote(str(deb))} | "
           f"tar -x -C {shlex.quote(str(target))} {options}")
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=1800, check=False,
                          env={**os.environ, "LC_ALL": "C"})


def unpack_text(deb: Path, target: Path, members: Sequence[str] | None = None,
                skipped: Sequence[str] | None = None) -> str | None:
    """``dpkg-deb -x`` of only the files matching ``members`` (all when None), without ``SKIPPED_FILES``:
    dpkg-deb streams the data, tar picks. None when it worked, else the error. A wildcard that matches
    nothing in this package is no error. A wanted file stored as a hard link to a file outside ``members``
    (debian-handbook's languages share files that way) is unpacked in a second pass with its target.
    Without dpkg-deb (not a Debian machine) the same files are unpacked in Python. ``skipped``: the file name
    wildcards left packed (None: ``SKIPPED_FILES``)."""
    skipped = SKIPPED_FILES if skipped is None else tuple(skipped)
    if shutil.which("dpkg-deb") is None:
        from corpora.debian.debfile import unpack_deb

        return unpack_deb(deb, target, members, skipped)
    excludes = " ".join(f"--exclude={shlex.quote(pat)}" for pat in skipped)
    wanted = ""
    if members is not None:
        wanted = "--wildcards --anchored --wildcards-match-slash -- " + " ".join(shlex.quote(m) for m in members)
    proc = _tar_x(deb, target, f"{excludes} {wanted}")
    if proc.returncode == 0:
        return None
    errors = [line for line in proc.stderr.splitlines() if line.strip() and not _NOT_FOUND.match(line)]
    links = [m.groups() for m in map(_HARD_LINK.match, errors) if m]
    if members is not None and proc.returncode == 2 and len(links) == len(errors):
        if links:  # the links and their targets, by exact name (a link always comes after its target)
            names = target / ".bpd-hardlinks"
            # each name once: tar takes a name as one occurrence, and several links may share a target
            unique = dict.fromkeys(name for pair in links for name in reversed(pair))
            names.write_text("".join(f"{name}\n" for name in unique))
            again = _tar_x(deb, target, f"--no-wildcards --files-from={shlex.quote(str(names))}")
            names.unlink()
            if again.returncode != 0:
                return again.stderr.strip() or f"exit status {again.returncode}"
        return None  # otherwise only wildcards that matched nothing (tar exits 2 for those)
    return "; ".join(errors) or f"exit status {proc.returncode}"

"""The Debian archive's indexes: where apt keeps them (a private apt state, so the system's lists are never
changed), and how both fetch paths read them: control stanzas, index files in apt's compressions, and the
``Translation-{en,de}`` description indexes joined into one file per language.

The apt path (``archive``) reads them from its private apt state or a ``.deb`` folder, the HTTP path
(``mirror``) from the indexes it downloads.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from corpora.debian import ArchiveError


def private_apt_config(apt: Path) -> Path:
    """A private apt configuration under ``apt`` (written once): the system's sources and settings, but its own
    lists and cache, and the English and German description indexes (containers often switch those off)."""
    parts = apt / "apt.conf.d"
    conf = apt / "apt.conf"
    if conf.is_file():
        return conf
    for d in ("lists/partial", "cache/archives/partial", "sources"):
        (apt / d).mkdir(parents=True, exist_ok=True)
    parts.mkdir(parents=True, exist_ok=True)
    system_parts = Path("/etc/apt/apt.conf.d")
    for f in sorted(system_parts.glob("*")) if system_parts.is_dir() else []:
        text = f.read_text(errors="replace") if f.is_file() else ""
        if "Acquire::Languages" not in text:  # the one setting we replace
            (parts / f.name).write_text(text)
    sources = apt / "sources"
    for f in sorted(Path("/etc/apt/sources.list.d").glob("*")):
        if f.suffix in (".list", ".sources"):
            shutil.copy(f, sources / f.name)
    if Path("/etc/apt/sources.list").is_file():
        shutil.copy("/etc/apt/sources.list", sources / "system.list")
    (apt / "sources.list").write_text("")  # the sources are the files of Dir::Etc::SourceParts
    tmp = conf.with_name("apt.conf.tmp")
    tmp.write_text(
        f'Dir::Etc::Parts "{parts}";\n'
        'Acquire::Languages { "en"; "de"; };\n'
        f'Dir::State::Lists "{apt / "lists"}";\n'
        f'Dir::Cache "{apt / "cache"}";\n'
        f'Dir::Etc::SourceParts "{sources}";\n'
        f'Dir::Etc::SourceList "{apt / "sources.list"}";\n'
        'APT::Get::List-Cleanup "false";\n'
    )
    os.replace(tmp, conf)
    return conf



def control_fields(block: str) -> dict[str, str]:
    """The ``Field: value`` lines of one stanza of a Debian control file (``apt-cache show``, a Packages index)."""
    return dict(re.findall(r"^([\w-]+): (.*)$", block, flags=re.M))


def decompress_index(path: Path) -> bytes:
    """An apt index in whatever compression apt stored it: the standard library's codecs, else apt's own
    helper (lz4 and zstd, which apt uses in containers, have no standard-library codec)."""
    import bz2
    import gzip
    import lzma

    codecs = {".gz": gzip.decompress, ".xz": lzma.decompress, ".bz2": bz2.decompress}
    if path.suffix in codecs:
        return codecs[path.suffix](path.read_bytes())
    if path.suffix in (".lz4", ".zst"):
        helper = shutil.which("apt-helper") or "/usr/lib/apt/apt-helper"
        proc = subprocess.run([helper, "cat-file", str(path)], capture_output=True, check=False)
        if proc.returncode != 0:
            raise ArchiveError(f"cannot decompress {path}: apt's apt-helper is missing or failed; copy the "
                               "decompressed file there.")
        return proc.stdout
    return path.read_bytes()


def join_translations(where: Path, lang: str, target: Path, fix: str) -> None:
    """Every suite's ``Translation-<lang>`` index under ``where`` (main, updates, security), decompressed and
    joined in file-name order into ``target`` (renamed into place when complete): the German entries name the
    md5 of the English description they translate, which a point release may have moved. ``fix``: what the
    error says to do when ``where`` has none."""
    files = sorted(p for p in where.iterdir() if re.search(rf"Translation-{lang}(\.\w+)?$", p.name))
    if not files:
        raise ArchiveError(f"{where} has no Translation-{lang} index: {fix}")
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "wb") as f:
        for path in files:
            f.write(decompress_index(path) + b"\n")
    os.replace(tmp, target)

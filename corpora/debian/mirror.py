"""The Debian corpus's packages fetched over HTTP from a Debian mirror, without apt: any machine with Python.

The apt path (:class:`~corpora.debian.archive.Archive`) downloads whatever the machine's own apt sources hold:
on Debian bookworm that is the release the reference corpus was built from (``results/data/debian_manifest.json``),
but on Ubuntu or another Debian release it is other versions of the packages, so another corpus and other test
sentences. This archive reads the bookworm indexes (main, updates, security) from ``deb.debian.org`` itself and
downloads the ``.deb`` files they name, checking each against the index's sha256; it unpacks with ``dpkg-deb``
where that exists and in Python (:mod:`corpora.debian.debfile`) where not. So ``task.corpora.debian.fetch=auto`` (the
default) gives the same packages on any machine: apt on Debian bookworm, this archive everywhere else.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from corpora.debian import FETCH_MODES, ArchiveError
from corpora.debian.archive import Archive
from corpora.debian.indexes import control_fields, decompress_index

MIRROR = "http://deb.debian.org/debian"
SECURITY_MIRROR = "http://deb.debian.org/debian-security"
RELEASE = "bookworm"  # the release of the reference build (results/data/debian_manifest.json)
#: The packages' text is the same on every architecture; one is fetched everywhere so every machine gets one corpus.
ARCH = "amd64"


@dataclass(frozen=True)
class PackageEntry:
    version: str
    arch: str
    size: int
    filename: str  # the path under the mirror's root (pool/...)
    sha256: str
    base: str  # the mirror it is under


def suites(mirror: str = MIRROR, security: str = SECURITY_MIRROR, release: str = RELEASE) -> list[tuple[str, str]]:
    """(mirror, suite) of the release's main, updates and security indexes, as apt lists them."""
    return [(mirror, release), (mirror, f"{release}-updates"), (security, f"{release}-security")]


def _order(c: str) -> int:
    """dpkg's order of one character of a version's non-digit part: ~ first, then the end, letters, the rest."""
    if c == "~":
        return -1
    if c.isalpha():
        return ord(c)
    return ord(c) + 256


def _compare_part(a: str, b: str) -> int:
    """dpkg's comparison of an upstream version or a Debian revision: alternating non-digit and digit runs."""
    while a or b:
        i = 0
        while i < len(a) and not a[i].isdigit():
            i += 1
        j = 0
        while j < len(b) and not b[j].isdigit():
            j += 1
        sa, sb, a, b = a[:i], b[:j], a[i:], b[j:]
        for k in range(max(len(sa), len(sb))):
            oa = _order(sa[k]) if k < len(sa) else 0
            ob = _order(sb[k]) if k < len(sb) else 0
            if oa != ob:
                return -1 if oa < ob else 1
        i = len(a) - len(a.lstrip("0123456789"))
        j = len(b) - len(b.lstrip("0123456789"))
        da, db, a, b = int(a[:i] or 0), int(b[:j] or 0), a[i:], b[j:]
        if da != db:
            return -1 if da < db else 1
    return 0


def compare_versions(a: str, b: str) -> int:
    """-1, 0 or 1 as Debian version ``a`` is older than, the same as or newer than ``b`` (dpkg's rules: epoch,
    then upstream version, then revision; ``~`` sorts before everything, even the end)."""
    def split(v: str) -> tuple[int, str, str]:
        epoch, _, rest = v.rpartition(":") if ":" in v else ("0", "", v)
        upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "0")
        return int(epoch or 0), upstream, revision

    ea, ua, ra = split(a)
    eb, ub, rb = split(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _compare_part(ua, ub) or _compare_part(ra, rb)


def _list_name(base: str, suite: str, rest: str) -> str:
    """The file name apt gives an index (``deb.debian.org_debian_dists_bookworm_main_..``), so that the joined
    Translation files come out in the same order, and with the same sha256, as on the apt path."""
    host_path = re.sub(r"^\w+://", "", base).rstrip("/")
    return f"{host_path}/dists/{suite}/{rest}".replace("/", "_")


def parse_packages(text: str, base: str) -> dict[str, PackageEntry]:
    """package -> its entry, from a ``Packages`` index."""
    out: dict[str, PackageEntry] = {}
    for block in text.split("\n\n"):
        fields = control_fields(block)
        if {"Package", "Version", "Filename", "SHA256"} <= fields.keys():
            out[fields["Package"]] = PackageEntry(fields["Version"], fields.get("Architecture", ARCH),
                                                  int(fields.get("Size", 0)), fields["Filename"], fields["SHA256"],
                                                  base)
    return out


def http_get(url: str, dest: Path | None = None, sha256: str | None = None, tries: int = 3,
             timeout: float = 60) -> bytes | None:
    """``url``'s body (into ``dest`` when given, written whole or not at all, checked against ``sha256``); None
    for a 404. Other failures are retried, then raised as ArchiveError."""
    last = ""
    for attempt in range(tries):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                if dest is None:
                    return resp.read()
                h = hashlib.sha256()
                tmp = dest.with_name(dest.name + ".part")
                with open(tmp, "wb") as f:
                    while chunk := resp.read(1 << 20):
                        h.update(chunk)
                        f.write(chunk)
                if sha256 is not None and h.hexdigest() != sha256:
                    tmp.unlink(missing_ok=True)
                    last = f"sha256 {h.hexdigest()[:12]} where the index says {sha256[:12]}"
                    continue
                os.replace(tmp, dest)
                return b""
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            last = f"HTTP {e.code}"
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
            last = str(getattr(e, "reason", e))
        time.sleep(1 + 2 * attempt)
    raise ArchiveError(f"could not fetch {url} ({last}); check the network (a proxy: set http_proxy), or pass "
                       "task.corpora.debian.deb_dir=/path/to/debs with the .deb files.")


class MirrorArchive(Archive):
    """:class:`Archive` with the indexes and ``.deb`` files fetched over HTTP from ``mirror`` (no apt).

    Layout: as ``Archive``, with ``root/mirror/lists`` the downloaded indexes in place of apt's state.
    """

    def __init__(self, root: Path, progress: bool = True, mirror: str = MIRROR, security: str = SECURITY_MIRROR,
                 release: str = RELEASE, workers: int = 4) -> None:
        self.suites = suites(mirror, security, release)
        self.workers = workers
        self._index: dict[str, PackageEntry] | None = None
        super().__init__(root, deb_dir=None, progress=progress)

    def _check_tools(self) -> None:  # nothing to install: urllib, and dpkg-deb or Python for unpacking
        pass

    def lists_dir(self) -> Path:
        return self.root / "mirror" / "lists"

    def update(self) -> None:
        """Fetch each suite's package index and its English and German description indexes, once."""
        lists = self.lists_dir()
        if (lists / ".complete").is_file():
            return
        lists.mkdir(parents=True, exist_ok=True)
        for base, suite in self.suites:
            self._fetch_index(base, suite, f"main/binary-{ARCH}/Packages", required=True)
            for lang in ("en", "de"):
                self._fetch_index(base, suite, f"main/i18n/Translation-{lang}", required=False)
        (lists / ".complete").write_text("")

    def _fetch_index(self, base: str, suite: str, rest: str, required: bool) -> None:
        for ext in ("xz", "bz2", "gz"):
            data = http_get(f"{base}/dists/{suite}/{rest}.{ext}")
            if data is not None:
                (self.lists_dir() / f"{_list_name(base, suite, rest)}.{ext}").write_bytes(data)
                return
        if required:
            raise ArchiveError(f"{base} has no {suite}/{rest} index: check task.corpora.debian.fetch's mirror, or pass "
                               "task.corpora.debian.deb_dir=/path/to/debs.")

    def index(self) -> dict[str, PackageEntry]:
        if self._index is None:
            self._index = {}
            for base, suite in self.suites:  # apt's candidate: the highest version in any suite
                for path in sorted(self.lists_dir().glob(f"{_list_name(base, suite, 'main/binary-' + ARCH)}"
                                                         "_Packages.*")):
                    text = decompress_index(path).decode("utf-8", "replace")
                    for name, entry in parse_packages(text, base).items():
                        old = self._index.get(name)
                        if old is None or compare_versions(entry.version, old.version) > 0:
                            self._index[name] = entry
        return self._index

    def candidates(self, packages: Iterable[str]) -> dict[str, tuple[str, int]]:
        index = self.index()
        return {p: (index[p].version, index[p].size) for p in sorted(set(packages)) if p in index}

    def _fetch(self, chunk: Sequence[str], wanted: dict[str, tuple[str, int]], partial: Path) -> None:
        """Download the chunk's packages into ``partial``, ``workers`` at a time, each checked against its sha256
        and named as ``apt-get download`` names it (the version with its epoch)."""
        index = self.index()

        def one(p: str) -> None:
            e = index[p]
            url = f"{e.base}/{e.filename}"
            if http_get(url, partial / f"{p}_{e.version}_{e.arch}.deb", sha256=e.sha256) is None:
                # The mirror keeps only current versions: an index fetched before an update names removed files.
                (self.lists_dir() / ".complete").unlink(missing_ok=True)
                raise ArchiveError(f"{url} is gone from the mirror (a newer version replaced it since the package "
                                   "index was fetched); the next run fetches the index anew: run the same command "
                                   "again.")

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            list(pool.map(one, chunk))


def system_is_reference_release() -> bool:
    """Whether this machine's apt serves the reference build's release (Debian bookworm)."""
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return False
    fields = dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', text, flags=re.M))
    return fields.get("ID") == "debian" and fields.get("VERSION_CODENAME") == RELEASE


def open_archive(root: Path, deb_dir: Path | None = None, fetch: str = "auto", progress: bool = True) -> Archive:
    """The archive a build reads: the ``.deb`` folder ``deb_dir``; else apt (``fetch=apt``), the mirror over HTTP
    (``fetch=http``), or ``auto``: apt on Debian bookworm, where it serves the reference's packages, the mirror
    on every other machine."""
    if fetch not in FETCH_MODES:
        raise ArchiveError(f"task.corpora.debian.fetch={fetch!r}: use one of {', '.join(FETCH_MODES)}.")
    if deb_dir is not None:
        return Archive(root, deb_dir=deb_dir, progress=progress)
    if fetch == "http" or (fetch == "auto" and not (Archive.apt_tools_present() and system_is_reference_release())):
        return MirrorArchive(root, progress=progress)
    return Archive(root, progress=progress)

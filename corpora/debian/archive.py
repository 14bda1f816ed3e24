"""Debian packages fetched and unpacked without touching the system: a private apt state, one folder per package.

``apt-get download`` and ``dpkg-deb -x`` install nothing, and the apt state (package lists, the German and
English ``Translation`` indexes apt fetches when ``Acquire::Languages`` names them) lives under the cache
folder, so the system's own lists are never changed. Every step is per package and atomic (a download or an
extract is renamed into place only when complete), so a build killed half way resumes where it stopped and
never reads a half file. ``deb_dir`` replaces apt altogether: a folder of ``.deb`` files (and the two
``Translation-*`` files) makes the build offline-repeatable. Reading the indexes is ``indexes``'s part,
unpacking one package ``unpack``'s; this module downloads and schedules.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from corpora.debian import ArchiveError
from corpora.debian.indexes import control_fields, join_translations, private_apt_config
from corpora.debian.unpack import clear_stale, unpack_into, unpacked

#: What a full build downloads and unpacks (measured: 2.1 GB of packages, 0.46 GB of the files the extractors
#: read, 0.1 GB of aligned documents, 0.04 GB of indexes); checked before any download starts.
DISK_NEEDED_GB = 3.0


@dataclass(frozen=True)
class DebInfo:
    package: str
    version: str
    filename: str  # <package>_<version>_<arch>.deb as it lies in debs/
    sha256: str
    size: int


def _run(cmd: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None,
         timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


_DEB_NAME = re.compile(r"^(?P<pkg>[^_]+)_(?P<ver>[^_]+)_(?P<arch>[^_]+)\.deb$")


class Archive:
    """Packages of this machine's Debian release (or of a local folder of ``.deb`` files) under ``root``.

    Layout: ``root/apt`` the private apt state, ``root/debs`` complete downloads, ``root/pkgs/<package>`` complete
    extracts, ``root/i18n`` the decompressed ``Translation-{en,de}`` indexes.
    """

    #: File name wildcards left packed: None for ``unpack.SKIPPED_FILES`` (the text corpus needs no pictures); the
    #: photo corpus unpacks its pictures with ``()``.
    skipped_files: tuple[str, ...] | None = None

    def __init__(self, root: Path, deb_dir: Path | None = None, progress: bool = True) -> None:
        self.root = Path(root).resolve()  # apt reads relative paths in its configuration from its own root
        self.deb_dir = Path(deb_dir).expanduser() if deb_dir else None
        self.progress = progress
        self.apt = self.root / "apt"
        self.debs = self.root / "debs"
        self.pkgs = self.root / "pkgs"
        self.i18n = self.root / "i18n"
        self.download_seconds = 0.0  # how long the last download_and_extract downloaded (unpacking alongside)
        if self.deb_dir is not None and not self.deb_dir.is_dir():
            raise ArchiveError(f"task.corpora.debian.deb_dir={self.deb_dir} is not a folder: point it at a folder "
                               "of .deb files (the corpus manifest lists them), or drop it to download the packages.")
        self._check_tools()

    @staticmethod
    def apt_tools_present() -> bool:
        return all(shutil.which(t) is not None for t in ("apt-get", "apt-cache"))

    def _check_tools(self) -> None:
        """apt for the downloads (``.deb`` files are unpacked by dpkg-deb, or in Python where it is missing)."""
        if self.deb_dir is None and not self.apt_tools_present():
            raise ArchiveError("apt-get not found: task.corpora.debian.fetch=apt needs Debian's apt; use "
                               "task.corpora.debian.fetch=http (any machine) or "
                               "task.corpora.debian.deb_dir=/path/to/debs.")

    def lists_dir(self) -> Path:
        """Where the Translation indexes are read from."""
        return self.deb_dir if self.deb_dir is not None else self.apt / "lists"

    # ---- the private apt state ---------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        return {**os.environ, "APT_CONFIG": str(private_apt_config(self.apt)), "LC_ALL": "C"}

    def update(self) -> None:
        """Fetch the package lists once (reused afterwards: the build pins versions in its manifest)."""
        if self.deb_dir is not None:
            return
        lists = self.apt / "lists"
        if any(lists.glob("*_Packages*")) and any(lists.glob("*Translation-de*")):
            return
        proc = _run(["apt-get", "update"], env=self._env(), timeout=900)
        if proc.returncode != 0 or not any(lists.glob("*_Packages*")):
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise ArchiveError(f"apt could not reach the Debian archive ({last}); on an offline machine pass "
                               "task.corpora.debian.deb_dir=/path/to/debs, a folder holding the .deb files and "
                               "Translation-{en,de} (see docs/data.md).")

    def candidates(self, packages: Iterable[str]) -> dict[str, tuple[str, int]]:
        """package -> (version, size in bytes) of what would be downloaded; packages not in this release are
        left out (the caller reports them)."""
        packages = sorted(set(packages))
        if self.deb_dir is not None:
            found: dict[str, tuple[str, int]] = {}
            for deb in sorted(self.deb_dir.glob("*.deb")):
                m = _DEB_NAME.match(deb.name)
                if m and m["pkg"] in packages:
                    found[m["pkg"]] = (m["ver"], deb.stat().st_size)
            return found
        out: dict[str, tuple[str, int]] = {}
        for chunk_start in range(0, len(packages), 200):
            chunk = packages[chunk_start: chunk_start + 200]
            proc = _run(["apt-cache", "show", "--no-all-versions", *chunk], env=self._env())
            for block in proc.stdout.split("\n\n"):
                fields = control_fields(block)
                if "Package" in fields and "Version" in fields:
                    out[fields["Package"]] = (fields["Version"], int(fields.get("Size", 0)))
        return out

    # ---- downloads ---------------------------------------------------------------------------------------

    def _complete_deb(self, package: str) -> Path | None:
        found = sorted(self.debs.glob(f"{package}_*.deb"))
        return found[-1] if found else None

    def download(self, wanted: dict[str, tuple[str, int]],
                 on_ready: Callable[[DebInfo], None] | None = None) -> dict[str, DebInfo]:
        """Every wanted package's ``.deb`` in ``debs/`` (downloaded only when missing), with its sha256.

        ``on_ready`` is called with each package's info as soon as its ``.deb`` is complete (at once for the
        ones already there), so unpacking can run while the rest downloads.
        """
        self.debs.mkdir(parents=True, exist_ok=True)
        partial = self.debs / ".partial"
        shutil.rmtree(partial, ignore_errors=True)  # a killed download: apt verifies what it fetches again
        partial.mkdir()
        infos: dict[str, DebInfo] = {}

        def ready(p: str) -> None:
            deb = self._complete_deb(p)
            if deb is None:
                raise ArchiveError(f"{p}'s .deb is missing after the download; run the same command again.")
            infos[p] = DebInfo(p, wanted[p][0], deb.name, self._sha256_cached(deb), deb.stat().st_size)
            if on_ready is not None:
                on_ready(infos[p])

        todo = sorted(p for p in wanted if self._complete_deb(p) is None)
        for p in sorted(set(wanted) - set(todo)):
            ready(p)
        total = sum(wanted[p][1] for p in todo)
        bar = tqdm(total=total, unit="B", unit_scale=True, desc="download", disable=not self.progress or not todo)
        for chunk in _chunks(todo, {p: wanted[p][1] for p in todo}):
            self._fetch(chunk, wanted, partial)
            for deb in partial.glob("*.deb"):
                os.replace(deb, self.debs / deb.name.replace("%3a", ":"))
            for p in chunk:
                ready(p)
            bar.update(sum(wanted[p][1] for p in chunk))
        bar.close()
        shutil.rmtree(partial, ignore_errors=True)
        return dict(sorted(infos.items()))

    def _fetch(self, chunk: Sequence[str], wanted: dict[str, tuple[str, int]], partial: Path) -> None:
        """Put the chunk's complete ``.deb`` files into ``partial`` (moved into ``debs/`` by the caller)."""
        if self.deb_dir is not None:
            for p in chunk:
                src = next(self.deb_dir.glob(f"{p}_*.deb"))
                try:  # a hard link where the folder is on the same disk: no 2 GB copy
                    os.link(src, partial / src.name)
                except OSError:
                    shutil.copyfile(src, partial / src.name)
            return
        proc = _run(["apt-get", "download", *chunk], env=self._env(), cwd=partial)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise ArchiveError(f"apt-get download failed for {', '.join(chunk)} ({last}); check the "
                               "network, or pass task.corpora.debian.deb_dir=/path/to/debs with these .deb files.")

    def _sha256_cached(self, deb: Path) -> str:
        """sha256 of a .deb, remembered beside it (a .deb never changes under the same name)."""
        side = deb.with_name(deb.name + ".sha256")
        if side.is_file():
            return side.read_text().strip()
        digest = sha256_file(deb)
        side.write_text(digest + "\n")
        return digest

    # ---- extraction (each package unpacked by ``unpack``) --------------------------------------------------

    def extract(self, infos: dict[str, DebInfo], members: Mapping[str, Sequence[str] | None] | None = None,
                workers: int = 2) -> dict[str, Path]:
        """package -> the folder its ``.deb`` is unpacked into (unpacked only once per version and member list).

        ``members`` gives each package the ``tar`` wildcards of the files the extractors read (None or a
        missing package: all of it, less ``unpack.SKIPPED_FILES``); ``workers`` packages are unpacked at a time.
        """
        _, roots = self.download_and_extract({}, members, workers, infos=infos)
        return roots

    def download_and_extract(self, wanted: dict[str, tuple[str, int]],
                             members: Mapping[str, Sequence[str] | None] | None = None, workers: int = 2,
                             infos: dict[str, DebInfo] | None = None) -> tuple[dict[str, DebInfo], dict[str, Path]]:
        """:meth:`download` the wanted packages and unpack each (:meth:`extract`) as soon as its ``.deb`` is
        complete, ``workers`` at a time, while the rest download (given ``infos``: unpack those only)."""
        members = members or {}
        clear_stale(self.pkgs)
        sizes = {p: size for p, (_, size) in wanted.items()} if infos is None else {p: i.size for p, i in infos.items()}
        bar = tqdm(total=sum(sizes.values()), unit="B", unit_scale=True, desc="extract", disable=not self.progress)
        roots: dict[str, Path] = {}
        futures: dict[Future[Path], DebInfo] = {}
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:

            def ready(info: DebInfo) -> None:
                target, wanted_files = self.pkgs / info.package, members.get(info.package)
                done = unpacked(target, info.filename, wanted_files)
                if done is not None:
                    roots[info.package] = done
                    bar.update(sizes.get(info.package, info.size))
                else:
                    deb = self.debs / info.filename
                    futures[pool.submit(unpack_into, deb, target, wanted_files, self.skipped_files)] = info

            try:
                if infos is None:
                    t0 = time.perf_counter()
                    infos = self.download(wanted, on_ready=ready)
                    self.download_seconds = time.perf_counter() - t0
                else:  # the largest first: the workers finish together
                    for info in sorted(infos.values(), key=lambda i: -i.size):
                        ready(info)
                for future in as_completed(list(futures)):
                    info = futures[future]
                    roots[info.package] = future.result()
                    bar.update(sizes.get(info.package, info.size))
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
        bar.close()
        return dict(sorted(infos.items())), dict(sorted(roots.items()))

    # ---- the description indexes (DDTP) ------------------------------------------------------------------

    def translations(self) -> tuple[Path, dict[str, str]]:
        """A folder with ``Translation-en`` and ``Translation-de`` (decompressed, every suite's index of the
        language joined: ``indexes.join_translations``), and their sha256s."""
        self.i18n.mkdir(parents=True, exist_ok=True)
        out: dict[str, str] = {}
        for lang in ("en", "de"):
            target = self.i18n / f"Translation-{lang}"
            if not target.is_file():
                where = self.lists_dir()
                fix = (f"copy it from an online build's {self.i18n}, or drop the ddtp source."
                       if self.deb_dir is not None else f"delete {where} and run the same command again.")
                join_translations(where, lang, target, fix)
            out[f"Translation-{lang}"] = sha256_file(target)
        return self.i18n, out


#: One ``apt-get download`` call fetches at most this many packages or bytes: each call spends most of a second
#: reading the package lists, and each chunk is unpacked as soon as it is complete.
CHUNK_PACKAGES, CHUNK_BYTES = 40, 200_000_000


def _chunks(packages: Sequence[str], sizes: Mapping[str, int]) -> Iterator[list[str]]:
    chunk: list[str] = []
    for p in packages:
        if chunk and (len(chunk) >= CHUNK_PACKAGES or sum(sizes[q] for q in chunk) + sizes[p] > CHUNK_BYTES):
            yield chunk
            chunk = []
        chunk.append(p)
    if chunk:
        yield chunk


def check_disk(folder: Path, needed_gb: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free / 1e9
    if free < needed_gb:
        raise ArchiveError(f"{folder} has {free:.1f} GB free but the Debian corpus build needs about "
                           f"{needed_gb:.1f} GB: free space there or point paths.cache_dir at a larger disk.")

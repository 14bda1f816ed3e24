"""Debian packages fetched and unpacked without touching the system: a private apt state, one folder per package.

``apt-get download`` and ``dpkg-deb -x`` install nothing, and the apt state (package lists, the German and
English ``Translation`` indexes apt fetches when ``Acquire::Languages`` names them) lives under the cache
folder, so the system's own lists are never changed. Every step is per package and atomic (a download or an
extract is renamed into place only when complete), so a build killed half way resumes where it stopped and
never reads a half file. ``deb_dir`` replaces apt altogether: a folder of ``.deb`` files (and the two
``Translation-*`` files) makes the build offline-repeatable.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

#: What a full build downloads and unpacks (measured: 2.1 GB of packages, 0.46 GB of the files the extractors
#: read, 0.1 GB of aligned documents, 0.04 GB of indexes); checked before any download starts.
DISK_NEEDED_GB = 3.0


class ArchiveError(RuntimeError):
    """A condition the user has to fix (no archive, no disk, no tools); the message names the fix."""


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


def control_fields(block: str) -> dict[str, str]:
    """The ``Field: value`` lines of one stanza of a Debian control file (``apt-cache show``, a Packages index)."""
    return dict(re.findall(r"^([\w-]+): (.*)$", block, flags=re.M))


_DEB_NAME = re.compile(r"^(?P<pkg>[^_]+)_(?P<ver>[^_]+)_(?P<arch>[^_]+)\.deb$")


class Archive:
    """Packages of this machine's Debian release (or of a local folder of ``.deb`` files) under ``root``.

    Layout: ``root/apt`` the private apt state, ``root/debs`` complete downloads, ``root/pkgs/<package>`` complete
    extracts, ``root/i18n`` the decompressed ``Translation-{en,de}`` indexes.
    """

    #: File name wildcards left packed: None for ``SKIPPED_FILES`` (the text corpus needs no pictures); the photo
    #: corpus unpacks its pictures with ``()``.
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
            raise ArchiveError(f"task.debian_deb_dir={self.deb_dir} is not a folder: point it at a folder of .deb "
                               "files (the corpus manifest lists them), or drop it to download the packages.")
        self._check_tools()

    @staticmethod
    def apt_tools_present() -> bool:
        return all(shutil.which(t) is not None for t in ("apt-get", "apt-cache"))

    def _check_tools(self) -> None:
        """apt for the downloads (``.deb`` files are unpacked by dpkg-deb, or in Python where it is missing)."""
        if self.deb_dir is None and not self.apt_tools_present():
            raise ArchiveError("apt-get not found: task.debian_fetch=apt needs Debian's apt; use "
                               "task.debian_fetch=http (any machine) or task.debian_deb_dir=/path/to/debs.")

    def lists_dir(self) -> Path:
        """Where the Translation indexes are read from."""
        return self.deb_dir if self.deb_dir is not None else self.apt / "lists"

    # ---- the private apt state ---------------------------------------------------------------------------

    def _apt_conf(self) -> Path:
        """A private apt configuration: the system's sources and settings, but its own lists and cache, and
        the English and German description indexes (containers often switch those off)."""
        parts = self.apt / "apt.conf.d"
        conf = self.apt / "apt.conf"
        if conf.is_file():
            return conf
        for d in ("lists/partial", "cache/archives/partial", "sources"):
            (self.apt / d).mkdir(parents=True, exist_ok=True)
        parts.mkdir(parents=True, exist_ok=True)
        system_parts = Path("/etc/apt/apt.conf.d")
        for f in sorted(system_parts.glob("*")) if system_parts.is_dir() else []:
            text = f.read_text(errors="replace") if f.is_file() else ""
            if "Acquire::Languages" not in text:  # the one setting we replace
                (parts / f.name).write_text(text)
        sources = self.apt / "sources"
        for f in sorted(Path("/etc/apt/sources.list.d").glob("*")):
            if f.suffix in (".list", ".sources"):
                shutil.copy(f, sources / f.name)
        if Path("/etc/apt/sources.list").is_file():
            shutil.copy("/etc/apt/sources.list", sources / "system.list")
        (self.apt / "sources.list").write_text("")  # the sources are the files of Dir::Etc::SourceParts
        tmp = conf.with_name("apt.conf.tmp")
        tmp.write_text(
            f'Dir::Etc::Parts "{parts}";\n'
            'Acquire::Languages { "en"; "de"; };\n'
            f'Dir::State::Lists "{self.apt / "lists"}";\n'
            f'Dir::Cache "{self.apt / "cache"}";\n'
            f'Dir::Etc::SourceParts "{sources}";\n'
            f'Dir::Etc::SourceList "{self.apt / "sources.list"}";\n'
            'APT::Get::List-Cleanup "false";\n'
        )
        os.replace(tmp, conf)
        return conf

    def _env(self) -> dict[str, str]:
        return {**os.environ, "APT_CONFIG": str(self._apt_conf()), "LC_ALL": "C"}

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
                               "task.debian_deb_dir=/path/to/debs, a folder holding the .deb files and "
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
                               "network, or pass task.debian_deb_dir=/path/to/debs with these .deb files.")

    def _sha256_cached(self, deb: Path) -> str:
        """sha256 of a .deb, remembered beside it (a .deb never changes under the same name)."""
        side = deb.with_name(deb.name + ".sha256")
        if side.is_file():
            return side.read_text().strip()
        digest = sha256_file(deb)
        side.write_text(digest + "\n")
        return digest

    # ---- extraction --------------------------------------------------------------------------------------

    def _clear_stale_extracts(self) -> None:
        self.pkgs.mkdir(parents=True, exist_ok=True)
        for stale in self.pkgs.glob(".*"):  # extracts a killed build left half done
            shutil.rmtree(stale, ignore_errors=True)

    def _unpacked(self, info: DebInfo, members: Sequence[str] | None) -> Path | None:
        """The package's folder if it was unpacked from this .deb with these members, else None."""
        stamp = self.pkgs / info.package / ".bpd-deb"
        return stamp.parent if stamp.is_file() and stamp.read_text() == _stamp(info, members) else None

    def _unpack(self, info: DebInfo, members: Sequence[str] | None) -> Path:
        """Unpack into a hidden folder, then rename it into place (a killed run never leaves a half folder)."""
        target = self.pkgs / info.package
        tmp = Path(tempfile.mkdtemp(prefix=f".{info.package}.", dir=self.pkgs))
        error = _unpack_text(self.debs / info.filename, tmp, members, self.skipped_files)
        if error is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            (self.debs / info.filename).unlink(missing_ok=True)  # fetched again by the next run
            raise ArchiveError(f"{info.filename} could not be unpacked ({error[:200]}); it was deleted: "
                               "run the same command again to download it anew.")
        (tmp / ".bpd-deb").write_text(_stamp(info, members))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
        return target

    def extract(self, infos: dict[str, DebInfo], members: Mapping[str, Sequence[str] | None] | None = None,
                workers: int = 2) -> dict[str, Path]:
        """package -> the folder its ``.deb`` is unpacked into (unpacked only once per version and member list).

        ``members`` gives each package the ``tar`` wildcards of the files the extractors read (None or a
        missing package: all of it, less ``SKIPPED_FILES``); ``workers`` packages are unpacked at a time.
        """
        _, roots = self.download_and_extract({}, members, workers, infos=infos)
        return roots

    def download_and_extract(self, wanted: dict[str, tuple[str, int]],
                             members: Mapping[str, Sequence[str] | None] | None = None, workers: int = 2,
                             infos: dict[str, DebInfo] | None = None) -> tuple[dict[str, DebInfo], dict[str, Path]]:
        """:meth:`download` the wanted packages and unpack each (:meth:`extract`) as soon as its ``.deb`` is
        complete, ``workers`` at a time, while the rest download (given ``infos``: unpack those only)."""
        members = members or {}
        self._clear_stale_extracts()
        sizes = {p: size for p, (_, size) in wanted.items()} if infos is None else {p: i.size for p, i in infos.items()}
        bar = tqdm(total=sum(sizes.values()), unit="B", unit_scale=True, desc="extract", disable=not self.progress)
        roots: dict[str, Path] = {}
        futures: dict[Future[Path], DebInfo] = {}
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:

            def ready(info: DebInfo) -> None:
                done = self._unpacked(info, members.get(info.package))
                if done is not None:
                    roots[info.package] = done
                    bar.update(sizes.get(info.package, info.size))
                else:
                    futures[pool.submit(self._unpack, info, members.get(info.package))] = info

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
        """A folder with ``Translation-en`` and ``Translation-de`` (decompressed), and their sha256s.

        Each file joins every suite's index of its language (main, updates, security): the German entries
        name the md5 of the English description they translate, which a point release may have moved.
        """
        self.i18n.mkdir(parents=True, exist_ok=True)
        out: dict[str, str] = {}
        for lang in ("en", "de"):
            target = self.i18n / f"Translation-{lang}"
            if not target.is_file():
                where = self.lists_dir()
                files = sorted(p for p in where.iterdir() if re.search(rf"Translation-{lang}(\.\w+)?$", p.name))
                if not files:
                    raise ArchiveError(f"{where} has no Translation-{lang} index: "
                                       + (f"copy it from an online build's {self.i18n}, or drop the ddtp source."
                                          if self.deb_dir is not None else
                                          f"delete {where} and run the same command again."))
                tmp = target.with_name(target.name + ".tmp")
                with open(tmp, "wb") as f:
                    for path in files:
                        f.write(decompress_index(path) + b"\n")
                os.replace(tmp, target)
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


#: Files no extractor reads (pictures, sound, fonts, compiled code): left in the archive even where a member
#: wildcard would take them (a help folder's figures).
SKIPPED_FILES = ("*.png", "*.jpg", "*.jpeg", "*.gif", "*.svg", "*.svgz", "*.webp", "*.ico", "*.bmp", "*.xcf",
                 "*.ogg", "*.wav", "*.mp3", "*.flac", "*.ttf", "*.otf", "*.woff", "*.woff2", "*.so", "*.so.*",
                 "*.a", "*.pyc", "*.pdf", "*.eps", "*.wmf")
_NOT_FOUND = re.compile(r"^tar: .*: Not found in archive$|^tar: Exiting with failure status due to previous errors$")
_HARD_LINK = re.compile(r"^tar: (.+): Cannot hard link to '(.+)': No such file or directory$")


def _stamp(info: DebInfo, members: Sequence[str] | None) -> str:
    """What an unpacked folder was made from: the .deb and the member wildcards (a changed list unpacks again)."""
    return info.filename + "\n" + ("*" if members is None else "\n".join(members)) + "\n"


def _tar_x(deb: Path, target: Path, options: str) -> subprocess.CompletedProcess[str]:
    cmd = (f"set -o pipefail; dpkg-deb --fsys-tarfile {shlex.quote(str(deb))} | "
           f"tar -x -C {shlex.quote(str(target))} {options}")
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=1800, check=False,
                          env={**os.environ, "LC_ALL": "C"})


def _unpack_text(deb: Path, target: Path, members: Sequence[str] | None = None,
                 skipped: Sequence[str] | None = None) -> str | None:
    """``dpkg-deb -x`` of only the files matching ``members`` (all when None), without ``SKIPPED_FILES``:
    dpkg-deb streams the data, tar picks. None when it worked, else the error. A wildcard that matches
    nothing in this package is no error. A wanted file stored as a hard link to a file outside ``members``
    (debian-handbook's languages share files that way) is unpacked in a second pass with its target.
    Without dpkg-deb (not a Debian machine) the same files are unpacked in Python. ``skipped``: the file name
    wildcards left packed (None: ``SKIPPED_FILES``)."""
    skipped = SKIPPED_FILES if skipped is None else tuple(skipped)
    if shutil.which("dpkg-deb") is None:
        from bpd.data.debian.debfile import unpack_deb

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


def check_disk(folder: Path, needed_gb: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free / 1e9
    if free < needed_gb:
        raise ArchiveError(f"{folder} has {free:.1f} GB free but the Debian corpus build needs about "
                           f"{needed_gb:.1f} GB: free space there or point paths.cache_dir at a larger disk.")

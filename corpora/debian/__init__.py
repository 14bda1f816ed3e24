"""English–German text that Debian's own packages ship, built into a corpus (``corpora.debian.build``).

What every module of the package and its callers share lives here, so the archive's index reading and its
unpacking (``indexes``, ``unpack``) can raise the same error as the archive without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: How ``task.corpora.debian.fetch`` may fetch the packages (``corpora.debian.mirror.open_archive``); bpd's config
#: checks the option against it.
FETCH_MODES = ("auto", "apt", "http")
#: The order sources are read in (fixed: the first occurrence of a duplicate pair wins); every source there is.
SOURCE_ORDER = ("docbooks", "ddtp", "libreoffice_help", "manpages", "gnome_help", "kde_doc", "lyx", "gettext", "qt",
                "mozilla")
KINDS = ("sentences", "strings")


def check_fetch(fetch: str, where: str) -> None:
    if fetch not in FETCH_MODES:
        raise ValueError(f"{where}.fetch must be one of {', '.join(FETCH_MODES)} (got {fetch!r}).")


@dataclass
class DebianOptions:
    """The Debian English-German corpus's options (``task.corpora.debian``, registered in bpd/config/corpora.py),
    read as they are by its builder (``corpora.debian.build.prepare_debian``, beside the task's ``HeldOut``)."""

    sources: list[str] | None = None  # which extractors (null = all, in SOURCE_ORDER)
    kinds: list[str] = field(default_factory=lambda: list(KINDS))  # which kinds of text ([sentences]: no UI strings)
    min_words: int = 1  # the shortest English side
    deb_dir: str | None = None  # a folder of .deb files to build from instead of downloading (offline, repeatable)
    # How the packages are fetched: apt, http (bookworm's from deb.debian.org, no apt needed) or auto (apt on
    # Debian bookworm, the release of the reference build; http on any other machine).
    fetch: str = "auto"

    #: Where the packages come from does not change the corpus (its content hash keys it): left out of cache keys.
    NOT_KEYED = ("deb_dir", "fetch")

    @property
    def chosen(self) -> tuple[str, ...]:
        """The sources read, in corpus order as given."""
        return tuple(self.sources or SOURCE_ORDER)

    def validate(self, where: str = "task.corpora.debian") -> None:
        check_fetch(self.fetch, where)
        unknown = [s for s in self.chosen if s not in SOURCE_ORDER]
        if unknown:
            raise ValueError(f"unknown Debian corpus source(s) {', '.join(unknown)}; choose from "
                             f"{', '.join(SOURCE_ORDER)} ({where}.sources).")
        if not self.kinds or any(k not in KINDS for k in self.kinds):
            raise ValueError(f"{where}.kinds must name sentences and/or strings (got {list(self.kinds)}).")
        if self.min_words < 1:
            raise ValueError(f"{where}.min_words must be >= 1 (got {self.min_words}).")
        if "docbooks" not in self.chosen:
            raise ValueError(f"the dev and test sets are books of the docbooks source: keep docbooks in "
                             f"{where}.sources.")


class ArchiveError(RuntimeError):
    """A condition the user has to fix (no archive, no disk, no tools); the message names the fix."""

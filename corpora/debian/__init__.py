"""English–German text that Debian's own packages ship, built into a corpus (``corpora.debian.build``).

What every module of the package and its callers share lives here, so the archive's index reading and its
unpacking (``indexes``, ``unpack``) can raise the same error as the archive without importing it.
"""

#: How ``task.corpora.debian.fetch`` may fetch the packages (``corpora.debian.mirror.open_archive``); bpd's config
#: checks the option against it.
FETCH_MODES = ("auto", "apt", "http")


class ArchiveError(RuntimeError):
    """A condition the user has to fix (no archive, no disk, no tools); the message names the fix."""

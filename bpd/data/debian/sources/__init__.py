"""One module per kind of source; importing this package registers them all in ``base.SOURCES``."""

from bpd.data.debian.sources import (  # noqa: F401  (each registers itself)
    blocks,
    ddtp,
    gettext,
    libreoffice_help,
    lyx,
    manpages,
    mozilla,
    qt,
)

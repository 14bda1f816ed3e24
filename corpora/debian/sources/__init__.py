"""One module (``manpages``: one package) per kind of source; importing this package registers them all in
``base.SOURCES``. ``blocks`` is the block parser and aligner that ``docbooks``, ``gnome_help``, ``kde_doc`` and
``lyx`` share."""

from corpora.debian.sources import (  # noqa: F401  (each registers itself)
    ddtp,
    docbooks,
    gettext,
    gnome_help,
    kde_doc,
    libreoffice_help,
    lyx,
    manpages,
    mozilla,
    qt,
)

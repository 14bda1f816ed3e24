"""The photo corpus's pinned sources: which Debian package holds which photographs, under which licence.

Each source names one package of Debian bookworm, the ``tar`` wildcards of the pictures it contributes (as
:mod:`bpd.data.debian.archive` unpacks them) and how its files group into *designs*: one photograph that a package
ships at several resolutions (a KDE wallpaper's ``contents/images/<W>x<H>.jpg``) is one design, of which only the
largest file is read. The versions and sha256s of the packages a build read are in its ``manifest.json``; the
reference build's is ``results/data/photos_manifest.json``. Licences are those of the packages' ``copyright``
files (docs/data.md has the table). Only JPEG files are taken: in these packages the PNG and WebP wallpapers are
drawn art (gradients, logos, flat vector shapes), the JPEG ones photographs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath


def _file_stem(rel: str) -> str:
    """Each file is its own photograph."""
    return PurePosixPath(rel).stem


def _kde_design(rel: str) -> str:
    """``usr/share/wallpapers/<Design>/contents/images/<W>x<H>.jpg``: every size of one design is one photograph."""
    return PurePosixPath(rel).parts[-4]


@dataclass(frozen=True)
class PhotoSource:
    name: str
    package: str
    members: tuple[str, ...]  # tar wildcards, anchored at the package root ("./usr/...")
    licence: str
    design: Callable[[str], str] = _file_stem  # a file's path under the package root -> its design's name
    #: "photos": the main corpus (split by photograph); "faces": a held-out face-shaped test set.
    role: str = "photos"


SOURCES: dict[str, PhotoSource] = {s.name: s for s in (
    PhotoSource("endless_sky_land", "endless-sky-data", ("./usr/share/games/endless-sky/images/land/*.jpg",),
                "public domain (morguefile), some CC-BY-SA-3.0 / 4.0 (Wikimedia Commons)"),
    PhotoSource("plasma_wallpapers", "plasma-workspace-wallpapers",
                ("./usr/share/wallpapers/*/contents/images/*.jpg",), "GPL-2+", design=_kde_design),
    PhotoSource("mate_nature", "mate-backgrounds", ("./usr/share/backgrounds/mate/nature/*.jpg",), "GPL-2+"),
    PhotoSource("lomiri_16_04", "lomiri-wallpapers-16.04", ("./usr/share/backgrounds/*.jpg",),
                "CC-BY-4.0, CC-BY-SA-4.0, CC0-1.0 (per file)"),
    PhotoSource("lomiri_20_04", "lomiri-wallpapers-20.04", ("./usr/share/backgrounds/*.jpg",),
                "CC-BY-4.0, CC-BY-SA-4.0 (per file)"),
    PhotoSource("ukui", "ukui-wallpapers", ("./usr/share/backgrounds/*.jpg",), "CC-BY-SA-3.0"),
)}

#: The order sources are read in (fixed: a near-duplicate's first occurrence names its group).
SOURCE_ORDER: tuple[str, ...] = tuple(SOURCES)

"""The photo corpus's pinned sources: which Debian package holds which photographs, under which licence.

Each source names one package of Debian bookworm, the ``tar`` wildcards of the pictures it contributes (as
:mod:`corpora.debian.unpack` unpacks them) and how its files group into *designs*: one photograph that a package
ships at several resolutions (a KDE wallpaper's ``contents/images/<W>x<H>.jpg``) is one design, of which only the
largest file is read. Sources of the ``faces`` role are not split: every picture is one 32x32 face of a test set
of its own. The versions and sha256s of the packages a build read are in its ``manifest.json``; the reference
build's is ``results/data/photos_manifest.json``. Licences are those of the packages' ``copyright``
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


def _file_path(rel: str) -> str:
    """Each file is its own picture, named by its last folders and its stem (stems repeat across a game's faction
    folders)."""
    return "/".join(PurePosixPath(rel).with_suffix("").parts[-3:])


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
    #: "photos": the main corpus (split by photograph); "faces": a held-out face test set, each picture
    #: centre-cropped to a square and area-resized to one HR image (CelebA's framing, not patches).
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
    # Faces, held out whole: photographs and paintings of real faces (tightly cropped, 50x50), and painted
    # head-and-shoulders portraits (200x150).
    PhotoSource("pokerth_people", "pokerth-data", ("./usr/share/games/pokerth/gfx/avatars/default/people/*.png",),
                "BSD-3-clause", design=_file_path, role="faces"),
    PhotoSource("naev_portraits", "naev-data", ("./usr/share/naev/dat/gfx/portraits/*.png",),
                "public domain, GPL-3, CC-BY-SA-3.0 (per file)", design=_file_path, role="faces"),
)}

#: The order sources are read in (fixed: a near-duplicate's first occurrence names its group).
SOURCE_ORDER: tuple[str, ...] = tuple(SOURCES)

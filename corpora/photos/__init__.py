"""The photo corpus for super-resolution: photographs from Debian packages, cut into patch pairs."""

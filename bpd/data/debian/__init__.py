"""English–German text that Debian's own packages ship, built into a corpus (``bpd.data.debian.build``)."""

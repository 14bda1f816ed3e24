"""The corpus builders: the Debian English–German text corpus (``corpora.debian``), the photo corpus for
super-resolution (``corpora.photos``) and the ding sentences (``corpora.ding``), each written into a folder that
``bpd`` reads.

They import nothing from ``bpd`` (``tests/corpora/test_independent.py`` checks it): a corpus and its hash must
not change when the method library does, and the builders can be used or shipped without torch.
"""

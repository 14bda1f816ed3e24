"""bpd: blockwise parallel decoding for deep autoregressive models (Stern et al., NeurIPS 2018).

``bpd.translate`` and ``bpd.load_translator`` (``bpd.translator``) are imported on first use, so that
``import bpd`` stays free of torch for the tools that only read configs and rows."""

__version__ = "0.1.0"

_LAZY = {"translate": "bpd.translator", "load_translator": "bpd.translator"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bpd' has no attribute {name!r}")

"""bpd: blockwise parallel decoding for deep autoregressive models (Stern et al., NeurIPS 2018)."""

__version__ = "0.1.0"

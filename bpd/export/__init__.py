"""A trained bpd Transformer's base model (p_1, without the proposal heads) written as a Hugging Face
transformers model, its tokenizer as a HF tokenizer, and the CTranslate2 conversion of that directory: the
peers of the benchmark (``bench/peers.py``) run our weights through other libraries' decoders.

Needs the ``export`` extra (``pip install -e .[export]``): transformers and ctranslate2 are imported lazily,
so the rest of bpd never pays for them.
"""

from bpd.export.hf import check_exportable, export_hf, pegasus_config, to_pegasus

__all__ = ["check_exportable", "export_hf", "pegasus_config", "to_pegasus"]

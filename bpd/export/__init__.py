"""A trained bpd Transformer's base model (p_1) written as a Hugging Face transformers model, its tokenizer as a
HF tokenizer, and the CTranslate2 conversion of that directory: the peers of the benchmark (``bench/peers.py``)
run our weights through other libraries' decoders. A model with proposal heads also gets them written beside
its base, with the ``custom_generate`` code that decodes blockwise in transformers' ``generate`` (``heads``,
``hf_blockwise``).

Needs the ``export`` extra (``pip install -e .[export]``): transformers and ctranslate2 are imported lazily,
so the rest of bpd never pays for them.
"""

from bpd.export.hf import check_exportable, export_hf, pegasus_config, to_pegasus

__all__ = ["check_exportable", "export_hf", "pegasus_config", "to_pegasus"]

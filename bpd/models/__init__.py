"""Models: the translation Transformer, the proposal heads (one module per architecture), the
super-resolution image model, and the decoding fast paths."""

from bpd.models.heads import HEADS, ProposalHeads, build_heads
from bpd.models.image_transformer import ImageTransformer, ImageTransformerConfig, build_image_model
from bpd.models.kv_cache import KVCache
from bpd.models.transformer import Transformer, TransformerConfig, build_translation_model

#: Model classes by the ``kind`` a checkpoint's config records in ``extra`` (translation when absent).
MODEL_CLASSES = {"translation": (Transformer, TransformerConfig), "image": (ImageTransformer, ImageTransformerConfig)}


def model_from_config(cfg: dict) -> Transformer:
    """Rebuild a model (weights not loaded) from the config dict stored in a checkpoint."""
    cls, config_cls = MODEL_CLASSES[cfg.get("extra", {}).get("kind", "translation")]
    return cls(config_cls(**cfg))


__all__ = ["HEADS", "ImageTransformer", "KVCache", "ProposalHeads", "Transformer", "TransformerConfig",
           "build_heads", "build_image_model", "build_translation_model", "model_from_config"]

"""Models: the translation Transformer, the proposal heads, and the super-resolution image model."""

from bpd.models.heads import HEAD_ARCHS, ProposalHeads
from bpd.models.transformer import PRESETS, Transformer, TransformerConfig, build_translation_model

__all__ = ["HEAD_ARCHS", "PRESETS", "ProposalHeads", "Transformer", "TransformerConfig", "build_translation_model"]

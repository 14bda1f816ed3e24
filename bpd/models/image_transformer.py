"""Conditional image Transformer for super-resolution (the paper's Section 6 / Table 2 task).

The low-resolution image is encoded as a sequence of channel intensities; the decoder generates the
high-resolution image one channel intensity at a time in raster order (R, G, B per pixel), each a
256-way classification. Positions are learned row, column and channel embeddings (plus a BOS slot),
so the model knows where in the image each token sits. Everything else (KV cache, n-token verify
calls, per-row truncation, proposal heads) is inherited from ``Transformer``, so the same
``greedy_decode`` / ``blockwise_decode`` run on it unchanged. There is no EOS: decoding stops at
``H * W * 3`` tokens.

Sizes come from ``conf/model/image_*.yaml``: ``image_tiny`` for CPUs and ``image_transformer`` close to
tensor2tensor's ``img2img_transformer_b3`` (hidden 512, filter 2048, 8 heads, 4 encoder / 8 decoder
layers; the paper's local 1D attention is not implemented: full causal attention over 3072 positions is
exact and fits on a GPU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bpd.config import ModelConfig
from bpd.data.images import BOS_ID, EOS_ID, N_INTENSITIES, PAD_ID, VOCAB_SIZE
from bpd.models.heads import Ahead
from bpd.models.transformer import EncoderState, Transformer, TransformerConfig, model_sizes
from bpd.models.upsampler import Upsampler


@dataclass
class ImageTransformerConfig(TransformerConfig):
    lr_size: int = 4
    hr_size: int = 16


class ImageTransformer(Transformer):
    #: Its inputs have one fixed length (the low-resolution image, whose positions are grid cells): the static
    #: decode path does not pad them to a bucket (``bpd.decoding.engine``).
    source_buckets = False
    #: Token ids 0..255 are intensities.
    ordinal_values = (0, N_INTENSITIES)

    def __init__(self, cfg: ImageTransformerConfig) -> None:
        cfg.positions = "learned"  # replaced below by row/column/channel tables
        cfg.max_positions = 1
        cfg.extra = {**cfg.extra, "kind": "image"}
        super().__init__(cfg)
        d = cfg.d_model
        del self.pos
        for layer in self.dec_layers:  # a verify pass attends over up to 3,072 cached intensities
            layer.self_attn.fused_for_many = True
        self.src_row, self.src_col = nn.Embedding(cfg.lr_size, d), nn.Embedding(cfg.lr_size, d)
        self.tgt_row, self.tgt_col = nn.Embedding(cfg.hr_size, d), nn.Embedding(cfg.hr_size, d)
        self.channel = nn.Embedding(3, d)
        self.bos_pos = nn.Parameter(torch.zeros(d))
        for e in (self.src_row, self.src_col, self.tgt_row, self.tgt_col, self.channel):
            nn.init.normal_(e.weight, std=0.02)
        if cfg.aligned_input:
            self.aligned = nn.Embedding(N_INTENSITIES, d)
            if cfg.aligned_tied:
                self.aligned.weight = self.output.weight  # (256, d) both: intensity v's output row embeds v
            else:
                nn.init.normal_(self.aligned.weight, std=0.02)
        self.upsampler: Upsampler | None = None
        if cfg.aligned_input and cfg.aligned_upsample == "learned":
            # Fitted before the base trains (bpd.models.upsampler.fit_upsampler), then frozen: not a base parameter.
            self.upsampler = Upsampler(cfg.hr_size // cfg.lr_size, cfg.upsampler_channels, cfg.upsampler_layers)
            self.upsampler.requires_grad_(False)

    def base_parameters(self) -> list[nn.Parameter]:
        frozen = set() if self.upsampler is None else {id(p) for p in self.upsampler.parameters()}
        return [p for p in super().base_parameters() if id(p) not in frozen]

    @property
    def seq_len(self) -> int:
        return self.cfg.hr_size * self.cfg.hr_size * 3

    def _grid(self, idx: torch.Tensor, size: int, rows: nn.Embedding, cols: nn.Embedding) -> torch.Tensor:
        idx = idx.clamp(0, size * size * 3 - 1)  # verify passes may run past the end; those outputs are unused
        pix = idx // 3
        return rows(pix // size) + cols(pix % size) + self.channel(idx % 3)

    def embed_src(self, src: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(src.shape[1], device=src.device).expand_as(src)
        x = self.src_embed(src) * math.sqrt(self.cfg.d_model)
        return self.drop(x + self._grid(pos, self.cfg.lr_size, self.src_row, self.src_col))

    def embed_tgt(self, tgt: torch.Tensor, pos: torch.Tensor, upper: int, enc=None) -> torch.Tensor:
        # Position 0 holds BOS; position p >= 1 holds HR token p - 1 (and predicts HR token p).
        x = self.tgt_embed(tgt) * math.sqrt(self.cfg.d_model)
        grid = self._grid(pos - 1, self.cfg.hr_size, self.tgt_row, self.tgt_col)
        grid = torch.where((pos == 0)[..., None], self.bos_pos.to(grid.dtype), grid)
        x = x + grid
        if self.cfg.aligned_input:
            if enc is None or enc.aligned is None:
                raise ValueError("model.aligned_input needs the source image: decode with the model's encode().")
            # The upsampled intensity of the token this position predicts (verify passes may run past the end).
            a = self.aligned(enc.aligned.gather(1, pos.clamp(max=self.seq_len - 1)))
            x = x + (a * math.sqrt(self.cfg.d_model) if self.cfg.aligned_tied else a).to(x.dtype)
        return self.drop(x)

    def head_ahead(self, enc: EncoderState, at: torch.Tensor | None = None) -> Ahead | None:
        """Slots that read ahead (``heads.ahead``) read the upsampled guess under the token each guesses, embedded
        as the decoder embeds the one under its own (``embed_tgt``)."""
        if not self.heads.ahead:
            return None
        if enc.aligned is None:
            raise ValueError("heads.ahead=true needs the source image: decode with the model's encode().")
        scale = math.sqrt(self.cfg.d_model) if self.cfg.aligned_tied else 1.0
        return Ahead(enc.aligned, self.aligned.weight, scale, at)

    def encode(self, src: torch.Tensor) -> EncoderState:
        state = super().encode(src)
        if self.cfg.aligned_input:
            state.aligned = self.upsample(src)
        return state

    def upsample(self, src: torch.Tensor) -> torch.Tensor:
        """(B, lr*lr*3) source intensities -> (B, hr*hr*3): the upsampled intensity under each output token,
        computed once per input (``model.aligned_upsample``: nearest, the LR pixel an output pixel lies in,
        bicubic, or learned: bicubic plus the fitted upsampler's correction)."""
        mode = self.cfg.aligned_upsample
        return upsampled_ids(src, self.cfg.lr_size, self.cfg.hr_size, self.upsampler if mode == "learned" else mode)


def upsampled_ids(src: torch.Tensor, lr: int, hr: int, how: str | Upsampler) -> torch.Tensor:
    """(B, lr*lr*3) source intensities -> (B, hr*hr*3) upsampled ones, rounded to intensity ids in raster order:
    torch's ``nearest`` or ``bicubic`` interpolation, or a learned ``Upsampler``."""
    img = src.view(-1, lr, lr, 3).permute(0, 3, 1, 2).float()
    if isinstance(how, Upsampler):
        up = how(img)
    else:
        up = F.interpolate(img, size=(hr, hr), mode=how, align_corners=False if how == "bicubic" else None)
    return up.round().clamp(0, N_INTENSITIES - 1).long().permute(0, 2, 3, 1).reshape(src.shape[0], -1)


def build_image_model(
    k: int, model: ModelConfig | None = None, lr_size: int = 4, hr_size: int = 16, seed: int = 0, **options
) -> ImageTransformer:
    """A super-resolution model of ``model``'s sizes with ``k`` proposal heads (``options``: other
    ``TransformerConfig`` fields, e.g. heads_arch, identity_p1)."""
    if k < 1:
        raise ValueError(f"k must be >= 1 (got {k}).")
    if hr_size % lr_size:
        raise ValueError(f"hr_size ({hr_size}) must be a multiple of lr_size ({lr_size}).")
    params = {
        **model_sizes(model or ModelConfig()),
        **options,
        "vocab_size": VOCAB_SIZE,
        "n_output": N_INTENSITIES,
        "share_embeddings": False,
        "k": k,
        "pad_id": PAD_ID,
        "bos_id": BOS_ID,
        "eos_id": EOS_ID,
        "lr_size": lr_size,
        "hr_size": hr_size,
    }
    torch.manual_seed(seed)
    return ImageTransformer(ImageTransformerConfig(**params))

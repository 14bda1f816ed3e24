"""int8 proposal chains (``decode.proposal_precision=int8``): the slot step on int8 weights is the float step up to
quantization error, it really runs (not the float path under another name), and bad values are refused.
That exact decoding stays greedy's with int8 chains is in the property test (tests/test_decoding.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import random_model, random_src

from bpd.config.decode import DecodeConfig
from bpd.models import fastpath


@pytest.mark.parametrize("arch", ["recurrent", "attend"])
@pytest.mark.parametrize("tied", [False, True])
def test_int8_slot_step_is_the_float_step_up_to_quantization(arch, tied):
    model = random_model(40, 6, seed=3, arch=arch, head_noise=0.3, dtype=torch.float32, heads_tied=tied)
    src = random_src(3, 7, 40, seed=3)
    with torch.inference_mode():
        enc = model.encode(src)
        source = model.head_source(enc) if model.heads.reads_source else None
        h = torch.randn(3, model.heads.d_model, generator=torch.Generator().manual_seed(0))
        tok = torch.tensor([5, 9, 11])
        floats = fastpath.TableStep(model.heads, source)
        model.heads.set_proposal_precision("int8")
        ints = fastpath.TableStep(model.heads, source)
        assert ints.int8 and not floats.int8
        s_f, s_i = h, h
        for i in range(1, 6):
            s_f, logits_f = floats(s_f, tok, i)
            s_i, logits_i = ints(s_i, tok, i)
            assert not torch.equal(logits_f, logits_i)  # the int8 products ran
            scale = logits_f.abs().max()
            assert (logits_f - logits_i).abs().max() < 0.05 * scale, f"slot {i}"
            # the next slot reads the same token on both paths, so each slot's error is its own
            tok = logits_f.argmax(-1)


def test_bad_precisions_are_refused():
    model = random_model(12, 3, seed=0, arch="recurrent", dtype=torch.float32)
    with pytest.raises(ValueError, match="use one of float32, int8"):
        model.heads.set_proposal_precision("fp8")
    with pytest.raises(ValueError, match="decode.proposal_precision='bfloat16'"):
        DecodeConfig(proposal_precision="bfloat16").validate()


def test_packed_zero_channel_stays_zero():
    """The tables fold each bias in through a column that must stay exactly 0 (a zero channel quantized to 0)."""
    w = torch.randn(5, 8)
    w[2] = 0.0
    out = fastpath.int8_linear(torch.randn(4, 8), fastpath.pack_int8(w))
    assert torch.all(out[:, 2] == 0)


def test_int8_is_refused_with_the_fix_where_the_engine_is_missing(monkeypatch):
    monkeypatch.setattr(fastpath, "quantized_engines", lambda: ["qnnpack"])
    model = random_model(12, 3, seed=0, arch="recurrent", dtype=torch.float32)
    with pytest.raises(ValueError, match="use decode.proposal_precision=float32"):
        model.heads.set_proposal_precision("int8")


def test_int8_products_do_not_saturate():
    """Activations and weights spanning their whole 8-bit ranges: without VNNI (AVX2), fbgemm adds pairs of u8 x s8
    products into saturating 16-bit sums, which 8-bit activations overflow (errors of 15% of the largest output
    seen on an AVX2 CPU); 7-bit activations cannot. This runs the product the user's CPU runs."""
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(256, 512, generator=g), 3 * torch.randn(4, 512, generator=g)
    exact = x @ w.t()
    err = (fastpath.int8_linear(x, fastpath.pack_int8(w)) - exact).abs().max()
    assert err < 0.03 * exact.abs().max(), f"{torch.backends.cpu.get_cpu_capability()}: max error {err:.2f}"

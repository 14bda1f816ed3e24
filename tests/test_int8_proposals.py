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
    """The eager chain's int8 products need fbgemm (an ARM build lacks it): refused with the fix there, while the
    static path's weight-only int8 products, which every CPU build has, still decode."""
    monkeypatch.setattr(fastpath, "quantized_engines", lambda: ["qnnpack"])
    model = random_model(12, 3, seed=0, arch="recurrent", dtype=torch.float32)
    model.heads.set_proposal_precision("int8")
    with pytest.raises(ValueError, match="use decode.proposal_precision=float32"):
        fastpath.TableStep(model.heads)
    src = random_src(2, 5, 12, seed=0)
    from bpd.decoding import blockwise_decode, criteria, greedy_decode

    static = blockwise_decode(model, src, k=3, criterion=criteria.Exact(), max_len=10, engine="static")
    assert static.tokens == greedy_decode(model, src, max_len=10, engine="static").tokens


def test_int8_is_a_cpu_path():
    """On a GPU the chain runs in float32 (one config serves both; the rows record what ran)."""
    assert fastpath.precision_on(torch.device("cpu"), "int8") == "int8"
    assert fastpath.precision_on(torch.device("cuda", 0), "int8") == "float32"
    assert fastpath.precision_on(torch.device("cuda"), "float32") == "float32"


def test_int8_products_do_not_saturate():
    """Activations and weights spanning their whole 8-bit ranges: without VNNI (AVX2), fbgemm adds pairs of u8 x s8
    products into saturating 16-bit sums, which 8-bit activations overflow (errors of 15% of the largest output
    seen on an AVX2 CPU); 7-bit activations cannot. This runs the product the user's CPU runs."""
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(256, 512, generator=g), 3 * torch.randn(4, 512, generator=g)
    exact = x @ w.t()
    err = (fastpath.int8_linear(x, fastpath.pack_int8(w)) - exact).abs().max()
    assert err < 0.03 * exact.abs().max(), f"{torch.backends.cpu.get_cpu_capability()}: max error {err:.2f}"


@pytest.mark.parametrize("arch", ["recurrent", "attend"])
@pytest.mark.parametrize("tied", [False, True])
def test_static_int8_chain_is_the_float_chain_up_to_quantization(arch, tied):
    """The static path's traced int8 chain (weight-only int8 matrices, ``static_steps.DecodingTables``): each slot's
    state and logits are the float tables' up to quantization, the products really multiply int8 weights, and tied
    slots share one quantized copy. The micro slots' inner dimension (d_ff + 1 = 65) is the odd width ATen's
    int8 kernel reads past when several rows are multiplied: padded, it decodes 3 rows here."""
    from bpd.decoding.static_steps import INT8_ALIGN, decoding_tables, int8_slot

    model = random_model(40, 6, seed=3, arch=arch, head_noise=0.3, dtype=torch.float32, heads_tied=tied)
    src = random_src(3, 7, 40, seed=3)
    with torch.inference_mode():
        source = model.head_source(model.encode(src)) if model.heads.reads_source else None
        floats = decoding_tables(model)
        model.heads.set_proposal_precision("int8")
        ints = decoding_tables(model)
        assert ints.int8 and not floats.int8 and ints.wt.dtype == torch.int8
        assert all(t.shape[1] % INT8_ALIGN == 0 for t in ints.buffers() if t.dtype == torch.int8)
        if tied:
            assert ints.s0_2 is ints.s1_2 and ints.s0_3 is ints.s1_3
        h = torch.randn(3, model.heads.d_model, generator=torch.Generator().manual_seed(0))
        tok = torch.tensor([5, 9, 11])
        s_f, s_i = h, h
        for i in range(5):
            slot = floats.slot(i)
            lookup = slot[0][tok]
            s_f = torch.addmm(s_f, fastpath.slot_hidden(lookup, s_f, slot, source, 3), slot[3])
            s_i = int8_slot(ints, f"s{i}_", lookup, s_i, source)
            logits_f, logits_i = floats.logits(s_f), ints.logits(s_i)
            assert not torch.equal(logits_f, logits_i)  # the int8 products ran
            assert (logits_f - logits_i).abs().max() < 0.05 * logits_f.abs().max(), f"slot {i + 1}"
            s_i = s_f  # each slot's error its own
            tok = logits_f.argmax(-1)

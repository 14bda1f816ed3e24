"""Super-resolution: the image Transformer under the shared decoding contract, and the SR pipeline."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from conftest import IMAGE_MICRO
from toy import evaluate_toy, staged, toy_config, toy_task, tweak

from bpd import stages
from bpd.config import BeamOptions, CriterionConfig, HeadsConfig, ImageTaskConfig, MethodsConfig, TrainConfig
from bpd.data import images as im
from bpd.decoding import blockwise_decode, criteria, greedy_decode
from bpd.decoding.methods.draft import draft_decode
from bpd.decoding.methods.tree import tree_decode
from bpd.models.image_transformer import build_image_model
from bpd.runtime import resolve_path


def sr_config(tmp, **over):
    task = ImageTaskConfig(lr_size=2, hr_size=4, n_train=96, n_dev=8, n_test=8, seed=0)
    cfg = tweak(toy_config(tmp), task=task, model=IMAGE_MICRO, train={"max_tokens": 48 * 8},
                decode={"methods": MethodsConfig(beam=BeamOptions(0)), "ks": [2, 3],
                        "criteria": [CriterionConfig("exact"), CriterionConfig("distance", 2.0)]})
    return tweak(cfg, **over).validate()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("aligned", [False, True, "tied", "learned"])
# attend: slots read the low-resolution image's keys; ahead: medusa slots read the guess under the token they guess
@pytest.mark.parametrize("arch", ["paper", "attend", "ahead"])
def test_image_model_exact_blockwise_equals_greedy(seed, aligned, arch):
    if arch == "ahead" and not aligned:
        pytest.skip("heads.ahead reads the aligned input")
    sizes = dataclasses.replace(IMAGE_MICRO, aligned_input=bool(aligned), aligned_tied=aligned in ("tied", "learned"),
                                aligned_upsample="learned" if aligned == "learned" else "nearest",
                                upsampler_channels=4, upsampler_layers=2)
    heads = {"heads_arch": "medusa", "heads_ahead": True} if arch == "ahead" else {"heads_arch": arch}
    model = build_image_model(4, sizes, lr_size=2, hr_size=4, seed=seed, **heads).double().eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        moved = [*model.heads.parameters(), *(model.upsampler.parameters() if aligned == "learned" else ())]
        for p in moved:  # a fitted upsampler's guesses are not bicubic's
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.05)
    src = torch.randint(0, 256, (3, 12), generator=g)
    gr = greedy_decode(model, src, max_len=48)
    bw = blockwise_decode(model, src, k=4, max_len=48)
    assert bw.tokens == gr.tokens
    if arch == "ahead":  # slots that read ahead take each row's position from the static cache too
        assert blockwise_decode(model, src, k=4, max_len=48, engine="static").tokens == gr.tokens
    assert all(len(t) == 48 for t in bw.tokens)  # fixed length, no EOS
    assert all(0 <= x < 256 for t in bw.tokens for x in t)  # only intensities are ever produced
    d = blockwise_decode(model, src, k=4, criterion=criteria.Distance(eps=255), max_len=48)
    assert all(b == 4 for row in d.block_sizes for b in row[:-1])  # eps=255 accepts every intensity
    # The decoders beyond the paper on the image model too: trees (positions by depth through the row, column
    # and channel embeddings) and a draft image model of other weights.
    for shape in ("2x2", "beam3"):
        assert tree_decode(model, src, shape, k=4, max_len=48).tokens == gr.tokens
    draft = build_image_model(1, sizes, lr_size=2, hr_size=4, seed=seed + 1).double().eval()
    assert draft_decode(model, draft, src, k=4, max_len=48).tokens == gr.tokens


def ahead_model(seed: int = 0, k: int = 4):
    """A micro image model whose medusa slots read ahead, their ahead weights random (they start at zero)."""
    sizes = dataclasses.replace(IMAGE_MICRO, aligned_input=True, aligned_tied=True)
    model = build_image_model(k, sizes, lr_size=2, hr_size=4, seed=seed, heads_arch="medusa",
                              heads_ahead=True).double().eval()
    assert not model.heads.w_ahead.any()
    with torch.no_grad():
        model.heads.w_ahead.normal_(0, 0.1, generator=torch.Generator().manual_seed(seed))
    return model


def test_ahead_slots_read_the_guess_under_the_token_they_guess():
    """heads.ahead: at the state of position p, slot i adds the aligned input of position p + i (the token it
    guesses) through its own weights; the three layouts that compute slots agree on it: every position at once
    (the forward pass and dev evaluation), a loss's flattened positions at the rows it scores, and decoding's one
    state per row at that row's position."""
    from bpd.training.losses import slot_scores

    model = ahead_model()
    heads = model.heads
    src = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(1))
    tgt_out = torch.randint(0, 256, (2, 48), generator=torch.Generator().manual_seed(2))
    tgt = torch.cat([torch.full((2, 1), model.bos_id), tgt_out[:, :-1]], dim=1)
    with torch.no_grad():
        h, source = model.teacher_forced(src, tgt)
        enc = model.encode(src)
        grid = heads.states(h, 4, source=source)  # (B, T, 4, d)
        plain = heads.learned_states(h, 1, 4)
        e = model.aligned(enc.aligned) * model.cfg.d_model**0.5  # what the decoder adds at each position
        for i in (1, 2, 3):
            p = torch.arange(48 - i)
            expect = plain[:, p, i - 1] + e[:, p + i] @ heads.w_ahead[i - 1]
            torch.testing.assert_close(grid[:, p, i], expect)
        # decoding: one state per row, each at its own position
        at = torch.tensor([5, 30])
        one = heads.states(h[[0, 1], at], 4, start=1, source=model.head_source(enc, at))
        torch.testing.assert_close(one, grid[[0, 1], at, 1:])
        # a loss: flattened positions, the slot computed at those its target is in the image only
        scored = dict((i, x) for i, x, _ in slot_scores(model, h, tgt_out, [0, 2], source=source))
        assert scored[2].shape[0] == 2 * (48 - 2)  # positions whose target two tokens on exists
        logits = heads.project(grid[:, : 48 - 2, 2]).flatten(0, 1)
        torch.testing.assert_close(scored[2], logits)
        with pytest.raises(ValueError, match="heads.ahead"):
            heads.states(h[:, 0], 3, start=1)  # no source: the position's guess is unknown
        with pytest.raises(ValueError, match="heads.ahead"):
            heads.states(h[:, 0], 3, start=1, source=model.head_source(enc))  # one state per row, no position


def test_ahead_heads_propose_on_every_engine_as_their_states_say():
    """Decoding's proposals from slots that read ahead are their states' argmaxes at each row's position, on the
    eager loop and on the static path (which compiles the same functions)."""
    from bpd.decoding.methods.blockwise import propose, start
    from bpd.decoding.static_steps import propose_block

    model = ahead_model(seed=3)
    src = torch.randint(0, 256, (3, 12), generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        enc = model.encode(src)
        cache = model.new_cache(3, 60)
        props = start(model, torch.full((3, 1), model.bos_id), enc, cache, 4)
        h = model.decode(props, enc, cache)  # positions 1..4
        at = cache.lengths - 1
        want = model.heads.proposal_top1(model.heads.states(h[:, -1], 4, start=1, source=model.head_source(enc, at)))
        first = props[:, :1]
        assert torch.equal(propose(model, h[:, -1], first, 4, enc, cache)[:, 1:], want)
        assert torch.equal(propose_block(model, h[:, -1], first, 4, None, None, model.head_ahead(enc, at))[:, 1:], want)


def test_ahead_heads_are_refused_where_they_read_nothing(tmp_path):
    sizes = dataclasses.replace(IMAGE_MICRO, aligned_input=True)
    with pytest.raises(ValueError, match="aligned_input"):
        build_image_model(3, IMAGE_MICRO, lr_size=2, hr_size=4, heads_arch="medusa", heads_ahead=True)
    with pytest.raises(ValueError, match="decoder state alone"):
        build_image_model(3, sizes, lr_size=2, hr_size=4, heads_arch="recurrent", heads_ahead=True)
    with pytest.raises(ValueError, match="identity_p1"):
        build_image_model(3, sizes, lr_size=2, hr_size=4, heads_arch="medusa", heads_ahead=True, identity_p1=False)
    with pytest.raises(ValueError, match="heads.ahead"):
        HeadsConfig(arch="attend", ahead=True).validate()
    with pytest.raises(ValueError, match="aligned_input"):  # translation: nothing is known of an output position
        toy_config(tmp_path, heads={"arch": "medusa", "ahead": True}).validate()


def test_image_model_teacher_forced_shapes_and_positions():
    model = build_image_model(3, IMAGE_MICRO, lr_size=2, hr_size=4, seed=0).eval()
    src = torch.randint(0, 256, (2, 12))
    tgt = torch.randint(0, 256, (2, 48))
    tgt[:, 0] = model.bos_id
    assert model(src, tgt).shape == (2, 48, 3, 256)
    # Row, column and channel embeddings: position p>=1 holds token p-1 = 3*(r*W+c)+ch.
    pos = torch.tensor([[1, 2, 4, 13]])
    grid = model._grid(pos - 1, 4, model.tgt_row, model.tgt_col)
    expect = [model.tgt_row.weight[r] + model.tgt_col.weight[c] + model.channel.weight[ch]
              for r, c, ch in ((0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0))]
    torch.testing.assert_close(grid[0], torch.stack(expect))


def test_aligned_input_adds_the_upsampled_intensity_of_the_predicted_pixel(tmp_path):
    """model.aligned_input: position p (which predicts HR token p) also embeds the LR intensity that token
    upsamples; a 2x2 -> 4x4 image: HR pixel (r, c) lies under LR pixel (r // 2, c // 2), same channel."""
    sizes = dataclasses.replace(IMAGE_MICRO, aligned_input=True)
    model = build_image_model(1, sizes, lr_size=2, hr_size=4, seed=0).eval()
    plain = build_image_model(1, IMAGE_MICRO, lr_size=2, hr_size=4, seed=0).eval()
    src = torch.randint(0, 256, (2, 12))
    tgt = torch.randint(0, 256, (2, 5))
    pos = torch.arange(5).expand(2, 5)
    enc = model.encode(src)
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("aligned")})
    extra = model.embed_tgt(tgt, pos, 5, enc) - plain.embed_tgt(tgt, pos, 5, plain.encode(src))
    # HR tokens 0..4 = (r0 c0 R), (r0 c0 G), (r0 c0 B), (r0 c1 R), (r0 c1 G): all under LR pixel (0, 0).
    expect = model.aligned(src[:, [0, 1, 2, 0, 1]])
    torch.testing.assert_close(extra, expect)
    assert model.upsample(src)[0, 3 * (2 * 4 + 3) + 2] == src[0, 3 * (1 * 2 + 1) + 2]  # HR (2, 3) B -> LR (1, 1) B
    with pytest.raises(ValueError, match="aligned_input"):
        model.decode(tgt, dataclasses.replace(enc, aligned=None))
    with pytest.raises(ValueError, match="aligned_input"):  # translation has no pixel alignment
        toy_config(tmp_path, model={"aligned_input": True})


def test_tied_aligned_input_starts_the_model_at_the_upsampled_intensity(tmp_path):
    """model.aligned_tied: the aligned intensity's embedding is that intensity's output row, so an untrained
    model already scores the upsampled intensity highest at nearly every position (bicubic's answer), and
    training moves one table, not two."""
    sizes = dataclasses.replace(IMAGE_MICRO, d_model=64, aligned_input=True, aligned_upsample="bicubic",
                                aligned_tied=True)
    model = build_image_model(1, sizes, lr_size=2, hr_size=4, seed=0).eval()
    assert model.aligned.weight is model.output.weight
    untied = build_image_model(1, dataclasses.replace(sizes, aligned_tied=False), lr_size=2, hr_size=4, seed=0)
    src = torch.randint(0, 256, (16, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        up = model.upsample(src)
        for m, lo, hi in ((model, 0.75, 1.0), (untied.eval(), 0.0, 0.1)):
            tgt = torch.cat([torch.full((16, 1), m.bos_id), up[:, :-1]], 1)
            agree = (m.heads.base_logits(m.teacher_forced(src, tgt)[0]).argmax(-1) == up).float().mean()
            assert lo <= agree <= hi
    with pytest.raises(ValueError, match="aligned_input=true"):
        dataclasses.replace(IMAGE_MICRO, aligned_tied=True).validate()


def test_bicubic_aligned_input_embeds_the_bicubic_upsample_of_the_source():
    """model.aligned_upsample=bicubic: position p embeds the bicubic interpolation of the LR image at HR
    token p, in the same raster (pixel, channel) order; a flat image upsamples to itself, a ramp to values
    between its neighbours."""
    sizes = dataclasses.replace(IMAGE_MICRO, aligned_input=True, aligned_upsample="bicubic")
    model = build_image_model(1, sizes, lr_size=2, hr_size=4, seed=0).eval()
    flat = torch.full((1, 12), 77)
    assert model.upsample(flat).tolist() == [[77] * 48]
    # R rises left to right (10 -> 200), G is flat 50, B falls top to bottom (240 -> 0).
    src = torch.tensor([[10, 50, 240, 200, 50, 240, 10, 50, 0, 200, 50, 0]])
    up = model.upsample(src).view(4, 4, 3)
    assert (up[..., 1] == 50).all()
    assert all(up[r, 0, 0] < up[r, 1, 0] < up[r, 2, 0] < up[r, 3, 0] for r in range(4))  # R increases
    assert all(up[0, c, 2] > up[1, c, 2] > up[2, c, 2] > up[3, c, 2] for c in range(4))  # B decreases
    assert ((up >= 0) & (up <= 255)).all()
    enc = model.encode(src)
    tgt, pos = torch.randint(0, 256, (1, 5)), torch.arange(5)[None]
    nearest = build_image_model(1, dataclasses.replace(sizes, aligned_upsample="nearest"), lr_size=2,
                                hr_size=4, seed=0).eval()
    nearest.load_state_dict(model.state_dict())
    extra = model.embed_tgt(tgt, pos, 5, enc) - nearest.embed_tgt(tgt, pos, 5, nearest.encode(src))
    expect = model.aligned(up.reshape(1, -1)[:, :5]) - nearest.aligned(src[:, [0, 1, 2, 0, 1]])
    torch.testing.assert_close(extra, expect)
    with pytest.raises(ValueError, match="aligned_upsample"):
        dataclasses.replace(sizes, aligned_upsample="bilinear").validate()


def test_learned_upsampler_starts_at_bicubic_and_fits_what_bicubic_misses():
    """model.aligned_upsample=learned: untrained, the upsampler is bicubic exactly (its correction starts at zero);
    fitted to blocky images (each LR pixel a flat 4x4 block, which bicubic blurs across every block edge) it
    beats bicubic on images it has not seen; it is frozen afterwards and not a base parameter."""
    from bpd.models.upsampler import fit_upsampler

    sizes = dataclasses.replace(IMAGE_MICRO, aligned_input=True, aligned_upsample="learned", aligned_tied=True,
                                upsampler_channels=16, upsampler_layers=3)
    model = build_image_model(1, sizes, lr_size=2, hr_size=8, seed=0).eval()
    bicubic = dataclasses.replace(sizes, aligned_upsample="bicubic")
    src = torch.randint(0, 256, (8, 12), generator=torch.Generator().manual_seed(0))
    assert torch.equal(model.upsample(src), build_image_model(1, bicubic, lr_size=2, hr_size=8).upsample(src))
    assert not any(p.requires_grad for p in model.upsampler.parameters())
    assert {id(p) for p in model.upsampler.parameters()}.isdisjoint(map(id, model.base_parameters()))

    rng = np.random.default_rng(0)
    lr = rng.integers(0, 256, (600, 2, 2, 3), dtype=np.uint8)
    hr = lr.repeat(4, 1).repeat(4, 2)
    losses = fit_upsampler(model.upsampler, lr[:512], hr[:512], 300, 32, 3e-3, seed=0, show=False)
    assert losses[-1] < losses[0] / 4
    assert not any(p.requires_grad for p in model.upsampler.parameters())
    held = torch.from_numpy(lr[512:].reshape(88, -1).astype(np.int64))
    truth = torch.from_numpy(hr[512:].reshape(88, -1).astype(np.int64))
    err = lambda m: (m.upsample(held) - truth).float().pow(2).mean()  # noqa: E731
    assert err(model) < err(build_image_model(1, bicubic, lr_size=2, hr_size=8)) / 4
    with pytest.raises(ValueError, match="upsampler_layers"):
        dataclasses.replace(sizes, upsampler_layers=1).validate()


def test_the_base_stage_fits_its_upsampler_first_and_keeps_it(tmp_path, monkeypatch):
    """train.upsampler_steps: the base stage fits a learned upsampler before its first step, the checkpoint
    carries it unchanged by the base's training, and a recipe that has no learned upsampler refuses the option."""
    cfg = sr_config(tmp_path, model={"aligned_input": True, "aligned_upsample": "learned", "aligned_tied": True,
                                     "upsampler_channels": 8, "upsampler_layers": 2},
                    train={"max_steps": 4, "upsampler_steps": 30, "upsampler_batch": 16})
    task = toy_task(cfg)
    fitted, real = {}, task.fit_before_base

    def spy(model, train, seed):
        real(model, train, seed)
        fitted.update({k: v.clone() for k, v in model.upsampler.state_dict().items()})

    monkeypatch.setattr(task, "fit_before_base", spy)
    path = staged(stages.ensure_base, cfg, task)
    kept = {k.removeprefix("upsampler."): v for k, v in torch.load(path, weights_only=False)["model"].items()
            if k.startswith("upsampler.")}
    assert fitted and fitted.keys() == kept.keys()
    assert all(torch.equal(fitted[k], kept[k]) for k in kept)
    assert kept["body.2.weight"].abs().sum() > 0  # fitted: no longer the zero correction
    with pytest.raises(ValueError, match="aligned_upsample=learned"):
        sr_config(tmp_path, train={"upsampler_steps": 5})


def test_sr_pipeline_rows_files_and_psnr(tmp_path):
    from bpd.data.images import mean_psnr

    cfg = sr_config(tmp_path)
    task = toy_task(cfg)
    assert task.kind == "image" and len(task.pairs("train").tgt(0)) == 48
    path = staged(stages.ensure_heads, cfg, task)
    rows = evaluate_toy(cfg, task, path)
    names = [r["decoder"] for r in rows]
    assert names[:3] == ["greedy", "blockwise_k2_exact", "blockwise_k3_exact"]
    assert {"nearest", "bicubic"} <= set(names)
    for r in rows:
        if r["method"] == "reference":
            assert r["psnr"] > 0
            continue
        assert {"psnr", "psnr_vs_greedy", "pred_file", "target_file", "grid_file", "mean_block_size"} <= set(r)
        pred = np.load(resolve_path(r["pred_file"]))
        target = np.load(resolve_path(r["target_file"]))
        assert pred.dtype == np.uint8 and pred.shape == (8, 4, 4, 3)
        assert mean_psnr(pred, target) == pytest.approx(r["psnr"])  # recomputable from the saved arrays
        if r["criterion"] == "exact" or r["method"] == "greedy":
            assert r["identical_to_greedy"] == 1.0
    assert resolve_path(rows[0]["grid_file"]).exists()
    # The grid's columns, as its caption must name them: the largest k of each criterion, with its k̂.
    shown = {r["decoder"]: r["mean_block_size"] for r in rows if r["decoder"] in ("blockwise_k3_exact",
                                                                                   "blockwise_k3_distance2")}
    assert rows[0]["grid_columns"] == ["low-res input", "greedy",
                                       f"blockwise k=3 exact (k̂={shown['blockwise_k3_exact']:.2f})",
                                       f"blockwise k=3 eps=2 (k̂={shown['blockwise_k3_distance2']:.2f})",
                                       "ground truth"]


def test_an_evaluation_in_chunks_decodes_and_pools_to_the_whole_ones(tmp_path):
    """decode.first: chunks of a split (each its own run id) decode its examples from ``first`` on, scored against
    their own targets, and analysis/pool_chunks.py pools their rows into the whole evaluation's figures."""
    from analysis.pool_chunks import pooled_rows
    from bpd.runtime import resolve_path

    cfg = sr_config(tmp_path)
    task = toy_task(cfg)
    path = staged(stages.ensure_heads, cfg, task)
    whole = {r["decoder"]: r for r in evaluate_toy(cfg, task, path)}
    chunks = [evaluate_toy(tweak(cfg, decode={"first": f, "n_examples": 4}), task, path) for f in (0, 4)]
    assert [r["first_example"] for r in chunks[1]] == [4] * len(chunks[1])
    for name in ("greedy", "blockwise_k3_distance2"):
        mine = [next(r for r in c if r["decoder"] == name) for c in chunks]
        for column in ("pred_file", "target_file"):
            parts = [np.load(resolve_path(r[column])) for r in mine]
            np.testing.assert_array_equal(np.concatenate(parts), np.load(resolve_path(whole[name][column])))
    pooled = {r["decoder"]: r for r in pooled_rows([r for c in chunks for r in c])}
    for name, r in whole.items():
        assert pooled[name]["n_examples"] == 8 and pooled[name]["psnr"] == pytest.approx(r["psnr"])
        if r["method"] != "reference":
            assert pooled[name]["mean_block_size"] == pytest.approx(r["mean_block_size"])
    with pytest.raises(ValueError, match="past the 8 examples"):
        evaluate_toy(tweak(cfg, decode={"first": 8}), task, path)


def test_sr_training_lowers_loss(tmp_path):
    from bpd.training.evaluation import DevEvaluation, evaluate_heads
    from bpd.training.loop import TrainOutput, train

    cfg = sr_config(tmp_path)
    task = toy_task(cfg)
    model = task.build_model(cfg.model, HeadsConfig(k=1), 1, 0)
    dev = task.eval_batches(task.pairs("dev"), 400)
    before = evaluate_heads(model, dev(), [0], "cpu")["loss_head1"]
    tcfg = TrainConfig(lr=1e-2, warmup_steps=5, max_steps=100, max_minutes=None, label_smoothing=0.0,
                       ckpt_every=1000, eval_every=100)
    out = train(model, task.train_batches(task.pairs("train"), 400, 0), tcfg,
                TrainOutput(tmp_path / "m.pt", progress=False), dev=DevEvaluation({"dev": dev}))
    assert out["history"][-1]["dev/loss_head1"] < before - 0.3


def test_ordinal_targets_spread_over_near_intensities_and_are_the_plain_loss_at_sigma_0():
    """``train.ordinal_sigma``: an intensity's target row is a Gaussian over its neighbours (other tokens keep
    their one-hot row), so a confident near miss costs less than a far one; at sigma 0 it is cross-entropy with
    uniform smoothing, token for token."""
    import torch.nn.functional as F

    from bpd.training.losses import IGNORE, ordinal_table, slot_loss

    vocab, n = im.VOCAB_SIZE, im.N_INTENSITIES
    table = ordinal_table(vocab, 0, n, 2.0, 0.1)
    torch.testing.assert_close(table.sum(1), torch.ones(vocab))
    row = table[100, :n]
    assert int(row.argmax()) == 100 and row[101] < row[100] and row[103] < row[101] and row[101] == row[99]
    assert row[110] < 1e-3 < row[102]
    assert table[im.BOS_ID, im.BOS_ID] > 0.9 and table[im.BOS_ID, :n].max() < 1e-3  # BOS is no intensity
    logits, tgt = torch.randn(7, vocab), torch.tensor([0, 5, 100, 255, im.BOS_ID, IGNORE, 30])
    plain = F.cross_entropy(logits, tgt, ignore_index=IGNORE, label_smoothing=0.1)
    torch.testing.assert_close(slot_loss(logits, tgt, ordinal_table(vocab, 0, n, 0.0, 0.1)), plain)
    torch.testing.assert_close(slot_loss(logits, tgt, 0.1), plain)

    def confident(at: int) -> torch.Tensor:
        return F.one_hot(torch.tensor([at]), vocab).float() * 10

    target = torch.tensor([100])
    assert slot_loss(confident(101), target, table) < slot_loss(confident(150), target, table) - 1
    one_hot = ordinal_table(vocab, 0, n, 0.0, 0.1)
    torch.testing.assert_close(slot_loss(confident(101), target, one_hot), slot_loss(confident(150), target, one_hot))


def test_ordinal_training_needs_an_ordered_vocabulary(tmp_path):
    """The loop builds the table from the model's ordered values (an image model's intensities), and refuses the
    option on a model without them."""
    from bpd.models import Transformer, TransformerConfig
    from bpd.training.loop import TrainOutput, train

    cfg = sr_config(tmp_path)
    task = toy_task(cfg)
    tcfg = TrainConfig(lr=1e-2, warmup_steps=5, max_steps=3, max_minutes=None, ordinal_sigma=1.5,
                       ckpt_every=1000, eval_every=100)
    batches = task.train_batches(task.pairs("train"), 400, 0)
    with pytest.raises(ValueError, match="ordinal_sigma spreads targets over ordered token values"):
        train(Transformer(TransformerConfig(vocab_size=im.VOCAB_SIZE, d_model=16, n_heads=2, d_ff=32,
                                            n_enc_layers=1, n_dec_layers=1)), batches, tcfg,
              TrainOutput(tmp_path / "a.pt", progress=False))
    out = train(task.build_model(cfg.model, HeadsConfig(k=1), 1, 0), batches, tcfg,
                TrainOutput(tmp_path / "b.pt", progress=False))
    assert out["step"] == 3 and out["last_loss"] == out["last_loss"]


def test_missing_celeba_is_a_clear_error(tmp_path):
    cfg = sr_config(tmp_path, task=ImageTaskConfig(name="celeba_sr", source="celeba", data_dir=str(tmp_path / "nope")))
    with pytest.raises(FileNotFoundError, match="img_align_celeba"):
        toy_task(cfg)

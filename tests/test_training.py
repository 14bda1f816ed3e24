"""Training: losses over heads, frozen vs fine-tuned parameter handling, checkpoints and resume."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from conftest import MICRO, random_model, random_src

from bpd.config import HeadsConfig, TrainConfig
from bpd.models import HEADS
from bpd.training.checkpoint import CheckpointError, load_checkpoint, load_model, save_checkpoint
from bpd.training.evaluation import DevEvaluation
from bpd.training.loop import TrainOutput, train, trained_heads
from bpd.training.losses import anchored, combine, head_losses, shifted_targets, teacher_tokens
from bpd.training.report import Reporter


def toy_batches(vocab: int = 20, n: int = 8, seed: int = 0):
    """A learnable toy: the target is the source shifted by one token id."""

    def batches(epoch: int, start: int = 0):
        g = torch.Generator().manual_seed(seed + epoch)
        for j in range(n):
            src = torch.randint(3, vocab - 1, (8, 6), generator=g)
            tgt_out = torch.cat([src + 1, torch.full((8, 1), 2)], dim=1)
            tgt_in = torch.cat([torch.full((8, 1), 1), tgt_out[:, :-1]], dim=1)
            if j >= start:
                yield src, tgt_in, tgt_out

    return batches


def quiet(path: Path, **kw) -> TrainOutput:
    """Where a test's run checkpoints, without a progress bar (the tests' own output stays readable)."""
    return TrainOutput(path, progress=False, **kw)


def fresh_model(k: int = 3, seed: int = 0, **kw):
    from bpd.models import build_translation_model

    return build_translation_model(20, k, MICRO, seed=seed, **kw)


def test_shifted_targets():
    t = torch.tensor([[5, 6, 7, 2]])
    assert shifted_targets(t, 0, 0).tolist() == [[5, 6, 7, 2]]
    assert shifted_targets(t, 2, 0).tolist() == [[7, 2, 0, 0]]


def test_few_steps_lower_the_loss(tmp_path):
    from bpd.training.evaluation import evaluate_heads

    model = fresh_model(k=1, identity_p1=True)
    dev = lambda: toy_batches(n=2)(99, 0)  # noqa: E731
    before = evaluate_heads(model, dev(), [0], "cpu")["loss_head1"]
    cfg = TrainConfig(
        lr=1e-2,
        warmup_steps=5,
        max_steps=120,
        max_minutes=None,
        label_smoothing=0.0,
        ckpt_every=1000,
        eval_every=60,
        log_every=1000,
    )
    out = train(model, toy_batches(), cfg, quiet(tmp_path / "m.pt"), dev=DevEvaluation({"dev": dev}))
    after = out["history"][-1]["dev/loss_head1"]
    assert after < 0.6 * before, (before, after)
    assert load_checkpoint(tmp_path / "m.pt")["step"] == 120 and out["stopped_by"] == "steps"


def test_a_binding_time_cap_is_recorded(tmp_path, capsys):
    """max_minutes is a cap: when it, not the step budget, ends a stage, the checkpoint says so (rows carry it
    as train_stopped_by / base_stopped_by), because that model depends on the machine's speed; the progress
    bar counts towards the cap, not towards the 1,000 steps that will never run."""
    cfg = TrainConfig(max_steps=1000, max_minutes=1e-6, warmup_steps=1, ckpt_every=1000, log_every=1000)
    out = train(fresh_model(k=1, identity_p1=True), toy_batches(), cfg, tmp_path / "m.pt")
    assert out["step"] < 1000 and out["stopped_by"] == "minutes"
    bar = capsys.readouterr().err
    assert "min cap" in bar and "/1000" not in bar.split("min cap")[-1]
    assert load_checkpoint(tmp_path / "m.pt")["stopped_by"] == "minutes"


def test_the_bar_returns_to_the_step_budget_when_the_pace_recovers():
    """A run paused early (SIGSTOP beside another job) looks slow and the bar counts towards the cap; once the
    pace shows the steps will end the stage after all, the bar counts towards the steps again."""
    cfg = TrainConfig(max_steps=100, max_minutes=1.0)
    r = Reporter(cfg, "heads", 0, None, is_main=True, progress=True)
    r.stepped(1, elapsed=30.0, budget_s=60.0)  # 30 s a step: the cap ends it at about step 2
    assert r.bar.total == 2 and "min cap" in r.bar.desc
    r.stepped(90, elapsed=31.0, budget_s=60.0)  # then fast: 100 steps end it well inside the minute
    assert r.bar.total == 100 and "min cap" not in r.bar.desc
    r.bar.close()


@pytest.mark.parametrize("arch", list(HEADS))
def test_frozen_training_keeps_base_bit_identical(tmp_path, arch):
    model = fresh_model(k=3, heads_arch=arch, identity_p1=True)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if not n.startswith("heads.")}
    heads_before = {n: p.detach().clone() for n, p in model.named_parameters() if n.startswith("heads.")}
    cfg = TrainConfig(lr=3e-3, warmup_steps=2, max_steps=8, ckpt_every=100)
    heads = HeadsConfig(k=3, arch=arch, training="frozen")
    train(model, toy_batches(), cfg, quiet(tmp_path / "h.pt"), heads=heads)
    for n, p in model.named_parameters():
        if n.startswith("heads."):
            continue
        assert torch.equal(p, before[n]), f"frozen base parameter {n} changed"
    assert any(not torch.equal(p, heads_before[n]) for n, p in model.named_parameters() if n.startswith("heads."))
    assert trained_heads(model, heads) == [1, 2]  # p_1 is the base itself: no loss on it


def test_finetune_moves_base_parameters(tmp_path):
    model = fresh_model(k=2, identity_p1=True)
    before = model.tgt_embed.weight.detach().clone()
    cfg = TrainConfig(lr=3e-3, warmup_steps=2, max_steps=5, base_lr_scale=0.5, ckpt_every=100)
    heads = HeadsConfig(k=2, training="finetune", loss="sampled")
    train(model, toy_batches(), cfg, quiet(tmp_path / "h.pt"), heads=heads)
    assert not torch.equal(before, model.tgt_embed.weight)
    assert trained_heads(model, heads) == [0, 1]
    assert trained_heads(model, None) == [0]  # the base stage: p_1 alone


def test_resume_after_interruption_matches_uninterrupted(tmp_path):
    cfg = TrainConfig(lr=3e-3, warmup_steps=3, max_steps=12, max_minutes=None, ckpt_every=4, label_smoothing=0.1)
    m1 = fresh_model(k=1, identity_p1=True, dropout=0.1)
    train(m1, toy_batches(n=5), cfg, quiet(tmp_path / "a.pt"))

    # Interrupted run: stop after 7 steps (the last checkpoint is at step 4), then resume to 12.
    m2 = fresh_model(k=1, identity_p1=True, dropout=0.1)
    train(m2, toy_batches(n=5), dataclasses.replace(cfg, max_steps=7), quiet(tmp_path / "b.pt"))
    state = load_checkpoint(tmp_path / "b.state.pt")
    assert state["step"] == 7
    # Simulate a crash between checkpoints: rewind the state file to the step-4 checkpoint.
    m3 = fresh_model(k=1, identity_p1=True, dropout=0.1)
    train(m3, toy_batches(n=5), dataclasses.replace(cfg, max_steps=4), quiet(tmp_path / "c.pt"))
    m4 = fresh_model(k=1, identity_p1=True, dropout=0.1)
    out = train(m4, toy_batches(n=5), cfg, quiet(tmp_path / "c.pt", resume=True))
    assert out["step"] == 12
    for (n, p), q in zip(m1.state_dict().items(), m4.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7, msg=f"{n} differs after resume")


def test_continuing_a_shorter_run_is_the_longer_run(tmp_path):
    """train.continue_from: 6 steps continued to 12 equal 12 steps from scratch, also when the shorter run
    kept its best weights (its state holds the last ones); a run that differs in more than its budget is
    refused before any step, naming the field."""
    cfg = TrainConfig(lr=3e-3, warmup_steps=3, max_steps=12, max_minutes=None, ckpt_every=4, eval_every=4,
                      keep_best=True, label_smoothing=0.1)
    dev = DevEvaluation({"dev": lambda: toy_batches(n=2)(99, 0)})
    m1 = fresh_model(k=1, identity_p1=True, dropout=0.1)
    full = train(m1, toy_batches(n=5), cfg, quiet(tmp_path / "full.pt"), dev=dev)
    m2 = fresh_model(k=1, identity_p1=True, dropout=0.1)
    train(m2, toy_batches(n=5), dataclasses.replace(cfg, max_steps=6), quiet(tmp_path / "short.pt"), dev=dev)
    # It kept step 4's weights (its one evaluation); its state holds step 6's, where it stopped (6 is no
    # multiple of ckpt_every), and that is where the longer run goes on from.
    assert load_checkpoint(tmp_path / "short.pt")["best_step"] == 4
    assert load_checkpoint(tmp_path / "short.state.pt")["step"] == 6
    m3 = fresh_model(k=1, identity_p1=True, dropout=0.1, seed=5)  # other initial weights: the state's win
    longer = dataclasses.replace(cfg, continue_from=str(tmp_path / "short.pt"), ckpt_every=5)
    out = train(m3, toy_batches(n=5), longer, quiet(tmp_path / "long.pt"), dev=dev)
    assert out["step"] == 12 and [r["step"] for r in out["history"]] == [r["step"] for r in full["history"]]
    for (n, p), q in zip(m1.state_dict().items(), m3.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7, msg=f"{n} differs after continuing")

    with pytest.raises(ValueError, match="lr=0.003, this one 0.001"):
        train(fresh_model(k=1, identity_p1=True, dropout=0.1), toy_batches(n=5),
              dataclasses.replace(longer, lr=1e-3), quiet(tmp_path / "other.pt"), dev=dev)
    with pytest.raises(ValueError, match="raise max_steps above it"):
        train(fresh_model(k=1, identity_p1=True, dropout=0.1), toy_batches(n=5),
              dataclasses.replace(longer, max_steps=4), quiet(tmp_path / "fewer.pt"), dev=dev)
    with pytest.raises(ValueError, match="model_config differs"):
        train(fresh_model(k=1, identity_p1=True, dropout=0.2), toy_batches(n=5), longer, quiet(tmp_path / "m.pt"),
              dev=dev)
    with pytest.raises(ValueError, match=r"train\.continue_from: no resume state"):
        train(fresh_model(k=1, identity_p1=True, dropout=0.1), toy_batches(n=5),
              dataclasses.replace(cfg, continue_from=str(tmp_path / "nope.pt")), quiet(tmp_path / "nope-run.pt"),
              dev=dev)
    assert not (tmp_path / "nope-run.pt").exists()  # refused before any step
    assert "continue_from" not in cfg.product()  # the same model either way: cache keys leave it out
    # A state that lacks a field of this config (another version wrote it) is another run: refused, naming it.
    old = load_checkpoint(tmp_path / "short.state.pt")
    old["train_config"].pop("weight_decay")
    save_checkpoint(tmp_path / "short.state.pt", old)
    with pytest.raises(ValueError, match="that run had weight_decay=None, this one 0.0"):
        train(fresh_model(k=1, identity_p1=True, dropout=0.1), toy_batches(n=5), longer, quiet(tmp_path / "again.pt"),
              dev=dev)


def test_heads_trained_among_a_proposal_vocabulary():
    """heads.proposal_vocab: a proposal slot's loss is a softmax over the allowed tokens, a target outside them
    left out (such a head could never propose it); p_1 keeps the whole vocabulary; unset, cache keys leave it
    out."""
    import torch.nn.functional as F

    from bpd.config import keyed

    model = fresh_model(k=3, heads_arch="recurrent", identity_p1=True)
    src, tgt_in, tgt_out = next(toy_batches()(0))
    ids = torch.tensor([0, 2, 5, 6, 7, 9, 11, 13])  # includes id 0 (= pad's position, not pad) and EOS (2)
    h = model(src, tgt_in, hidden_only=True)
    full = head_losses(model, h, tgt_out, [0, 1, 2])
    model.heads.set_loss_vocab(ids)
    part = head_losses(model, h, tgt_out, [0, 1, 2])
    torch.testing.assert_close(part[0], full[0])  # p_1: unchanged
    logits = dict(model.heads.slot_logits(h, [2], tokens=teacher_tokens(tgt_out, 3, model.pad_id)))[2]
    assert logits.shape[-1] == len(ids)
    tgt = shifted_targets(tgt_out, 2, model.pad_id).flatten()
    keep = torch.isin(tgt, ids) & (tgt != model.pad_id)
    assert 0 < int(keep.sum()) < int((tgt != model.pad_id).sum())  # some targets lie outside the vocabulary
    pos = torch.searchsorted(ids, tgt[keep])
    torch.testing.assert_close(part[2], F.cross_entropy(logits.flatten(0, 1)[keep].float(), pos))
    assert keyed(HeadsConfig()) == {} and keyed(HeadsConfig(proposal_vocab=9)) == {"proposal_vocab": 9}
    with pytest.raises(ValueError, match="heads.proposal_vocab=0"):
        HeadsConfig(proposal_vocab=0).validate()


def test_checkpoint_errors(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(bad)
    save_checkpoint(tmp_path / "odd.pt", {"hello": 1})
    with pytest.raises(CheckpointError, match="not a bpd checkpoint"):
        load_checkpoint(tmp_path / "odd.pt")


def test_checkpoint_round_trip(tmp_path):
    model = random_model(20, 3, 0, dtype=torch.float32)
    save_checkpoint(tmp_path / "m.pt", {"model_config": model.config_dict(), "model": model.state_dict()})
    loaded, _ = load_model(tmp_path / "m.pt")
    src = torch.randint(3, 20, (2, 5))
    tgt = torch.randint(3, 20, (2, 4))
    torch.testing.assert_close(loaded(src, tgt), model(src, tgt))


def test_bad_train_config_values(tmp_path):
    with pytest.raises(ValueError, match="frozen or finetune"):
        HeadsConfig(training="thawed").validate()
    # A run of no steps would write a "finished" untrained checkpoint that later stages build on.
    with pytest.raises(ValueError, match=r"train\.max_steps must be >= 1"):
        TrainConfig(max_steps=0).validate()
    with pytest.raises(ValueError, match=r"train\.lr must be > 0"):
        TrainConfig(lr=-1.0).validate()
    # train() itself refuses them too (library callers), naming the heads stage's section.
    with pytest.raises(ValueError, match=r"heads_train \(or train\)\.max_minutes"):
        train(fresh_model(k=2), toy_batches(), TrainConfig(max_minutes=0), tmp_path / "m.pt", heads=HeadsConfig(k=2))


def test_keep_best_and_patience(tmp_path):
    """Early stopping: the final checkpoint holds the best dev weights; patience ends training early."""
    from bpd.training.evaluation import evaluate_heads

    model = fresh_model(k=1, identity_p1=True)
    dev = lambda: toy_batches(n=2)(99, 0)  # noqa: E731
    # A learning rate this high diverges after a while: the best dev loss is not the last one. When is up to
    # the CPU's float rounding (a chaotic trajectory: 60 steps sufficed on one CPU, not on another), so the
    # budget leaves room and the test asks only that patience, not the budget, ended the run.
    cfg = TrainConfig(
        max_minutes=None,
        lr=0.3,
        warmup_steps=2,
        max_steps=400,
        label_smoothing=0.0,
        ckpt_every=1000,
        eval_every=5,
        keep_best=True,
        patience=3,
    )
    out = train(model, toy_batches(), cfg, quiet(tmp_path / "m.pt"), dev=DevEvaluation({"dev": dev}))
    losses = [r["dev/loss_head1"] for r in out["history"]]
    best_i = min(range(len(losses)), key=losses.__getitem__)
    ck = load_checkpoint(tmp_path / "m.pt")
    assert ck["best_step"] == out["history"][best_i]["step"]
    assert evaluate_heads(model, dev(), [0], "cpu")["loss_head1"] == pytest.approx(losses[best_i], rel=1e-5)
    assert out["step"] < 400 and out["stopped_by"] == "patience", "the run must stop by patience"
    assert len(losses) - 1 - best_i == 3  # exactly `patience` evaluations after the best one


def test_p1_weight_combines_losses():
    losses = {0: torch.tensor(2.0), 1: torch.tensor(4.0), 2: torch.tensor(6.0)}
    assert float(combine(losses)) == pytest.approx(4.0)  # the plain mean
    assert float(combine(losses, p1_weight=2.0)) == pytest.approx((2 * 2 + 4 + 6) / 4)
    with pytest.raises(ValueError, match="p1_weight"):
        HeadsConfig(p1_weight=0.0).validate()


@pytest.mark.parametrize("arch", ["recurrent", "attend"])
@pytest.mark.parametrize("tied", [False, True])
def test_recurrent_heads_teacher_forcing_and_proposals(arch, tied):
    """Recurrent slots read teacher tokens in training; fed their own argmax chain they give exactly the
    free-running logits, and ``propose`` (decoding) returns that chain's tokens. Slots that attend to the
    input read it, and the loss at a subset of positions (a scattered attention) agrees with the full one."""
    model = random_model(30, 4, 5, arch=arch, head_noise=0.5, heads_tied=tied)
    h = torch.randn(3, 6, model.cfg.d_model, dtype=torch.float64)
    src = random_src(3, 5, 30, 5)
    source = model.head_source(model.encode(src))
    free = model.heads(h, source=source)  # (3, 6, 4, V): each slot chained on the previous slot's argmax
    chain = free.argmax(-1)  # slot j's token is what slot j+1 reads
    torch.testing.assert_close(model.heads(h, tokens=chain[..., :3], source=source), free, rtol=0, atol=0)
    other = (chain[..., :3] + 1) % 30
    assert not torch.allclose(model.heads(h, tokens=other, source=source)[..., 1:, :], free[..., 1:, :]), \
        "slots must read tokens"
    if arch == "attend":
        elsewhere = model.head_source(model.encode(src.flip(0)))
        moved = model.heads(h, source=elsewhere)[..., 1:, :]
        assert not torch.allclose(moved, free[..., 1:, :]), "slots must read the source"
        with pytest.raises(ValueError, match="reads the source"):
            model.heads(h)
    props = model.heads.propose(h[:, 0], chain[:, 0, :1], 4, source)
    assert torch.equal(props, chain[:, 0, 1:])
    with torch.inference_mode():  # the decoding path (per-vocabulary tables) proposes the same tokens
        assert torch.equal(model.heads.propose(h[:, 0], chain[:, 0, :1], 4, source), chain[:, 0, 1:])
    # head_losses uses teacher tokens tgt_out[t .. t+k-2] at position t.
    tgt_out = torch.randint(3, 30, (3, 6))
    tgt_out[0, 4:] = model.pad_id  # a short row: its far slots are computed at fewer positions
    assert torch.equal(teacher_tokens(tgt_out, 4, model.pad_id)[:, 0], tgt_out[:, :3])
    losses = head_losses(model, h, tgt_out, [0, 1, 2, 3], source=model.head_source(model.encode(src)))
    logits = model.heads(h, tokens=teacher_tokens(tgt_out, 4, model.pad_id), source=source)
    ce = torch.nn.functional.cross_entropy(
        logits[:, :, 2].flatten(0, 1), shifted_targets(tgt_out, 2, model.pad_id).flatten(), ignore_index=model.pad_id
    )
    torch.testing.assert_close(losses[2], ce.float())
    with pytest.raises(ValueError, match="identity_p1"):
        from bpd.models import build_translation_model

        build_translation_model(30, 4, MICRO, heads_arch="recurrent", identity_p1=False)


@pytest.mark.parametrize("vocab", [None, [2, 3, 5, 7, 11, 13, 17]])
@pytest.mark.parametrize("arch", ["recurrent", "attend"])
def test_both_slot_steps_propose_the_same_chain(vocab, arch):
    """``RecurrentHeads.stepper`` hands out the parameters' step outside inference mode and the decoding tables'
    inside it; the proposal chain runs on either and gives the same tokens, also among a proposal vocabulary
    (where a slot after the first reads the previous slot's index into it)."""
    from bpd.models.fastpath import TableStep
    from bpd.models.heads.recurrent import PlainStep

    model = random_model(30, 5, 0, arch=arch, head_noise=0.3)
    heads = model.heads
    h = torch.randn(4, model.cfg.d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    source = model.head_source(model.encode(random_src(4, 6, 30, 3)))
    first = torch.tensor([[4], [9], [2], [7]])
    with torch.inference_mode():
        heads.set_proposal_vocab(None if vocab is None else torch.tensor(vocab))
        assert isinstance(heads.stepper(source), TableStep)
        fast = heads.propose(h, first, 5, source)
    with torch.no_grad():
        assert isinstance(heads.stepper(source), PlainStep)
        plain = heads.propose(h, first, 5, source)
    heads.set_proposal_vocab(None)
    assert plain.shape == (4, 4) and torch.equal(fast, plain)
    if vocab is not None:
        assert torch.isin(plain, torch.tensor(vocab)).all()


@pytest.mark.parametrize("arch", ["recurrent", "attend"])
def test_tied_slots_share_one_set_of_weights(tmp_path, arch):
    """``heads.tie_slots``: one set of slot weights, a first-layer bias per slot (its depth); the decoding tables
    hand every slot the very same weight tensors; training moves the shared weights and each slot's bias; the
    option is refused for heads whose slots do not run one after another, in one sentence."""
    from bpd.models import build_translation_model
    from bpd.models.fastpath import recurrent_slots

    tied = fresh_model(k=4, heads_arch=arch, identity_p1=True, heads_tied=True)
    untied = fresh_model(k=4, heads_arch=arch, identity_p1=True)
    assert tied.heads.w_r_in.shape[0] == tied.heads.w_r_out.shape[0] == 1 and tied.heads.b_r_in.shape[0] == 3
    assert sum(p.numel() for p in tied.heads.parameters()) < sum(p.numel() for p in untied.heads.parameters())
    with torch.inference_mode():
        slots = recurrent_slots(tied.heads)
    assert all(s[2] is slots[0][2] and s[3] is slots[0][3] for s in slots[1:])
    with torch.no_grad():
        tied.heads.w_r_out.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(0))
        tied.heads.b_r_in[1].add_(1.0)  # slot 2 alone: the same state and token give another state
    h, tok = torch.randn(2, tied.cfg.d_model), torch.tensor([4, 5])
    source = tied.head_source(tied.encode(torch.tensor([[3, 4, 5], [6, 7, 8]])))
    assert not torch.allclose(tied.heads.step(h, tok, 1, source), tied.heads.step(h, tok, 2, source))
    assert torch.allclose(tied.heads.step(h, tok, 1, source), tied.heads.step(h, tok, 3, source))
    before = {n: p.detach().clone() for n, p in tied.heads.named_parameters()}
    cfg = TrainConfig(lr=3e-3, warmup_steps=2, max_steps=4, ckpt_every=100)
    train(tied, toy_batches(), cfg, quiet(tmp_path / "h.pt"), heads=HeadsConfig(k=4, arch=arch, tie_slots=True))
    assert all(not torch.equal(p, before[n]) for n, p in tied.heads.named_parameters())
    reloaded = load_model(tmp_path / "h.pt", "cpu")[0]
    assert reloaded.heads.tie_slots and reloaded.heads.w_r_in.shape[0] == 1
    for bad in ("medusa", "paper"):
        with pytest.raises(ValueError, match="tie_slots=true needs slots that run one after another"):
            HeadsConfig(arch=bad, tie_slots=True).validate()
        with pytest.raises(ValueError, match="tie_slots=true needs slots that run one after another"):
            build_translation_model(20, 3, MICRO, heads_arch=bad, identity_p1=True, heads_tied=True)


def test_head_losses_finite_when_a_head_has_no_targets():
    """Short sentences leave a far head nothing to predict: its loss is 0 (not NaN), the others are the mean."""
    import torch.nn.functional as F

    model = fresh_model(k=4)
    tgt_out = torch.tensor([[5, 6, 2, 0, 0], [7, 2, 0, 0, 0]])  # at most 3 tokens: head 3 sees only padding
    h = torch.randn(2, 5, model.cfg.d_model)
    losses = head_losses(model, h, tgt_out, [0, 1, 3])
    assert float(losses[3].detach()) == 0.0
    ref = F.cross_entropy(model.heads.base_logits(h).flatten(0, 1), tgt_out.flatten(), ignore_index=0)
    assert float(losses[0].detach()) == pytest.approx(float(ref.detach()), rel=1e-5)
    combine(losses).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("arch", ["paper", "blockdiag", "medusa", "recurrent"])
def test_head_losses_score_only_positions_with_a_target(arch):
    """The losses (and their gradients) equal the cross-entropy of the full (B, T, k, V) logits with padding
    ignored, yet slot i is projected at the positions with a target i tokens ahead only."""
    import torch.nn.functional as F

    model = fresh_model(k=4, heads_arch=arch, identity_p1=True)
    tgt_out = torch.tensor([[5, 6, 7, 8, 2, 0], [7, 9, 2, 0, 0, 0], [4, 5, 6, 7, 8, 2]])
    h = torch.randn(3, 6, model.cfg.d_model, requires_grad=True)
    projected = {}
    real = model.heads.slot_output

    def counting(i, x):
        projected[i] = x.shape[0]
        return real(i, x)

    model.heads.slot_output = counting
    losses = head_losses(model, h, tgt_out, [0, 1, 2, 3], label_smoothing=0.1)
    counted = dict(projected)
    logits = model.heads(h, tokens=teacher_tokens(tgt_out, 4, model.pad_id))
    everywhere = head_losses(model, h, tgt_out, [0, 1, 2, 3], label_smoothing=0.1, every_position=True)
    assert projected == {0: 18, 1: 18, 2: 18, 3: 18}  # the reference path (bench/train_step.py) projects all
    for i in range(4):
        tgt = shifted_targets(tgt_out, i, model.pad_id).flatten()
        ref = F.cross_entropy(logits[:, :, i].flatten(0, 1), tgt, ignore_index=model.pad_id, label_smoothing=0.1)
        torch.testing.assert_close(losses[i], ref)
        torch.testing.assert_close(everywhere[i], ref)
        assert counted[i] == int((tgt != model.pad_id).sum()) < 18  # 15, 12, 9, 6 positions of 18
    ours = torch.autograd.grad(combine(losses), [h, *model.heads.parameters()], allow_unused=True)
    full = sum(F.cross_entropy(logits[:, :, i].flatten(0, 1), shifted_targets(tgt_out, i, model.pad_id).flatten(),
                               ignore_index=model.pad_id, label_smoothing=0.1) for i in range(4)) / 4
    theirs = torch.autograd.grad(full, [h, *model.heads.parameters()], allow_unused=True)
    for a, b in zip(ours, theirs):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b)


def test_cpu_dropout_keeps_one_minus_p_scaled_and_is_the_identity_in_eval():
    """bpd's Dropout draws its CPU mask from rand_like (faster than F.dropout's Bernoulli draw): kept units
    are scaled by 1 / (1 - p), about 1 - p of them are kept, the same seed gives the same mask, the gradient
    is the mask, and eval mode (or p = 0) passes the input through."""
    from bpd.models.transformer import Dropout

    drop, x = Dropout(0.3), torch.randn(400, 500, requires_grad=True)
    torch.manual_seed(0)
    y = drop(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.005
    torch.testing.assert_close(y[kept], x[kept] / 0.7)
    torch.manual_seed(0)
    assert torch.equal(drop(x), y)
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / 0.7)
    assert drop.eval()(x) is x and Dropout(0.0)(x) is x


def test_input_noise_swaps_only_real_inputs_for_batch_tokens():
    from bpd.training.noise import noisy_inputs

    pad = 0
    tgt_in = torch.tensor([[1, 5, 6, 7, 0, 0], [1, 8, 9, 0, 0, 0]])
    g = torch.Generator().manual_seed(0)
    assert torch.equal(noisy_inputs(tgt_in, 0.0, pad), tgt_in)
    out = noisy_inputs(tgt_in, 0.9, pad, generator=g)
    assert torch.equal(out[:, 0], tgt_in[:, 0])  # BOS kept
    assert torch.equal(out == pad, tgt_in == pad)  # padding kept, nothing becomes padding
    assert set(out[:, 1:][tgt_in[:, 1:] != pad].tolist()) <= {5, 6, 7, 8, 9}  # drawn from the batch's inputs
    assert (out != tgt_in).any()  # at 0.9 some of the five real inputs change
    big = torch.randint(3, 50, (64, 40))
    share = (noisy_inputs(big, 0.3, pad, generator=g)[:, 1:] != big[:, 1:]).float().mean().item()
    assert 0.2 < share < 0.32  # 0.3 minus the draws that land on the same id
    with pytest.raises(ValueError, match=r"train\.input_noise must be in \[0, 1\)"):
        noisy_inputs(tgt_in, 1.0, pad)
    with pytest.raises(ValueError, match=r"train\.input_noise must be in \[0, 1\)"):
        TrainConfig(input_noise=-0.1).validate()


def test_training_with_input_noise_runs_its_steps_and_differs(tmp_path):
    cfg = TrainConfig(lr=1e-2, warmup_steps=5, max_steps=40, max_minutes=None, label_smoothing=0.0,
                      ckpt_every=1000, eval_every=1000, log_every=1000, input_noise=0.2)
    a = train(fresh_model(k=1, identity_p1=True), toy_batches(), cfg, quiet(tmp_path / "a.pt"))
    b = train(fresh_model(k=1, identity_p1=True), toy_batches(), dataclasses.replace(cfg, input_noise=0.0),
              quiet(tmp_path / "b.pt"))
    assert a["step"] == b["step"] == 40 and a["last_loss"] != b["last_loss"]


def test_ctrl_c_names_the_step_and_the_checkpoint_to_resume_from(tmp_path):
    """Ctrl-C mid-training: one message with the step, the last checkpoint and the resume command (the entry
    points print it instead of a traceback); the same call then resumes from that checkpoint."""
    from bpd.training.loop import TrainingInterrupted

    cfg = TrainConfig(lr=3e-3, warmup_steps=3, max_steps=12, max_minutes=None, ckpt_every=4, label_smoothing=0.0)
    make = toy_batches(n=5)

    def stopping(epoch: int, start: int = 0):  # Ctrl-C while the 8th batch is fetched: 7 steps done
        for i, b in enumerate(make(epoch, start)):
            if epoch == 1 and i == 2:
                raise KeyboardInterrupt
            yield b

    with pytest.raises(TrainingInterrupted) as e:
        train(fresh_model(k=1, identity_p1=True), stopping, cfg, quiet(tmp_path / "m.pt"))
    msg = str(e.value)
    assert msg.startswith("stopped base training at step 7 of 12;") and "\n" not in msg
    assert f"last checkpoint {tmp_path / 'm.state.pt'} (step 4)" in msg
    assert msg.endswith("run the same command to resume.")
    assert isinstance(e.value, KeyboardInterrupt)  # code that stops on Ctrl-C still does
    assert train(fresh_model(k=1, identity_p1=True), make, cfg, quiet(tmp_path / "m.pt"))["step"] == 12
    with pytest.raises(TrainingInterrupted, match="at step 0 of 12; no checkpoint yet"):
        train(fresh_model(k=1, identity_p1=True), _interrupt_now, cfg, quiet(tmp_path / "n.pt"))


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGUSR1"), reason="no SIGUSR1 on this system")
def test_sigusr1_writes_the_resume_state_at_the_next_step_and_training_goes_on(tmp_path, capsys):
    """SIGUSR1 (``kill -USR1``, or a batch system before its time limit) asks for a resume checkpoint between
    ``ckpt_every`` steps: it is written after the step under way, training goes on, and a run stopped after it
    resumes from it to the same weights as a run never stopped."""
    import os
    import signal

    from bpd.training.loop import TrainingInterrupted

    cfg = TrainConfig(lr=3e-3, warmup_steps=3, max_steps=12, max_minutes=None, ckpt_every=1000,
                      label_smoothing=0.0, log_every=1000, eval_every=1000)
    make = toy_batches(n=5)

    def asked_then_stopped(epoch: int, start: int = 0):  # 5 batches an epoch
        for i, b in enumerate(make(epoch, start)):
            if epoch == 1 and i == 1:  # while fetching the 7th batch (6 steps done): ask for a checkpoint
                os.kill(os.getpid(), signal.SIGUSR1)
            if epoch == 1 and i == 4:  # Ctrl-C while fetching the 10th: 9 steps done
                raise KeyboardInterrupt
            yield b

    previous = signal.getsignal(signal.SIGUSR1)
    with pytest.raises(TrainingInterrupted) as e:
        train(fresh_model(k=1, identity_p1=True), asked_then_stopped, cfg, quiet(tmp_path / "m.pt"))
    assert f"last checkpoint {tmp_path / 'm.state.pt'} (step 7)" in str(e.value)
    assert signal.getsignal(signal.SIGUSR1) == previous  # the handler lives as long as training
    assert "step 7: resume state written on request (SIGUSR1)" in capsys.readouterr().out
    assert load_checkpoint(tmp_path / "m.state.pt")["step"] == 7
    resumed = fresh_model(k=1, identity_p1=True)
    assert train(resumed, make, cfg, quiet(tmp_path / "m.pt"))["step"] == 12
    straight = fresh_model(k=1, identity_p1=True)
    train(straight, make, cfg, quiet(tmp_path / "s.pt"))
    for (name, a), b in zip(resumed.state_dict().items(), straight.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def _interrupt_now(epoch: int, start: int = 0):
    raise KeyboardInterrupt
    yield  # a generator, like every batch factory


@pytest.mark.parametrize("every_position", [False, True])
def test_soft_targets_are_p1_at_the_guessed_position(every_position):
    """heads.soft_targets: slot i at position t learns p_1's distribution at t + i (over the slot's vocabulary),
    computed here from the full (B, T, k, V) logits; p_1 keeps its hard loss; where the hard target lies
    outside the slot's vocabulary, or past the sentence, the position carries no loss; and no gradient
    reaches the targets."""
    import torch.nn.functional as F

    model = fresh_model(k=3, heads_arch="recurrent", identity_p1=True)
    ids = torch.tensor([0, 2, 5, 6, 7, 9, 11, 13])
    model.heads.set_loss_vocab(ids)
    tgt_out = torch.tensor([[5, 6, 7, 8, 2, 0], [7, 9, 2, 0, 0, 0], [4, 5, 6, 7, 9, 2]])
    h = torch.randn(3, 6, model.cfg.d_model, requires_grad=True)
    losses = head_losses(model, h, tgt_out, [0, 1, 2], every_position=every_position, soft=True)
    hard = head_losses(model, h, tgt_out, [0, 1, 2], every_position=every_position)
    torch.testing.assert_close(losses[0], hard[0])

    p1 = F.softmax(model.heads.base_logits(h)[..., ids], dim=-1)
    for i in (1, 2):
        num, count = 0.0, 0
        for b in range(3):
            for t in range(6 - i):
                tgt = int(tgt_out[b, t + i])
                if tgt == model.pad_id or not bool((ids == tgt).any()) or model.pad_id in tgt_out[b, t : t + i + 1]:
                    continue
                logp = F.log_softmax(model.heads.slot_projection(model.heads.states(
                    h[b, t], 3, tokens=tgt_out[b, t : t + 2])[i]), dim=-1)
                num = num - (p1[b, t + i].detach() * logp).sum()
                count += 1
        torch.testing.assert_close(losses[i], num / count, rtol=1e-5, atol=1e-6)
    from bpd.training.losses import slot_scores

    assert all(not tgt.requires_grad for i, _, tgt in slot_scores(model, h, tgt_out, [1, 2], soft=True))
    combine(losses).backward()
    assert h.grad is not None and torch.isfinite(h.grad).all()
    with pytest.raises(ValueError, match="identity_p1=true"):
        HeadsConfig(k=3, identity_p1=False, soft_targets=True).validate()


@pytest.mark.parametrize("every_position", [False, True])
def test_p1_distill_adds_the_kl_from_the_base_to_p1_alone(every_position):
    """heads.p1_distill: p_1's loss gains the weighted KL(base's p_1 || p_1) over the non-padding targets, the
    proposal slots' losses are untouched, no gradient reaches the base's distributions, and a model anchored to
    itself has nothing added."""
    import torch.nn.functional as F

    from bpd.training.losses import p1_anchor

    base, model = fresh_model(k=3, identity_p1=True).eval(), fresh_model(k=3, seed=1, identity_p1=True).eval()
    src = torch.tensor([[5, 6, 7, 8], [7, 9, 3, 4], [4, 5, 6, 7]])
    tgt_out = torch.tensor([[5, 6, 7, 8, 2, 0], [7, 9, 2, 0, 0, 0], [4, 5, 6, 7, 9, 2]])
    tgt_in = torch.cat([torch.ones(3, 1, dtype=torch.long), tgt_out[:, :-1]], dim=1)
    h, _ = model.teacher_forced(src, tgt_in)
    anchor = p1_anchor(base, src, tgt_in, tgt_out, weight=0.5)
    assert not anchor.log_probs.requires_grad
    hard = head_losses(model, h, tgt_out, [0, 1, 2], every_position=every_position)
    held = anchored(head_losses(model, h, tgt_out, [0, 1, 2], every_position=every_position), model, h, tgt_out,
                    anchor)

    keep = tgt_out != model.pad_id
    p_base = F.softmax(base.heads.base_logits(base.teacher_forced(src, tgt_in)[0]), dim=-1)[keep]
    logp = F.log_softmax(model.heads.base_logits(h), dim=-1)[keep]
    kl = (p_base * (p_base.log() - logp)).sum(-1).mean()
    torch.testing.assert_close(held[0], hard[0] + 0.5 * kl)
    assert float(kl.detach()) > 0.01  # two different models: the term is there to be measured
    for i in (1, 2):
        torch.testing.assert_close(held[i], hard[i])
    itself = p1_anchor(model, src, tgt_in, tgt_out, weight=3.0)
    torch.testing.assert_close(anchored(head_losses(model, h, tgt_out, [0, 1, 2]), model, h, tgt_out, itself)[0],
                               hard[0])


def test_p1_distill_holds_a_finetuned_p1_near_the_base_and_resumes_to_the_same_model(tmp_path):
    """Fine-tuned with the base at the heads' rate, p_1 drifts less from the base's own distributions with
    heads.p1_distill than without; off (the default) nothing is copied and the cache key is unchanged; and an
    interrupted anchored run resumed from its checkpoint is the uninterrupted one (the anchor is the base the
    stage started from, not the resumed weights)."""
    import torch.nn.functional as F

    from bpd.config.common import keyed

    src, tgt_in, tgt_out = next(toy_batches(seed=9)(0))

    def drift(p1_distill: float, path: Path, max_steps: int = 12, model=None):
        model = model if model is not None else fresh_model(k=3, identity_p1=True)
        base = fresh_model(k=3, identity_p1=True).eval()
        cfg = TrainConfig(lr=1e-2, warmup_steps=1, max_steps=max_steps, ckpt_every=4, max_minutes=None)
        heads = HeadsConfig(k=3, training="finetune", p1_distill=p1_distill)
        train(model, toy_batches(), cfg, quiet(path), heads=heads)
        with torch.no_grad():
            p = F.log_softmax(model.eval().heads.base_logits(model.teacher_forced(src, tgt_in)[0]), -1)
            q = F.log_softmax(base.heads.base_logits(base.teacher_forced(src, tgt_in)[0]), -1)
        return float(F.kl_div(p, q, log_target=True, reduction="batchmean")), model

    free, _ = drift(0.0, tmp_path / "free.pt")
    held, whole = drift(20.0, tmp_path / "held.pt")
    assert held < 0.5 * free, (held, free)
    assert "p1_distill" not in keyed(HeadsConfig(k=3, training="finetune"))

    drift(20.0, tmp_path / "cut.pt", max_steps=6)  # stops at step 6; its resume state is at step 6
    state = load_checkpoint(tmp_path / "cut.state.pt")
    assert state["step"] == 6
    _, resumed = drift(20.0, tmp_path / "cut.pt")
    for (n, p), q in zip(whole.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=f"{n} differs after resume")
    with pytest.raises(ValueError, match="p1_distill"):
        HeadsConfig(k=3, training="frozen", p1_distill=1.0).validate()

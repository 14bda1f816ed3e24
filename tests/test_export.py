"""The export (bpd.export): a tiny model made here, written as a Hugging Face Pegasus model and tokenizer and
converted by CTranslate2, computes what ours computes (no network: both libraries come from the registry)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import MICRO

pytest.importorskip("transformers")
ctranslate2 = pytest.importorskip("ctranslate2")

from bpd.config import output_limit  # noqa: E402
from bpd.data.batches import pad_rows  # noqa: E402
from bpd.data.tokenizer import Tokenizer  # noqa: E402
from bpd.decoding.methods.greedy import greedy_decode  # noqa: E402
from bpd.decoding.peers import ct2_greedy, hf_generate  # noqa: E402
from bpd.export import check_exportable, export_hf  # noqa: E402
from bpd.export.checks import greedy_identity, logits_gap  # noqa: E402
from bpd.export.ct2 import convert_ct2, ct2_translator  # noqa: E402
from bpd.models import build_translation_model  # noqa: E402

LINES = ["the cat sat on the mat", "a dog  ran far away", " leading and trailing ", "Zürich ist schön",
         "numbers 12 345 and symbols !?", "x"]


def tiny_model(vocab: int, **options):
    """A random micro model whose layer norms and biases are not at their init (1 and 0): a residual
    dimension mapped to the wrong place must show in the logits."""
    model = build_translation_model(vocab, 2, MICRO, seed=3, **options)
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.startswith("heads.") and p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=g) * 0.3)
        model.tgt_embed.weight.mul_(3.0)  # sharper outputs: EOS and repeats both occur
    return model.eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(LINES * 20) + "\n", encoding="utf-8")
    tok = Tokenizer.train([corpus], root / "spm" / "joint", 60, seed=0)
    model = tiny_model(tok.vocab_size)
    hf_dir = export_hf(model, tok.model_path, root / "hf", max_positions=128)
    return model, tok, hf_dir, root


def sources(tok) -> list[list[int]]:
    return [tok.encode(line) or [tok.eos_id] for line in LINES]


def test_tokenizer_round_trip(exported):
    from transformers import AutoTokenizer

    _, tok, hf_dir, _ = exported
    hf = AutoTokenizer.from_pretrained(hf_dir)
    assert (hf.pad_token_id, hf.bos_token_id, hf.eos_token_id, hf.unk_token_id) == (0, 1, 2, 3)
    for line in LINES:
        assert hf(line)["input_ids"] == tok.encode(line)  # no special tokens on a source, as ours


def test_logits_match(exported):
    from transformers import AutoModelForSeq2SeqLM

    model, tok, hf_dir, _ = exported
    hf = AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    src = sources(tok)
    targets = [list(reversed(s))[:5] + [tok.eos_id] for s in src]
    assert logits_gap(model, hf, src, targets) < 1e-4


def test_greedy_identical(exported):
    from transformers import AutoModelForSeq2SeqLM

    model, tok, hf_dir, _ = exported
    hf = AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    src = sources(tok)
    same, greedy = greedy_identity(model, hf_generate(hf), src)
    assert same.identical == 1.0, same.mismatches
    # Several rows at once (padded sources) and prompt lookup give greedy's outputs too.
    limit = output_limit(max(len(s) for s in src))
    batched = hf_generate(hf)(src, limit)
    assert batched == greedy_decode(model, pad_rows(src, 0, min_width=1), limit).tokens
    assert greedy_identity(model, hf_generate(hf, prompt_lookup=3), src, greedy)[0].identical == 1.0


def test_ctranslate2_greedy(exported):
    model, tok, hf_dir, root = exported
    src = sources(tok)
    vocab = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    ct2 = ct2_translator(convert_ct2(hf_dir, root / "ct2-float32", "float32"))
    same, _ = greedy_identity(model, ct2_greedy(ct2, vocab, tok.eos_id), src)
    assert same.identical == 1.0, same.mismatches
    # int8 weights: another model, close but not identical; it must convert, run and respect the limit.
    int8 = ct2_greedy(ct2_translator(convert_ct2(hf_dir, root / "ct2-int8", "int8")), vocab, tok.eos_id)
    assert all(0 < len(int8([s], output_limit(len(s)))[0]) <= output_limit(len(s)) for s in src)


def test_refuses_what_pegasus_cannot_express():
    with pytest.raises(ValueError, match="learned"):
        check_exportable(build_translation_model(20, 1, MICRO, positions="learned"))
    with pytest.raises(ValueError, match="untied"):
        check_exportable(build_translation_model(20, 1, MICRO, share_embeddings=False))


def test_peer_bench_pairs_every_decoder(exported):
    """The round-robin times every decoder on every batch and pairs the ratios; a peer that returns greedy's
    tokens is identical, one that stops early is not, and our best exact decoder is named."""
    from bpd.bench.peers import PEER_COLUMNS, batches_of, our_decoders, our_specs, peer_rows, round_robin

    model, tok, _, _ = exported
    specs = our_specs(model, [2, 4])  # the model has k = 2: k = 4 is left out
    ours = our_decoders(model, specs)
    assert list(ours) == ["greedy", "blockwise_k2_exact"]
    peers = {"same": ours["greedy"], "short": lambda src, n: [t[:1] for t in ours["greedy"](src, n)]}
    times, outputs = round_robin({**ours, **peers}, batches_of(sources(tok), 2), repeats=2, warmup=1)
    assert all(t.shape == (2, 3) and (t > 0).all() for t in times.values())
    kinds = {"same": {"library": "test", "peer_mode": "greedy"},
             "short": {"library": "test", "peer_mode": "short", "peer_quantization": "int8"}}
    rows, best = peer_rows(times, outputs, specs, kinds, lambda t: 0.0, {"batch_size": 2})
    by = {r["decoder"]: r for r in rows}
    assert by["same"]["identical_to_greedy"] == 1.0 and by["short"]["identical_to_greedy"] < 1.0
    assert by["blockwise_k2_exact"]["identical_to_greedy"] == 1.0
    assert best in ours and by["same"]["best_vs_peer"] > 0 and by["greedy"]["best_vs_peer"] is None
    # What each decoder is, in columns: ours as make bench's rows say it, a peer its library and mode.
    assert (by["greedy"]["method"], by["greedy"]["k"], by["greedy"]["library"]) == ("greedy", 1, "bpd")
    k2 = by["blockwise_k2_exact"]
    assert (k2["method"], k2["k"], k2["criterion"], k2["min_block_size"]) == ("blockwise", 2, "exact", 1)
    assert by["short"]["method"] is None and by["short"]["k"] is None and by["short"]["peer_quantization"] == "int8"
    assert by["same"]["peer_quantization"] is None and by["greedy"]["peer_mode"] is None
    assert by["same"]["speedup_over_hf_greedy"] is None  # no hf_greedy timed here
    assert len({tuple(r) for r in rows}) == 1 and set(PEER_COLUMNS) <= set(rows[0])  # one set of columns


def test_peer_bench_times_both_decode_paths(exported):
    """With two decode paths, our decoders are keyed by path, the static ones decode every batch once before
    timing (each shape built), their outputs are greedy's, and each peer's row pairs it with both greedies."""
    from bpd.bench.peers import batches_of, compile_shapes, our_decoders, our_specs, peer_rows, round_robin

    model, tok, _, _ = exported
    specs = our_specs(model, [2], engines=["eager", "static"])
    ours = our_decoders(model, specs)
    assert list(ours) == ["greedy", "blockwise_k2_exact", "greedy@static", "blockwise_k2_exact@static"]
    batches = batches_of(sources(tok), 2)
    assert set(compile_shapes(model, specs, batches)) == {"greedy@static", "blockwise_k2_exact@static"}
    peers = {"twice": ours["greedy"]}
    times, outputs = round_robin({**ours, **peers}, batches, repeats=2, warmup=0)
    # Times set by hand (a unit test times nothing): the peer twice as slow as each of our decoders.
    times = {key: np.full_like(t, 2.0 if key == "twice" else 1.0) for key, t in times.items()}
    rows, _ = peer_rows(times, outputs, specs, {"twice": {"library": "test", "peer_mode": "greedy"}},
                        lambda t: 0.0, {"batch_size": 2})
    by = {(r["decoder"], r["engine"]): r for r in rows}
    assert all(by[(d, "static")]["identical_to_greedy"] == 1.0 for d in ("greedy", "blockwise_k2_exact"))
    peer = by[("twice", None)]
    assert set(peer["greedy_vs_peer"]) == {"eager", "static"} and by[("greedy", "eager")]["greedy_vs_peer"] is None
    assert peer["speedup"] == pytest.approx(0.5) and peer["greedy_vs_peer"] == {"eager": [2.0, 2.0, 2.0],
                                                                               "static": [2.0, 2.0, 2.0]}


#: Run in a fresh interpreter (the test process imports ctranslate2 itself): a CTranslate2 peer converted and
#: decoding through the bench's round-robin, then what the parent process holds.
APART = """
import json, os, sys
from bpd.bench.peers import batches_of, round_robin
from bpd.export.ct2_process import CT2Process, convert_apart
hf_dir, out_dir, vocab, eos_id, src = json.loads(sys.argv[1])
peer = CT2Process(convert_apart(hf_dir, out_dir, "float32"), vocab, eos_id, threads=1)
times, outputs = round_robin({"ct2_float32": peer}, batches_of(src, 2), repeats=2, warmup=1)
print(json.dumps({"worker": peer.pid, "parent": os.getpid(), "loaded": "ctranslate2" in sys.modules,
                  "times": times["ct2_float32"].tolist(), "outputs": outputs["ct2_float32"]}))
peer.close()
"""


def test_ct2_peer_decodes_in_its_own_process(exported):
    """A CTranslate2 peer converts and decodes in worker processes: the process that runs the round-robin never
    loads ctranslate2, the worker's pid is another, and greedy's tokens and per-batch times come back."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from bpd.bench.peers import batches_of

    model, tok, hf_dir, root = exported
    src = sources(tok)
    vocab = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    args = json.dumps([str(hf_dir), str(root / "ct2-apart"), vocab, tok.eos_id, src])
    done = subprocess.run([sys.executable, "-c", APART, args], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["worker"] != got["parent"] and not got["loaded"]
    assert np.array(got["times"]).shape == (2, 3) and (np.array(got["times"]) > 0).all()
    greedy = [t for b in batches_of(src, 2) for t in greedy_decode(model, pad_rows(b, 0, min_width=1),
                                                                     output_limit(max(map(len, b)))).tokens]
    assert got["outputs"] == greedy


def test_ct2_worker_times_its_decode_and_pairs_in_rows(exported):
    """A CTranslate2 worker in the bench's round-robin beside our greedy: its pid is not ours, it reports a decode
    time no longer than the call's round trip, its row pairs it with our greedy and its outputs are greedy's; it
    stops on close, and a worker that cannot load its model says why."""
    import os
    import time

    from bpd.bench.peers import batches_of, our_decoders, our_specs, peer_rows, round_robin
    from bpd.export.bundle import peer_columns
    from bpd.export.ct2_process import CT2Process

    model, tok, hf_dir, root = exported
    vocab = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    peer = CT2Process(convert_ct2(hf_dir, root / "ct2-worker", "float32"), vocab, tok.eos_id, threads=1)
    try:
        assert peer.pid != os.getpid()
        src = sources(tok)[:2]
        t0 = time.perf_counter()
        tokens, seconds = peer.timed(src, output_limit(max(map(len, src))))
        assert 0 < seconds <= time.perf_counter() - t0 and tokens == peer(src, output_limit(max(map(len, src))))
        specs = our_specs(model, [])
        times, outputs = round_robin({**our_decoders(model, specs), "ct2_float32": peer}, batches_of(sources(tok), 2),
                                     repeats=2, warmup=1)
    finally:
        peer.close()
    assert not peer._proc.is_alive()
    rows, _ = peer_rows(times, outputs, specs, {"ct2_float32": peer_columns("ct2_float32")}, lambda t: 0.0,
                        {"batch_size": 2})
    by = {r["decoder"]: r for r in rows}
    row = by["ct2_float32"]
    assert row["library"] == "ctranslate2" and row["peer_quantization"] == "float32"
    assert row["identical_to_greedy"] == 1.0 and row["repeats"] == 2 and row["best_vs_peer"] > 0
    assert set(row["greedy_vs_peer"]) == {"eager"} and len({tuple(r) for r in rows}) == 1
    with pytest.raises(RuntimeError, match="failed"):
        CT2Process(root / "no-such-model", vocab, tok.eos_id, threads=1)


def test_every_peer_says_what_it_is():
    """Each peer bundle_peers can build has its row columns in PEERS (library, mode, CTranslate2's weights)."""
    from bpd.bench.peers import PEER_COLUMNS
    from bpd.export.bundle import BATCH_ONE_PEERS, PEERS
    from bpd.export.ct2 import QUANTIZATIONS

    assert set(PEERS) == {"hf_greedy", *BATCH_ONE_PEERS, *(f"ct2_{q}" for q in QUANTIZATIONS)}
    assert all(set(c) == {"library", *PEER_COLUMNS} for c in PEERS.values())
    assert {c["peer_quantization"] for c in PEERS.values() if c["library"] == "ctranslate2"} == set(QUANTIZATIONS)
    from bpd.export.bundle import peer_columns

    assert peer_columns("hf_blockwise_k4") == {"library": "transformers", "peer_mode": "blockwise",
                                               "peer_quantization": None, "k": 4, "criterion": "exact"}
    assert peer_columns("hf_greedy") == PEERS["hf_greedy"]


def test_assisted_generation_keeps_the_assistant_cache_in_step(exported, monkeypatch):
    """HF assisted generation with an exported draft gives our greedy's tokens, and the draft's cache stays
    behind the output every round. transformers 5.25 re-fed an encoder-decoder assistant its whole output on
    top of its cache when no decoder attention mask was given (the cache grew by the output's length a round
    until the positions ran out: ``assistant_decoder_inputs``); this test fails without that workaround."""
    from transformers import AutoModelForSeq2SeqLM
    from transformers.generation import candidate_generator

    model, tok, hf_dir, root = exported
    hf = AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    draft_dir = export_hf(_other_model(tok.vocab_size), tok.model_path, root / "draft", max_positions=128)
    seen: list[tuple[int, int]] = []
    update = candidate_generator.AssistedCandidateGenerator._update_past_and_masks

    def spy(self, input_ids, *args, **kwargs):
        out = update(self, input_ids, *args, **kwargs)
        cache = self.assistant_kwargs.get("cache")
        if cache is not None:
            seen.append((input_ids.shape[-1], cache.get_seq_length()))
        return out

    monkeypatch.setattr(candidate_generator.AssistedCandidateGenerator, "_update_past_and_masks", spy)
    src = sources(tok)
    _, greedy = greedy_identity(model, hf_generate(hf), src)
    for assistant_dir in (hf_dir, draft_dir):  # a draft that always agrees, and one that often does not
        assistant = AutoModelForSeq2SeqLM.from_pretrained(assistant_dir).eval()
        seen.clear()
        same, _ = greedy_identity(model, hf_generate(hf, assistant=assistant), src, greedy)
        assert same.identical == 1.0, same.mismatches
        assert seen and all(cached < length for length, cached in seen), seen


def _other_model(vocab: int):
    """A draft: the same micro shape as ``tiny_model``, other random weights."""
    model = build_translation_model(vocab, 1, MICRO, seed=11)
    with torch.no_grad():
        model.tgt_embed.weight.mul_(3.0)
    return model.eval()


def test_peers_at_batch_8_give_our_batched_greedy(exported):
    """Batch 8 (padded sources of different lengths): HF greedy and CTranslate2 float32 return the tokens our
    greedy returns for the same batch; the bundle leaves the batch-1-only peers out of a batch-8 run."""
    from bpd.export.bundle import BATCH_ONE_PEERS, bundle_peers, export_bundle

    model, tok, hf_dir, root = exported
    dirs = export_bundle(model, tok.model_path, root / "bundle", source="tiny")
    assert export_bundle(model, tok.model_path, root / "bundle", source="tiny") == dirs  # reused, not redone
    vocab = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    src = (sources(tok) + [list(reversed(s)) for s in sources(tok)])[:8]
    assert len(src) == 8 and len({len(s) for s in src}) > 1
    limit = output_limit(max(len(s) for s in src))
    ours = greedy_decode(model, pad_rows(src, 0, min_width=1), limit).tokens
    peers = bundle_peers(dirs, vocab, tok.eos_id, threads=1, draft_hf_dir=hf_dir, batch_one=False)
    assert set(peers) == {"hf_greedy", "ct2_float32", "ct2_int8"} and not set(BATCH_ONE_PEERS) & set(peers)
    assert peers["hf_greedy"](src, limit) == ours
    # The export carries the model's heads (k = 2): an HF blockwise peer per k asked for, exact at batch 8 too.
    blockwise = bundle_peers(dirs, vocab, tok.eos_id, threads=1, batch_one=False, blockwise_ks=(2,))
    assert set(blockwise) == {"hf_greedy", "hf_blockwise_k2", "ct2_float32", "ct2_int8"}
    assert blockwise["hf_blockwise_k2"](src, limit) == ours
    assert peers["ct2_float32"](src, limit) == ours
    assert all(0 < len(t) <= limit for t in peers["ct2_int8"](src, limit))
    at_one = bundle_peers(dirs, vocab, tok.eos_id, threads=1, draft_hf_dir=hf_dir, batch_one=True)
    assert set(BATCH_ONE_PEERS) <= set(at_one)
    with pytest.raises(ValueError, match="batch 1"):
        at_one["hf_assisted"](src, limit)


def varied_sources(vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(3, vocab, (int(n),), generator=g).tolist() for n in [9, 4, 7, 9, 2, 6]]


def varied_model(vocab: int, arch: str, **options):
    """A random micro model with k = 4 heads whose greedy outputs vary (strong random layers), whose heads propose
    close to p_1 (blocks of every size), and whose rows end at different steps: EOS takes the embedding of a token
    some outputs hold (a little longer, so it wins where that token would), so some rows stop early and others run
    to the limit. What exercises every path of a round."""
    model = build_translation_model(vocab, 4, MICRO, seed=1, heads_arch=arch, **options)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("heads."):
                p.add_(torch.randn(p.shape, generator=g) * 0.02)
            elif "_layers." in name:
                p.add_(torch.randn(p.shape, generator=g))
        model.eval()
        outs = greedy_decode(model, pad_rows(varied_sources(vocab), 0, min_width=1), 24).tokens
        model.tgt_embed.weight[model.eos_id] = 1.05 * model.tgt_embed.weight[outs[1][5]]
    return model


def hf_blockwise(hf, hf_dir, src: list[list[int]], limit: int, k: int, top_n: int | None):
    """Blockwise decoding through transformers' generate (custom_generate from the export): tokens as ours cut
    them, and each row's rounds."""
    from bpd.decoding.peers import as_ours, padded

    ids, mask = padded(src, 0)
    out = hf.generate(input_ids=ids, attention_mask=mask, custom_generate=str(hf_dir), trust_remote_code=True, k=k,
                      top_n=top_n, max_new_tokens=limit, return_dict_in_generate=True)
    return [as_ours(row[1:].tolist(), 2, limit) for row in out.sequences], out.rounds


@pytest.mark.parametrize("arch", ["recurrent", "attend", "paper", "blockdiag", "medusa"])
def test_hf_blockwise_generate_returns_our_tokens(exported, arch):
    """The export carries the heads, and transformers' generate with the exported custom_generate decodes
    blockwise: exact acceptance gives our greedy's tokens, top-2 our blockwise decoder's tokens (and rounds), at
    batch 1 and at batch 6 (rows of different lengths that accept different block sizes and finish apart)."""
    from transformers import AutoModelForSeq2SeqLM

    from bpd.decoding import blockwise_decode, criteria
    from bpd.export.hf_blockwise import HEADS_CONFIG, HEADS_WEIGHTS

    _, tok, _, root = exported
    model = varied_model(tok.vocab_size, arch)
    hf_dir = export_hf(model, tok.model_path, root / f"heads_{arch}", max_positions=128)
    assert (hf_dir / HEADS_CONFIG).is_file() and (hf_dir / HEADS_WEIGHTS).is_file()
    assert (hf_dir / "custom_generate" / "generate.py").is_file()
    hf = AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    src = varied_sources(tok.vocab_size)
    limit = 24
    padded_src = pad_rows(src, 0, min_width=1)
    greedy = greedy_decode(model, padded_src, limit).tokens
    blocks = []
    for top_n in (None, 2):
        crit = criteria.Exact() if top_n is None else criteria.TopK(top_n)
        ours = blockwise_decode(model, padded_src, k=4, criterion=crit, max_len=limit)
        assert hf_blockwise(hf, hf_dir, src, limit, 4, top_n) == (ours.tokens, list(ours.iterations))
        alone = [hf_blockwise(hf, hf_dir, [s], limit, 4, top_n)[0][0] for s in src]
        assert alone == [blockwise_decode(model, pad_rows([s], 0, min_width=1), k=4, criterion=crit,
                                          max_len=limit).tokens[0] for s in src]
        if top_n is None:
            assert ours.tokens == greedy and alone == [greedy_decode(model, pad_rows([s], 0, min_width=1),
                                                                     limit).tokens[0] for s in src]
        blocks.append(ours)
    exact, top2 = blocks
    # Not vacuous: blocks above 1, rows that end early and rows cut by the limit, rows in one batch that accept
    # different block sizes in the same round, and top-2 parting from greedy somewhere.
    rounds = max(len(b) for b in exact.block_sizes)
    assert exact.mean_block_size > 1.05 and any(len({b[i] for b in exact.block_sizes if len(b) > i}) > 1
                                                for i in range(rounds))
    lengths = [len(t) for t in exact.tokens]
    assert min(lengths) < limit and max(lengths) == limit and len(set(lengths)) > 2
    if arch in ("recurrent", "attend", "blockdiag"):  # (these seeds: the other heads' top-2 blocks are greedy's)
        assert top2.tokens != greedy


def test_export_with_heads_loads_as_plain_pegasus_and_opts_in(exported):
    """Without trust_remote_code the export is a plain Pegasus model (generate is the library's greedy); loaded
    with trust_remote_code, its generate decodes blockwise (exact: greedy's tokens) and hands beam search back to
    the library; a folder without heads is refused in one sentence."""
    from transformers import AutoModelForSeq2SeqLM, GenerationMixin

    from bpd.decoding.peers import padded

    model, tok, hf_dir, root = exported
    heads_dir = export_hf(varied_model(tok.vocab_size, "recurrent"), tok.model_path, root / "opt_in",
                          max_positions=128)
    plain = AutoModelForSeq2SeqLM.from_pretrained(heads_dir).eval()
    assert type(plain).generate is GenerationMixin.generate and "generate" not in vars(plain)
    ids, mask = padded(sources(tok), 0)
    limit = output_limit(ids.shape[1])
    greedy = plain.generate(input_ids=ids, attention_mask=mask, max_new_tokens=limit)
    opted = AutoModelForSeq2SeqLM.from_pretrained(heads_dir, trust_remote_code=True).eval()
    assert torch.equal(opted.generate(input_ids=ids, attention_mask=mask, max_new_tokens=limit, k=3), greedy)
    beams = opted.generate(input_ids=ids, attention_mask=mask, max_new_tokens=limit, num_beams=2)
    assert torch.equal(beams, plain.generate(input_ids=ids, attention_mask=mask, max_new_tokens=limit, num_beams=2))
    base_dir = export_hf(build_translation_model(tok.vocab_size, 1, MICRO, seed=2).eval(), tok.model_path,
                         root / "no_heads", max_positions=128)
    base = AutoModelForSeq2SeqLM.from_pretrained(base_dir).eval()
    with pytest.raises(ValueError, match="no proposal heads"):
        base.generate(input_ids=ids, attention_mask=mask, custom_generate=str(heads_dir), trust_remote_code=True,
                      heads_dir=str(base_dir))


def test_plain_and_blockwise_generate_agree_without_a_length(exported):
    """The export's generation config carries a length (the positions' cap): the library's plain generate does not
    stop at its default of 20 tokens while the exported blockwise one runs on; both give our greedy's tokens."""
    from transformers import AutoModelForSeq2SeqLM

    from bpd.decoding.peers import as_ours, padded
    from bpd.export.hf import generation_cap

    _, tok, _, root = exported
    model = varied_model(tok.vocab_size, "recurrent", max_positions=64)  # a short cap: a quick test
    hf_dir = export_hf(model, tok.model_path, root / "lengths", max_positions=64)
    src = varied_sources(tok.vocab_size)
    ids, mask = padded(src, 0)
    plain = AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    cap = generation_cap(plain.config.max_position_embeddings, model.k)
    assert plain.generation_config.max_new_tokens == cap
    greedy = [as_ours(row[1:].tolist(), 2, cap) for row in plain.generate(input_ids=ids, attention_mask=mask)]
    blockwise = plain.generate(input_ids=ids, attention_mask=mask, custom_generate=str(hf_dir),
                               trust_remote_code=True, k=4)
    assert [as_ours(row[1:].tolist(), 2, cap) for row in blockwise] == greedy
    assert greedy == greedy_decode(model, pad_rows(src, 0, min_width=1), cap).tokens
    assert max(len(t) for t in greedy) > 20  # not vacuous: rows run past transformers' default


@pytest.mark.parametrize("option, match", [({"top_n": 0}, "top_n=0"), ({"top_n": -1}, "top_n=-1"),
                                           ({"top_n": 1.5}, "top_n=1.5"), ({"k": 2.5}, "k=2.5"), ({"k": 0}, "k=0"),
                                           ({"k": 5}, "up to k=4")])
def test_blockwise_generate_refuses_options_it_would_bend(exported, option, match):
    from transformers import AutoModelForSeq2SeqLM

    from bpd.decoding.peers import padded

    _, tok, _, root = exported
    hf_dir = root / "options"
    if not hf_dir.is_dir():
        export_hf(varied_model(tok.vocab_size, "recurrent"), tok.model_path, hf_dir, max_positions=64)
    hf = AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    ids, mask = padded(varied_sources(tok.vocab_size)[:1], 0)
    with pytest.raises(ValueError, match=match):
        hf.generate(input_ids=ids, attention_mask=mask, custom_generate=str(hf_dir), trust_remote_code=True,
                    **option)

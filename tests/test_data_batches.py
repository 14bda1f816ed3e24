"""Token stores and batches: a store round-trips the text, a killed build leaves no half store, evaluation
splits keep every line, and batches built from stored lengths are today's batches for the same seed."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from bpd.data.batches import batch_iterator, make_batches, pad_rows
from bpd.data.store import ListPairs, PairStore, StoreEncoding, build_store, file_hash, token_counts
from bpd.data.tokenizer import BOS_ID, EOS_ID, PAD_ID

# ------------------------------------------------------------------------------------------------------------
# the list-based batching this module replaced (kept verbatim as the reference the new one must equal)


def reference_make_batches(pairs, max_tokens, shuffle=True, seed=0, rank=0, world_size=1, chunk_size=8192):
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    if shuffle:
        rng.shuffle(order)
    lengths = [max(len(s), len(t)) for s, t in pairs]
    batches = []
    for start in range(0, len(order), chunk_size):
        chunk = sorted(order[start : start + chunk_size], key=lambda i: (lengths[i], len(pairs[i][0])))
        batch, width = [], 0
        for i in chunk:
            new_width = max(width, lengths[i])
            if batch and (len(batch) + 1) * new_width > max_tokens:
                batches.append(batch)
                batch, new_width = [], lengths[i]
            batch.append(i)
            width = new_width
        if batch:
            batches.append(batch)
    if shuffle:
        rng.shuffle(batches)
    usable = len(batches) // world_size * world_size
    return batches[:usable][rank::world_size]


def toy_pairs(n: int = 300, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(seed)
    return [([rng.randrange(4, 50) for _ in range(rng.randint(1, 30))],
             [rng.randrange(4, 50) for _ in range(rng.randint(1, 30))] + [EOS_ID]) for _ in range(n)]


def lengths(pairs):
    return np.array([len(s) for s, _ in pairs]), np.array([len(t) for _, t in pairs])


@pytest.mark.parametrize("seed, shuffle, world, chunk", [(0, True, 1, 8192), (3, True, 3, 50), (1, False, 2, 64)])
def test_batches_equal_the_list_based_ones(seed, shuffle, world, chunk):
    pairs = toy_pairs(1000, seed)
    for rank in range(world):
        new = make_batches(*lengths(pairs), 256, shuffle, seed, rank, world, chunk)
        assert [b.tolist() for b in new] == reference_make_batches(pairs, 256, shuffle, seed, rank, world, chunk)


def test_batches_deterministic_and_shuffled_by_seed():
    src, tgt = lengths(toy_pairs())
    a = [b.tolist() for b in make_batches(src, tgt, 256, seed=1)]
    assert a == [b.tolist() for b in make_batches(src, tgt, 256, seed=1)]
    assert a != [b.tolist() for b in make_batches(src, tgt, 256, seed=2)]
    with pytest.raises(ValueError):
        make_batches(src, tgt, 256, rank=2, world_size=2)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_rank_sharding_disjoint_equal_lockstep(world_size):
    src, tgt = lengths(toy_pairs(301))
    full = make_batches(src, tgt, 256, seed=4)
    shards = [make_batches(src, tgt, 256, seed=4, rank=r, world_size=world_size) for r in range(world_size)]
    assert len({len(s) for s in shards}) == 1 and len(shards[0]) == len(full) // world_size
    flat = [i for shard in shards for b in shard for i in b.tolist()]
    assert len(flat) == len(set(flat))  # disjoint


@pytest.mark.parametrize("workers", [0, 2])
def test_collated_batches_shapes_bos_eos_padding_and_resume(workers):
    pairs = toy_pairs()
    store = ListPairs(pairs)
    batches = make_batches(store.src_lengths, store.tgt_lengths, 200, seed=3)
    got = list(batch_iterator(store, batches, PAD_ID, BOS_ID, workers=workers))
    seen = []
    for (src, tgt_in, tgt_out), idx in zip(got, batches):
        assert src.dtype == tgt_in.dtype == tgt_out.dtype == torch.long and tgt_in.shape == tgt_out.shape
        assert src.shape[0] * max(src.shape[1], tgt_out.shape[1]) <= 200 or src.shape[0] == 1
        assert (tgt_in[:, 0] == BOS_ID).all()
        mask = tgt_out != PAD_ID
        assert torch.equal(tgt_in[:, 1:][mask[:, 1:]], tgt_out[:, :-1][mask[:, 1:]])  # shifted by one
        assert (tgt_in[~mask] == PAD_ID).all()
        for i, row_s, row_t in zip(idx.tolist(), src.tolist(), tgt_out.tolist()):
            assert [x for x in row_s if x != PAD_ID] == pairs[i][0] and [x for x in row_t if x != PAD_ID] == pairs[i][1]
            seen.append(i)
    assert sorted(seen) == list(range(len(pairs)))  # every example exactly once
    # Resuming at batch 5 gives exactly the rest, without collating the first five.
    rest = list(batch_iterator(store, batches, PAD_ID, BOS_ID, start=5, workers=workers))
    assert len(rest) == len(got) - 5 and all(torch.equal(a[2], b[2]) for a, b in zip(rest, got[5:]))


def test_pad_rows():
    rows = [np.array([5, 6, 7]), np.array([8]), np.array([], dtype=np.int64)]
    assert pad_rows(rows, 0).tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]]
    assert pad_rows(rows, 0, lead=1).tolist() == [[1, 5, 6], [1, 0, 0], [0, 0, 0]]
    assert pad_rows([], 0).shape == (0, 0)


# ------------------------------------------------------------------------------------------------------------
# token stores


def _build(tok, folder, path, split="train", **kw):
    encoding = StoreEncoding(tok.encode_batch, tok.eos_id, tok.vocab_size, file_hash(tok.model_path))
    return build_store(path, folder / f"{split}.src", folder / f"{split}.tgt", encoding, log=lambda _: None, **kw)


def test_store_round_trip_equals_the_text(tokenizer_and_folder, tmp_path):
    tok, folder = tokenizer_and_folder
    store = _build(tok, folder, tmp_path / "train.store", chunk_lines=7)  # several chunks
    src = (folder / "train.src").read_text(encoding="utf-8").splitlines()
    tgt = (folder / "train.tgt").read_text(encoding="utf-8").splitlines()
    assert len(store) == len(src) and store.manifest["source_lines"] == len(src)
    for i in range(len(store)):
        s, t = store.pair(i)
        assert tok.decode(s) == src[i] and t[-1] == EOS_ID and tok.decode(t) == tgt[i]
    assert store.src_lengths.tolist() == [len(tok.encode(line)) for line in src]
    again = PairStore(tmp_path / "train.store")  # re-opened: the same pairs, mapped from disk
    assert again.pair(3) == store.pair(3) and again.manifest["dtype"] == "uint16"
    counts = store.target_counts(tok.vocab_size)
    assert counts.sum() == store.tgt_lengths.sum() and counts[EOS_ID] == len(store)
    tokens = np.asarray(store.arrays["tgt"])  # counted in chunks that split lines: the same counts
    assert np.array_equal(token_counts(tokens, tok.vocab_size, chunk=7), counts)


def test_training_store_cuts_long_pairs_and_drops_empty_ones(tokenizer_and_folder, tmp_path):
    tok, folder = tokenizer_and_folder
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "train.src").write_text("Das ist ein Haus.\n\nDer Hund schläft heute sehr lange im Garten.\n")
    (tmp_path / "c" / "train.tgt").write_text("This is a house.\nNothing.\nThe dog sleeps in the garden today.\n")
    store = _build(tok, tmp_path / "c", tmp_path / "s.store", max_len=6)
    assert len(store) == 2 and store.manifest["dropped_empty"] == 1 and store.manifest["truncated"] >= 1
    assert all(n <= 6 for n in store.src_lengths) and all(n <= 6 for n in store.tgt_lengths)
    assert store.tgt(1)[-1] == EOS_ID


def test_evaluation_store_keeps_every_line_whole(tokenizer_and_folder, tmp_path):
    tok, folder = tokenizer_and_folder
    (tmp_path / "c").mkdir()
    long = " ".join(["Der Hund schläft."] * 60)
    (tmp_path / "c" / "test.src").write_text(f"Das ist ein Haus.\n\n{long}\n")
    (tmp_path / "c" / "test.tgt").write_text("This is a house.\nEmpty source.\nThe dog.\n")
    store = _build(tok, tmp_path / "c", tmp_path / "t.store", split="test", keep_all=True)
    assert len(store) == 3 and store.manifest["empty_sources"] == 1
    assert store.src(1).tolist() == [EOS_ID] and len(store.src(2)) == len(tok.encode(long)) > 100


def test_a_killed_build_leaves_no_half_store_and_resumes(tokenizer_and_folder, tmp_path, monkeypatch):
    tok, folder = tokenizer_and_folder
    calls, kill = [], [True]

    def dying(lines):
        calls.append(len(lines))
        if kill[0] and len(calls) == 5:  # the third chunk's source side
            raise KeyboardInterrupt
        return tok.encode_batch(lines)

    dying_encoding = StoreEncoding(dying, tok.eos_id, tok.vocab_size, "h")
    path = tmp_path / "train.store"
    with pytest.raises(KeyboardInterrupt):
        build_store(path, folder / "train.src", folder / "train.tgt", dying_encoding, chunk_lines=7, log=lambda _: None)
    assert not path.exists() and len(list(path.with_name("train.store.partial").glob("chunk*.npz"))) == 2
    calls.clear()
    kill[0] = False
    store = build_store(path, folder / "train.src", folder / "train.tgt", dying_encoding, chunk_lines=7,
                        log=lambda _: None)
    n_chunks = -(-store.manifest["source_lines"] // 7)
    assert len(calls) == 2 * (n_chunks - 2)  # the two finished chunks were not encoded again
    assert not path.with_name("train.store.partial").exists()
    assert store.pair(0) == _build(tok, folder, tmp_path / "ref.store").pair(0)


def test_a_store_of_another_tokenizer_is_rebuilt_and_bad_input_named(tokenizer_and_folder, tmp_path):
    tok, folder = tokenizer_and_folder
    path = tmp_path / "train.store"
    _build(tok, folder, path)
    other = build_store(path, folder / "train.src", folder / "train.tgt",
                        StoreEncoding(tok.encode_batch, tok.eos_id, tok.vocab_size, "another-tokenizer"),
                        log=lambda _: None)
    assert other.manifest["tokenizer"] == "another-tokenizer"
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "train.src").write_bytes(b"ok\n\xff\xfe broken\n")
    (tmp_path / "bad" / "train.tgt").write_text("ok\nfine\n")
    with pytest.raises(ValueError, match=r"train\.src line 2 is not UTF-8"):
        _build(tok, tmp_path / "bad", tmp_path / "bad.store")
    (tmp_path / "bad" / "train.src").write_text("one\ntwo\nthree\n")
    with pytest.raises(ValueError, match="has 3 lines but .* has 2; they must align"):
        _build(tok, tmp_path / "bad", tmp_path / "bad2.store")
    assert not Path(tmp_path / "bad2.store").exists()

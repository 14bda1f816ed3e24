"""Shared fixtures: tiny random models for decoding properties."""

from __future__ import annotations

import os

import pytest
import torch

from bpd.config import ModelConfig

os.environ.setdefault("WANDB_MODE", "disabled")
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

#: conf/model/micro.yaml's sizes: unit tests and property checks (a few thousand parameters).
MICRO = ModelConfig(name="micro", d_model=32, n_heads=2, d_ff=64, n_enc_layers=1, n_dec_layers=2, dropout=0.0)
IMAGE_MICRO = ModelConfig(name="image_micro", d_model=32, n_heads=2, d_ff=64, n_enc_layers=1, n_dec_layers=1,
                          dropout=0.0)


def random_model(
    vocab: int,
    k: int,
    seed: int,
    arch: str = "paper",
    head_noise: float = 0.3,
    identity_p1: bool = False,
    dtype: torch.dtype = torch.float64,
    **overrides,
):
    """A random micro Transformer whose head weights are perturbed by ``head_noise``.

    Small noise keeps proposals close to p_1 (long accepted blocks); large noise makes them mostly
    wrong (short blocks). Mixing both exercises every acceptance path.
    """
    from bpd.models import HEADS, build_translation_model

    torch.manual_seed(seed)
    identity_p1 = identity_p1 or HEADS[arch].path_dependent  # slot 1 reads p_1's token
    model = build_translation_model(vocab, k, MICRO, seed=seed, heads_arch=arch, identity_p1=identity_p1, **overrides)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.heads.parameters():
            p.add_(torch.randn(p.shape, generator=g) * head_noise)
        # Sharpen the output a little so that EOS and repeated tokens both occur.
        model.tgt_embed.weight.mul_(3.0)
    return model.to(dtype).eval()


def random_src(batch: int, src_len: int, vocab: int, seed: int, pad_id: int = 0, ragged: bool = True):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab, (batch, src_len), generator=g)
    if ragged and batch > 1:
        lengths = torch.randint(1, src_len + 1, (batch,), generator=g)
        lengths[0] = src_len
        for i, n in enumerate(lengths.tolist()):
            src[i, n:] = pad_id
    return src


@pytest.fixture(autouse=True, scope="session")
def compiled_step_store(tmp_path_factory):
    """Compiled steps (``bpd.decoding.step_store``) kept in one folder for the session, never the user's store:
    tests that compile the same model share its packages, as later processes on a machine do."""
    from bpd.decoding import step_store

    root = tmp_path_factory.mktemp("compiled")
    step_store.use_store(root)
    os.environ["BPD_COMPILED_DIR"] = str(root)  # (subprocesses, and entry points run in-process)
    yield root
    step_store.use_store(None)


@pytest.fixture
def make_model():
    return random_model


@pytest.fixture(scope="module")
def tokenizer_and_folder(tmp_path_factory):
    """A toy ding dictionary prepared into train/dev/test, and a 100-piece tokenizer trained on it."""
    from test_data_translation import HEADER, SPECIAL_LINES, _generated_lines

    from bpd.data.tokenizer import Tokenizer
    from corpora.ding import prepare_ding

    root = tmp_path_factory.mktemp("tok")
    ding = root / "de-en"
    ding.write_text(HEADER + "\n".join(SPECIAL_LINES + _generated_lines()) + "\n", encoding="utf-8")
    folder = prepare_ding(root, ding_path=ding, n_dev=5, n_test=10)
    tok = Tokenizer.train([folder / "train.src", folder / "train.tgt"], root / "spm" / "joint", 100, seed=0)
    return tok, folder


@pytest.fixture(autouse=True)
def _plugins_env_restored():
    """An entry point run in-process (``_common.start``) puts its plugins in ``BPD_PLUGINS`` for the jobs it launches;
    a test's must not reach the next test's subprocesses (a relative plugin path fails from another folder)."""
    before = os.environ.get("BPD_PLUGINS")
    yield
    if before is None:
        os.environ.pop("BPD_PLUGINS", None)
    else:
        os.environ["BPD_PLUGINS"] = before

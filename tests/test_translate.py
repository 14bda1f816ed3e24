"""Text in, text out (bpd.translator, experiments/translate.py): a micro model and tokenizer made here translate
sentences with any registered decoder, as the evaluation decodes test lines, and bad input is refused with one
sentence naming the fix before any decoding."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import MICRO
from omegaconf import OmegaConf

import bpd
from bpd.data.batches import pad_rows
from bpd.data.tokenizer import Tokenizer
from bpd.decoding import blockwise_decode, criteria, greedy_decode
from bpd.models import build_translation_model
from bpd.training.checkpoint import save_checkpoint
from bpd.translator import encode_texts, load_translator, longest_source

ROOT = Path(__file__).resolve().parents[1]
LINES = ["the cat sat on the mat", "a dog ran far away", "the mat is red", "a cat and a dog"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A micro model with k = 3 heads saved as a checkpoint, and its tokenizer."""
    root = tmp_path_factory.mktemp("translate")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(LINES * 20) + "\n", encoding="utf-8")
    tok = Tokenizer.train([corpus], root / "spm", 40, seed=0)
    model = build_translation_model(tok.vocab_size, 3, MICRO, seed=1, heads_arch="recurrent").eval()
    path = root / "model.pt"
    save_checkpoint(path, {"model_config": model.config_dict(), "model": model.state_dict()})
    return model, tok, path


def test_translate_is_the_evaluations_decoding(trained):
    """bpd.translate at batch 1 gives the tokens greedy_decode gives each encoded sentence (the evaluation's
    decoding of a test line), and any registered method by name with its options."""
    _, tok, path = trained
    model, tok2 = bpd.load_translator(path, tok.model_path)
    assert tok2.vocab_size == tok.vocab_size
    expected = [tok.decode(greedy_decode(model, pad_rows([tok.encode(t)], 0, min_width=1)).tokens[0]) for t in LINES]
    assert bpd.translate(model, tok, LINES) == expected
    assert bpd.translate(model, str(tok.model_path), LINES, method="blockwise", k=3) == expected  # exact
    top2 = [tok.decode(blockwise_decode(model, pad_rows([tok.encode(t)], 0, min_width=1), k=3,
                                        criterion=criteria.TopK(2)).tokens[0]) for t in LINES]
    assert bpd.translate(model, tok, LINES, method="blockwise", k=3, criterion="topk", criterion_param=2) == top2
    assert len(bpd.translate(model, tok, LINES, method="beam", beam={"size": 2}, batch_size=3)) == len(LINES)
    with pytest.raises(ValueError, match="takes no option k"):
        bpd.translate(model, tok, LINES, method="greedy", k=4)
    with pytest.raises(ValueError, match="unknown decoding method"):
        bpd.translate(model, tok, LINES, method="sampling")


def test_bad_input_is_refused_in_one_sentence(trained, tmp_path):
    model, tok, path = trained
    longest = longest_source(model, 3)
    with pytest.raises(ValueError, match=r"line 2 is empty; .*remove blank lines"):
        encode_texts(tok, ["the cat", "  ", "a dog"], longest)
    with pytest.raises(ValueError, match=r"line 1 has characters .*'☃'.*allow_unknown=true"):
        encode_texts(tok, ["the ☃ cat"], longest)
    assert tok.unk_id in encode_texts(tok, ["the ☃ cat"], longest, allow_unknown=True)[0]
    with pytest.raises(ValueError, match=r"line 1 is \d+ tokens long; .*split the line"):
        encode_texts(tok, ["the cat " * longest], longest)
    with pytest.raises(TypeError, match="list of sentences"):
        encode_texts(tok, "the cat", longest)
    # Another task's checkpoint (the shipped super-resolution model), a tokenizer of another vocabulary, no file.
    with pytest.raises(ValueError, match="image .*not a translation model"):
        load_translator(ROOT / "checkpoints" / "faces_sr_base.pt")
    other = next((ROOT / "checkpoints").glob("debian_en_de_*.spm8000.model"))
    with pytest.raises(ValueError, match="8000 pieces but .* reads"):
        load_translator(path, other)
    with pytest.raises(FileNotFoundError, match="shipped model's name"):
        load_translator(tmp_path / "missing.pt")
    with pytest.raises(FileNotFoundError, match="pass tokenizer="):
        load_translator(path)


def test_command_line_one_line_per_input(trained, tmp_path):
    """translate.py: sentences as arguments and on stdin, one output line each; a bad line ends with one
    sentence on stderr (exit 2) and nothing on stdout."""
    _, tok, path = trained
    command = [sys.executable, str(ROOT / "experiments" / "translate.py"), f"checkpoint={path}",
               f"tokenizer={tok.model_path}", "decode=blockwise", "k=3", "stats=true"]
    run = subprocess.run([*command, LINES[0], "-"], input="\n".join(LINES[1:]) + "\n", capture_output=True,
                         text=True, cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == bpd.translate(load_translator(path, tok.model_path)[0], tok, LINES)
    assert "k-hat" in run.stderr and "identical to greedy: 100.0%" in run.stderr
    bad = subprocess.run([*command, "the cat", ""], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip() == "error: line 2 is empty; give one sentence per line (remove blank lines)."


def test_translate_decodes_on_the_compiled_path(trained):
    """``engine="compiled"`` (translate.py: ``engine=`` or ``decode.engine=``): the same translations."""
    _, tok, path = trained
    model, _ = load_translator(path, tok.model_path)
    assert bpd.translate(model, tok, LINES[:2], engine="compiled") == bpd.translate(model, tok, LINES[:2])
    with pytest.raises(ValueError, match="use one of eager, static, compiled"):
        bpd.translate(model, tok, LINES[:1], engine="fast")


@pytest.mark.slow
def test_a_second_translate_process_loads_the_compiled_steps(trained, tmp_path):
    """translate.py with the compiled path: the first process builds its step, the second only loads it."""
    _, tok, path = trained
    command = [sys.executable, str(ROOT / "experiments" / "translate.py"), f"checkpoint={path}",
               f"tokenizer={tok.model_path}", "decode.engine=compiled", f"cache_dir={tmp_path}", *LINES[:2]]
    runs = [subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=600) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr
    assert runs[0].stdout == runs[1].stdout == "\n".join(bpd.translate(load_translator(path, tok.model_path)[0],
                                                                       tok, LINES[:2])) + "\n"
    assert "built in 0.0 s" not in runs[0].stderr and "built in 0.0 s" in runs[1].stderr, runs[1].stderr


def test_arguments_split_into_overrides_and_sentences():
    sys.path.insert(0, str(ROOT / "experiments"))
    from translate import split_arguments

    overrides, sentences, stdin = split_arguments(
        ["checkpoint=x.pt", "decode=blockwise", "k=4", "Set x=1 in the file.", "Hello.", "-", "+tokenizer=a",
         "decode.engine=compiled"])
    assert overrides == ["checkpoint=x.pt", "method=blockwise", "k=4", "+tokenizer=a", "engine=compiled"]
    assert sentences == ["Set x=1 in the file.", "Hello."] and stdin


def test_threads_and_defaults_are_typed():
    from bpd.config.translate import TranslateConfig

    cfg = TranslateConfig(checkpoint="x", criterion="topk")
    assert cfg.method_options(("k", "criterion", "criterion_param")) == {"k": 4, "criterion": "topk",
                                                                         "criterion_param": 2.0}
    with pytest.raises(ValueError, match="needs a second model"):
        TranslateConfig(checkpoint="x", method="draft").validate()
    assert torch.get_num_threads() >= 1


def test_any_methods_own_options_reach_translate_from_its_config():
    """``methods.<name>`` holds one decoder's options of every method that takes any, made from the registry: beam
    search's and a tree shape, and a plugin's method's (the toy's ``min_count``) with no edit of ``TranslateConfig``;
    the command line sets them, the chosen method's decoder receives them, its own check refuses a bad one."""
    from hydra import compose, initialize_config_dir

    from bpd.config import BeamOptions, registry
    from bpd.config.methods import MethodOptions
    from bpd.config.translate import TranslateConfig
    from bpd.translator import configured_spec

    beam = TranslateConfig(checkpoint="x", method="beam", methods=MethodOptions(beam=BeamOptions(size=8)))
    assert configured_spec(beam).options.beam == BeamOptions(size=8, alpha=0.6)
    assert configured_spec(TranslateConfig(checkpoint="x", method="tree", methods=MethodOptions(tree="beam4"))).tree \
        == "beam4"
    with pytest.raises(ValueError, match="unknown tree shape 'bush' in methods.tree"):
        TranslateConfig(checkpoint="x", method="tree", methods=MethodOptions(tree="bush")).validate()
    sys.path.insert(0, str(ROOT / "experiments"))
    import _common

    with registry.extended([str(ROOT / "tests" / "toys")]):
        _common.register()
        with initialize_config_dir(config_dir=_common.CONF_DIR, version_base="1.3"):
            cfg = OmegaConf.to_object(compose("translate", overrides=[
                "checkpoint=x", "method=toy_bigram", "k=3", "methods.toy_bigram.min_count=2"]))
        spec = configured_spec(cfg)
        assert (spec.k, spec.options.toy_bigram.min_count) == (3, 2)
        with pytest.raises(ValueError, match="decode=toy_bigram needs a second model beside the checkpoint"):
            cfg.validate()  # its bigram table is built from an evaluation's corpus
    _common.register()


def test_bad_options_and_inputs_name_their_fix(trained, tmp_path):
    """threads=0 and k=0 are refused (0 threads silently meant torch's default), k's advice points the right way,
    the tokenizer hint names the file training writes (spm<task.vocab_size>.model, not the model's piece count),
    and a file that is not UTF-8 is named."""
    from bpd.config.translate import TranslateConfig

    model, tok, path = trained
    with pytest.raises(ValueError, match="threads must be >= 1, or null"):
        TranslateConfig(checkpoint="x", threads=0).validate()
    with pytest.raises(ValueError, match="k must be >= 1"):
        TranslateConfig(checkpoint="x", k=0).validate()
    with pytest.raises(ValueError, match="use k >= 1"):
        blockwise_decode(model, pad_rows([tok.encode(LINES[0])], 0, min_width=1), k=0)
    with pytest.raises(ValueError, match="lower k to at most 3"):
        blockwise_decode(model, pad_rows([tok.encode(LINES[0])], 0, min_width=1), k=4)
    with pytest.raises(FileNotFoundError, match=rf"spm<task.vocab_size>.model .*{model.cfg.vocab_size} pieces") as hint:
        load_translator(path)  # the tokenizer asked for 40 pieces; this little corpus gave fewer
    assert f"spm{model.cfg.vocab_size}.model" not in str(hint.value)
    sys.path.insert(0, str(ROOT / "experiments"))
    from translate import read_sentences

    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("Grüße aus Köln\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"input=.*latin1.txt is not UTF-8 text .*save it as UTF-8"):
        read_sentences(TranslateConfig(checkpoint="x", input=str(latin1)))

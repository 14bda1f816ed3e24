"""Translate your own sentences with a trained model: one translation a line on stdout (docs/translate.md).

    python experiments/translate.py checkpoint=debian_en_de_base "This function returns an empty list."
    python experiments/translate.py checkpoint=debian_en_de_base input=sentences.txt decode=blockwise k=4
    cat sentences.txt | python experiments/translate.py checkpoint=debian_en_de_base -
    python experiments/translate.py checkpoint=debian_en_de_base decode=blockwise k=4 stats=true "..."

Sentences come as bare arguments (anything that is not a ``key=value`` override), from ``input=FILE``, or from
standard input (``-``, or no sentence given while stdin is not a terminal). ``decode`` (or ``method``) names
any registered method that needs only the checkpoint (greedy, naive_greedy, beam, blockwise, tree) with its
options: k, criterion, criterion_param, min_block_size, and its own (``methods.beam.size``, ``methods.tree``).
``engine=compiled`` (or ``decode.engine=compiled``) decodes on the compiled path, whose steps the first run on a
machine builds and later runs load (under ``cache_dir``/compiled). ``stats=true`` also decodes with greedy, batch
by batch beside the chosen decoder, and prints k-hat, rounds and time against greedy on stderr.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import hydra
from _common import CONF_DIR, guarded, start
from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:
    from bpd.config.translate import TranslateConfig

#: A Hydra override (``key=value``, ``+key=value``, ``~key``) or flag; any other argument is a sentence.
OVERRIDE = re.compile(r"^([+~]{0,2}[A-Za-z_][\w.@/-]*(=|$)|-)")
#: Arguments that are Hydra's own flags, not sentences (``--help``, ``--cfg job``, ``-m``).
FLAG = re.compile(r"^-")


def split_arguments(argv: list[str]) -> tuple[list[str], list[str], bool]:
    """Hydra's overrides, the sentences, and whether ``-`` (read standard input) was given."""
    overrides, sentences, stdin = [], [], False
    for arg in argv:
        if arg.startswith("decode="):  # the method, spelled as the other entry points' decode group
            arg = "method=" + arg.removeprefix("decode=")
        elif arg.startswith("decode.engine="):  # the decode path, spelled as the other entry points' option
            arg = "engine=" + arg.removeprefix("decode.engine=")
        if arg == "-":
            stdin = True
        elif FLAG.match(arg) or ("=" in arg and OVERRIDE.match(arg) and " " not in arg.split("=", 1)[0]):
            overrides.append(arg)
        else:
            sentences.append(arg)
    return overrides, sentences, stdin


SENTENCES: list[str] = []
READ_STDIN = False


def read_sentences(cfg: TranslateConfig) -> list[str]:
    """The sentences of the arguments, ``text=``, ``input=`` and standard input, in that order."""
    lines = [*SENTENCES, *cfg.text]
    if cfg.input and cfg.input != "-":
        path = Path(cfg.input)
        if not path.is_file():
            raise FileNotFoundError(f"input={cfg.input} does not exist; give a text file with one sentence a line.")
        try:
            lines += path.read_text(encoding="utf-8-sig").splitlines()
        except UnicodeDecodeError as e:  # the codec's own message names no file
            raise ValueError(f"input={cfg.input} is not UTF-8 text (byte {e.start}: {e.reason}); save it as "
                             "UTF-8, one sentence a line.") from e
    if READ_STDIN or cfg.input == "-" or (not lines and not sys.stdin.isatty()):
        lines += sys.stdin.read().splitlines()
    return lines


def run(cfg: TranslateConfig) -> None:
    import torch

    from bpd.decoding import step_store
    from bpd.decoding.spec import DecodeSpec
    from bpd.translator import configured_spec, decode_texts, encode_texts, load_translator, longest_source

    cfg.validate()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    spec = configured_spec(cfg)
    step_store.use_store(Path(cfg.cache_dir) / "compiled")
    texts = read_sentences(cfg)  # before the model loads: a missing file or no input ends at once
    if not texts:
        raise ValueError("no sentences: give them as arguments, with input=FILE, or on standard input (-).")
    model, tok = load_translator(cfg.checkpoint, cfg.tokenizer, cfg.shipped_dir)
    if spec.rounds and spec.k > model.k:
        heads = f"{model.k - 1} proposal heads (k up to {model.k})" if model.k > 1 else "no proposal heads"
        raise ValueError(f"decode={spec.method} k={spec.k}: {cfg.checkpoint} has {heads}; lower k, or use a "
                         "checkpoint with heads (a heads stage's model), or decode=greedy.")
    sources = encode_texts(tok, texts, longest_source(model, spec.k), cfg.allow_unknown)
    specs = [spec] if not cfg.stats or spec.method == "greedy" else [spec, DecodeSpec("greedy", engine=cfg.engine)]
    with torch.inference_mode():
        if cfg.stats:  # the first calls pay one-off costs (allocations, thread pools): not the decoders' times
            decode_texts(model, tok, sources[:1], specs, 1)
        results = decode_texts(model, tok, sources, specs, cfg.batch_size)
    for line in results[0].texts:
        print(line)
    if cfg.stats:
        print(stats_line(results), file=sys.stderr)
    if spec.path == "compiled":
        from bpd.decoding.engine import engine_for

        e = engine_for(model, "compiled")
        print(f"compiled steps: built in {e.compile_seconds:.1f} s, loaded in {e.load_seconds:.2f} s "
              f"({step_store.store_dir()})", file=sys.stderr)


def stats_line(results) -> str:
    """k-hat, rounds and time of the chosen decoder, against greedy's when it is another."""
    ours = results[0]
    line = (f"{ours.decoder}: {len(ours.tokens)} sentences, {ours.output_tokens} tokens in {sum(ours.rounds)} "
            f"rounds (k-hat {ours.khat:.2f}), {ours.seconds:.2f} s")
    if len(results) > 1:
        greedy = results[1]
        same = sum(a == b for a, b in zip(ours.tokens, greedy.tokens)) / len(greedy.tokens)
        line += (f"; greedy: {greedy.output_tokens} tokens in {sum(greedy.rounds)} rounds, {greedy.seconds:.2f} s; "
                 f"speedup {greedy.seconds / max(ours.seconds, 1e-9):.2f}x (one pass, decoders alternating "
                 f"batch by batch); identical to greedy: {same:.1%}")
    return line


@hydra.main(config_path=CONF_DIR, config_name="translate", version_base="1.3")
def job(cfg: DictConfig) -> None:
    guarded(lambda: run(OmegaConf.to_object(cfg)))


def main() -> None:
    global SENTENCES, READ_STDIN
    args, SENTENCES, READ_STDIN = split_arguments(sys.argv[1:])
    sys.argv = [sys.argv[0], *args]
    start()  # the plugins and schemas, before Hydra composes (importing this module changes nothing)
    job()


if __name__ == "__main__":
    main()

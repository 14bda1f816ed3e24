"""Every shell command the README and docs/ show is checked as written, without the hours it would run.

The commands are the lines of the fenced shell (and plain) blocks of README.md and docs/*.md that start with a
program (``make``, ``python``, ``torchrun``, ...). Each is checked the way its entry point would take it:

* ``python experiments/<entry>.py ...`` (also after ``torchrun`` or in a pipe): Hydra composes the entry point's
  primary config with the overrides, one job per combination of a sweep's values (``-m``), and the entry point's
  own validation runs on it (``ExperimentConfig.validate``, the benchmark's options, translate.py's config), so a
  documented option that is misspelt, moved or refused fails here, not after an hour of training;
* ``python bench/<script>.py --option ...``: the script's argument parser reads the options (the script stops
  there);
* ``make <target> VAR=...``: ``make -n`` expands the target as written, and every entry point command it would run
  is composed as above;
* ``bash <script>``: bash reads the script (``bash -n``).

A placeholder (``<file>.pt``) gets a stand-in word. A sweep composes every value of each swept key at least once.

Other programs (sacrebleu, tmux, pip, ...) are counted as skipped, with the reason. Nothing is run and nothing is
written: the checkout is as clean after this test as before it.
"""

from __future__ import annotations

import functools
import re
import runpy
import shlex
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments"))
import _common  # noqa: E402

_common.register()  # the schemas, as every entry point's start registers them

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
PYTHON = re.compile(r"^(?:\S*/)?python3?$")
#: Programs whose lines are commands, not a block's printed output; those not checked say why.
SKIPPED = {
    "sacrebleu": "scores files a run wrote", "cat": "shell", "cd": "shell", "tmux": "a terminal session",
    "pip": "installs packages", "source": "shell", "wandb": "W&B's own CLI",
    "squeue": "SLURM's own CLI", "git": "git", "sbatch": "SLURM's own CLI", "tar": "shell",
}
CHECKED = ("make", "torchrun", "bash")
#: A placeholder the reader fills in (``<file>.pt``, ``<run_id>``): checked with a stand-in word.
PLACEHOLDER = re.compile(r"<[\w -]+>")
#: Hydra's own flags that take a value (the value is not an override).
VALUE_FLAGS = ("--cfg", "-c", "--package", "-p", "--config-dir", "-cd", "--info", "--experimental-rerun")


@dataclass(frozen=True)
class Command:
    page: str
    line: str


def documented_commands() -> list[Command]:
    """Each command line of the pages' shell and plain blocks (continuations joined, comments dropped)."""
    found = []
    for page in PAGES:
        for lang, body in FENCE.findall(page.read_text(encoding="utf-8")):
            if lang not in ("", "bash", "sh", "console"):
                continue
            for line in body.replace("\\\n", " ").splitlines():
                line = re.sub(r"(^|\s)#.*", "", line).strip()
                words = [w for w in line.split() if not ENV.match(w)]
                if words and (words[0] in SKIPPED or words[0] in CHECKED or PYTHON.match(words[0])):
                    found.append(Command(page.name, line))
    return found


def expand_sweeps(overrides: list[str]) -> list[list[str]]:
    """A multirun's jobs, as many as its longest sweep has values: job i takes each sweep's value i (cycling), so
    every value of every sweep is composed at least once (the whole grid would be the product, and slow)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    choices = []
    for o in OverridesParser.create().parse_overrides(overrides):
        if o.is_sweep_override():
            choices.append([f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()])
        else:
            choices.append([o.input_line])
    n = max(len(c) for c in choices) if choices else 1
    return [[c[i % len(c)] for c in choices] for i in range(n)]


def compose_entry(script: Path, args: list[str]) -> int:
    """Compose ``experiments/<script>`` with ``args`` as its entry point would (every job of a sweep) and run its
    own validation; the number of jobs composed."""
    name = re.search(r'config_name="(\w+)"', script.read_text(encoding="utf-8")).group(1)
    if script.stem == "translate":
        from translate import split_arguments

        args = split_arguments(args)[0]
    overrides, skip = [], False
    for a in args:
        if skip or a in VALUE_FLAGS:
            skip = not skip and a in VALUE_FLAGS
            continue
        if a.startswith(("--config-name=", "-cn=")):
            name = a.split("=", 1)[1]
        # Hydra's flags, and Hydra's own settings (launcher, sweep folders): not the job's config.
        elif not a.startswith(("-", "hydra/", "hydra.")):
            overrides.append(a)
    jobs = expand_sweeps(overrides)  # (a moved or misspelt option: Hydra refuses it when composing)
    for job in jobs:
        compose_job(name, tuple(job))
    return len(jobs)


@functools.cache
def compose_job(name: str, job: tuple[str, ...]) -> None:
    """One job of an entry point composed and validated (once: pages and make targets repeat jobs)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    for group in _common.OPTIONAL_GROUPS:
        for o in job:
            if o.startswith(f"{group}="):
                assert (REPO / "conf" / group / f"{o.split('=', 1)[1]}.yaml").is_file(), f"no {o}"
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(name, overrides=list(job))
    if name == "translate":
        OmegaConf.to_object(cfg).validate()
        return
    _, entry = _common.to_configs(cfg)
    if hasattr(entry, "bench"):
        entry.bench.validate()


class Parsed(Exception):
    """Raised in place of a script's work once its argument parser has read the options."""


def parse_script(script: Path, args: list[str]) -> None:
    """Run ``script`` only as far as its argument parser: the documented options must parse."""
    import argparse

    real = argparse.ArgumentParser.parse_args

    def parse_and_stop(self, argv=None, namespace=None):
        real(self, argv, namespace)
        raise Parsed

    with mock.patch.object(argparse.ArgumentParser, "parse_args", parse_and_stop), \
            mock.patch.object(sys, "argv", [str(script), *args]):
        with pytest.raises(Parsed):
            runpy.run_path(str(script), run_name="__main__")


def check_python(words: list[str]) -> str:
    """Compose or parse one ``python ...`` command; what was done, or why nothing was."""
    if words[1] == "-m" or words[1] == "-c":
        return "skip: a module or inline code, not a script of this repository"
    script = REPO / words[1]
    assert script.is_file(), f"{words[1]} does not exist"
    if script.parent.name == "experiments":
        compose_entry(script, words[2:])
        return "composed"
    if "parse_args" not in script.read_text(encoding="utf-8"):
        return "skip: a script without options would run whole"
    parse_script(script, words[2:])
    return "parsed"


def check_make(words: list[str]) -> str:
    """``make -n`` as written, and every entry point command the target would run composed."""
    out = subprocess.run(["make", "-n", *words[1:]], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for line in out.stdout.replace("\\\n", " ").splitlines():
        found = re.search(r"(?:^|\s)(\S*python3?)\s+((?:experiments|bench|analysis)/\S+\.py)(.*)", line)
        if found:
            check_python(["python", found.group(2), *shlex.split(found.group(3))])
    return "composed"


def check(command: Command) -> str:
    """The check one documented command gets: composed / parsed, or 'skip: why'."""
    results = []
    for part in re.split(r"\s*(?:\|\||&&|\||;)\s*", PLACEHOLDER.sub("x", command.line)):
        try:
            words = [w for w in shlex.split(part) if not ENV.match(w)]
        except ValueError:
            return "skip: not shell syntax"
        if not words:
            continue
        if words[0] == "torchrun":
            words = ["python", *words[next(i for i, w in enumerate(words) if w.endswith(".py")):]]
        if words[0] == "make":
            results.append(check_make(words))
        elif words[0] == "bash":  # the script exists and bash reads it (bash -n: syntax only)
            script = REPO / words[1]
            assert script.is_file(), f"{words[1]} does not exist"
            assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0, words[1]
            results.append("parsed")
        elif PYTHON.match(words[0]) and len(words) > 1:
            results.append(check_python(words))
        elif words[0] in SKIPPED:
            results.append(f"skip: {SKIPPED[words[0]]}")
    done = [r for r in results if not r.startswith("skip")]
    return done[0] if done else (results[0] if results else "skip: empty")


def check_all(commands: list[Command]) -> tuple[Counter, list[str]]:
    """Each command's outcome counted, and every failure with its page, line and error."""
    outcomes, failures = Counter(), []
    for c in commands:
        try:
            outcomes[check(c)] += 1
        except (Exception, SystemExit) as e:  # noqa: BLE001 (each failure is named in the assertion)
            failures.append(f"{c.page}: {c.line}\n    {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return outcomes, failures


def test_the_readmes_commands_compose():
    """The README's own commands (the sweep among them), in the quick suite; every page's: below (slow)."""
    commands = [c for c in documented_commands() if c.page == "README.md"]
    assert len(commands) >= 8
    outcomes, failures = check_all(commands)
    assert not failures, "README commands that do not compose:\n" + "\n".join(failures)
    assert not any(r.startswith("skip") for r in outcomes), outcomes


@pytest.mark.slow
def test_every_documented_command_composes(capsys):
    before = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
    commands = documented_commands()
    assert len(commands) > 50  # the pages' commands were found
    outcomes, failures = check_all(commands)
    checked = sum(n for r, n in outcomes.items() if not r.startswith("skip"))
    with capsys.disabled():
        print(f"\ndocumented commands: {len(commands)}; checked {checked} ("
              + ", ".join(f"{n} {r}" for r, n in sorted(outcomes.items())) + f"), failed {len(failures)}")
    assert not failures, "documented commands that do not compose:\n" + "\n".join(failures)
    assert checked >= 0.9 * len(commands)
    after = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
    assert after == before, "checking the documented commands changed the checkout"

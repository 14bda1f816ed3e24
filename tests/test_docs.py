"""The docs name only what exists, and stay reference: every `make` target and config key that docs/ and the
README name in code exists (as the README table test does for its table), and docs/ pages hold no dated
notebook entries, machine nicknames or commit hashes outside one provenance paragraph per example.

The example tables of reproduction.md and benchmark.md are checked number by number against their rows.
Torch-free: reads the Makefile, ``conf/``, the typed configs of ``bpd.config`` (the base layer) and rows.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path

import pytest

from bpd.config import BenchConfig, ExperimentConfig, ImageTaskConfig, TranslationTaskConfig

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [REPO / "README.md", *DOCS]
MAX_PAGE_LINES = 300

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
MAKE = re.compile(r"(?:^|[\s;&(|])make\s+((?:[A-Z_]+=\S*\s+)*)([a-z][\w-]*)")
GROUP_PICK = re.compile(r"(?<![\w./$-])(experiment|setting|task|model|draft|logger|train|decode|hydra/launcher)"
                        r"=([\w,]+)")
SECTIONS = {f.name for f in dataclasses.fields(ExperimentConfig)
            if f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory())}
SECTIONS |= {"task", "bench"}  # task: a translation or image config; bench: experiments/bench.py's section
KEY = re.compile(r"(?<![\w./$-])(" + "|".join(sorted(SECTIONS, key=len, reverse=True)) + r")((?:\.\w+)+)(?![\w(*])")
#: Python attributes the README's API section names in prose, not options.
ATTRIBUTES = {"model.pad_id"}
NOT_KEYS = {"py", "sh", "yaml", "md", "json", "jsonl", "pt", "txt", "npz", "model"}  # file names, not options
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
NICKNAME = re.compile(r"\bCPU [12]\b|\bXeon VM\b|\bEPYC VM\b|\bthe (?:earlier |first )?VM\b")
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}(?:-dirty)?\b")
#: A measured ratio (a speedup, 1.06x): written with two decimals; a configured one (0.3x a rate) has fewer.
RATIO = re.compile(r"\b\d+\.\d\dx\b")
#: docs/ as a whole: reference stays short, findings go to results/.
MAX_DOCS_LINES = 1800


def code_of(text: str) -> list[str]:
    """The code a page shows: shell and plain fenced blocks, and inline code spans outside any block (Python
    blocks are left out: ``model.eval()`` is an object, not an option)."""
    shell = [body for lang, body in FENCE.findall(text) if lang in ("", "bash", "sh", "console")]
    out = [re.sub(r"(^|\s)#.*", "", body) for body in shell]  # a shell comment is prose
    out += INLINE.findall(FENCE.sub("", text))
    return out


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-z][\w-]*)\s*:(?!=)", text, re.M))


def _walk_ok(roots: list[type], path: list[str]) -> bool:
    for cls in roots:
        node: typing.Any = cls
        ok = True
        for name in path:
            if not dataclasses.is_dataclass(node):
                break  # below a list / dict / scalar option: its own values, not ours to check
            if name not in {f.name for f in dataclasses.fields(node)}:
                ok = False
                break
            node = typing.get_type_hints(node).get(name)
        if ok:
            return True
    return False


def references(page: Path) -> tuple[set[str], set[str], set[tuple[str, str]]]:
    """The make targets, config keys and (group, member) picks a page names in its code."""
    targets, keys, picks = set(), set(), set()
    for code in code_of(page.read_text(encoding="utf-8")):
        targets |= {m.group(2) for m in MAKE.finditer(code)}
        for m in KEY.finditer(code):
            key = m.group(1) + m.group(2)
            if key.rsplit(".", 1)[-1] not in NOT_KEYS and key not in ATTRIBUTES:
                keys.add(key)
        for group, members in GROUP_PICK.findall(code):
            picks |= {(group, member) for member in members.split(",") if member}
    return targets, keys, picks


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_make_target_and_option_named_exists(page):
    targets, keys, picks = references(page)
    missing_targets = sorted(targets - make_targets())
    assert not missing_targets, f"{page.name} names make targets the Makefile lacks: {missing_targets}"
    unknown = sorted(k for k in keys if not known(k))
    assert not unknown, f"{page.name} names config keys that bpd/config lacks: {unknown}"
    no_file = sorted(f"{g}={m}" for g, m in picks if not (REPO / "conf" / g / f"{m}.yaml").is_file())
    assert not no_file, f"{page.name} picks config group members with no file in conf/: {no_file}"


def known(key: str) -> bool:
    """Whether ``section.field[.field...]`` names an option of the typed configs."""
    return _walk_ok(_roots(key), key.split(".")[1:])


def _roots(key: str) -> list[type]:
    section = key.split(".")[0]
    if section == "task":
        return [TranslationTaskConfig, ImageTaskConfig]
    if section == "bench":
        return [BenchConfig]
    field = next(f for f in dataclasses.fields(ExperimentConfig) if f.name == section)
    return [type(field.default_factory())]


def paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", FENCE.sub("", text)) if p.strip()]


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_docs_are_reference_not_a_notebook(page):
    text = page.read_text(encoding="utf-8")
    n_lines = len(text.splitlines())
    assert n_lines <= MAX_PAGE_LINES, f"{page.name}: {n_lines} lines, over {MAX_PAGE_LINES} (findings go to results/)"
    examples = [p for p in paragraphs(text) if p.lstrip().startswith("Example:")]
    assert len(examples) <= 1, f"{page.name}: {len(examples)} example paragraphs (one example table a page)"
    for p in paragraphs(text):
        if p in examples:
            continue
        assert not DATE.search(p), f"{page.name}: a date outside the example's provenance: {DATE.search(p)[0]!r}"
        assert not NICKNAME.search(p), f"{page.name}: a machine nickname: {NICKNAME.search(p)[0]!r} (name the CPU)"
    assert not COMMIT.search(text), f"{page.name}: a commit hash {COMMIT.search(text)[0]!r} (provenance is in results/)"


def test_docs_are_short_and_measured_ratios_stay_in_the_example():
    """docs/ holds at most ``MAX_DOCS_LINES`` lines, and a measured ratio only in a page's one example table (a
    fenced printout or one markdown table): findings with their figures are results/ pages, which docs link."""
    total = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in DOCS)
    assert total <= MAX_DOCS_LINES, f"docs/ has {total} lines, over {MAX_DOCS_LINES}: move findings to results/"
    for page in DOCS:
        with_ratios = [p for p in paragraphs(page.read_text(encoding="utf-8")) if RATIO.search(p)]
        prose = [p for p in with_ratios if not p.lstrip().startswith("|")]
        assert not prose, f"{page.name}: a measured ratio {RATIO.search(prose[0])[0]!r} in prose (results/ holds it)"
        assert len(with_ratios) <= 1, f"{page.name}: measured ratios in {len(with_ratios)} tables (one example)"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_an_example_names_rows_that_exist(page):
    for p in paragraphs(page.read_text(encoding="utf-8")):
        if not p.lstrip().startswith("Example:"):
            continue
        paths = [s for s in INLINE.findall(p) if s.startswith(("results/", "checkpoints/"))]
        assert paths, f"{page.name}: its example names no rows (results/... or checkpoints/...)"
        for s in paths:
            assert list(REPO.glob(s)), f"{page.name}: its example's rows {s!r} do not exist"
        assert DATE.search(p), f"{page.name}: its example names no date"


def test_the_checks_catch_what_they_are_for(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("Run `make benchh` with `heads.arc=paper`, `experiment=demoo`, `task.debian_*`, "
                    "`heads.set_proposal_precision(\"int8\")`.\n\n```bash\nmake bench  # make waits\n```\n\n"
                    "```python\nmodel.eval()\n```\n", encoding="utf-8")
    targets, keys, picks = references(page)
    assert targets == {"benchh", "bench"} and "benchh" not in make_targets()
    assert keys == {"heads.arc"} and not known("heads.arc")
    assert all(map(known, ("heads.arch", "decode.ks", "bench.n_examples", "task.corpora.debian.fetch",
                           "train.max_steps")))
    assert picks == {("experiment", "demoo")}
    assert NICKNAME.search("ran on CPU 2") and COMMIT.search("at b6e4190 on") and not COMMIT.search("at 1,200 steps")


def _rows(path: str) -> list[dict]:
    return [json.loads(line) for line in (REPO / path).read_text(encoding="utf-8").splitlines() if line.strip()]


def _latest(rows: list[dict]) -> dict:
    return max(rows, key=lambda r: (r.get("n_examples") or 0, r.get("time") or ""))


def test_reproduction_example_is_the_rows():
    """docs/reproduction.md's Table 1 example: every BLEU, k̂ and speedup is what the rows hold."""
    text = (REPO / "docs" / "reproduction.md").read_text(encoding="utf-8")
    rows = [r for r in _rows("results/table1_debian/rows.jsonl") if r.get("split") == "test"
            and r.get("method") == "blockwise" and r.get("criterion") == "exact"
            and (r.get("min_block_size") or 1) == 1]
    cells = re.findall(r"^\| (\w+) \| ([\d.]+) \| ([\d.]+) / ([\d.]+) \| ([\d.]+)x \|", text, re.M)
    assert len(cells) == 6
    for setting, bleu, k4, k10, speedup in cells:
        r4 = _latest([r for r in rows if r["setting"] == setting and r["k"] == 4])
        r10 = _latest([r for r in rows if r["setting"] == setting and r["k"] == 10])
        assert (f"{r4['bleu']:.2f}", f"{r4['mean_block_size']:.2f}", f"{r10['mean_block_size']:.2f}",
                f"{r4['speedup']:.2f}") == (bleu, k4, k10, speedup), setting


def test_benchmark_example_is_the_rows():
    """docs/benchmark.md's printout: each decoder's k̂, tokens/s and paired speedup are what its rows hold."""
    text = (REPO / "docs" / "benchmark.md").read_text(encoding="utf-8")
    command = "python experiments/bench.py experiment=demo_debian bench.ks=[2,4,6] bench.batch_sizes=[1]"
    (day,) = re.findall(r"Example: `make bench`'s batch-1 part, (\d{4}-\d\d-\d\d)", text)
    rows = [r for r in _rows("results/bench/rows.jsonl")
            if r.get("command") == command and r.get("time", "").startswith(day)]
    lines = re.findall(r"^attend\s+(eager|compiled)\s+1 (\w+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)x \[([\d.]+),([\d.]+)\]",
                       text, re.M)
    assert len(lines) == 15
    for engine, decoder, khat, toks, sp, lo, hi in lines:
        (r,) = [r for r in rows if r["decoder"] == decoder and r["engine"] == engine]
        assert (f"{r['mean_block_size']:.2f}", f"{r['tokens_per_s']:.0f}", f"{r['speedup']:.2f}",
                f"{r['speedup_ci_low']:.2f}", f"{r['speedup_ci_high']:.2f}") == (khat, toks, sp, lo, hi), decoder


ROUTINE = ("demo", "demo-train", "demo-ding", "demo-sr", "demo-sr-faces", "bench", "export", "figures")


@pytest.mark.parametrize("target", ROUTINE)
def test_routine_targets_write_under_outputs_unless_recorded(target):
    """A routine make target leaves a clean checkout clean: its rows, report and figures go under outputs/results/,
    and into results/ only with RECORD=1 (what `make -n` would run, read without running it)."""
    import subprocess

    def commands(*extra: str) -> list[str]:
        out = subprocess.run(["make", "-n", target, *extra], cwd=REPO, capture_output=True, text=True, check=True)
        return [c for c in out.stdout.replace("\\\n", " ").splitlines()
                if "experiments/" in c or "analysis/" in c]

    plain, recorded = commands(), commands("RECORD=1")
    assert plain and all("outputs/results/" in c for c in plain), plain
    assert recorded and not any("outputs/results" in c for c in recorded), recorded

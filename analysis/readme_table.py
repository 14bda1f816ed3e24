"""The README's demo table, printed from committed rows so it cannot drift from them.

The README holds one block between ``<!-- demo-table: ROWS -->`` and ``<!-- /demo-table -->``: ROWS names the
rows file, and the block is one run in it (its id and time head the block) printed exactly as the demo prints it
(``format_table``), under that run's own command. ``python analysis/readme_table.py`` rewrites the block from the
newest run (``make figures`` runs it); ``--check`` only compares the block with the run it names, so a demo run
appended since (``make demo`` on a user's machine) leaves the check green, and ``tests/test_readme_table.py`` fails
when README and rows disagree.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO_ROOT))

from analysis.load import DamagedRows, read_jsonl, refuse_damaged  # noqa: E402
from bpd.evaluate import format_table  # noqa: E402

README = REPO_ROOT / "README.md"
BLOCK = re.compile(r"(<!-- demo-table: (?P<rows>\S+) -->\n)(?P<body>.*?)(<!-- /demo-table -->)", re.S)
NAMED = re.compile(r"Run `(?P<run_id>[^`]+)` of `[^`]+` \((?P<time>\d{4}-\d\d-\d\d \d\d:\d\d),")


def read(rows_path: Path, accept_damaged: bool = False) -> list[dict[str, Any]]:
    """The rows of ``rows_path``; a line that does not parse is refused naming it (``DamagedRows``), or with
    ``accept_damaged`` left out and named."""
    skipped: list[str] = []
    rows = read_jsonl(rows_path, skipped)
    refuse_damaged(skipped, accept_damaged)
    if not rows:
        raise SystemExit(f"{rows_path} holds no rows: run the demo first (make demo).")
    return rows


def newest_run(rows_path: Path, accept_damaged: bool = False) -> list[dict[str, Any]]:
    """The rows of the run appended last to ``rows_path``, in file order: a run's rows are written together and
    share its ``time``; the same run id redone later (another commit, ``decode.skip_existing=false``) is another
    run, not more rows of this one."""
    rows = read(rows_path, accept_damaged)
    last = (rows[-1]["run_id"], rows[-1]["time"])
    return [r for r in rows if (r["run_id"], r["time"]) == last]


def named_run(rows_path: Path, body: str, accept_damaged: bool = False) -> list[dict[str, Any]]:
    """The rows of the run a block names (its id and its time to the minute), in file order; none when the block
    names no run or the rows hold no such run."""
    m = NAMED.search(body)
    if m is None:
        return []
    return [r for r in read(rows_path, accept_damaged)
            if r["run_id"] == m["run_id"] and r["time"].replace("T", " ")[:16] == m["time"]]


def render(rows_path: Path, run: list[dict[str, Any]]) -> str:
    """The block's body: where the rows come from, the command that wrote them, and the table it printed."""
    first = run[0]
    rel = rows_path.relative_to(REPO_ROOT) if rows_path.is_absolute() else rows_path
    return (
        f"Run `{first['run_id']}` of `{rel}` ({first['time'].replace('T', ' ')[:16]}, {first['device']}), written by\n"
        f"`{first['command']}`:\n\n```\n{format_table(run)}\n```\n"
    )


def block(text: str) -> re.Match[str]:
    m = BLOCK.search(text)
    if m is None:
        raise SystemExit("README.md has no '<!-- demo-table: ROWS -->' ... '<!-- /demo-table -->' block.")
    return m


def updated(text: str, accept_damaged: bool = False) -> str:
    """``text`` with its block rewritten from the newest run of its rows."""
    m = block(text)
    rows_path = REPO_ROOT / m["rows"]
    return text[: m.start("body")] + render(rows_path, newest_run(rows_path, accept_damaged)) + text[m.end("body"):]


def agrees(text: str, accept_damaged: bool = False) -> bool:
    """Whether the block is the run it names, printed from its rows as the demo prints it."""
    m = block(text)
    rows_path = REPO_ROOT / m["rows"]
    run = named_run(rows_path, m["body"], accept_damaged)
    return bool(run) and render(rows_path, run) == m["body"]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 when the README's table is not the run it names")
    p.add_argument("--readme", type=Path, default=README)
    p.add_argument("--accept-damaged", action="store_true", help="leave out (and name) rows lines that do not parse")
    args = p.parse_args(argv)
    text = args.readme.read_text(encoding="utf-8")
    try:
        return _run(args, text)
    except DamagedRows as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, text: str) -> int:
    if args.check:
        if not agrees(text, args.accept_damaged):
            print(f"{args.readme}: the demo table differs from its rows; run python analysis/readme_table.py")
            return 1
        return 0
    new = updated(text, args.accept_damaged)
    if new != text:
        args.readme.write_text(new, encoding="utf-8")
    print(f"{args.readme}: demo table is the newest run of its rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

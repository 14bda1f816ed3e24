"""The README's demo table, printed from committed rows so it cannot drift from them.

The README holds one block between ``<!-- demo-table: ROWS -->`` and ``<!-- /demo-table -->``: ROWS names the
rows file, and the block is the newest run in it printed exactly as the demo prints it (``format_table``), under
that run's own command. ``python analysis/readme_table.py`` rewrites the block (``make figures`` runs it);
``--check`` only compares, and ``tests/test_readme_table.py`` fails when README and rows disagree.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO_ROOT))

from bpd.evaluate import format_table  # noqa: E402

README = REPO_ROOT / "README.md"
BLOCK = re.compile(r"(<!-- demo-table: (?P<rows>\S+) -->\n)(?P<body>.*?)(<!-- /demo-table -->)", re.S)


def newest_run(rows_path: Path) -> list[dict[str, Any]]:
    """The rows of the run appended last to ``rows_path``, in file order: a run's rows are written together and
    share its ``time``; the same run id redone later (another commit, ``decode.skip_existing=false``) is another
    run, not more rows of this one."""
    rows = [json.loads(line) for line in rows_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows:
        raise SystemExit(f"{rows_path} holds no rows: run the demo first (make demo).")
    last = (rows[-1]["run_id"], rows[-1]["time"])
    return [r for r in rows if (r["run_id"], r["time"]) == last]


def render(rows_path: Path) -> str:
    """The block's body: where the rows come from, the command that wrote them, and the table it printed."""
    run = newest_run(rows_path)
    first = run[0]
    rel = rows_path.relative_to(REPO_ROOT) if rows_path.is_absolute() else rows_path
    return (
        f"Run `{first['run_id']}` of `{rel}` ({first['time'].replace('T', ' ')[:16]}, {first['device']}), written by\n"
        f"`{first['command']}`:\n\n```\n{format_table(run)}\n```\n"
    )


def updated(text: str) -> str:
    m = BLOCK.search(text)
    if m is None:
        raise SystemExit("README.md has no '<!-- demo-table: ROWS -->' ... '<!-- /demo-table -->' block.")
    body = render(REPO_ROOT / m["rows"])
    return text[: m.start("body")] + body + text[m.end("body"):]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 when the README's table is not its rows' newest run")
    p.add_argument("--readme", type=Path, default=README)
    args = p.parse_args(argv)
    text = args.readme.read_text(encoding="utf-8")
    new = updated(text)
    if args.check:
        if new != text:
            print(f"{args.readme}: the demo table differs from its rows; run python analysis/readme_table.py")
            return 1
        return 0
    if new != text:
        args.readme.write_text(new, encoding="utf-8")
    print(f"{args.readme}: demo table is the newest run of its rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

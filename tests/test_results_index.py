"""results/README.md is the index analysis/results_index.py makes from each folder's opening lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis import results_index

MAX_INDEX_LINES = 100


def test_the_committed_index_is_the_generated_one_and_fits_a_screen():
    text = results_index.index()
    assert (results_index.RESULTS / "README.md").read_text(encoding="utf-8") == text, \
        "results/README.md is stale: run python analysis/results_index.py"
    assert len(text.splitlines()) <= MAX_INDEX_LINES


def test_every_folder_is_indexed_with_its_rows(tmp_path: Path):
    (tmp_path / "demo" / "outputs").mkdir(parents=True)
    (tmp_path / "demo" / "README.md").write_text("# Does it work?\nYes: 1.1x.\n\nHow it ran.\n")
    (tmp_path / "demo" / "rows.jsonl").write_text("{}\n")
    (tmp_path / "figures").mkdir()
    (tmp_path / "studies" / "logs_only").mkdir(parents=True)
    (tmp_path / "studies" / "logs_only" / "README.md").write_text("# How was it made?\nOn a GPU.\n")
    (tmp_path / "studies" / "logs_only" / "run.log").write_text("")
    text = results_index.index(tmp_path)
    assert "- [`demo/`](demo/README.md) Does it work? **Yes: 1.1x.** Rows: `rows.jsonl`." in text
    assert "- [`studies/logs_only/`](studies/logs_only/README.md) How was it made? **On a GPU.** Rows: `run.log` " \
           "(no rows)." in text
    assert "figures" not in text.split("## The paper")[1]


@pytest.mark.parametrize("readme, fix", [(None, "has no README.md"), ("Notes\n\nmore", "must open with"),
                                         ("# A question?\n\nThe answer", "must open with")])
def test_a_folder_without_its_question_and_answer_is_refused_with_the_fix(tmp_path: Path, readme, fix):
    (tmp_path / "study").mkdir()
    if readme is not None:
        (tmp_path / "study" / "README.md").write_text(readme)
    with pytest.raises(ValueError, match=fix):
        results_index.index(tmp_path)

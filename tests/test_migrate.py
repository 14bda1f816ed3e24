"""experiments/migrate.py: schema 1 -> 2 for rows, their output folders and cache files, exactly where a
configuration reproduces the old name, once, and never over an existing file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bpd.config import cache_key
from bpd.evaluate import run_id

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import migrate  # noqa: E402

DEMO = "python experiments/run.py experiment=demo"


def test_rows_get_their_configs_new_ids_and_folders_once(tmp_path, capsys):
    (cfg,) = migrate.configs(DEMO)
    about = (cfg.decode, cfg.task.name, cfg.device)
    old = migrate.v1_run_id(*about, "heads_x.pt")
    folder = tmp_path / "results" / "demo"
    (folder / "outputs" / old).mkdir(parents=True)
    (folder / "outputs" / old / "greedy.hyp.txt").write_text("hallo\n")
    rows = [{"run_id": old, "model": "heads_x.pt", "command": DEMO, "decoder": "greedy",
             "hyp_file": f"results/demo/outputs/{old}/greedy.hyp.txt"},
            {"run_id": "0000000000", "model": "heads_x.pt", "command": DEMO, "decoder": "greedy", "engine": "static"}]
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    migrate.migrate_rows(tmp_path / "results", None, dry_run=False)
    got = [json.loads(x) for x in (folder / "rows.jsonl").read_text().splitlines()]
    new = run_id(*about, Path("heads_x.pt"))
    assert got[0]["run_id"] == new and got[0]["run_id_v1"] == old and got[0]["schema"] == 2
    assert got[0]["hyp_file"] == f"results/demo/outputs/{new}/greedy.hyp.txt"
    assert (folder / "outputs" / new / "greedy.hyp.txt").exists() and not (folder / "outputs" / old).exists()
    assert (got[0]["engine"], got[0]["proposal_precision"]) == ("eager", "float32")  # what older code decoded with
    # An id no configuration reproduces gets one derived from it; a column a row has is kept.
    assert got[1]["run_id"] == cache_key("schema 1", "0000000000") and got[1]["engine"] == "static"
    before = (folder / "rows.jsonl").read_text()
    migrate.migrate_rows(tmp_path / "results", None, dry_run=False)
    assert (folder / "rows.jsonl").read_text() == before


def test_cache_files_are_renamed_by_their_stem_once_and_never_over_a_file(tmp_path, capsys):
    (cfg,) = migrate.configs(DEMO)
    names = migrate.renames(cfg, None)
    old, new = next((o, n) for o, n in names.items() if o.startswith("heads_"))
    models = tmp_path / "models"
    models.mkdir()
    for suffix in (".pt", ".state.pt"):
        (models / f"{old}{suffix}").write_text(suffix)
    migrate.migrate_cache(tmp_path, [DEMO], dry_run=True)
    assert f"models/{old}.state.pt -> {new}.state.pt" in capsys.readouterr().out
    assert (models / f"{old}.pt").exists()
    migrate.migrate_cache(tmp_path, [DEMO], dry_run=False)
    assert sorted(p.name for p in models.iterdir()) == [f"{new}.pt", f"{new}.state.pt"]
    migrate.migrate_cache(tmp_path, [DEMO], dry_run=False)  # nothing left to rename
    assert sorted(p.name for p in models.iterdir()) == [f"{new}.pt", f"{new}.state.pt"]
    (models / f"{old}.pt").write_text("an older copy")
    with pytest.raises(SystemExit, match="already exists"):
        migrate.migrate_cache(tmp_path, [DEMO], dry_run=False)


def test_rows_written_now_are_left_alone(tmp_path):
    """``append_rows`` stamps the schema a row's ids were made under, so a later migration does not take a row
    written after the last one for a schema-1 row (and rename its run id)."""
    from bpd.tracking import append_rows

    folder = tmp_path / "results" / "demo"
    append_rows(folder / "rows.jsonl", [{"run_id": "abcdef0123", "model": "heads_x.pt", "command": DEMO,
                                         "decoder": "greedy"}])
    before = (folder / "rows.jsonl").read_text()
    migrate.migrate_rows(tmp_path / "results", None, dry_run=False)
    assert (folder / "rows.jsonl").read_text() == before and json.loads(before)["schema"] == 2

"""`make bench-scale`: what a blockwise round costs against a greedy step, from the demo's size to the paper's,
and the speedup the paper's accepted block sizes would buy at each (``bpd/bench/cost_model.py``).

For every model preset (tiny, small, transformer_base, transformer_big; random weights: timing does not
depend on what the weights learned), batch size, dtype, proposal vocabulary (the whole vocabulary, or the
1,000 most frequent tokens) and round design (``chain``: today's decoder; ``combined``: the paper's
all-positions pass), it times t_1 and t_k for k = 2, 4, 8, 10 round-robin, splits the chain's round into
decoder layers, scoring and proposals, and predicts speedup = k_hat * t_1 / t_k from the paper's k_hat
(Table 1, Both, exact). Rows go to results/bench-scale/rows.jsonl; the table is printed and plotted
(results/figures/bench_scale.png).

    python bench/bench_scale.py                                  # CPU: the whole grid (~20 min on 2 cores)
    python bench/bench_scale.py --device cuda                    # on a GPU (bench/gpu.sh runs it)
    python bench/bench_scale.py --quick                          # a one-minute plumbing check
"""

from __future__ import annotations

import argparse
import csv
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bpd.bench.cost_model import DESIGNS, predicted_speedup, repeats_for, round_costs  # noqa: E402
from bpd.config import ModelConfig  # noqa: E402
from bpd.models import build_translation_model  # noqa: E402
from bpd.tracking import append_rows, device_name, git_sha, read_rows  # noqa: E402

PRESETS = {  # sizes as conf/model/*.yaml, with the vocabulary each is used with
    "tiny": (ModelConfig("tiny", 128, 4, 512, 2, 2), 4000),
    "small": (ModelConfig("small", 256, 4, 1024, 3, 3), 8000),
    "transformer_base": (ModelConfig("transformer_base", 512, 8, 2048, 6, 6), 32000),
    "transformer_big": (ModelConfig("transformer_big", 1024, 16, 4096, 6, 6), 32000),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def paper_khat() -> dict[int, float]:
    """The paper's mean accepted block size per k: Table 1, Both (distilled data, fine-tuned), exact."""
    with open(ROOT / "analysis" / "paper_reference.csv") as f:
        return {int(r["k"]): float(r["mean_block_size"]) for r in csv.DictReader(f)
                if r["table"] == "table1" and r["setting"] == "both" and r["criterion"] == "exact"}


def measure(preset: str, batch: int, dtype: str, arch: str, proposal_vocab: int | None, ks: list[int],
            device: torch.device, src_len: int, budget_s: float) -> list[dict]:
    cfg, vocab = PRESETS[preset]
    model = build_translation_model(vocab, max(ks), cfg, seed=0, heads_arch=arch, identity_p1=True)
    model = model.to(device=device, dtype=DTYPES[dtype]).eval()
    if proposal_vocab:
        model.heads.set_proposal_vocab(torch.arange(3, 3 + proposal_vocab))
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, vocab, (batch, src_len), generator=g).to(device)
    reps = repeats_for(model, src, budget_s)
    c = round_costs(model, src, ks, reps)
    khat = paper_khat()
    params = sum(p.numel() for p in model.parameters())
    rows = []
    for k in ks:
        for design in DESIGNS:
            tk = c[f"{design}{k}"]
            row = {
                "preset": preset, "parameters": params, "vocab": vocab, "batch_size": batch, "dtype": dtype,
                "heads_arch": arch, "proposal_vocab": proposal_vocab, "k": k, "design": design,
                "t1_ms": c["t1"], "tk_ms": tk, "step_cost_ratio": tk / c["t1"], "repeats": reps,
                "paper_khat": khat.get(k), "predicted_speedup": predicted_speedup(khat[k], c["t1"], tk)
                if k in khat else None,
            }
            if design == "chain":
                d1 = c["d1"]
                row.update({"decoder_ms": c[f"d{k}"], "propose_ms": c[f"p{k}"],
                            "scoring_ms": c[f"part_t{k}"] - c[f"d{k}"] - c[f"p{k}"],
                            "greedy_decoder_ms": d1, "greedy_scoring_ms": c["part_t1"] - d1,
                            "decoder_ratio": c[f"d{k}"] / d1})
            rows.append(row)
    return rows


def latest(rows: list[dict]) -> list[dict]:
    """The newest row of each measured configuration on the newest row's device (runs append to one file)."""
    if not rows:
        return []
    device = max(rows, key=lambda r: r["time"])["device"]
    out: dict[tuple, dict] = {}
    for r in sorted((r for r in rows if r["device"] == device), key=lambda r: r["time"]):
        out[(r["preset"], r["batch_size"], r["dtype"], r["heads_arch"], r["proposal_vocab"], r["k"], r["design"])] = r
    return list(out.values())


def plot(rows: list[dict], out: Path) -> None:
    """Predicted speedup against k at batch 1 (Medusa heads), one panel per round design and dtype measured:
    solid the whole vocabulary as proposal vocabulary, dashed the 1,000 most frequent tokens."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dtypes = [d for d in DTYPES if any(r["dtype"] == d for r in rows)]
    fig, axes = plt.subplots(len(dtypes), len(DESIGNS), figsize=(10, 3.6 * len(dtypes)), sharey=True, squeeze=False)
    for row_axes, dtype in zip(axes, dtypes):
        for ax, design in zip(row_axes, DESIGNS):
            for i, preset in enumerate(PRESETS):
                for pv, ls in ((None, "-"), (1000, "--")):
                    sel = sorted((r for r in rows if r["preset"] == preset and r["design"] == design
                                  and r["batch_size"] == 1 and r["dtype"] == dtype and r["proposal_vocab"] == pv
                                  and r["predicted_speedup"] and r["heads_arch"] == "medusa"), key=lambda r: r["k"])
                    if sel:
                        ax.plot([r["k"] for r in sel], [r["predicted_speedup"] for r in sel], marker="o", ls=ls,
                                color=f"C{i}", label=preset if pv is None else None)
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_title(f"{design} round, batch 1, {dtype}", fontsize=9)
            ax.set_xlabel("k")
        row_axes[0].set_ylabel("predicted speedup\n= paper's k̂ (Both) x t_1 / t_k")
    axes[0][0].legend(fontsize=8, title="solid: all proposals; dashed: 1k vocab", title_fontsize=7)
    fig.suptitle(f"bench_scale: Medusa heads, random weights, {rows[0]['device']}", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, metadata={"CreationDate": None} if out.suffix == ".pdf" else None)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--presets", nargs="+", default=list(PRESETS))
    ap.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8, 32])
    ap.add_argument("--dtypes", nargs="+", default=list(DTYPES))
    ap.add_argument("--ks", nargs="+", type=int, default=[2, 4, 8, 10])
    ap.add_argument("--archs", nargs="+", default=["medusa", "recurrent"],
                    help="head architectures; the first is timed everywhere, the others at batch 1, float32")
    ap.add_argument("--budget-s", type=float, default=0.25, help="seconds of repetitions per timed function")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--results", default=str(ROOT / "results" / "bench-scale"))
    ap.add_argument("--figure", default=str(ROOT / "results" / "figures" / "bench_scale.png"))
    ap.add_argument("--quick", action="store_true", help="tiny and small only, batch 1, float32, k = 2 and 4")
    a = ap.parse_args()
    bad = [p for p in a.presets if p not in PRESETS] + [d for d in a.dtypes if d not in DTYPES]
    if bad:
        sys.exit(f"bench_scale: unknown preset or dtype {bad[0]!r}; presets {list(PRESETS)}, dtypes {list(DTYPES)}.")
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_scale: torch sees no CUDA GPU; use --device cpu.")
    if a.quick:
        a.presets, a.batch_sizes, a.dtypes, a.ks, a.budget_s = ["tiny", "small"], [1], ["float32"], [2, 4], 0.05
    torch.set_num_threads(a.threads)
    # engine: round_costs times the model's own (eager) calls, as every row of this file always has.
    common = {"engine": "eager", "device": device_name(device), "threads": torch.get_num_threads(),
              "git_sha": git_sha(),
              "command": " ".join(["bench/bench_scale.py", *sys.argv[1:]]), "python": platform.python_version(),
              "torch": torch.__version__, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    rows: list[dict] = []
    t0 = time.time()
    for preset in a.presets:
        for batch in a.batch_sizes:
            for dtype in a.dtypes:
                for pv in (None, 1000):
                    for i, arch in enumerate(a.archs):
                        if i and (batch != 1 or dtype != "float32" or pv):
                            continue
                        got = measure(preset, batch, dtype, arch, pv, a.ks, device, 25, a.budget_s)
                        rows += [{**r, **common} for r in got]
                        best = min((r for r in got if r["k"] == max(a.ks)), key=lambda r: r["tk_ms"])
                        print(f"{preset:<17} b{batch:<3} {dtype:<9} {arch:<9} pv={pv or 'all':<5} t1 "
                              f"{got[0]['t1_ms']:8.2f} ms  " + "  ".join(
                                  f"{r['design'][:5]}{r['k']} {r['step_cost_ratio']:.2f}" for r in got)
                              + f"  best k={max(a.ks)}: {best['design']} ({time.time() - t0:.0f} s)", flush=True)
    out = Path(a.results)
    append_rows(out / "rows.jsonl", rows)
    # The figure shows every configuration measured on this device so far.
    plot(latest(read_rows(out / "rows.jsonl")), Path(a.figure))
    print(f"rows: {out / 'rows.jsonl'}; figure: {a.figure}; {time.time() - t0:.0f} s in all")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The whole wall-clock benchmark on one CUDA GPU, in under ~8 minutes on a modern GPU:
# trains the demo model on the GPU if it is missing (time-budgeted), then times greedy vs blockwise
# (exact, top-2; k = 2..8) at batch 1, 8 and 32 in float32 and bfloat16, for all three head architectures.
# Rows: results/bench-gpu/rows.jsonl; Spec-Bench records: results/bench-gpu/specbench/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
if [ ! -x "$PY" ]; then python3 -m venv .venv && .venv/bin/pip install -q -e ".[dev]"; PY=.venv/bin/python; fi
export WANDB_MODE=${WANDB_MODE:-offline}
COMMON=(experiment=demo device=cuda logger=none bench.results_dir=results/bench-gpu
        train.max_minutes=2 heads_train.max_minutes=1 bench.arch_train_minutes=1
        'bench.batch_sizes=[1,8,32]' 'bench.n_examples={1: 200, 8: 500, 32: 1000}')
"$PY" experiments/bench.py "${COMMON[@]}" 'bench.archs=[medusa,blockdiag,paper]' bench.dtype=float32
"$PY" experiments/bench.py "${COMMON[@]}" 'bench.archs=[medusa]' bench.dtype=bfloat16

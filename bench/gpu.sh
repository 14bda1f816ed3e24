#!/usr/bin/env bash
# The wall-clock benchmark on one CUDA GPU: greedy vs blockwise (exact, top-2; k = 2..6) at batch 1, 8
# and 32, in float32 and bfloat16, and trees against the chain (k = 4, batch 1 and 8), on the Debian demo's
# model: Table 1's Both model, shipped in checkpoints/ and installed, so a lease trains nothing (EXPERIMENT;
# RECIPE: overrides that pick another model, e.g. RECIPE='experiment=demo_debian_train heads.tie_slots=true',
# whose heads train there first, 300 steps on the shipped Debian base)
# (100 / 256 / 512 test sentences; 3 to 14 repeats at batch 1 until each speedup's 95% interval is within
# +-3%, 3 at batch 8 and 32; per dtype; SHORT=1 for a lease of minutes: docs/benchmark.md), each on the eager and
# the compiled decode path (compiled = CUDA graphs there, not yet run on a GPU).
#
#   bash bench/gpu.sh                        # on a CUDA machine
#   ARCHS=1 bash bench/gpu.sh                # also Medusa / block-diagonal / paper / attend heads (300-step trainings)
#   COMPILE=1 bash bench/gpu.sh              # also torch.compile'd decoder layers, for both decoders
#   DEVICE=cpu QUICK=1 bash bench/gpu.sh     # a dry run of this script on a CPU (minutes), before spending GPU time
#   BENCH_EXTRA='task=folder ...' SCALE=0    # overrides after every bench.py's own; no size sweep (the test's toy run)
#
# Offline GPU machines: run `make bench-gpu-prep` here first and send the paths it prints along: wheels of
# the few pure-Python packages a PyTorch image lacks, the demo's trained model and its tokenised data, so
# the GPU times the very model the CPU table measured. Rows: results/bench-gpu/rows.jsonl (and $OUT/, when
# set, for a remote runner to bring back); Spec-Bench records: results/bench-gpu/specbench/.
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
RESULTS=${RESULTS:-results/bench-gpu}
EXPERIMENT=${EXPERIMENT:-demo_debian}
read -r -a RECIPE <<< "${RECIPE-}"
read -r -a EXTRA <<< "${BENCH_EXTRA:-}"
export WANDB_MODE=${WANDB_MODE:-offline} PYTHONUNBUFFERED=1

source bench/gpu_python.sh  # PY: the venv, or a GPU image's python3 with .whl/
"$PY" - "$DEVICE" <<'EOF' || exit 2
import importlib.util, sys
missing = [m for m in ("torch", "hydra", "omegaconf", "sacrebleu", "sentencepiece", "tqdm", "numpy", "bpd")
           if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"bench/gpu.sh: missing Python packages {missing}: run `make bench-gpu-prep` and send .whl/ along.")
import torch
if sys.argv[1].startswith("cuda") and not torch.cuda.is_available():
    sys.exit("bench/gpu.sh: torch sees no CUDA GPU; run it on a GPU machine (or DEVICE=cpu QUICK=1 for a dry run).")
print(f"torch {torch.__version__} on {torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu'}")
EOF

COMMON=(experiment="$EXPERIMENT" "${RECIPE[@]}" device="$DEVICE" logger=none bench.results_dir="$RESULTS"
        'bench.batch_sizes=[1,8,32]' bench.specbench_records=true 'bench.engines=[eager,compiled]')
if [ -n "${QUICK:-}" ]; then  # plumbing check: few inputs, one repeat, two k
    COMMON+=('bench.n_examples={1: 6, 8: 16, 32: 32}' bench.repeats=1 bench.max_repeats=1 bench.step_repeats=10 'bench.ks=[2,4]')
elif [ -n "${SHORT:-}" ]; then  # a few minutes of a lease (bench/gpu_lease.sh): fewer inputs and k, 3 passes, no bfloat16
    COMMON+=('bench.n_examples={1: 50, 8: 128, 32: 256}' bench.repeats=3 bench.max_repeats=3 bench.step_repeats=50
             'bench.ks=[2,4,6]')
fi
run() { echo "+ bench.py $*"; "$PY" experiments/bench.py "${COMMON[@]}" "$@" "${EXTRA[@]}"; }
run bench.dtype=float32
if [ -z "${SHORT:-}" ]; then run bench.dtype=bfloat16 bench.methods.naive_greedy=false; fi
if [ -n "${COMPILE:-}" ]; then run bench.dtype=float32 bench.compile=true bench.methods.naive_greedy=false; fi
if [ -n "${ARCHS:-}" ]; then
    # attend: is its chain, twice as dear as recurrent's on a CPU (bandwidth), nearer on a GPU (launches)?
    run 'bench.archs=[medusa,blockdiag,paper,attend]' 'bench.batch_sizes=[1]' bench.methods.naive_greedy=false 'bench.engines=[eager]'
fi
# Tree verification against the chain (docs/beyond.md): on a GPU a verify call's extra rows are nearly free,
# which is where a tree should beat the chain at batch 1; on the 2-core CPU it ties.
TREES=('bench.methods.tree=[chain+1,2x1,beam4]' 'bench.criteria=[{name: exact}]' 'bench.batch_sizes=[1,8]' bench.methods.naive_greedy=false
       'bench.engines=[eager]')  # trees have no static path
if [ -z "${QUICK:-}" ]; then TREES+=('bench.ks=[4]' bench.max_repeats=$([ -n "${SHORT:-}" ] && echo 3 || echo 6)); fi
run bench.dtype=float32 "${TREES[@]}"
# The cost model across sizes (bpd/bench/cost_model.py): t_k / t_1 from tiny to transformer_big on this GPU.
if [ "${SCALE:-1}" != 0 ]; then
    SIZES=(--device "$DEVICE" --results "$RESULTS/scale" --figure "$RESULTS/scale/bench_scale.png")
    if [ -n "${QUICK:-}${SHORT:-}" ]; then SIZES+=(--quick); fi
    echo "+ bench_scale.py ${SIZES[*]}"; "$PY" bench/bench_scale.py "${SIZES[@]}"
fi
if [ -n "${OUT:-}" ]; then  # a remote runner brings back what is under $OUT: the rows and the records, 3 files
    cp "$RESULTS/rows.jsonl" "$OUT/rows.jsonl"
    if [ -f "$RESULTS/scale/rows.jsonl" ]; then cp "$RESULTS/scale/rows.jsonl" "$OUT/scale_rows.jsonl"; fi
    tar -czf "$OUT/specbench.tar.gz" -C "$RESULTS" specbench
fi
echo "rows: $RESULTS/rows.jsonl"

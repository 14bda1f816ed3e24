#!/usr/bin/env bash
# What one short GPU lease runs (one call of at most 10 minutes): the Debian base models of
# `make pretrain-debian` that are not shipped yet (MODELS; several run side by side on the one GPU: each step
# is a few small kernels, so two keep it busier than one) and Table 1's heads (HEADS: settings, e.g.
# "finetune both", HEADS_STEPS steps each, beside them; then each evaluated there: exact k-hat and BLEU on
# EVAL_N test sentences), then `SHORT=1 bash bench/gpu.sh` in the time left.
#
#   DEBIAN=1 bash bench/gpu_lease_prep.sh          # here: .whl/ and gpu_carry/ (name both in the carry list)
#   bash bench/gpu_lease.sh                        # there; MODELS= for the benchmark alone
#   HEADS="finetune both" HEADS_STEPS=20000 bash bench/gpu_lease.sh   # there: Table 1's heads far past a CPU's budget
#   cat DIR/lease.tar.part-* | tar -xf - -C BACK   # here: ship/ (checkpoints), bench-gpu/ (rows), logs/
#
# The models train with the recipe's own step budget (base/mt_debian.yaml) and no time cap, so they are the
# models `make pretrain-debian` makes on a CPU, and their manifests match the recipe; a model that has not
# finished by TRAIN_SECONDS is stopped and does not come back (its optimizer state is too large to carry).
# Everything that comes back is one tar, split in 15 MiB parts (the runner brings back files of at most 16 MiB).
# A runner that sends the working tree under a size limit: docs/benchmark.md says what to leave out.
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
TOTAL_SECONDS=${TOTAL_SECONDS:-560}     # when the parts must be written, counted from the start
TRAIN_SECONDS=${TRAIN_SECONDS:-400}     # when unfinished training stops
# Every Debian base is shipped (base, teacher, distilled), and the benchmark's model (Table 1's Both): by default
# nothing trains.
# MODELS=distilled would train the distilled base on the shipped teacher's beam-4 outputs of all 499k sources.
MODELS=${MODELS-}
SHIP_DIR=${SHIP_DIR:-checkpoints}       # where the models export to, and the shipped teacher is read from
DEVICE=${DEVICE:-cuda}
read -r -a EXTRA <<< "${PRETRAIN_EXTRA:-}"
# Table 1's heads: settings of HEADS_EXPERIMENT trained HEADS_STEPS steps each (a step budget: the cache name and
# the rows say it); TRAIN_SECONDS caps them as heads_train.max_minutes (a cap the rows record when it binds).
HEADS=${HEADS-}
HEADS_EXPERIMENT=${HEADS_EXPERIMENT:-table1_debian}
HEADS_STEPS=${HEADS_STEPS:-20000}
EVAL_N=${EVAL_N:-200}                   # test sentences each trained heads model is evaluated on, on the GPU
CACHE_DIR=${CACHE_DIR:-outputs/cache}   # the heads' stage cache (a dry run's is its own)
read -r -a HEXTRA <<< "${HEADS_EXTRA:-}"
OUT=${OUT:-/tmp/lease-out}
WORK=${WORK:-/tmp/lease}
mkdir -p "$OUT" "$WORK/ship" "$WORK/logs"
elapsed() { echo $(($(date +%s) - START)); }
export WANDB_MODE=disabled PYTHONUNBUFFERED=1

source bench/gpu_python.sh  # PY: as bench/gpu.sh picks it (a GPU image's python3 with .whl/)
if [ -f gpu_carry/data.tar.xz ]; then mkdir -p outputs/cache/data && tar -xJf gpu_carry/data.tar.xz -C outputs/cache/data; fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$WORK/logs/gpu.txt"
echo "setup done at $(elapsed) s"

# 1. The base models: the recipe, on the GPU; decoded targets 512 sources a batch (a GPU's batch; not part
#    of any key). They export into checkpoints/ there, beside the shipped ones (`models=[distilled]` installs
#    the shipped teacher rather than training it again), and what is new there comes back in ship/.
#    PRETRAIN_EXTRA: overrides for a dry run (DEVICE=cpu, a few steps).
touch "$WORK/start"
pids=()
for m in $MODELS; do
    "$PY" experiments/pretrain.py experiment=pretrain_mt_debian "models=[$m]" device="$DEVICE" logger=none \
        paths.shipped_dir="$SHIP_DIR" distill.batch_size=512 "${EXTRA[@]}" > "$WORK/logs/pretrain_$m.log" 2>&1 &
    pids+=($!)
done
# The heads' time cap, the same literal for training and evaluation (it is part of the heads' cache key).
CAP=$(awk -v s="$TRAIN_SECONDS" -v e="$(elapsed)" 'BEGIN { printf "%.1f", (s - e) / 60 }')
heads_args() {  # one setting's overrides, shared by its training and its evaluation
    echo experiment="$HEADS_EXPERIMENT" setting="$1" device="$DEVICE" logger=none heads_train.max_steps="$HEADS_STEPS" \
        heads_train.max_minutes="$CAP" paths.cache_dir="$CACHE_DIR" "${HEXTRA[@]}"
}
for s in $HEADS; do
    # shellcheck disable=SC2046
    "$PY" experiments/train.py $(heads_args "$s") stage=heads > "$WORK/logs/heads_$s.log" 2>&1 &
    pids+=($!)
done
any_alive() { for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
while [ "$(elapsed)" -lt "$TRAIN_SECONDS" ] && any_alive; do sleep 5; done
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && { echo "stopping $p at $(elapsed) s"; kill "$p"; }; done
wait
echo "training done at $(elapsed) s"
for m in $MODELS; do tr '\r' '\n' < "$WORK/logs/pretrain_$m.log" | grep -v "^train base" | tail -25; done
for s in $HEADS; do tr '\r' '\n' < "$WORK/logs/heads_$s.log" | grep -v "^train heads" | tail -15; done

# 1b. Each trained heads model evaluated on the GPU (rows in rows/; a model the cap stopped is evaluated as it is).
for s in $HEADS; do
    [ "$((TOTAL_SECONDS - $(elapsed)))" -gt 60 ] || { echo "no time left to evaluate $s"; break; }
    # shellcheck disable=SC2046
    timeout "$((TOTAL_SECONDS - $(elapsed) - 30))" "$PY" experiments/run.py $(heads_args "$s") \
        decode.n_examples="$EVAL_N" paths.results_dir="$WORK/rows" > "$WORK/logs/evaluate_$s.log" 2>&1
    echo "evaluate $s exit $? at $(elapsed) s"; tail -12 "$WORK/logs/evaluate_$s.log"
done

# 2. The benchmark in what is left (rows are written per bench.py run, in the order gpu.sh runs them).
left=$((TOTAL_SECONDS - $(elapsed)))
if [ "${BENCH:-1}" = 1 ] && [ "$left" -gt 60 ]; then  # (BENCH=0: none, as in the CPU dry run's test)
    SHORT=1 DEVICE="$DEVICE" RESULTS="$WORK/bench-gpu" OUT= timeout "$left" bash bench/gpu.sh > "$WORK/logs/bench.log" 2>&1
    echo "bench exit $? at $(elapsed) s"; tail -40 "$WORK/logs/bench.log"
fi

# 3. Back: one tar in parts.
find "$SHIP_DIR" -maxdepth 1 -type f -newer "$WORK/start" -exec cp {} "$WORK/ship/" \;
if [ -n "$HEADS" ]; then  # the heads models trained here (their cache names carry the step budget)
    find "$CACHE_DIR/models" -maxdepth 1 -name 'heads_*.pt' -not -name '*.state.pt' -newer "$WORK/start" -exec cp {} "$WORK/ship/" \;
fi
tar -cf - -C "$WORK" . | split -b 15M - "$OUT/lease.tar.part-"
ls -la "$OUT"
echo "packed at $(elapsed) s"

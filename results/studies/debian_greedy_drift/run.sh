#!/usr/bin/env bash
# greedy time per token: the distillation model against the Both model, alternating, same machine, alone
# Run from anywhere: it works in the repository root, on the Table 1 models in its outputs/cache/.
cd "$(dirname "$0")/../../.."
for i in 1 2; do for m in frozen_distilled_a31046ba2e finetune_distilled_cca5eafe74; do
  .venv/bin/python experiments/run.py experiment=table1_debian checkpoint=outputs/cache/models/heads_k10_${m}.pt \
    'decode.ks=[2]' 'decode.criteria=[{name: exact}]' decode.n_examples=200 decode.timing_repeats=1 threads=2 logger=none \
    paths.results_dir=/tmp/greedy_ab/${m}_$i 2>&1 | grep -E "^greedy|k2_exact"
done; done

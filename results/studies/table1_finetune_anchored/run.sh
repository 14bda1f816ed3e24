#!/usr/bin/env bash
# Table 1 on the Debian corpus, setting=finetune_anchored: the heads trained 1,200 steps (Table 1's budget), then
# continued to 2,400 and to 4,800 (each continuation is the model a run of that budget trains: the schedule does
# not depend on the budget). One thread, nice 19, in the background; the PID of the training process now running
# is in TRAINING_PID (pause: kill -STOP; go on: kill -CONT). Run this script again to resume after a kill: each
# stage resumes from its last resume state (every 50 steps; kill -USR1 first writes one at the next step), and a
# finished stage is skipped. Log: outputs/table1_finetune_anchored/train.log.
set -u
cd "$(dirname "$0")/../../.."
MODELS=outputs/cache/models
COMMON=(experiment=table1_debian setting=finetune_anchored stage=heads heads_train.max_minutes=100000
        heads_train.ckpt_every=50 threads=1 logger=none)
mkdir -p outputs/table1_finetune_anchored

stage() {  # one budget: train it (or resume it, or find it finished) in the foreground of this script
    PYTHONPATH=$PWD nice -n 19 "${PYTHON:-.venv/bin/python}" experiments/train.py "${COMMON[@]}" "$@" &
    echo $! > TRAINING_PID
    wait $!
}

# The cache names of the 1,200- and 2,400-step models (the corpus hash of the reference build is part of them).
stage heads_train.max_steps=1200 || exit 1
stage heads_train.max_steps=2400 heads_train.continue_from=$MODELS/heads_k10_finetune_gold_6a281b2862.pt || exit 1
stage heads_train.max_steps=4800 heads_train.continue_from=$MODELS/heads_k10_finetune_gold_ee1091b465.pt || exit 1
echo "done: $MODELS/heads_k10_finetune_gold_832574ee43.pt"

# bpd: the user interface. Every target does its own setup on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.bpd-setup-stamp
# CPU machines get the CPU wheel pinned explicitly: an unpinned torch resolves to a multi-GB CUDA build.
CPU_TORCH ?= torch==2.13.0
export WANDB_MODE ?= offline
export PYTHONHASHSEED := 0

.PHONY: data setup test test-all lint demo demo-debian demo-train demo-ding demo-sr demo-sr-faces bench figures reproduce reproduce-mt-small reproduce-sr-small \
        reproduce-mt reproduce-mt-debian reproduce-sr reproduce-sr-photos reproduce-paper clean-results help bench-gpu-prep scale-check pretrain pretrain-debian \
        bench-scale export bench-peers data-sr pretrain-photos-sr

help:
	@echo "make demo     - the main job on the Debian corpus (2 cores, with the data: minutes; README.md)"
	@echo "make test     - the test suite (CPU, <10 min)"
	@echo "make lint     - ruff"
	@echo "see README.md and docs/ for the reproduction and benchmark targets"

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then \
	    echo "CUDA GPU found: installing torch from pyproject's range"; \
	else \
	    echo "no CUDA GPU: installing the CPU build $(CPU_TORCH)"; \
	    $(PY) -m pip install -q "$(CPU_TORCH)"; \
	fi
	$(PY) -m pip install -q -e ".[dev]"
	@touch $(STAMP)

# (the 15 slowest tests are listed last: where the suite's time goes, in CI logs too)
test: setup
	WANDB_MODE=disabled $(PY) -m pytest -m "not slow" -x --durations=15 tests

test-all: setup
	WANDB_MODE=disabled $(PY) -m pytest tests

lint: setup
	$(VENV)/bin/ruff check bpd corpora experiments analysis tests bench

# ---- experiments ---------------------------------------------------------------------------------
RUN := $(PY) experiments/run.py
PROTOCOL ?= fast
DATA_DIR ?=
# FROM_SCRATCH=1: train the base models too instead of installing the shipped ones (checkpoints/).
FROM_SCRATCH ?=
SHIPPED := $(if $(FROM_SCRATCH),shipped=false,)
# A demo decodes and times on this machine every time: an earlier run's rows would otherwise make it skip its
# evaluation and print nothing.
REDO := decode.skip_existing=false
# Routine targets (the demos, bench, export, figures) write their rows, report and figures under outputs/results/,
# so a checkout stays clean; RECORD=1 writes them into results/, the committed record, instead.
RECORD ?=
RESULTS = $(if $(RECORD),results,outputs/results)

# The Debian English-German corpus (docs/data.md): Debian bookworm's packages fetched into outputs/cache/data/, once
# (apt on Debian bookworm, HTTP from deb.debian.org anywhere else; DEBIAN_FETCH=apt|http|auto chooses).
# DEB_DIR=/path/to/debs builds it offline from a folder of .deb files.
DEB_DIR ?=
DEBIAN_FETCH ?=
DEBIAN_DATA = $(if $(DEB_DIR),task.corpora.debian.deb_dir=$(DEB_DIR),) $(if $(DEBIAN_FETCH),task.corpora.debian.fetch=$(DEBIAN_FETCH),)
data: setup
	$(PY) experiments/data.py task=debian_en_de $(DEBIAN_DATA)

# The photo corpus for super-resolution (docs/data.md): photographs from Debian bookworm's packages (a 0.26 GB
# download), cut into 32x32 / 8x8 patch pairs held out by photograph, under outputs/cache/data/, once.
# PHOTOS_DEB_DIR=/path/to/debs builds it offline; PHOTOS_FETCH=apt|http|auto as DEBIAN_FETCH.
PHOTOS_DEB_DIR ?=
PHOTOS_FETCH ?=
PHOTOS_DATA = $(if $(PHOTOS_DEB_DIR),task.corpora.photos.deb_dir=$(PHOTOS_DEB_DIR),) $(if $(PHOTOS_FETCH),task.corpora.photos.fetch=$(PHOTOS_FETCH),)
data-sr: setup
	$(PY) experiments/data.py task=photos_sr $(PHOTOS_DATA)

# The demo, on the Debian corpus: builds the corpus on first use (a 2.1 GB download; DEB_DIR and DEBIAN_FETCH as for
# make data), installs the shipped Table 1 Both model (checkpoints/debian_en_de_both.pt) and its tokenizer, decodes
# on the compiled path, prints the table. FROM_SCRATCH=1 trains its teacher, distilled base and heads (days on a CPU).
demo: setup
	$(RUN) experiment=demo_debian $(DEBIAN_DATA) $(SHIPPED) $(REDO) paths.results_dir=$(RESULTS)/demo_debian
	@echo "rows: $(RESULTS)/demo_debian/rows.jsonl (W&B offline runs: outputs/wandb)"

demo-debian: demo

# The demo with a heads stage: the shipped Debian base, k = 6 slots fine-tuned on its greedy outputs (300 steps),
# decoded on the eager path (2 cores: ~12 min AVX-512, ~28 min AVX2, with the data).
demo-train: setup
	$(RUN) experiment=demo_debian_train $(DEBIAN_DATA) $(SHIPPED) $(REDO) paths.results_dir=$(RESULTS)/demo_debian_train
	@echo "rows: $(RESULTS)/demo_debian_train/rows.jsonl (W&B offline runs: outputs/wandb)"

# The demo on the small ding corpus (13k pairs, one 2 MB download): the earlier main demo, and the model that
# make export and make bench-peers use.
demo-ding: setup
	$(RUN) experiment=demo $(SHIPPED) $(REDO) paths.results_dir=$(RESULTS)/demo
	@echo "rows: $(RESULTS)/demo/rows.jsonl (W&B offline runs: outputs/wandb)"

# Super-resolution on the photo corpus: builds it on first use (a 0.26 GB download; PHOTOS_DEB_DIR and PHOTOS_FETCH
# as for make data-sr), installs Table 2's fine-tuned model (checkpoints/photos_sr_finetune_sr.pt), decodes 16 test
# patches. demo-sr-faces: the earlier 4x4 -> 16x16 demo on the five photographs bundled with scikit-image (no download).
demo-sr: setup
	$(RUN) experiment=demo_photos_sr $(PHOTOS_DATA) $(SHIPPED) $(REDO) paths.results_dir=$(RESULTS)/demo_photos_sr
	@echo "rows: $(RESULTS)/demo_photos_sr/rows.jsonl; image grid under $(RESULTS)/demo_photos_sr/outputs/*/grid.png"

demo-sr-faces: setup
	$(RUN) experiment=demo_sr $(SHIPPED) $(REDO) paths.results_dir=$(RESULTS)/demo-sr
	@echo "rows: $(RESULTS)/demo-sr/rows.jsonl; image grid under $(RESULTS)/demo-sr/outputs/*/grid.png"

# Table 1 on the embedded corpus: 4 settings, exact for every k, then top-n and minimum block size rows.
# fast protocol: one k=10 heads model per setting, decoded with every k <= 10; per_k: one model per k.
# The paper's settings, then fine-tuning that keeps p_1 in charge (*_gentle, not the paper's).
reproduce-mt-small: setup
ifeq ($(PROTOCOL),per_k)
	$(RUN) -m experiment=table1_small setting=regular,distillation,finetune,both heads.k=2,4,6,8,10 'decode.ks=[$${heads.k}]' name=table1_small_per_k $(SHIPPED)
else
	$(RUN) -m experiment=table1_small setting=regular,distillation,finetune,both,finetune_gentle,both_gentle $(SHIPPED)
	$(RUN) experiment=table1_small setting=both 'decode.criteria=[{name: topk, param: 2}, {name: topk, param: 3}]' $(SHIPPED)
	$(RUN) experiment=table1_small setting=both 'decode.ks=[2,4,6,8,10]' 'decode.criteria=[{name: exact, min_block_sizes: [2, 3]}]' $(SHIPPED)
endif

# Table 1 on the Debian corpus, the main embedded reproduction (hours per setting on a core; re-run to resume): the
# paper's settings and ours, each scored on the corpus's test and on the ding test (out of domain), then top-n and
# minimum block size rows. The base models install from checkpoints/ once shipped (make pretrain-debian).
DEBIAN_SETTINGS := regular,distillation,finetune,both,finetune_gentle,both_gentle
reproduce-mt-debian: data
	$(RUN) -m experiment=table1_debian setting=$(DEBIAN_SETTINGS) $(SHIPPED)
	$(RUN) -m experiment=table1_debian setting=$(DEBIAN_SETTINGS) decode.split=ding:test $(SHIPPED)
	$(RUN) experiment=table1_debian setting=both 'decode.criteria=[{name: topk, param: 2}, {name: topk, param: 3}]' $(SHIPPED)
	$(RUN) experiment=table1_debian setting=both 'decode.ks=[2,4,6,8,10]' 'decode.criteria=[{name: exact, min_block_sizes: [2, 3]}]' $(SHIPPED)

reproduce-sr-small: setup
	$(RUN) -m experiment=table2_small setting=regular,finetune $(SHIPPED)

# Table 2 on the photo corpus over the first SR_PATCHES (1,024) of its whole test split (decode.split=photos:test,
# stored shuffled: a random sample of its 13,025 patches), exact and eps = 2 at k = 4 and 10, in chunks of SR_CHUNK
# patches, each its own run: re-run the same command after a kill and it resumes at the chunk it was in (hours on
# one thread). Then one table from the chunks: analysis/pool_chunks.py. Builds the corpus first (as make data-sr).
SR_PATCHES ?= 1024
SR_CHUNK ?= 256
SR_SETTINGS ?= finetune_sr regular
SR_FIRSTS = $(shell seq 0 $(SR_CHUNK) $$(($(SR_PATCHES) - 1)))
define NEWLINE


endef
reproduce-sr-photos: data-sr
	$(foreach s,$(SR_SETTINGS),$(foreach f,$(SR_FIRSTS),$(RUN) experiment=table2_photos setting=$(s) decode.split=photos:test \
	    decode.first=$(f) decode.n_examples=$(SR_CHUNK) 'decode.ks=[4,10]' decode.batch_size=8 decode.timing_repeats=1 \
	    $(PHOTOS_DATA) $(SHIPPED) paths.results_dir=$(RESULTS)/table2_photos$(NEWLINE)))
	$(PY) analysis/pool_chunks.py $(RESULTS)/table2_photos/rows.jsonl --split photos:test

# The base models that ship in checkpoints/ (hours on 2 cores; re-run the same command to resume).
pretrain: setup
	$(PY) experiments/pretrain.py experiment=pretrain_sr
	$(PY) experiments/pretrain.py experiment=pretrain_mt 'models=[base,teacher,distilled]'

# The 8x8 -> 32x32 super-resolution base on the photo corpus (hours on one core; re-run the same command to resume).
pretrain-photos-sr: data-sr
	$(PY) experiments/pretrain.py experiment=pretrain_photos_sr $(PHOTOS_DATA)

# The base model on the Debian corpus (many hours on one core; re-run the same command to resume).
pretrain-debian: data
	$(PY) experiments/pretrain.py experiment=pretrain_mt_debian

reproduce-mt: setup
	@test -n "$(DATA_DIR)" || { echo "set DATA_DIR=/path/to/wmt14 (see docs/data.md)"; exit 2; }
	$(RUN) -m experiment=table1 task.data_dir=$(DATA_DIR) setting=regular,distillation,finetune,both

reproduce-sr: setup
	@test -n "$(DATA_DIR)" || { echo "set DATA_DIR=/path/to/celeba (see docs/data.md)"; exit 2; }
	$(RUN) -m experiment=table2 task.data_dir=$(DATA_DIR) setting=regular,finetune

# The report and figures from the committed rows under results/: into outputs/results/ (REPORT.md, figures/), or with
# RECORD=1 into results/ with the README's demo table (analysis/readme_table.py). WANDB_RUNS=outputs/wandb: from the
# rows of the W&B evaluation runs there instead.
WANDB_RUNS ?=
figures: setup
	$(PY) analysis/make_report.py --wandb $(if $(ACCEPT_DAMAGED),--accept-damaged) $(if $(RECORD),,--out $(RESULTS)/figures --report $(RESULTS)/REPORT.md) \
	    $(if $(WANDB_RUNS),--wandb-runs $(WANDB_RUNS),)
	$(if $(RECORD),$(PY) analysis/readme_table.py,)
	$(if $(RECORD),$(PY) analysis/results_index.py,)

# A reproduction records: its rows go to results/ and so do the report and figures made from them.
reproduce: RECORD = 1
reproduce: reproduce-mt-small reproduce-sr-small figures

reproduce-paper: setup
	@test -n "$(MT_DATA_DIR)" -a -n "$(SR_DATA_DIR)" || { echo "set MT_DATA_DIR=... SR_DATA_DIR=..."; exit 2; }
	$(MAKE) reproduce-mt DATA_DIR=$(MT_DATA_DIR)
	$(MAKE) reproduce-sr DATA_DIR=$(SR_DATA_DIR)
	$(MAKE) figures RECORD=1

# BENCH_EXPERIMENT=demo: the ding demo's model instead. On the demo's model, the demo's k (its heads go to 10).
# BENCH_EXPERIMENT=demo_photos_sr: super-resolution (make demo-sr's model), exact and eps = 2 at k = 4 and 10 on
# 4 test patches at batch 1 (a patch is 3,072 tokens).
BENCH_EXPERIMENT ?= demo_debian
DEMO_BENCH_KS := 'bench.ks=[2,4,6]'
SR_BENCH := 'bench.batch_sizes=[1]' 'bench.ks=[4,10]' 'bench.criteria=[{name: exact}, {name: distance, param: 2}]' \
	'bench.n_examples={1: 4}' bench.max_repeats=5 bench.methods.naive_greedy=false
bench: setup
	$(PY) experiments/bench.py experiment=$(BENCH_EXPERIMENT) $(if $(filter demo_debian%,$(BENCH_EXPERIMENT)),$(DEBIAN_DATA),) \
	    $(if $(filter demo_debian,$(BENCH_EXPERIMENT)),$(DEMO_BENCH_KS),) \
	    $(if $(filter demo_photos_sr,$(BENCH_EXPERIMENT)),$(PHOTOS_DATA) $(SR_BENCH),) \
	    $(if $(RECORD),,bench.results_dir=$(RESULTS)/bench)

# The shipped base as a Hugging Face model + tokenizer and its CTranslate2 conversions, and the demo's heads model
# with its proposal heads for blockwise decoding in HF generate (trained first if missing: minutes), checked
# against ours (docs/export.md): outputs/export/<model>/, check rows in outputs/results/export/ (RECORD=1: results/export/).
export: setup
	$(PY) experiments/export.py experiment=demo 'models=[base,heads]' results_dir=$(RESULTS)/export

# Our decoders beside HF transformers (greedy, blockwise with our heads, assisted, prompt lookup) and CTranslate2 on
# the same weights (docs/export.md): the demo's model at batch 1 and 2 threads, rows in results/bench-peers/.
bench-peers: setup
	$(PY) experiments/bench_peers.py experiment=demo draft=tiny

# What a round costs against a greedy step from the demo's model size to transformer_big (docs/benchmark.md).
bench-scale: setup
	$(PY) bench/bench_scale.py

# For an offline GPU machine: wheels it may lack and the demo's model, to send along with bench/gpu.sh.
bench-gpu-prep: setup
	$(PY) bench/gpu_prep.py

# ---- clusters: SLURM via hydra-submitit-launcher (docs/cluster.md) -----------------------------
# make reproduce-mt-slurm DATA_DIR=/path/to/wmt14 PARTITION=gpu [GPUS=8 NODES=1 SLURM_TIME=2880 SLURM_ARRAY=8]
# Each configuration is one SLURM array task with GPUS processes per node (DDP). The global batch stays that of
# REF_WORLD GPUs (the paper's 8) whatever GPUS x NODES is, by gradient accumulation; it must divide REF_WORLD.
# First the base models the settings share (each trained once), then heads + evaluation per setting.
# Re-running a target skips finished models and rows and resumes unfinished training from its checkpoint;
# wait until the previous submission's jobs have left the queue (squeue --me) before re-running.
PARTITION ?=
GPUS ?= 8
NODES ?= 1
REF_WORLD ?= 8
SLURM_TIME ?= 2880
SLURM_ARRAY ?= 8
TRAIN := $(PY) experiments/train.py
SLURM_ARGS = hydra/launcher=submitit_slurm hydra.launcher.gpus_per_node=$(GPUS) hydra.launcher.tasks_per_node=$(GPUS) \
	hydra.launcher.nodes=$(NODES) hydra.launcher.timeout_min=$(SLURM_TIME) hydra.launcher.array_parallelism=$(SLURM_ARRAY) \
	$(if $(PARTITION),hydra.launcher.partition=$(PARTITION)) dist.reference_world_size=$(REF_WORLD)

.PHONY: setup-slurm reproduce-mt-slurm reproduce-sr-slurm

setup-slurm: setup
	$(PY) -m pip install -q -e ".[slurm]"

reproduce-mt-slurm: setup-slurm
	@test -n "$(DATA_DIR)" || { echo "set DATA_DIR=/path/to/wmt14 (see docs/cluster.md)"; exit 2; }
	$(TRAIN) -m $(SLURM_ARGS) experiment=table1 task.data_dir=$(DATA_DIR) stage=base base_targets=gold,distilled
ifeq ($(PROTOCOL),per_k)
	$(RUN) -m $(SLURM_ARGS) experiment=table1 task.data_dir=$(DATA_DIR) setting=regular,distillation,finetune,both heads.k=2,4,6,8,10 'decode.ks=[$${heads.k}]' name=table1_per_k
else
	$(RUN) -m $(SLURM_ARGS) experiment=table1 task.data_dir=$(DATA_DIR) setting=regular,distillation,finetune,both
endif

reproduce-sr-slurm: setup-slurm
	@test -n "$(DATA_DIR)" || { echo "set DATA_DIR=/path/to/celeba (see docs/cluster.md)"; exit 2; }
	$(TRAIN) -m $(SLURM_ARGS) experiment=table2 task.data_dir=$(DATA_DIR) stage=base
	$(RUN) -m $(SLURM_ARGS) experiment=table2 task.data_dir=$(DATA_DIR) setting=regular,finetune

# The WMT14- and CelebA-scale data path on synthetic data of that size (docs/scale.md): rows in results/scale/.
scale-check: setup
	$(PY) bench/scale_check.py

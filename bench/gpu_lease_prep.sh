#!/usr/bin/env bash
# Here, before a GPU lease (bench/gpu_lease.sh) on a machine with no network: what it needs beside the code.
#   .whl/                  wheels of the pure-Python packages a stock PyTorch image lacks (hydra-core, omegaconf, antlr4)
#   gpu_carry/data.tar.xz  the ding corpus folder with its tokenizer (sentencepiece's output differs across its
#                          versions, and the shipped ding base names this tokenizer's fingerprint) and, with
#                          DEBIAN=1, the Debian corpus folder and its token store (`make data` first; ~30 MB)
# Both are ignored by git; name them in the runner's carry list. Run `make demo` (or any ding run) first, so
# the ding tokenizer exists.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DATA=${DATA:-outputs/cache/data}
pins=$("$PY" -c "import sys; sys.path.insert(0, 'bench'); from importlib.metadata import version; from gpu_prep import WHEELS
print(' '.join(f'{n}=={version(n)}' for n in WHEELS))")  # the same wheels as make bench-gpu-prep
"$PY" -m pip wheel -q --no-deps -w .whl $pins
ding=$(cd "$DATA" && ls -d ding_en-de 2>/dev/null) || { echo "no $DATA/ding_en-de: run make demo first." >&2; exit 2; }
[ -f "$DATA/$ding/spm4000.model" ] || { echo "no ding tokenizer in $DATA/$ding: run make demo first." >&2; exit 2; }
parts=("$ding")
if [ -n "${DEBIAN:-}" ]; then
    # the corpus folder with a finished build (manifest.json is written last) and its max_len-128 store
    folder=$(cd "$DATA" && ls -d debian_en_de_*/ | while read -r d; do [ -f "$DATA/$d/manifest.json" ] && echo "${d%/}"; done | head -1)
    [ -n "$folder" ] || { echo "no Debian corpus in $DATA: run make data first." >&2; exit 2; }
    store=$(grep -l '"max_len": 128' "$DATA"/stores/debian_en_de_*_train.store/manifest.json | head -1 | xargs dirname)
    [ -n "$store" ] || { echo "no max_len-128 Debian token store: run make pretrain-debian for a minute first." >&2; exit 2; }
    stem=${store%_train.store}
    parts+=("$folder" "stores/$(basename "$stem")_train.store" "stores/$(basename "$stem")_dev.store" "stores/$(basename "$stem")_test.store")
fi
mkdir -p gpu_carry
tar -cf - -C "$DATA" "${parts[@]}" | xz -T0 -6 > gpu_carry/data.tar.xz
echo "carry: .whl gpu_carry ($(du -sh gpu_carry/data.tar.xz | cut -f1) of data: ${parts[*]})"

"""Prepare `bench/gpu.sh` for a GPU machine that cannot download anything (`make bench-gpu-prep`).

Run it here, after `make demo`. It

* builds wheels of the pure-Python packages a stock PyTorch image tends to lack (hydra-core, omegaconf,
  antlr4-python3-runtime, at the versions installed here) into `.whl/`, which `bench/gpu.sh` installs
  from when they are missing there;
* finds the demo's trained model and tokenised data in `outputs/cache/` (nothing is trained: it stops
  with the fix if they are missing), so that the GPU times the very model the CPU table measured;
* prints the paths to send along (all ignored by git) and writes them to `.whl/carry.txt`.

    python bench/gpu_prep.py                       # the demo's model
    python bench/gpu_prep.py experiment=demo_sr    # another experiment's
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
WHEELS = ("hydra-core", "omegaconf", "antlr4-python3-runtime")


def main(overrides: list[str]) -> int:
    from _common import CONF_DIR, register, to_configs
    from hydra import compose, initialize_config_dir

    from bpd.runtime import Runtime
    from bpd.stages import Recipe, heads_path_for
    from bpd.tasks import load_task
    from corpora.ding import ding_folder

    register()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg, _ = to_configs(compose("config", overrides=overrides or ["experiment=demo"]))
    runtime = Runtime.build(cfg)
    task = load_task(runtime, cfg.task, cfg.shipped)  # reuses the tokenised corpus (the embedded one: prepared offline)
    model = heads_path_for(runtime, Recipe.of(cfg), task)
    if not model.exists():
        print(f"no trained model at {model}: run `make demo` (or this experiment) first.", file=sys.stderr)
        return 2
    data_dir, t = runtime.cache_root / "data", cfg.task
    if getattr(t, "source", None) == "ding":  # the tokenised corpus; the raw dictionary (pkg/) is not needed
        folders = [ding_folder(data_dir, t.direction, t.corpora.ding.include_phrases)]
    else:
        folders = [p for p in data_dir.iterdir() if p.name != "pkg"] if data_dir.is_dir() else []
    wheel_dir = ROOT / ".whl"
    wheel_dir.mkdir(exist_ok=True)
    pins = [f"{name}=={version(name)}" for name in WHEELS]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheel_dir), *pins], check=True)
    carry = [".whl", str(model.relative_to(ROOT)), *(str(f.relative_to(ROOT)) for f in folders)]
    (wheel_dir / "carry.txt").write_text("\n".join(carry) + "\n")
    size = sum(f.stat().st_size for c in carry for f in ([ROOT / c] if (ROOT / c).is_file() else (ROOT / c).rglob("*")))
    print(f"wheels: {', '.join(pins)} in .whl/")
    print(f"send along ({size / 2**20:.1f} MiB, all ignored by git): {' '.join(carry)}")
    print("then, on the GPU machine: bash bench/gpu.sh")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

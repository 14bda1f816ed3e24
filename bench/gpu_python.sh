# Sourced by bench/gpu.sh and bench/gpu_lease.sh from the repository root: sets PY to the project's venv if
# there is one; else to a python3 that has torch (a GPU image), with the missing pure-Python packages installed
# from .whl/ (offline: `make bench-gpu-prep` or bench/gpu_lease_prep.sh) or the index; else to a new venv.
if [ -n "${PY:-}" ]; then :
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
elif python3 -c "import torch" 2>/dev/null; then
    PY=python3
    if ! python3 -c "import hydra, omegaconf" 2>/dev/null; then
        if compgen -G ".whl/*.whl" >/dev/null; then
            python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/bpd-site .whl/*.whl || exit 2
        else
            python3 -m pip install -q --target /tmp/bpd-site "hydra-core>=1.3,<1.4" "omegaconf>=2.3" || exit 2
        fi
        export PYTHONPATH=/tmp/bpd-site${PYTHONPATH:+:$PYTHONPATH}
    fi
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
else
    { python3 -m venv .venv && .venv/bin/pip install -q -e ".[dev]"; } || exit 2
    PY=.venv/bin/python
fi

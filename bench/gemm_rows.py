"""What one compiled matrix product costs at 1, 4 and 8 rows: the verify pass multiplies k rows by each weight
where a greedy step multiplies one (issue: why a k = 4 round costs more than its bytes say).

A bias-free linear layer (``--n`` outputs, ``--k`` inputs; the demo model's vocabulary projection by default)
compiled as the compiled decode path compiles (``compiling.compile_options``: freezing, inductor's CPU GEMM
template), with optional extra inductor settings (``--patch``, a Python dict literal), timed at each row count
(the median of 7 runs of 200 calls), beside the eager product (ATen).

    python bench/gemm_rows.py                                 # 8000 x 256, the template's own choices
    python bench/gemm_rows.py --patch "{'cpp.gemm_max_k_slices': 2}"
"""

from __future__ import annotations

import argparse
import ast
import time

import torch


def median_us(fn, x: torch.Tensor) -> float:
    for _ in range(50):
        fn(x)
    runs = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(200):
            fn(x)
        runs.append((time.perf_counter() - t0) / 200)
    return sorted(runs)[3] * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8000)
    ap.add_argument("--k", type=int, default=256)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--patch", default="{}", help="extra inductor settings, e.g. \"{'cpp.gemm_max_k_slices': 2}\"")
    args = ap.parse_args()

    import torch._inductor.config as inductor

    from bpd.decoding.compiling import compile_options

    torch.set_num_threads(args.threads)
    patch = ast.literal_eval(args.patch)
    lin = torch.nn.Linear(args.k, args.n, bias=False).eval()
    print(f"{args.n} x {args.k}, {torch.backends.cpu.get_cpu_capability()}, {args.threads} threads, patch {patch}")
    with torch.inference_mode():
        for m in args.rows:
            x = torch.randn(m, args.k)
            with compile_options(gpu=False), inductor.patch(**patch):
                torch._dynamo.reset()
                compiled = torch.compile(lin, fullgraph=True, dynamic=False)
                compiled(x)
            print(f"m={m}: compiled {median_us(compiled, x):.0f} us, eager {median_us(lin, x):.0f} us", flush=True)


if __name__ == "__main__":
    main()

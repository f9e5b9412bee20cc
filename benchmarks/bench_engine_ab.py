"""Two library trees, one host, alternately: the trainer's milliseconds per GD iteration at the book's shapes.

    python benchmarks/bench_engine_ab.py --src before=/path/to/old/src --src after=src [--rounds 3]
                                         [--iterations 60] [--out DIR]

For an engine change (an A/B, not a timed test): each round starts one fresh process per tree
(order A, B, then B, A, ...; one torch thread each, so load drifts hit both alike), which imports
``resgd`` from that tree and times, after a warm-up, ``train_gd`` (one run) at the experiment
pages' shapes and ``train_stacked`` (16 runs) at the robustness map's. Inputs are seeded random
tensors of the pages' shapes (the time of a step does not depend on the values). The median over
rounds per tree and shape, and after/before, are printed under the CPU's name and written as
``engine_ab.csv`` (``--out``, default ``benchmarks/results``).
``$RESGD_MKL_INTEL_PATH=1`` preloads MKL's Intel-path stub into both trees' processes alike.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from report import publish_table  # benchmarks/ is on sys.path when a script runs

# name: (d, n tokens, N samples, layers, pooling, runs in the stack); d_qk = 16, m = 64 as the pages
SHAPES = {
    "jena L=1": (11, 24, 128, 1, "none", 1),
    "jena L=10": (11, 24, 64, 10, "none", 1),
    "sst2 L=1": (50, 16, 128, 1, "mean", 1),
    "sst2 L=10": (50, 16, 64, 10, "mean", 1),
    "map jena R=16": (11, 8, 16, 1, "none", 16),
    "map sst2 R=16": (50, 8, 16, 2, "mean", 16),
}


def child(iterations: int) -> dict[str, float]:
    """In the tree on ``sys.path``: ms per iteration for every shape, on one torch thread."""
    from resgd.infra.threads import torch_threads

    with torch_threads(1):
        return {name: _ms_per_iteration(shape, iterations) for name, shape in SHAPES.items()}


def _ms_per_iteration(shape: tuple, iterations: int) -> float:
    """``train_gd`` (one run) or ``train_stacked`` (R runs, β spread over [0, 1]) on seeded inputs."""
    import torch

    from resgd.core.model import ModelConfig, init_params
    try:
        from resgd.core.trainer import GDConfig, train_gd, train_stacked
    except ImportError:  # older trees: the trainer in stacked.py, GD's settings in train.py
        from resgd.core.stacked import train_stacked
        from resgd.core.train import GDConfig
        try:
            from resgd.core.stacked import train_gd
        except ImportError:  # trees before the one trainer kept it in train.py
            from resgd.core.train import train_gd

    d, n, N, L, pooling, R = shape
    g = torch.Generator().manual_seed(0)
    X = torch.randn(N, n, d, generator=g, dtype=torch.float64)
    Y = torch.randn((N, 1) if pooling == "mean" else (N, n, 1), generator=g, dtype=torch.float64)
    mask = None
    if pooling == "mean":
        lengths = torch.randint(n // 2, n + 1, (N,), generator=g)
        mask = torch.arange(n)[None, :] < lengths[:, None]
    models = [ModelConfig(d=d, d_qk=16, m=64, k=1, n_layers=L, beta=b, pooling=pooling)
              for b in ([0.3] if R == 1 else [i / (R - 1) for i in range(R)])]
    params = [init_params(cfg, seed) for seed, cfg in enumerate(models)]

    def run(T: int) -> None:
        gd = GDConfig(lr=1e-6, iterations=T)
        if R == 1:
            train_gd(params[0], models[0], X, Y, gd, mask)
        else:
            train_stacked(params, models, X, Y, [gd] * R, mask)

    run(5)  # warm-up (and, for trees that had one, the compiled step's build)
    start = time.perf_counter()
    run(iterations)
    return 1e3 * (time.perf_counter() - start) / (iterations + 1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", default=[], metavar="NAME=PATH",
                        help="a library tree (the folder holding resgd/); give two")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.iterations)))
        return
    trees = dict(item.split("=", 1) for item in args.src)
    if len(trees) != 2 or not all((Path(p) / "resgd").is_dir() for p in trees.values()):
        parser.error("--src NAME=PATH twice, each PATH a folder holding resgd/")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if env.get("RESGD_MKL_INTEL_PATH") == "1":
        from resgd.infra import mkl_path
        env = dict(mkl_path.child_env(env))
    names = list(trees)
    rows = []
    for r in range(args.rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            proc = subprocess.run([sys.executable, __file__, "--child", "--iterations", str(args.iterations)],
                                  env=dict(env, PYTHONPATH=str(Path(trees[name]).resolve())),
                                  capture_output=True, text=True, check=True)
            for shape, ms in json.loads(proc.stdout.strip().splitlines()[-1]).items():
                rows.append(dict(round=r, tree=name, shape=shape, ms_per_iteration=ms))
    table = pd.DataFrame(rows).groupby(["shape", "tree"], sort=False)["ms_per_iteration"].median().unstack("tree")
    table = table[names]
    table[f"{names[1]}/{names[0]}"] = table[names[1]] / table[names[0]]
    print(f"median of {args.rounds} rounds, ms per iteration")
    publish_table(table.reset_index(), args.out, "engine_ab")


if __name__ == "__main__":
    main()

"""A/B of ``$RESGD_MKL_INTEL_PATH``: our step with MKL's default path and with its Intel path (the stub).

A preload applies to a whole process, so the two variants cannot share one: child processes
run alternately (default, stub, default, stub, …; ``--rounds`` each) on the same cases, each
timing its steps in CPU time of its one thread (less sensitive than wall time to other users of
a shared machine) and returning the median per case, its dense matmul rate and its loss and
gradients on a fixed problem. Reported: the median over rounds per variant, the speed-up, and
the largest relative difference of the loss and gradients between the variants::

    python benchmarks/bench_mkl_path.py [--rounds 3] [--dtypes float64,float32] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = [("jena", 64, 1), ("jena", 1024, 1), ("jena", 8192, 1), ("jena", 64, 10), ("jena", 1024, 10),
         ("sst2", 64, 1), ("sst2", 1024, 1), ("sst2", 64, 10)]


def child(dtypes: list[str], seconds: float) -> dict:
    """Runs in a child process: times per case, the matmul rate, and a loss and gradients to compare."""
    import torch

    sys.path.insert(0, str(HERE))
    from bench_gd import DTYPES, cpu_name, make_case, matmul_rate

    from resgd.infra import mkl_path
    from resgd.core.autograd_reference import autograd_loss_and_grad

    torch.set_num_threads(1)
    out = {"cpu": cpu_name(), "active": mkl_path.active(), "times_ms": {}, "limit_gflops": {}, "values": {}}
    for dname in dtypes:
        dtype = DTYPES[dname]
        out["limit_gflops"][dname] = matmul_rate(dtype, 1024)["median_gflops"]
        for size, N, L in CASES:
            cfg, X, Y, mask, params = make_case(size, N, L, dtype)
            autograd_loss_and_grad(params, cfg, X, Y, mask)
            times, started = [], time.perf_counter()
            while len(times) < 3 or (time.perf_counter() - started < seconds and len(times) < 50):
                t0 = time.thread_time()
                autograd_loss_and_grad(params, cfg, X, Y, mask)
                times.append(time.thread_time() - t0)
            out["times_ms"][f"{dname} {size} N={N} L={L}"] = 1e3 * statistics.median(times)
        cfg, X, Y, mask, params = make_case("sst2", 64, 2, dtype, seed=1)
        loss, grads, _ = autograd_loss_and_grad(params, cfg, X, Y, mask)
        out["values"][dname] = {"loss": float(loss), **{k: v.flatten().tolist() for k, v in grads.items()}}
    return out


def max_rel_diff(a: dict, b: dict) -> float:
    worst = 0.0
    for name, ref in a.items():
        ref = ref if isinstance(ref, list) else [ref]
        got = b[name] if isinstance(b[name], list) else [b[name]]
        scale = max(abs(x) for x in ref) or 1e-300
        worst = max(worst, max(abs(x - y) for x, y in zip(ref, got)) / scale)
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtypes", default="float64")
    parser.add_argument("--seconds", type=float, default=1.0, help="timing per case and child")
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    dtypes = args.dtypes.split(",")
    if args.child:
        print(json.dumps(child(dtypes, args.seconds)))
        return 0

    from resgd.infra import mkl_path

    base = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", mkl_path.ENV)}
    envs = {"default": base, "intel_path": mkl_path.child_env({**base, mkl_path.ENV: "1"})}
    results = {name: [] for name in envs}
    load = [os.getloadavg()]
    for _ in range(args.rounds):
        for name, env in envs.items():
            done = subprocess.run([sys.executable, __file__, "--child", "--dtypes", args.dtypes, "--seconds", str(args.seconds)],
                                  env=env, capture_output=True, text=True, check=True)
            results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
        load.append(os.getloadavg())
    assert not any(r["active"] for r in results["default"]) and all(r["active"] for r in results["intel_path"])
    rows = []
    for case in results["default"][0]["times_ms"]:
        a = statistics.median(r["times_ms"][case] for r in results["default"])
        b = statistics.median(r["times_ms"][case] for r in results["intel_path"])
        rows.append({"case": case, "default_ms": a, "intel_path_ms": b, "speedup": a / b})
    limits = {d: {name: statistics.median(r["limit_gflops"][d] for r in results[name]) for name in envs} for d in dtypes}
    diffs = {d: max_rel_diff(results["default"][0]["values"][d], results["intel_path"][0]["values"][d]) for d in dtypes}
    cpu = results["default"][0]["cpu"]  # named by the child (bench_gd.cpu_name): the parent imports no torch
    print(f"{cpu}, 1 thread, {args.rounds} rounds each, load average {load[0][0]:.1f} → {load[-1][0]:.1f}")
    print("| case | MKL default (ms) | Intel path (ms) | speed-up |\n|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['case']} | {r['default_ms']:.3g} | {r['intel_path_ms']:.3g} | {r['speedup']:.2f}× |")
    for d in dtypes:
        print(f"dense matmul {d}: {limits[d]['default']:.0f} → {limits[d]['intel_path']:.0f} GFLOP/s; "
              f"largest relative difference of loss and gradients: {diffs[d]:.1e}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from resgd.infra.atomic import write_json

    write_json(out / "bench_mkl_path.json", {"cpu": cpu, "load": load, "rows": rows, "limits": limits, "max_rel_diff": diffs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

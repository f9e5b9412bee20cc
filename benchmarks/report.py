"""Markdown tables for benchmarks/README.md from a bench_gd.json written by bench_gd.py.

    python benchmarks/report.py [benchmarks/results/bench_gd.json]   # prints Markdown
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent


def publish_table(table: pd.DataFrame, out: str | Path, name: str) -> None:
    """Write ``table`` atomically as ``out/name.csv`` and print it under the CPU's name (model,
    family/model numbers: the two 'AMD EPYC' kinds differ 2x in float64 matmul rate) and the load."""
    import os

    import torch

    from resgd.infra.atomic import atomic_path
    from resgd.core.engine import cpu_id

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / f"{name}.csv") as tmp:
        table.to_csv(tmp, index=False)
    print(f"\nCPU: {cpu_id()}, torch {torch.__version__}, 1 thread, load {os.getloadavg()[0]:.1f}\n")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))


def case_order(index: tuple) -> tuple:
    """threads, then float64 before float32, then size, L, N."""
    threads, dtype, size, L, N = index
    return threads, dtype != "float64", size, L, N


def main_table(rows: pd.DataFrame) -> str:
    """One line per case: ms/step of ours and of the nn baseline, ratios, GFLOP/s, fraction of the limit."""
    key = ["threads", "dtype", "size", "L", "N"]
    step = rows.pivot_table(index=key, columns="impl", values="step_ms")
    gflops = rows[rows["impl"] == "ours"].set_index(key)["gflops"]
    frac = rows.pivot_table(index=key, columns="impl", values="frac_of_limit")
    lines = ["| threads | dtype | size | L | N | ours ms/step | nn ms/step | nn / ours | autograd / ours | MHA / ours | ours GFLOP/s | ours / limit | nn / limit |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for index in sorted(step.index, key=case_order):
        threads, dtype, size, L, N = index
        ours = step.loc[index, "ours"]

        def ratio(other):
            value = step.loc[index, other] if other in step.columns else float("nan")
            return "–" if pd.isna(value) else f"{value / ours:.2f}×"

        lines.append(f"| {threads} | {dtype} | {size} | {L} | {N} | {ours:.3g} | {step.loc[index, 'nn']:.3g} | **{ratio('nn')}** "
                     f"| {ratio('ours_autograd')} | {ratio('mha')} | {gflops.loc[index]:.1f} | {100 * frac.loc[index, 'ours']:.0f} % "
                     f"| {100 * frac.loc[index, 'nn']:.0f} % |")
    return "\n".join(lines)


def peers_table(rows: pd.DataFrame, floor: bool = True) -> str:
    """Ours, the torch.nn baseline and the JAX peer side by side, with the matmul limit and our kernels' rate.

    "step / kernels" is the whole step's rate as a fraction of the rate of its own matrix-product
    kernels (= the kernels' share of the profiled step): 100 % would mean nothing but matmuls.
    ``floor=False`` leaves out the two profiler columns (wall time: meaningless when the steps were
    timed in CPU time on a busy machine).
    """
    key = ["threads", "dtype", "size", "L", "N"]
    step = rows.pivot_table(index=key, columns="impl", values="step_ms")
    ours = rows[rows["impl"] == "ours"].set_index(key)
    jax = rows[rows["impl"] == "jax"].set_index(key)
    lines = ["| threads | dtype | size | L | N | ours ms | nn ms | JAX ms | nn / ours | JAX / ours | JAX compile (s) "
             "| ours / limit | JAX / limit |" + (" kernels / limit | step / kernels |" if floor else ""),
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if floor else "")]

    def cell(value, fmt):
        return "–" if pd.isna(value) else format(value, fmt)

    for index in sorted(step.index, key=case_order):
        threads, dtype, size, L, N = index
        o = ours.loc[index]
        nn = step.loc[index].get("nn", float("nan"))
        jx = step.loc[index].get("jax", float("nan"))
        j = jax.loc[index] if index in jax.index else {}
        kernels = o.get("matmul_gflops", float("nan")) / o["limit_gflops"]
        lines.append(f"| {threads} | {dtype} | {size} | {L} | {N} | {o['step_ms']:.3g} | {cell(nn, '.3g')} | {cell(jx, '.3g')} "
                     f"| **{cell(nn / o['step_ms'], '.2f')}×** | **{cell(jx / o['step_ms'], '.2f')}×** "
                     f"| {cell(j.get('compile_s', float('nan')), '.2f')} | {100 * o['frac_of_limit']:.0f} % "
                     f"| {cell(100 * j.get('frac_of_limit', float('nan')), '.0f')} % |"
                     + (f" {cell(100 * kernels, '.0f')} % | {cell(100 * o.get('matmul_share', float('nan')), '.0f')} % |"
                        if floor else ""))
    return "\n".join(lines)


def matmul_floor_table(rows: pd.DataFrame) -> str:
    """Where our step's time goes: its matrix-product kernels against everything else, and the 3× target."""
    key = ["threads", "dtype", "size", "L", "N"]
    ours = rows[rows["impl"] == "ours"].set_index(key)
    if "matmul_ms" not in ours.columns:
        return ""
    nn = rows[rows["impl"] == "nn"].set_index(key)["step_ms"]
    lines = ["| threads | dtype | size | L | N | ours ms/step | in matmul kernels (ms) | share | matmul-kernel GFLOP/s | kernels / limit "
             "| nn / 3 (ms) | matmul floor vs nn / 3 |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ours = ours.dropna(subset=["matmul_ms"])
    for index in sorted(ours.index, key=case_order):
        r = ours.loc[index]
        threads, dtype, size, L, N = index
        third = nn.get(index, float("nan")) / 3
        lines.append(f"| {threads} | {dtype} | {size} | {L} | {N} | {r['step_ms']:.3g} | {r['matmul_ms']:.3g} | {100 * r['matmul_share']:.0f} % "
                     f"| {r['matmul_gflops']:.1f} | {100 * r['matmul_gflops'] / r['limit_gflops']:.0f} % | {third:.3g} "
                     f"| {100 * r['matmul_ms'] / third:.0f} % |")
    return "\n".join(lines)


def trainer_table(rows: pd.DataFrame) -> str:
    part = rows[rows["impl"].isin(["ours", "ours_train_gd"])]
    wide = part.pivot_table(index=["threads", "dtype", "size", "L", "N"], columns="impl", values="step_ms").dropna()
    wide = wide.loc[sorted(wide.index, key=case_order)].reset_index()
    lines = ["| dtype | size | L | N | autograd_loss_and_grad + update (ms) | train_gd per iteration (ms) | overhead |", "|---|---|---:|---:|---:|---:|---:|"]
    for _, r in wide.iterrows():
        lines.append(f"| {r['dtype']} | {r['size']} | {r['L']} | {r['N']} | {r['ours']:.3g} | {r['ours_train_gd']:.3g} | {100 * (r['ours_train_gd'] / r['ours'] - 1):+.0f} % |")
    return "\n".join(lines)


def map_table(rows: pd.DataFrame) -> str:
    """``bench_map.py``'s rows as the README's table: ms per step of the stack (ours, JAX, the GEMM
    ceiling, from the median rates), JAX time / ours time and the fractions of the ceiling (per-repeat
    medians), then the two targets counted over the shapes (ours ≥ JAX; ours ≥ 60 % of the ceiling)."""
    lines = ["| data | N | L | ours ms/step | JAX ms/step | ceiling ms/step | JAX / ours (time) | ours / ceiling | JAX / ceiling | ours CPU/wall | JAX CPU/wall |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for _, r in rows.iterrows():
        ours_ms = 1e3 * r["R"] / r["run_steps_per_s"]
        flops_ms = ours_ms * r["ours_gflops"]  # the step's GEMM work in GFLOP/s·ms
        lines.append(f"| {r['dataset']} | {r['N']} | {r['L']} | {ours_ms:.2f} | {flops_ms / r['jax_gflops']:.2f} | "
                     f"{flops_ms / r['ceiling_gflops']:.2f} | **{r['jax_over_ours']:.2f}** | {100 * r['of_ceiling']:.0f} % | "
                     f"{100 * r['jax_of_ceiling']:.0f} % | {r['ours_cpu_per_wall']:.2f} | {r['jax_cpu_per_wall']:.2f} |")
    ahead = int((rows["jax_over_ours"] >= 1).sum())
    ceiling = int((rows["of_ceiling"] >= 0.6).sum())
    lines.append(f"\nOurs at least as fast as JAX (JAX / ours ≥ 1): {ahead} of {len(rows)} shapes; "
                 f"ours ≥ 60 % of the ceiling: {ceiling} of {len(rows)}. Largest |loss| and |‖∇Φ‖| difference "
                 f"from JAX (relative): {rows['jax_loss_rel_diff'].max():.1e}, {rows['jax_grad_norm_rel_diff'].max():.1e}; "
                 f"JAX compile {rows['jax_compile_s'].min():.1f}–{rows['jax_compile_s'].max():.1f} s per shape (not timed); "
                 f"load average {rows['load'].min():.1f}–{rows['load'].max():.1f}.")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else HERE / "results" / "bench_gd.json"
    data = json.loads(path.read_text())
    meta = data["meta"]
    rows = pd.DataFrame(data["rows"])
    print(f"Measured {meta['started_utc']} – {meta['finished_utc']} on {meta['machine']['cpu']} "
          f"({meta['machine']['logical_cpus']} logical CPUs), torch {meta['machine']['torch']}, "
          f"load average at start/end {meta['loadavg_start'][0]:.2f}/{meta['loadavg_end'][0]:.2f}; "
          f"{meta.get('clock', 'wall')} time.\n")
    print("Matmul limit: " + ", ".join(f"{x['dtype']} {x['threads']} thread(s): {x['median_gflops']:.0f} GFLOP/s" for x in data["limits"]) + "\n")
    if "jax" in set(rows["impl"]):
        print(peers_table(rows, floor=meta.get("clock", "wall") == "wall") + "\n")
    print(main_table(rows) + "\n")
    floor = matmul_floor_table(rows) if meta.get("clock", "wall") == "wall" else ""
    if floor:
        print(floor + "\n")
    if "ours_train_gd" in set(rows["impl"]):
        print(trainer_table(rows) + "\n")
    if data.get("sweep"):
        print("| sweep mode | wall time (s) | note |\n|---|---:|---|")
        for s in data["sweep"]:
            print(f"| {s['mode']} | {s['wall_s']:.2f} | {s['note']} |")
        print()
    if data.get("compile"):
        print("| case | compile (s) | compiled step (ms) | compiled nn step (ms) | ours (ms) |\n|---|---:|---:|---:|---:|")
        for c in data["compile"]:
            if "error" in c:
                print(f"| {c['size']} N={c['N']} L={c['L']} {c['dtype']} | error: {c['error']} | | | |")
            else:
                print(f"| {c['size']} N={c['N']} L={c['L']} {c['dtype']} | {c['compile_s']:.1f} (nn: {c['compile_nn_s']:.1f}) "
                      f"| {c['compiled_step_ms']:.3g} | {c['compiled_nn_step_ms']:.3g} | {c['ours_step_ms']:.3g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""CPU-seconds of each notebook of a book build: where the build's work goes, whatever its wall time.

    python benchmarks/book_cpu.py [--out benchmarks/results] [--] COMMAND ...   # default: make book

Runs ``COMMAND`` (the book build, ``make book`` by default) and samples every process below it
every ``--every`` seconds (psutil): each process's user + system CPU time, attributed to the notebook
of its nearest ``papermill`` ancestor (the kernel and its worker pool under it), else to ``build``
(the build itself, Sphinx, pip). A process's last sample is its CPU time, so a process that lives
less than one interval is missed (at most about ``--every`` CPU-s each). Two builds of two trees
measured with this script compare their work notebook by notebook, free of the wall-clock effects
of running two notebooks at a time; one run's wall time is CI's, from ``.ci/run``'s stage lines.
Writes ``book_cpu.csv`` (atomically) and prints it with the CPU named.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil

HERE = Path(__file__).resolve().parent
NOTEBOOK = re.compile(r"notebook_inputs/(\w+)\.ipynb")


def owner(proc: psutil.Process, cache: dict[int, str]) -> str:
    """The notebook a process works for: its nearest papermill ancestor's input, else ``build``."""
    chain = []
    current: psutil.Process | None = proc
    while current is not None and current.pid not in cache:
        chain.append(current.pid)
        try:
            found = NOTEBOOK.search(" ".join(current.cmdline())) if "papermill" in " ".join(current.cmdline()) else None
            if found:
                cache[current.pid] = found.group(1)
                break
            current = current.parent()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            current = None
    name = cache.get(current.pid, "build") if current is not None else "build"
    for pid in chain:
        cache[pid] = name
    return name


def sample(root: psutil.Process, seen: dict[int, tuple[str, float]], owners: dict[int, str]) -> None:
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            times = proc.cpu_times()
            seen[proc.pid] = (owner(proc, owners), times.user + times.system)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def measure(command: list[str], every: float) -> tuple[pd.DataFrame, float, int]:
    start = time.perf_counter()
    proc = subprocess.Popen(command)
    root = psutil.Process(proc.pid)
    seen: dict[int, tuple[str, float]] = {}
    owners: dict[int, str] = {}
    while proc.poll() is None:
        sample(root, seen, owners)
        time.sleep(every)
    wall = time.perf_counter() - start
    rows = pd.DataFrame([{"part": name, "cpu_s": cpu} for name, cpu in seen.values()])
    table = rows.groupby("part", as_index=False).agg(cpu_s=("cpu_s", "sum"), processes=("cpu_s", "size"))
    return table.sort_values("part", ignore_index=True), wall, proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between samples (default 0.5)")
    parser.add_argument("command", nargs="*", default=["make", "book"])
    args = parser.parse_args(argv)
    from report import publish_table

    table, wall, status = measure(args.command or ["make", "book"], args.every)
    table = pd.concat([table, pd.DataFrame([{"part": "all", "cpu_s": table["cpu_s"].sum(),
                                             "processes": table["processes"].sum()}])], ignore_index=True)
    publish_table(table, args.out, "book_cpu")
    print(f"wall {wall:.0f} s, exit {status}")
    return status


if __name__ == "__main__":
    sys.exit(main())

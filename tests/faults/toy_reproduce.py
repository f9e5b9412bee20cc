"""``python -m resgd reproduce`` with one small part that goes through the real pipeline.

Run as a script: ``python toy_reproduce.py ROOT PAUSE_S [--jobs N] [--wait-for-go]``. The part ``toy`` sweeps six
toy-data training runs through the experiments' cached sweep (run cache, per-entry locks, worker
processes) and publishes their table with :func:`resgd.pipeline.reproduce.reproduce_part`, as the
jena and sst2 parts do, in seconds instead of minutes. ``PAUSE_S`` paces the training (a sleep
after each run, printed as ``computed``) so that a test can interrupt the run between entries.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace


def toy_part(quick, figures_dir, *, n_jobs, scheduler):
    from resgd.core.model import ModelConfig
    from resgd.core.trainer import GDConfig
    from resgd.data.spec import DatasetSpec
    from resgd.experiments import runs
    from resgd.experiments.configuration import RunConfig
    from resgd.pipeline.reproduce import Outputs, reproduce_part

    spec = DatasetSpec("toy", n_train=6, n_tokens=4, n_test=4, seed=0)
    base = RunConfig(spec, ModelConfig(d=6, d_qk=3, m=5, beta=1.0),
                        GDConfig(lr=0.05, iterations=8, reduction="mean", record_every=4))
    configs = [replace(base, seed=s) for s in range(6)]

    def compute():
        table = runs.sweep(configs, n_jobs=n_jobs, scheduler=scheduler)
        return Outputs(result_files={"runs": ("toy/runs.csv", lambda tmp: table.to_csv(tmp, index=False))})

    return reproduce_part(compute, figures_dir=figures_dir, writes_results=True)


def main(argv: list[str]) -> int:
    from resgd import cli
    from resgd.experiments import runs

    root, pause = argv[0], float(argv[1])
    original = runs._compute_stack

    def paced(configs):  # the real training, then a pause in which the test may interrupt
        out = original(configs)
        print("computed", len(configs), flush=True)
        time.sleep(pause)
        return out

    runs._compute_stack = paced
    runs.MAX_STACK = 1  # one run per entry computation, so that an interrupt falls between entries
    if "--wait-for-go" in argv:  # a test starts two runs together: each says "ready", then waits for a line
        argv = [a for a in argv if a != "--wait-for-go"]
        print("ready", flush=True)
        sys.stdin.readline()
    return cli.main(["reproduce", "--only", "toy", "--figures-dir", f"{root}/figures", "--results-dir",
                     f"{root}/results", *argv[2:]], parts={"toy": toy_part})


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

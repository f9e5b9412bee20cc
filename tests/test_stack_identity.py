"""A run's numbers do not depend on the stack it was trained in — bit for bit.

At the map's shapes (``tests/engine_cases.py``): each run trained alone, and inside stacks of 2 and
13 runs (where it and its neighbours may diverge and leave, so a stack shrinks to one mid-run),
against the same run inside a stack of 16, under one and two torch threads. Every member of a
trained stack is compared, so two rotations of the 13-stack (the map's five runs, each two or three
times; one rotation led by the run that diverges first) put each run at four or more of its 13
positions. Deleting one cache entry and recomputing it alone must not change a byte of the
published tables.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import engine_cases as cases
from resgd.core.trainer import train_stacked
from resgd.infra.threads import torch_threads

ITERATIONS = 12  # run 3 diverges at t = 1, run 1 later at some depths: stacks shrink, to one too


def _train(stack, order):
    params, models, X, Y, gds, mask = stack
    return train_stacked([params[i] for i in order], [models[i] for i in order], X, Y, [gds[i] for i in order], mask)


def _same(a, b) -> bool:
    if a.params is None or b.params is None:
        same_params = a.params is None and b.params is None
    else:
        same_params = all(bool((a.params[k] == b.params[k]).all()) for k in a.params)
    ha, hb = cases.history_array(a.history), cases.history_array(b.history)
    return same_params and a.diverged == b.diverged and ha.shape == hb.shape and np.array_equal(ha, hb, equal_nan=True)


@pytest.mark.parametrize("kind,L,N,threads", [("jena", 2, 16, 1), ("jena", 2, 16, 2), ("sst2", 1, 16, 1),
                                               ("sst2", 2, 32, 2), ("jena", 10, 16, 1)])
def test_a_run_is_bit_identical_alone_and_in_any_stack(kind, L, N, threads):
    params, models, X, Y, gds, mask = cases.map_stack(kind, L, N)
    stack = (params, models, X, Y, [replace(g, iterations=ITERATIONS) for g in gds], mask)
    R = len(params)
    with torch_threads(threads):
        sixteen = _train(stack, [i % R for i in range(16)])
        for size, rotations in ((1, range(R)), (2, range(R)), (13, (0, 3))):
            for r in rotations:
                order = [(r + j) % R for j in range(size)]
                for position, got in enumerate(_train(stack, order)):
                    assert _same(got, sixteen[order[position]]), (kind, L, N, r, size, position)
    assert any(run.diverged for run in sixteen) and not all(run.diverged for run in sixteen)

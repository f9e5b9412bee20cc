"""Torch's intra-op thread count for one block of work, restored afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run the block with ``threads`` intra-op threads (``None``: leave torch's setting), then restore it.

    The library's matrices are small (d ≤ 50, a few dozen tokens): one thread is as fast as
    several on an idle machine, and on a shared 2-core machine a second OpenMP thread makes each
    step many times slower (10–20× measured while another job ran).
    """
    if threads is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        torch.set_num_threads(previous)

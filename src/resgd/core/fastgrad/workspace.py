"""Buffers reused from call to call: a GD loop must not page-fault fresh memory every step.

One set per thread, for the last shapes seen: internal scratch (:class:`Scratch`) and the
returned trace tensors, recycled once the caller has let go of them (:func:`output`). Measured:
up to 1.5× at large N (``benchmarks/README.md``).
"""

from __future__ import annotations

import threading

import torch


class Workspace(threading.local):
    """Per-thread buffers for the last shapes seen: internal scratch, and recycled output tensors."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.scratch: dict[str, torch.Tensor] = {}
        self.outputs: dict[tuple, list[torch.Tensor]] = {}
        self.shifted: dict[int, bool] = {}  # per layer: did its softmax need the max-shift last time?

    def select(self, key: tuple) -> None:
        if key != self.key:
            self.key, self.scratch, self.outputs, self.shifted = key, {}, {}, {}


WORKSPACE = Workspace()
_MAX_RECYCLED = 2  # per output shape: the trainer holds one trace while the next is computed
_use_count = getattr(torch._C, "_storage_Use_Count", None)


def clear_workspace() -> None:
    """Free the buffers the calling thread keeps for reuse (kept for the last shapes only)."""
    WORKSPACE.key, WORKSPACE.scratch, WORKSPACE.outputs, WORKSPACE.shifted = None, {}, {}, {}


def output(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialised tensor for a returned value, recycled once nothing refers to it any more.

    Returned tensors (the trace) are handed out as views of pooled tensors; the storage's use
    count says whether any view is still alive anywhere (the pool's own tensor plus the
    temporary storage object count 2). Recycling spares a GD loop from page-faulting fresh
    memory every step, which costs as much as a third of a step at large N.
    """
    if _use_count is None:
        return torch.empty(shape, dtype=dtype, device=device)
    pool = WORKSPACE.outputs.setdefault((shape, dtype, device), [])
    for tensor in pool:
        if _use_count(tensor.untyped_storage()._cdata) == 2:
            return tensor.view(shape)
    tensor = torch.empty(shape, dtype=dtype, device=device)
    if len(pool) < _MAX_RECYCLED:
        pool.append(tensor)
        return tensor.view(shape)
    return tensor


class Scratch:
    """Internal buffers sized for a full chunk, reused across chunks and calls; views cached."""

    def __init__(self, store: dict, c_full: int, n: int, dtype: torch.dtype, device: torch.device):
        self.store, self.c_full, self.n, self.dtype, self.device = store, c_full, n, dtype, device

    def tokens(self, name: str, width: int, c: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A (c·n, width) buffer and its (c, n, width) view."""
        entry = self.store.get(name)
        if entry is None:
            batched = torch.empty((self.c_full, self.n, width), dtype=self.dtype, device=self.device)
            entry = self.store[name] = (batched.view(self.c_full * self.n, width), batched)
        if c == self.c_full:
            return entry
        batched = entry[1][:c]
        return batched.view(c * self.n, width), batched

    def rows(self, name: str, c: int, *tail: int) -> torch.Tensor:
        """A (c, *tail) buffer."""
        entry = self.store.get(name)
        if entry is None:
            entry = self.store[name] = torch.empty((self.c_full, *tail), dtype=self.dtype, device=self.device)
        return entry if c == self.c_full else entry[:c]

    def fixed(self, name: str, *shape: int) -> torch.Tensor:
        """A buffer of a fixed shape."""
        entry = self.store.get(name)
        if entry is None:
            entry = self.store[name] = torch.empty(shape, dtype=self.dtype, device=self.device)
        return entry



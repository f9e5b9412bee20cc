"""A check run in the background while a block waits on other processes: the sweep's watch for
stopped local workers (:mod:`.sweep`) and for silent Dask workers (:mod:`.dask_backend`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def polling(every_s: float, check: Callable[[], None], name: str) -> Iterator[None]:
    """Run ``check()`` every ``every_s`` seconds in a daemon thread named ``name`` (the first call
    after ``every_s``) until the block ends; the thread holds no lock and ends with the block."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(every_s):
            check()

    threading.Thread(target=loop, name=name, daemon=True).start()
    try:
        yield
    finally:
        done.set()

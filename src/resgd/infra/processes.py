"""What the package asks ``/proc`` (Linux) about local processes: whether one is gone or stopped (a
lock's holder, a worker), when it started (a temporary file's writer, against pid reuse), and which
processes run below it (a sweep's workers). Elsewhere ``/proc`` is missing and each answer says
"unknown" the way its caller expects. Two other places ask about processes or the machine: the
notebook runner ends a kernel's children with psutil (:mod:`resgd.publish.notebook_run`) and the
engine reads the CPU's name from ``/proc/cpuinfo`` (:func:`resgd.core.engine.cpu_id`).
"""

from __future__ import annotations

import os
from pathlib import Path


def _fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3, the state, comes first);
    None when the process is gone. The name is cut at its last ')' (it may hold spaces and parentheses)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None


def state(pid: int) -> str:
    """``"gone"``, ``"stopped"`` (SIGSTOP, Ctrl-Z, a tracer) or ``"running"`` (also when unknown)."""
    try:
        fields = _fields(pid)
    except (OSError, IndexError):
        return "running"
    if fields is None:
        return "gone"
    return "gone" if fields[0] in ("Z", "X") else "stopped" if fields[0] in ("T", "t") else "running"


def start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch, exact to about a second); None if unknown."""
    try:
        fields = _fields(pid)
        if fields is None:
            return None
        ticks = int(fields[19])  # field 22, starttime, in clock ticks since boot
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def descendants(pid: int) -> list[int]:
    """The processes below ``pid``, children first (none where ``/proc`` is missing)."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if entry.name.isdigit():
            try:
                fields = _fields(int(entry.name))
            except (OSError, IndexError):
                continue
            if fields is not None:
                parents.setdefault(int(fields[1]), []).append(int(entry.name))  # field 4, the parent's pid
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found

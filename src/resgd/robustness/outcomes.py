"""What happened to a run: it **learns**, it **stalled**, or it **diverged** — three outcomes, never two.

A run whose loss does not fall is not a diverged run (its loss is finite) and says nothing about a
step size being "stable" (a flat landscape tolerates any step). The rule, fixed before the map's
runs: a run (or a stability probe) is

* ``diverged`` when the trainer stopped it (Φ above 10⁶ Φ(θ⁰) or not finite) or any loss is not
  finite;
* ``stalled`` when Φ(T) > (1 − ``stall_drop``) · Φ(0): it lost less than ``stall_drop`` of its
  starting loss over its iterations (this includes a finite loss that rose);
* ``learns`` otherwise.
"""

from __future__ import annotations

import numpy as np

OUTCOMES = ("learns", "stalled", "diverged")


def outcome(loss, diverged: bool, stall_drop: float) -> str:
    """The outcome of one run from its loss curve ``loss`` (Φ(0) first) and the trainer's flag."""
    loss = np.asarray(loss, dtype=float)
    if diverged or loss.size < 2 or not np.isfinite(loss).all():
        return "diverged"
    return "stalled" if loss[-1] > (1.0 - stall_drop) * loss[0] else "learns"

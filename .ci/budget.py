#!/usr/bin/env python3
"""CI's time guard: name this machine's CPU, and each stage that overran its budget.

    python3 .ci/budget.py cpu                 # the CPU line .ci/run prints first
    python3 .ci/budget.py check STAGE SECONDS # after a stage: its time against .ci/budget.json

CI's hosts differ (the slowest ran the build 3.4x slower than a Zen 4), so a budget is per CPU
kind: vendor, family and model as /proc/cpuinfo gives them. A stage over 1.5x its budget is named
in one line that starts with ``ci: OVER BUDGET``; it does not fail the run (CI's own limit does
that), it says where the time went. A CPU kind without a budget is compared with the slowest kind
the file knows, and says so. Standard library only: it runs before the project is installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BUDGET = Path(__file__).with_name("budget.json")
OVERRUN = 1.5


def cpu() -> tuple[str, str]:
    """(kind, model name): the kind is ``<vendor> family <f> model <m>``, the budget file's key."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("vendor_id", "cpu family", "model", "model name") and key not in fields:
                fields[key] = value.strip()
            if not line.strip() and fields:
                break  # the first processor is enough
    except OSError:
        pass
    kind = f"{fields.get('vendor_id', '?')} family {fields.get('cpu family', '?')} model {fields.get('model', '?')}"
    return kind, fields.get("model name", "unknown CPU")


def load(path: Path = BUDGET) -> dict:
    try:
        budget = json.loads(path.read_text(encoding="utf8"))
        kinds = budget["kinds"]
        for kind, entry in kinds.items():
            for stage, seconds in entry["stages"].items():
                if not isinstance(seconds, (int, float)) or seconds <= 0:
                    raise ValueError(f"kinds.{kind}.stages.{stage}: expected seconds > 0, got {seconds!r}")
        return budget
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SystemExit(f"ci: budget: {path}: {err}") from None


def budget_for(budget: dict, kind: str) -> tuple[dict, str]:
    """The stage budgets of ``kind``, else of the slowest kind the file knows (by the book's budget)."""
    kinds = budget["kinds"]
    if kind in kinds:
        return kinds[kind]["stages"], kind
    slowest = max(kinds, key=lambda k: kinds[k]["stages"].get("book", 0))
    return kinds[slowest]["stages"], f"{slowest} (no budget for {kind}: the slowest kind's)"


def check(stage: str, seconds: float, budget: dict, kind: str) -> str:
    stages, source = budget_for(budget, kind)
    if stage not in stages:
        return f"ci: budget: stage {stage} has no budget ({source})"
    allowed = stages[stage]
    if seconds > OVERRUN * allowed:
        return (f"ci: OVER BUDGET: stage {stage} took {seconds:.0f} s, {seconds / allowed:.1f}x its budget of "
                f"{allowed:.0f} s on {source} (named above {OVERRUN:g}x)")
    return f"ci: budget: stage {stage} {seconds:.0f} s of {allowed:.0f} s ({source})"


def main(argv: list[str]) -> int:
    kind, name = cpu()
    if argv[:1] == ["cpu"]:
        print(f"ci: cpu: {name} ({kind})")
        return 0
    if len(argv) == 3 and argv[0] == "check":
        try:
            seconds = float(argv[2])
        except ValueError:
            raise SystemExit(f"ci: budget: seconds must be a number, got {argv[2]!r}") from None
        print(check(argv[1], seconds, load(), kind))
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

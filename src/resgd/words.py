"""Counts in the book's sentences: "1 seed", "3 seeds", "1 is", "2 are".

Why: the pages glue counts that a preset or a result can make 0 or 1 next to fixed words, and a
sentence such as "1 are both in the regime" then reads as a bug. A page glues the count with its noun
or verb (:func:`count_noun`), or the verb alone where the count stands apart from it (:func:`agree`).
"""

from __future__ import annotations

import math
import numbers


def _whole(n) -> int:
    """``n`` as an int; a whole float is accepted (pandas turns a row's counts into floats)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Real) or not math.isfinite(n) or int(n) != n:
        raise ValueError(f"a count must be a whole number, got {n!r}")
    return int(n)


def agree(n: int, singular: str, plural: str | None = None) -> str:
    """The word that agrees with the count ``n``: ``singular`` for 1, ``plural`` (default
    ``singular + "s"``) for 0 and more; e.g. ``agree(1, "is", "are")`` is "is"."""
    return singular if _whole(n) == 1 else (singular + "s" if plural is None else plural)


def count_noun(n: int, singular: str, plural: str | None = None) -> str:
    """``n`` and the word that agrees with it: ``count_noun(1, "seed")`` is "1 seed",
    ``count_noun(0, "seed")`` "0 seeds", ``count_noun(2, "point is", "points are")`` "2 points are"."""
    return f"{_whole(n)} {agree(n, singular, plural)}"

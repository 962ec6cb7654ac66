"""What is computed from a run's records, kept for the records list it was last computed from: a
report fits, tabulates and draws one run several times, and a fleet's file holds 100,000 records."""

from __future__ import annotations

from functools import wraps
from typing import Callable, TypeVar

T = TypeVar("T")


def for_the_last_records(compute: Callable[[list], T]) -> Callable[[list], T]:
    """compute(records), computed again only for another list, or the same one grown or cut."""
    last: list = [None, -1, None]  # the records, their count, compute's answer

    @wraps(compute)
    def remembered(records: list) -> T:
        if last[0] is not records or last[1] != len(records):
            last[:] = [records, len(records), compute(records)]
        return last[2]
    return remembered

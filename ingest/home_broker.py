"""A replicated partition's name by its home broker, and where a new name starts when a reassignment moves it.

Wherever the 0.7 model names a partition ``(broker_id, partition)`` (the loader's committed state, a 0.7
consumer group's offset znodes, the mirror's mapping and checkpoints), a replicated partition is named by
its *home* broker, the first replica of its assignment: the name survives leader changes. Only a
reassignment that moves the first replica changes it. Every replica holds the same log, offset for offset,
so the record kept under an earlier home of the same topic and partition tells where the new name starts:
the furthest of them (a partition moved twice has two). The callers decide which records are of the same
topic, and what "furthest" measures (:func:`furthest_former`).
"""
from __future__ import annotations

from typing import Callable, Iterable, TypeVar

R = TypeVar("R")


def furthest_former(records: Iterable[tuple[int, int, R]], home: int, partition: int,
                    offset: Callable[[R], int]) -> tuple[int, R] | None:
    """``(former home, record)`` of the record of ``partition`` kept under a home broker other than ``home``
    whose ``offset`` is furthest, from ``records`` of one topic as ``(home broker, partition, record)``;
    None when there is none."""
    best: tuple[int, R] | None = None
    for h, p, rec in records:
        if p == partition and h != home and (best is None or offset(rec) > offset(best[1])):
            best = (h, rec)
    return best

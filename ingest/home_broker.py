"""A replicated partition's name by its home broker, and where a new name starts when a reassignment moves it.

Wherever the 0.7 model names a partition ``(broker_id, partition)`` (the loader's committed state, a 0.7
consumer group's offset znodes, the mirror's mapping and checkpoints), a replicated partition is named by
its *home* broker, the first replica of its assignment: the name survives leader changes. Only a
reassignment that moves the first replica changes it. Every replica holds the same log, offset for offset,
so the record kept under an earlier home of the same topic and partition tells where the new name starts:
the furthest of them (a partition moved twice has two). The callers decide which records are of the same
topic, and what "furthest" measures (:func:`furthest_former`); records kept in ZooKeeper, one znode per
``broker_id-partition`` (a consumer group's offsets, the mirror's checkpoints), are listed by
:func:`furthest_former_node`.
"""
from __future__ import annotations

from typing import Callable, Iterable, TypeVar

from ingest import znodes

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


def furthest_former_node(zk, directory: str, home: int, partition: int, read: Callable[[int], R | None],
                         offset: Callable[[R], int]) -> tuple[int, R] | None:
    """:func:`furthest_former` over the znodes under ``directory`` named ``broker_id-partition``:
    ``read(former_home)`` reads the record of ``partition`` kept under that home (None: not one of the same
    topic, or unreadable). A node that vanished, or a name or value that is not a number, is skipped; no
    ``directory``, no record."""
    from kazoo.exceptions import NoNodeError  # deferred: kazoo

    try:
        names = zk.retry(zk.get_children, directory)
    except NoNodeError:
        return None
    found = []
    for name in names:
        try:
            h, p = znodes.parse_partition_name(name)
            if p != partition or h == home:
                continue
            rec = read(h)
        except (NoNodeError, ValueError):
            continue
        if rec is not None:
            found.append((h, p, rec))
    return furthest_former(found, home, partition, offset)

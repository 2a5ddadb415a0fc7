"""Checkpoint: one znode per mirrored partition, (source offset, target offset) + the counter's state.

``znodes.mirror_checkpoint_path(group, source, topic, broker_id, partition)`` holds JSON::

    {"source_offset": 4096, "target_offset": 1024, "target_partition": 3,
     "tally": [segment_start, messages] | null, "counts": {...PartitionCounter.state()...} | null,
     "updated_at_ms": 1700000000000, "bounds_from": 512 | null, "pending_lost": [...]}

``bounds_from`` is a target offset (a message boundary) at most 1 MiB below ``target_offset``, where
a lost range's session bounds can be read back after a restart; ``pending_lost`` holds lost-range
records not yet acknowledged by the publisher (re-published after a restart).

``target_offset`` is null for a fallback unit (repartitioned, at least once: only the source
position matters). Every write is conditional on the znode version read (or written) last: a
stale owner's write fails with :class:`~ingest.errors.MirrorOwnershipLostError` and it stops
that partition. The resume rule that uses the checkpoint is in :mod:`ingest.mirror.copier`.

A replicated source partition is named by its home broker, which a reassignment can move: the unit under
the new name then starts from the furthest checkpoint of the same partition kept under a former home and
written for the same target partition (:func:`former_home_checkpoint`, the rule of :mod:`ingest.home_broker`).

Every kazoo call goes through ``client.retry``. A write whose answer a connection loss swallowed
is retried by kazoo with the old version and fails with BadVersion although it succeeded: the
store then reads the znode back and accepts it when it holds exactly the bytes it wrote.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from typing import Any

from ingest import znodes
from ingest.errors import MirrorError, MirrorOwnershipLostError
from ingest.home_broker import furthest_former_node
from ingest.mirror.mapping import MirrorUnit

log = logging.getLogger(__name__)

ABSENT = -1
"""The version of a checkpoint that does not exist yet (the first write creates it)."""


@dataclass(frozen=True)
class Checkpoint:
    """Where a unit's copy stands: source bytes ``[.., source_offset)`` are in the target below ``target_offset``."""

    source_offset: int
    target_offset: int | None
    target_partition: int | None
    tally: tuple[int, int] | None = None
    counts: dict[str, Any] | None = field(default=None, compare=False)
    updated_at_ms: int = 0
    bounds_from: int | None = None
    pending_lost: tuple[dict, ...] = field(default=(), compare=False)

    def to_json(self) -> bytes:
        return json.dumps({
            "source_offset": self.source_offset,
            "target_offset": self.target_offset,
            "target_partition": self.target_partition,
            "tally": list(self.tally) if self.tally is not None else None,
            "counts": self.counts,
            "updated_at_ms": self.updated_at_ms,
            "bounds_from": self.bounds_from,
            "pending_lost": list(self.pending_lost),
        }, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def parse(cls, data: bytes, where: str = "checkpoint") -> "Checkpoint":
        """Parse a checkpoint znode's bytes.

        Raises:
            MirrorError: not JSON of this layout, or negative offsets (names the value).
        """
        try:
            obj = json.loads(data.decode())
            if not isinstance(obj, dict):
                raise TypeError(f"a JSON {type(obj).__name__}, not an object")
            src = obj["source_offset"]
            tgt = obj.get("target_offset")
            tp = obj.get("target_partition")
            tally = obj.get("tally")
            counts = obj.get("counts")
            for name, v, nullable in (("source_offset", src, False), ("target_offset", tgt, True),
                                      ("target_partition", tp, True)):
                if v is None and nullable:
                    continue
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ValueError(f"{name} {v!r} is not an integer >= 0")
            if tally is not None:
                if (not isinstance(tally, list) or len(tally) != 2 or not isinstance(tally[1], int)
                        or not (tally[0] is None or isinstance(tally[0], int))):
                    raise ValueError(f"tally {tally!r} is not [segment_start|null, messages]")
                tally = (tally[0], tally[1])
            if counts is not None and not isinstance(counts, dict):
                raise ValueError(f"counts {counts!r} is not an object")
            bounds = obj.get("bounds_from")
            if bounds is not None and (isinstance(bounds, bool) or not isinstance(bounds, int) or bounds < 0):
                raise ValueError(f"bounds_from {bounds!r} is not an integer >= 0")
            lost = obj.get("pending_lost") or []
            if not isinstance(lost, list) or not all(isinstance(r, dict) for r in lost):
                raise ValueError(f"pending_lost {str(lost)[:80]} is not a list of objects")
            return cls(src, tgt, tp, tally, counts, int(obj.get("updated_at_ms", 0)), bounds, tuple(lost))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise MirrorError(
                f"{where} is unreadable ({exc}): {bytes(data)[:160]!r}; expected JSON with source_offset, "
                "target_offset, target_partition, tally, counts, updated_at_ms (docs/mirroring.md, "
                "\"Checkpoint\"); fix or delete the znode") from None


class CheckpointStore:
    """The checkpoint znode of one unit, written with the version read last.

    Args:
        zk: a started kazoo client of the target ZooKeeper (the mirror's coordination store).
        group: the mirror group.
        unit: the source partition.
    """

    def __init__(self, zk, group: str, unit: MirrorUnit) -> None:
        self.zk = zk
        self.path = znodes.mirror_checkpoint_path(group, unit.source, unit.topic, unit.broker_id, unit.partition)
        self.unit = unit
        self.version = ABSENT

    def __repr__(self) -> str:
        return f"CheckpointStore({self.path}, version {self.version})"

    def read(self) -> Checkpoint | None:
        """The checkpoint (None when there is none); remembers its version for the next write.

        Raises:
            MirrorError: the znode holds garbage.
        """
        from kazoo.exceptions import NoNodeError  # deferred: kazoo

        try:
            data, stat = self.zk.retry(self.zk.get, self.path)
        except NoNodeError:
            self.version = ABSENT
            return None
        self.version = stat.version
        return Checkpoint.parse(data, f"the checkpoint {self.path}")

    def write(self, cp: Checkpoint) -> None:
        """Write ``cp`` if nobody wrote since our last read/write.

        Raises:
            MirrorOwnershipLostError: another owner wrote (or created) the checkpoint meanwhile.
        """
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError  # deferred: kazoo

        value = cp.to_json()
        try:
            if self.version == ABSENT:
                self.zk.retry(self.zk.create, self.path, value, makepath=True)
                self.version = 0
            else:
                stat = self.zk.retry(self.zk.set, self.path, value, version=self.version)
                self.version = stat.version
            return
        except (BadVersionError, NodeExistsError, NoNodeError) as exc:
            conflict = exc
        # our own write whose answer was lost (kazoo retried it) reads back as exactly our bytes
        try:
            data, stat = self.zk.retry(self.zk.get, self.path)
        except NoNodeError:
            data, stat = None, None
        if data == value and stat is not None and stat.version in (self.version + 1, 0):
            self.version = stat.version
            return
        theirs = stat.version if stat is not None else "deleted"
        raise MirrorOwnershipLostError(
            f"{self.unit}: the checkpoint {self.path} was changed by another owner (expected version "
            f"{self.version}, found {theirs}: {type(conflict).__name__}); this copier stops the partition")

    def delete(self) -> None:
        """Remove the checkpoint (tests and operators resetting a unit)."""
        from kazoo.exceptions import NoNodeError  # deferred: kazoo

        try:
            self.zk.retry(self.zk.delete, self.path)
        except NoNodeError:
            pass
        self.version = ABSENT


def former_home_checkpoint(zk, group: str, unit: MirrorUnit) -> tuple[int, Checkpoint] | None:
    """``(former home broker, checkpoint)``: the furthest checkpoint (by source offset) of ``unit``'s partition
    under another home broker of the same source and topic, written for ``unit``'s target partition; None when
    there is none. Only a replicated unit has former homes (a 0.7 topic's ``broker_id-partition`` names another
    partition). An unreadable one is skipped (logged).
    """
    if not unit.replicated:
        return None

    def read(home: int) -> Checkpoint | None:
        path = znodes.mirror_checkpoint_path(group, unit.source, unit.topic, home, unit.partition)
        try:
            cp = Checkpoint.parse(zk.retry(zk.get, path)[0], f"the checkpoint {path}")
        except MirrorError as exc:
            log.warning("%s: a former home's checkpoint is skipped: %s", unit, exc)
            return None
        return cp if cp.target_partition == unit.target_partition else None

    return furthest_former_node(zk, znodes.mirror_topic_checkpoints_dir(group, unit.source, unit.topic),
                                unit.broker_id, unit.partition, read, offset=lambda cp: cp.source_offset)


def carried_over(own: Checkpoint | None, former: Checkpoint) -> Checkpoint:
    """The checkpoint a unit starts from when a former home's (``former``) is further than its own (``own``,
    None when it has none): the former's positions, with the unit's own counter state (its monitoring session
    is its own: the former home's session reported what it counted up to ``former``'s source offset)."""
    return replace(former, counts=own.counts if own is not None else None)

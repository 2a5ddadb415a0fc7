"""``ingest mirror status``: per source partition, where the mirror is and how far behind.

Read from ZooKeeper (the target's: checkpoints, members) and from the brokers (source end, target
end), never from a running mirror process, so it works whether the mirror runs or not:

* **position** (the next source byte to copy): exactly-once units resume at
  ``source_offset + (target_end - target_offset)`` of their checkpoint (the target's growth since
  the checkpoint equals the source bytes copied); a repartitioned (at-least-once) unit is at its
  checkpoint's ``source_offset``.
* **lag bytes** = source end - position (0 when caught up).
* **lag seconds**: 0 when caught up; else the seconds since the owner last saw the partition
  caught up (it reports that moment in its member node); with no owner running, the seconds since
  the unit's last checkpoint (the mirror stopped then; a lower bound); None when neither is known.
* **owner**: the member whose node lists the unit (None: no running member owns it).
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from kazoo.exceptions import NoNodeError

from ingest import znodes
from ingest.client.discovery import start_kazoo
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.config import Config
from ingest.mirror.config import SourceSpec
from ingest.mirror.discovery import SourceCluster, SourceDiscovery, UnitKey
from ingest.mirror.group import read_members
from ingest.zk_security import ZkSecurity

log = logging.getLogger(__name__)

EXACTLY_ONCE = "exactly-once"
AT_LEAST_ONCE = "at-least-once (repartitioned)"
NOT_STARTED = "not started"


@dataclass(frozen=True)
class UnitStatus:
    source: str
    topic: str
    broker_id: int
    partition: int
    target_partition: int | None
    mode: str
    checkpoint_source_offset: int | None
    checkpoint_target_offset: int | None
    position: int | None
    source_end: int | None
    target_end: int | None
    lag_bytes: int | None
    lag_seconds: float | None
    owner: str | None


def read_checkpoint(zk, group: str, unit: UnitKey) -> dict | None:
    """The unit's checkpoint JSON (the copier's format, docs/mirroring-data-path.md), None if none or unreadable."""
    path = znodes.mirror_checkpoint_path(group, unit.source, unit.topic, unit.broker_id, unit.partition)
    try:
        data, _ = zk.retry(zk.get, path)
        return json.loads(data.decode())
    except NoNodeError:
        return None
    except ValueError as exc:
        log.warning("unreadable checkpoint %s: %s", path, exc)
        return None


def checkpointed_units(zk, group: str) -> list[UnitKey]:
    """Every unit that has a checkpoint in ``group`` (also topics no longer listed by the sources)."""
    out = []

    def children(path: str) -> list[str]:
        try:
            return zk.retry(zk.get_children, path)
        except NoNodeError:
            return []

    root = znodes.mirror_checkpoints_dir(group)
    for source in children(root):
        for topic in children(f"{root}/{source}"):
            for name in children(f"{root}/{source}/{topic}"):
                try:
                    b, p = znodes.parse_partition_name(name)
                except ValueError:
                    continue
                out.append(UnitKey(source, topic, b, p))
    return out


def owners(members: dict[str, dict]) -> tuple[dict[str, str], dict[str, dict]]:
    """``({unit: member}, {unit: progress})`` from the members' nodes."""
    owner, progress = {}, {}
    for member, data in members.items():
        for u in data.get("units", []):
            owner[u] = member
        for u, p in (data.get("progress") or {}).items():
            progress[u] = p
    return owner, progress


def unit_status(unit: UnitKey, checkpoint: dict | None, source_end: int | None, target_end_of, *,
                owner: str | None, progress: dict | None, now_ms: int) -> UnitStatus:
    """One row. ``target_end_of(target_partition) -> int | None`` asks the target lazily."""
    if checkpoint is None:
        return UnitStatus(*unit, None, NOT_STARTED, None, None, 0 if source_end is not None else None,
                          source_end, None, source_end, _lag_s(source_end, owner, progress, None, now_ms), owner)
    tp = checkpoint.get("target_partition")
    so = int(checkpoint["source_offset"])
    to = None if checkpoint.get("target_offset") is None else int(checkpoint["target_offset"])
    target_end = target_end_of(tp) if tp is not None else None
    if tp is None:
        mode, position = AT_LEAST_ONCE, so
    else:
        mode = EXACTLY_ONCE
        position = so + (target_end - to) if target_end is not None and to is not None else None
    lag = max(0, source_end - position) if source_end is not None and position is not None else None
    return UnitStatus(*unit, tp, mode, so, to, position, source_end, target_end, lag,
                      _lag_s(lag, owner, progress, checkpoint.get("updated_at_ms"), now_ms), owner)


def _lag_s(lag: int | None, owner: str | None, progress: dict | None, checkpoint_ms: int | None,
           now_ms: int) -> float | None:
    if lag == 0:
        return 0.0
    caught_up = (progress or {}).get("caught_up_at_ms")
    if owner is not None and caught_up is not None:
        return round(max(0, now_ms - int(caught_up)) / 1000.0, 3)
    if owner is None and checkpoint_ms is not None:
        return round(max(0, now_ms - int(checkpoint_ms)) / 1000.0, 3)
    return None


def status(config: Config, *, zk=None, clock: Clock = SYSTEM_CLOCK) -> list[UnitStatus]:
    """Every unit the sources list now (filtered) plus every checkpointed one, sorted."""
    own = zk is None
    if own:
        zk = start_kazoo(config["target.zk.connect"], session_timeout_ms=config["zk.sessiontimeout.ms"],
                         connection_timeout_ms=config["zk.connectiontimeout.ms"],
                         security=ZkSecurity.from_config(config))
    sources = None
    target = None
    try:
        sources = SourceDiscovery(config)
        target = SourceCluster(SourceSpec("target", zk_connect=config["target.zk.connect"]), zk=zk,
                               socket_timeout_ms=config["socket.timeout.ms"])
        group = config["mirror.group"]
        units = sorted(set(sources.units()) | {u for u in checkpointed_units(zk, group)
                                                if sources.filter.accepts(u.topic)})
        owner, progress = owners(read_members(zk, group))
        now_ms = clock.time_ms()
        rows = []
        for u in units:
            cluster = sources.sources.get(u.source)
            source_end = cluster.latest_offset(u.topic, u.broker_id, u.partition) if cluster else None
            rows.append(unit_status(
                u, read_checkpoint(zk, group, u), source_end,
                lambda tp, topic=u.topic: target.latest_offset(topic, -1, tp),
                owner=owner.get(str(u)), progress=progress.get(str(u)), now_ms=now_ms))
        return rows
    finally:
        if target is not None:
            target.close()
        if sources is not None:
            sources.close()
        if own:
            zk.stop()
            zk.close()


HEADER = ("source", "topic", "partition", "target", "mode", "position", "source end", "target end",
          "lag bytes", "lag s", "owner")


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def render(rows: Iterable[UnitStatus]) -> str:
    """A fixed-width table, one line per source partition."""
    table = [HEADER] + [(r.source, r.topic, f"{r.broker_id}-{r.partition}", _cell(r.target_partition), r.mode,
                         _cell(r.position), _cell(r.source_end), _cell(r.target_end), _cell(r.lag_bytes),
                         _cell(r.lag_seconds), _cell(r.owner)) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def as_json(rows: Iterable[UnitStatus]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]

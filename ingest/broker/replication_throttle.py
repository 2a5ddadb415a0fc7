"""Set and clear the replication throttle of a reassignment in ZooKeeper, as Kafka's ``ReassignPartitionsCommand`` does.

For a set of moves (partition -> its new replicas) and a rate in bytes/s, :func:`apply` writes

- on every broker involved (a current or a new replica of a moved partition), ``/config/brokers/[id]``:
  ``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` = the rate;
- on every moved topic, ``/config/topics/[topic]``: ``leader.replication.throttled.replicas`` = ``p:b`` for
  each current replica ``b`` of each moved partition ``p`` (any of them may lead while the move runs) and
  ``follower.replication.throttled.replicas`` = ``p:b`` for each new replica not among the current ones
  (those that copy the partition from scratch). As in Kafka, the lists are replaced, not merged.

Every broker watches both nodes (:mod:`ingest.broker.throttle_configs`) and throttles from its next fetch
on; only the listed replicas' replication traffic is held back, never the in-sync replicas' on the leader,
never any other partition. :func:`clear` removes all four configs (Kafka's ``--verify`` once a reassignment
is done). Both are idempotent, retried through ``client.retry``, and write each node conditionally on the
version read. Call :func:`apply` before the new assignment is written, so that the current replicas are
the old ones (or pass them as ``current``).
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable, Mapping, Sequence

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ingest import znodes
from ingest.broker import replication_quota as rq
from ingest.broker.topics import validate_topic
from ingest.errors import InvalidConfigError, UnknownTopicError

log = logging.getLogger(__name__)

Moves = Mapping[tuple[str, int], Sequence[int]]


def throttled_replicas(moves: Moves, current: Mapping[tuple[str, int], Sequence[int]]) -> dict[str, dict[str, str]]:
    """topic -> its two throttled-replicas lists for ``moves`` from ``current`` (partitions that do not move
    are left out)."""
    leader: dict[str, list[str]] = {}
    follower: dict[str, list[str]] = {}
    for (topic, p), new in sorted(moves.items()):
        old = list(current[(topic, p)])
        if list(new) == old:
            continue
        leader.setdefault(topic, []).extend(f"{p}:{b}" for b in old)
        follower.setdefault(topic, []).extend(f"{p}:{b}" for b in new if b not in old)
    return {t: {rq.LEADER_REPLICAS: ",".join(leader[t]), rq.FOLLOWER_REPLICAS: ",".join(follower.get(t, []))}
            for t in leader}


def current_replicas(zk, moves: Moves) -> dict[tuple[str, int], tuple[int, ...]]:
    """Each moved partition's replicas in its topic's assignment now.

    Raises:
        UnknownTopicError: a topic or partition that does not exist.
    """
    out: dict[tuple[str, int], tuple[int, ...]] = {}
    for topic in sorted({t for t, _p in moves}):
        validate_topic(topic)
        try:
            data, _stat = zk.retry(zk.get, znodes.topic_dir(topic))
        except NoNodeError:
            raise UnknownTopicError(f"topic {topic!r} does not exist; cannot throttle its reassignment") from None
        assignment = znodes.parse_assignment(data) or {}
        for (t, p) in moves:
            if t != topic:
                continue
            if p not in assignment:
                raise UnknownTopicError(f"partition {topic}-{p} does not exist (topic {topic!r} has partitions "
                                        f"{sorted(assignment)})")
            out[(t, p)] = tuple(assignment[p])
    return out


def apply(zk, moves: Moves, rate: int, current: Mapping[tuple[str, int], Sequence[int]] | None = None) -> dict:
    """Throttle the replication of ``moves`` ((topic, partition) -> new replicas) at ``rate`` bytes/s.

    Args:
        zk: a started KazooClient. current: moved partitions' replicas before the move (those it leaves out:
            their assignment in ZooKeeper now).

    Returns:
        ``{"brokers": [ids], "topics": {topic: {config: value}}}``: what was written.

    Raises:
        InvalidConfigError: a rate that is not 0..2^63-1. UnknownTopicError: a moved partition that does not exist.
    """
    value = rq.check_rate(rq.LEADER_RATE, str(rate))
    current = {**current_replicas(zk, moves), **(current or {})}   # every moved partition must exist
    topics = throttled_replicas(moves, current)
    brokers = sorted({b for key, new in moves.items() if key in current and list(new) != list(current[key])
                      for b in (*current[key], *new)})
    for b in brokers:
        _update(zk, znodes.broker_config_path(b), lambda c: {**c, rq.LEADER_RATE: value, rq.FOLLOWER_RATE: value})
    for topic, lists in topics.items():
        _update(zk, znodes.topic_config_path(topic), lambda c, lists=lists: _with_lists(c, lists))
    log.info("replication throttle of %d bytes/s on brokers %s; throttled replicas %s", int(value), brokers, topics)
    return {"brokers": brokers, "topics": topics}


def clear(zk, topics: Iterable[str], brokers: Iterable[int] | None = None) -> None:
    """Remove the throttle: both rates from ``brokers`` (default: every registered broker and every broker with
    dynamic configs) and both throttled-replicas lists from ``topics``."""
    if brokers is None:
        ids = set(zk.retry(zk.get_children, znodes.BROKER_IDS))
        if zk.retry(zk.exists, znodes.CONFIG_BROKERS) is not None:
            ids |= set(zk.retry(zk.get_children, znodes.CONFIG_BROKERS))
        brokers = sorted(int(i) for i in ids if i.isdigit())
    for b in brokers:
        _update(zk, znodes.broker_config_path(b), lambda c: {k: v for k, v in c.items() if k not in rq.RATES},
                create=False)
    lists = (rq.LEADER_REPLICAS, rq.FOLLOWER_REPLICAS)
    for topic in topics:
        validate_topic(topic)
        _update(zk, znodes.topic_config_path(topic), lambda c: {k: v for k, v in c.items() if k not in lists},
                create=False)
    log.info("replication throttle cleared on brokers %s and topics %s", list(brokers), list(topics))


def _with_lists(configs: dict[str, str], lists: dict[str, str]) -> dict[str, str]:
    out = dict(configs)
    for name, value in lists.items():
        if value:
            out[name] = rq.check_replicas(name, value)
        else:
            out.pop(name, None)
    return out


def _update(zk, path: str, change: Callable[[dict[str, str]], dict[str, str]], create: bool = True) -> None:
    """Rewrite the config node at ``path`` (``{"version":1,"config":{...}}``) with ``change`` applied,
    conditionally on the version read (read again when someone wrote meanwhile)."""
    for _attempt in range(100):
        try:
            data, stat = zk.retry(zk.get, path)
        except NoNodeError:
            data, stat = None, None
        old = znodes.parse_topic_config(data)
        new = change(old)
        if new == old and (stat is not None or not create or not new):
            return
        value = znodes.topic_config_value(new)
        try:
            if stat is None:
                zk.retry(zk.create, path, value, makepath=True)
            else:
                zk.retry(zk.set, path, value, version=stat.version)
            return
        except (BadVersionError, NodeExistsError):
            continue
    raise InvalidConfigError(f"{path} kept changing while being written; retry")

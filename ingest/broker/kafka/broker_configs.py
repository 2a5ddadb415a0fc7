"""A broker's dynamic configs through the admin API: the replication throttle's rates at ``/config/brokers/[id]``.

The only dynamic broker configs are ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate`` (bytes/s; :mod:`ingest.broker.replication_quota`); every other broker
setting comes from ``server.properties`` at start. As Kafka, a BROKER resource is altered on the broker it
names (AdminClient sends it there): another id, or the empty name of cluster-wide defaults (which this
product does not keep), is INVALID_REQUEST. AlterConfigs replaces the broker's dynamic configs, IncrementalAlterConfigs
sets or deletes some; an unknown or read-only name, or a value that is not a rate, is INVALID_CONFIG.
Served on the coordination thread, conditionally on the version read, as the topics' configs
(:mod:`ingest.broker.kafka.zk_admin`).
"""
from __future__ import annotations

import logging
from typing import Callable, Mapping, Sequence

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ingest import znodes
from ingest.broker import replication_quota as rq
from ingest.errors import InvalidConfigError
from ingest.wire.kafka import incremental_alter_configs as ops

log = logging.getLogger(__name__)


def _check(name: str, value: str | None) -> str:
    if name not in rq.RATES:
        raise InvalidConfigError(f"Cannot update broker config {name} dynamically: the dynamic broker configs are "
                                 f"{', '.join(rq.RATES)}; the others come from server.properties at start")
    return rq.check_rate(name, value)


def wrong_broker(admin, name: str) -> str | None:
    """Why broker resource ``name`` cannot be altered here (INVALID_REQUEST), or None when it is this broker."""
    own = admin.replicas.broker_id
    if name == str(own):
        return None
    return (f"broker {name!r}: this is broker {own}; alter a broker's configs on that broker (cluster-wide "
            "broker defaults are not kept)")


def current(admin, broker_id: int) -> tuple[dict[str, str], object | None]:
    """The broker's dynamic configs in ZooKeeper now, and the stat of their node (None: no node)."""
    try:
        data, stat = admin.replicas.zk.call(admin.coordinated.deadline, admin.replicas.client.get_async,
                                            znodes.broker_config_path(broker_id),
                                            what=f"read the configs of broker {broker_id}")
    except NoNodeError:
        return {}, None
    return znodes.parse_broker_config(data), stat


def alter(admin, broker_id: int, configs: Mapping[str, str | None], validate_only: bool) -> dict[str, str]:
    """AlterConfigs: broker ``broker_id``'s dynamic configs become exactly ``configs`` (null values dropped)."""
    return _write(admin, broker_id, lambda _old: {k: _check(k, v) for k, v in configs.items() if v is not None},
                  validate_only)


def incremental(admin, broker_id: int, changes: Sequence[tuple[str, int, str | None]], validate_only: bool) -> dict[str, str]:
    """IncrementalAlterConfigs: ``(name, operation, value)`` applied in order (SET, DELETE; the rates are no lists)."""
    def change(old: dict[str, str]) -> dict[str, str]:
        new = dict(old)
        for key, op, value in changes:
            if op == ops.SET:
                new[key] = _check(key, value)
            elif op == ops.DELETE:
                _check(key, "0")
                new.pop(key, None)
            elif op in (ops.APPEND, ops.SUBTRACT):
                _check(key, "0")
                raise InvalidConfigError(f"Config value {'append' if op == ops.APPEND else 'subtract'} is not "
                                         f"allowed for config key: {key}")
            else:
                raise InvalidConfigError(f"Unknown config operation {op} for {key}: allowed 0 SET, 1 DELETE")
        return new
    return _write(admin, broker_id, change, validate_only)


def _write(admin, broker_id: int, change: Callable[[dict[str, str]], dict[str, str]], validate_only: bool) -> dict[str, str]:
    admin.require_worker(f"changing the configs of broker {broker_id}")
    old, stat = current(admin, broker_id)
    new = change(old)
    if validate_only or new == old:
        return new
    client, zk, deadline = admin.replicas.client, admin.replicas.zk, admin.coordinated.deadline
    path, value = znodes.broker_config_path(broker_id), znodes.broker_config_value(new)
    what = f"write the configs of broker {broker_id}"
    try:
        if stat is None:
            zk.call(deadline, client.create_async, path, value, makepath=True, what=what)
        else:
            zk.call(deadline, client.set_async, path, value, stat.version, what=what)
    except (BadVersionError, NodeExistsError):
        raise InvalidConfigError(f"the configs of broker {broker_id} changed while being written; describe them "
                                 "and retry") from None
    log.info("broker %d: dynamic configs %s -> %s", broker_id, old or "{}", new or "{}")
    return new

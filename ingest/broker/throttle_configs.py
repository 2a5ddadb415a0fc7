"""A broker's two replication quotas, kept current from its dynamic configs and the topics' throttled-replica lists.

Kafka's ``DynamicConfigManager`` handlers for the throttle: the rates come from this broker's
``/config/brokers/[id]`` (``leader.replication.throttled.rate``, ``follower.replication.throttled.rate``;
absent: unlimited), the partitions from each Kafka topic's ``/config/topics/[topic]``
(``leader.replication.throttled.replicas`` / ``follower.``..., the entries that name this broker, or ``*``).
Both nodes are watched (the topics' through :class:`~ingest.broker.replication_view.ReplicationView`); a change
applies from the next fetch on, without a restart.

Concurrency: the watch callbacks run on kazoo's event thread and only replace the quotas' settings
(:class:`~ingest.broker.replication_quota.ReplicationQuota` is thread-safe).
"""
from __future__ import annotations

import logging
import time
from typing import Mapping

from ingest import znodes
from ingest.broker import replication_quota as rq
from ingest.broker.replication_quota import ReplicationQuota
from ingest.errors import InvalidConfigError

log = logging.getLogger(__name__)


class ThrottleConfigs:
    """The leader and follower quotas of broker ``broker_id`` (``config``: its server config, for the windows)."""

    def __init__(self, config, broker_id: int, now=time.monotonic) -> None:
        self.broker_id = broker_id
        samples, window = config["replication.quota.window.num"], config["replication.quota.window.size.seconds"]
        self.leader = ReplicationQuota(samples, window, now)
        self.follower = ReplicationQuota(samples, window, now)
        self._closed = False

    def watch(self, client) -> None:
        """Follow ``/config/brokers/[id]`` from now on (its absence is no throttle)."""
        client.DataWatch(znodes.broker_config_path(self.broker_id), self._on_broker_config)

    def close(self) -> None:
        self._closed = True

    def _on_broker_config(self, data, _stat) -> bool:
        if self._closed:
            return False
        try:
            configs = znodes.parse_broker_config(data)
        except (ValueError, UnicodeDecodeError) as exc:
            log.error("broker %d: unreadable dynamic configs in ZooKeeper (%s); keeping the previous ones",
                      self.broker_id, exc)
            return True
        self.apply_broker(configs)
        return True

    def apply_broker(self, configs: Mapping[str, str]) -> None:
        """This broker's dynamic configs: the two rates (a value that is not a rate is logged and ignored)."""
        for name, quota in ((rq.LEADER_RATE, self.leader), (rq.FOLLOWER_RATE, self.follower)):
            bound = rq.UNLIMITED
            if name in configs:
                try:
                    bound = int(rq.check_rate(name, configs[name]))
                except InvalidConfigError as exc:   # written around the admin API, which checks it
                    log.error("broker %d: %s; not throttling", self.broker_id, exc)
            if bound != quota.bound:
                log.info("broker %d: %s %s", self.broker_id, name,
                         "unlimited" if bound >= rq.UNLIMITED else f"{bound} bytes/s")
                quota.update_bound(bound)

    def apply_topic(self, topic: str, configs: Mapping[str, str]) -> None:
        """A Kafka topic's configs: which of its partitions each side throttles on this broker."""
        for name, quota in ((rq.LEADER_REPLICAS, self.leader), (rq.FOLLOWER_REPLICAS, self.follower)):
            parts = rq.throttled_partitions(configs.get(name), self.broker_id)
            quota.mark_throttled(topic, parts)

"""The consumer group's fetching side: where each owned partition starts, and the fetcher threads.

:class:`GroupFetchers` reads (or, the first time, resets and persists) an owned
partition's committed offset in ``/consumers/G/offsets``, and runs one
:class:`~ingest.client.fetcher.Fetcher` thread per broker over the owned
partitions of one rebalance generation. A replicated partition (named by its
home broker) is handed to the fetcher of its leader at that moment and starts from the
offset committed under an earlier home broker when a reassignment changed its home, else is
reset from its leader's offsets (latest = the high watermark); from then on its fetcher
follows leader changes itself, through this object's
:class:`~ingest.client.replica_metadata.ReplicaMetadata` (brokers from
``/brokers/ids``).

Concurrency: called by the connector under its lock; the reset callable runs on
fetcher threads with a fresh connection of its own.
"""
from __future__ import annotations

import logging
from typing import Iterable

from kazoo.exceptions import NodeExistsError, NoNodeError

from ingest import znodes
from ingest.client.consumer_stream import PartitionState
from ingest.client.discovery import BrokerAddress, read_brokers
from ingest.client.fetcher import Fetcher
from ingest.client.fetch_settings import FetchSettings
from ingest.client.leader_consumer import LeaderConsumer
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.client.simple_consumer import SimpleConsumer
from ingest.config import Config
from ingest.errors import CoordinationError, IngestError
from ingest.home_broker import furthest_former_node

log = logging.getLogger(__name__)


class GroupFetchers:
    """Offsets to start from and the running fetchers of one group member (see the module docstring)."""

    def __init__(self, zk, group: str, config: Config) -> None:
        self.zk = zk
        self.group = group
        self.config = config
        self.fetch = FetchSettings.from_config(config)
        self.replicas = ReplicaMetadata(lambda: read_brokers(zk).values(),
                                        timeout_s=config["socket.timeout.ms"] / 1000.0)
        self._consumers: dict[int, SimpleConsumer] = {}
        self._fetchers: list[Fetcher] = []

    def _consumer(self, addr: BrokerAddress) -> SimpleConsumer:
        c = self._consumers.get(addr.broker_id)
        if c is None or (c.host, c.port) != (addr.host, addr.port):
            c = SimpleConsumer(addr.host, addr.port, settings=self.fetch)
            self._consumers[addr.broker_id] = c
        return c

    def leader_consumer(self) -> LeaderConsumer:
        return LeaderConsumer(self.replicas, settings=self.fetch)

    def reset_offset(self, topic: str, bid: int, part: int, replicated: bool = False) -> int:
        if replicated:  # offsets of the current leader (latest: the high watermark)
            with self.leader_consumer() as c:
                if self.config["autooffset.reset"] == "smallest":
                    return c.earliest_offset(topic, part)
                return c.latest_offset(topic, part)
        addr = read_brokers(self.zk).get(bid)
        if addr is None:
            raise CoordinationError(f"broker {bid} left while resetting {topic}/{bid}-{part}")
        # a fresh connection: this may run on a fetcher thread while the fetcher's own is in use
        with SimpleConsumer(addr.host, addr.port, timeout_s=self.config["socket.timeout.ms"] / 1000.0) as c:
            if self.config["autooffset.reset"] == "smallest":
                return c.earliest_offset(topic, part)
            return c.latest_offset(topic, part)

    def _moved_offset(self, topic: str, bid: int, part: int) -> int | None:
        """A replicated partition whose home broker changed (a reassignment moved its first replica): the
        furthest offset the group committed for it under an earlier home, None if none."""
        def read(home: int) -> int:
            return int(self.zk.retry(self.zk.get, znodes.offset_path(self.group, topic, home, part))[0])

        former = furthest_former_node(self.zk, znodes.group_topic_offsets_dir(self.group, topic), bid, part, read,
                                      offset=lambda o: o)
        return None if former is None else former[1]

    def start_offset(self, topic: str, bid: int, part: int, replicated: bool) -> int:
        path = znodes.offset_path(self.group, topic, bid, part)
        try:
            return int(self.zk.retry(self.zk.get, path)[0].decode())
        except (NoNodeError, ValueError):
            moved = self._moved_offset(topic, bid, part) if replicated else None
            offset = self.reset_offset(topic, bid, part, replicated) if moved is None else moved
            # persist the starting point at once: a rebalance before the first commit must not
            # reset again (with "largest" that would skip what arrived in between)
            try:
                self.zk.retry(self.zk.create, path, str(offset).encode(), makepath=True)
            except NodeExistsError:
                # another member (or our replayed create) wrote it first: its value stands
                return int(self.zk.retry(self.zk.get, path)[0].decode())
            log.info("%s/%d-%d: no committed offset for group %s, starting at %s offset %d", topic, bid, part,
                     self.group, "the earlier home broker's" if moved is not None else self.config["autooffset.reset"],
                     offset)
            return offset

    def _fetcher_broker(self, st: PartitionState) -> int:
        """The broker whose fetcher takes ``st``: its own, or a replicated partition's leader now."""
        if st.replicated:
            try:
                return self.replicas.leader(st.topic, st.partition).broker_id
            except IngestError as exc:  # no leader now: its fetcher finds one later
                log.info("%s/%d-%d: %s", st.topic, st.broker_id, st.partition, exc)
        return st.broker_id

    def start(self, owned: Iterable[PartitionState]) -> None:
        """Start the fetchers of ``owned``: one per broker, a replicated partition with its leader's."""
        live = read_brokers(self.zk)
        by_broker: dict[int, list[PartitionState]] = {}
        for st in owned:
            by_broker.setdefault(self._fetcher_broker(st), []).append(st)
        for bid, states in sorted(by_broker.items()):
            addr = live.get(bid)
            states = [st for st in states if addr is not None or st.replicated]
            if not states:
                continue
            f = Fetcher(self._consumer(addr) if addr is not None else None, states,
                        backoff_s=self.config["backoff.increment.ms"] / 1000.0,
                        max_fetch_size=self.fetch.max_fetch_size,
                        reset=lambda st: self.reset_offset(st.topic, st.broker_id, st.partition, st.replicated),
                        leaders=self.leader_consumer() if any(st.replicated for st in states) else None,
                        name=f"fetcher-{bid}")
            f.start()
            self._fetchers.append(f)


    def stop(self) -> None:
        """Stop the running fetchers and wait for them."""
        for f in self._fetchers:
            f.stop()
        for f in self._fetchers:
            f.join()
        self._fetchers = []

    def close(self) -> None:
        """Close the brokers' connections (after :meth:`stop`)."""
        for c in self._consumers.values():
            c.close()
        self._consumers = {}

"""Broker discovery: a static ``broker.list`` or ZooKeeper watches on ``/brokers``.

ZooKeeper layout read here (written by the brokers, see ``ingest.broker.zk_registry``;
paths and values are built and parsed by :mod:`ingest.znodes`)::

    /brokers/ids/[broker_id]               -> "creator:host:port"  (ephemeral; Kafka 0.7's form;
                                                              plain "host:port" read too)
    /brokers/topics/[topic]/[broker_id]    -> "#partitions"  (ephemeral)
    /brokers/endpoints/[broker_id]         -> the broker's Kafka listeners, Kafka's JSON (ephemeral)

Both discoveries answer :meth:`brokers` (a snapshot ``{broker_id: BrokerAddress}``)
and call their listeners (no arguments) whenever the broker or topic registry
changed; listeners run on kazoo's event thread and must not block. A sender
that finds no live broker waits for the next change with
:meth:`Discovery.wait_for_change` (bounded by its time budget): while brokers
re-register after a ZooKeeper outage, ``/brokers/ids`` is empty for a moment.
:func:`read_brokers` and :func:`read_topic_partition_counts` are the one reading
of those nodes, shared with the consumer group. Every ZooKeeper call goes
through ``client.retry`` (kazoo's recipe): a connection loss waits for the
reconnect instead of failing the read.

The Kafka listeners (for Kafka-format topics, docs/kafka-protocol.md D5) are ``bootstrap.servers``
when set, else with ZooKeeper the first endpoint of every ``/brokers/endpoints/[id]``
(:meth:`Discovery.kafka_servers`, read when asked, not watched: a Kafka client learns the rest of
the cluster from Metadata).

Concurrency: ``brokers()`` returns an immutable snapshot and is safe from any thread;
``version`` and ``wait_for_change`` too (a condition variable bumped after the listeners ran,
so a woken waiter sees caches the listeners cleared).
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable

from kazoo.exceptions import NoNodeError

from ingest import znodes
from ingest.clock import Clock
from ingest.config import Int, Key, Str, parse_int
from ingest.errors import ConfigError, CoordinationError
from ingest.zk_security import ZK_SECURITY_KEYS, ZkSecurity, new_kazoo

log = logging.getLogger(__name__)

# The keys make_discovery reads; the producer's and the consumer's configs both start with them.
DISCOVERY_KEYS = (
    Key("broker.list", Str(), None,
        "static brokers 'id:host:port,...' (used when zk.connect is not set)"),
    Key("zk.connect", Str(), None,
        "ZooKeeper connect string 'host:port[,host:port][/chroot]'; brokers found under /brokers"),
    Key("zk.connectiontimeout.ms", Int(100, 600_000), 6000,
        "how long to wait for the first ZooKeeper connection"),
    Key("zk.sessiontimeout.ms", Int(1000, 600_000), 6000,
        "ZooKeeper session timeout; a client that stops heart-beating this long loses its ephemeral nodes"),
    Key("socket.timeout.ms", Int(100, 3_600_000), 30_000,
        "socket read/write timeout for one broker request"),
) + ZK_SECURITY_KEYS


@dataclass(frozen=True, slots=True, order=True)
class BrokerAddress:
    """Where one broker listens."""

    broker_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.broker_id}:{self.host}:{self.port}"


def parse_broker_list(text: str) -> list[BrokerAddress]:
    """Parse ``"id:host:port,..."`` into addresses sorted by broker id.

    Raises:
        ConfigError: an entry is not ``id:host:port`` with integer id and port, or an id repeats.
    """
    out: dict[int, BrokerAddress] = {}
    for entry in (p.strip() for p in (text or "").split(",")):
        if not entry:
            continue
        parts = entry.split(":")
        try:
            if len(parts) != 3 or not parts[1]:
                raise ValueError
            broker_id, port = parse_int(parts[0]), parse_int(parts[2])   # ASCII digits only
            if broker_id < 0 or not 0 < port < 65536:
                raise ValueError
        except ValueError:
            raise ConfigError(
                f"broker.list entry {entry!r} is not id:host:port (e.g. 0:127.0.0.1:9092)") from None
        if broker_id in out:
            raise ConfigError(f"broker.list names broker id {broker_id} twice ({text!r})")
        out[broker_id] = BrokerAddress(broker_id, parts[1], port)
    if not out:
        raise ConfigError(f"broker.list {text!r} names no broker; expected 'id:host:port,...'")
    return [out[k] for k in sorted(out)]


def parse_broker_znode(broker_id: int, data: bytes) -> BrokerAddress:
    """The value of ``/brokers/ids/[id]``: Kafka 0.7's ``creator:host:port`` (or a plain ``host:port``)."""
    host, port = znodes.parse_broker_value(data)
    return BrokerAddress(broker_id, host, port)


def read_brokers(zk) -> dict[int, BrokerAddress]:
    """``{broker_id: address}`` of the brokers registered under ``/brokers/ids`` (empty if none).

    A node that vanishes between listing and reading (its broker's session
    ended) or holds junk is skipped: the watch that fires for the change
    triggers another read.
    """
    try:
        children = zk.retry(zk.get_children, znodes.BROKER_IDS)
    except NoNodeError:
        return {}
    out: dict[int, BrokerAddress] = {}
    for child in children:
        try:
            data, _ = zk.retry(zk.get, znodes.broker_path(int(child)))
            addr = parse_broker_znode(int(child), data)
            if addr.port < 0:
                continue   # a broker without a 0.7 port (port=-1): only Kafka clients reach it
            out[int(child)] = addr
        except (NoNodeError, ValueError, KeyError, UnicodeDecodeError) as exc:
            log.debug("skipping broker znode %s: %s", child, exc)
    return out


def read_kafka_servers(zk, security_protocol: str | None = None) -> tuple[tuple[str, int], ...]:
    """``(host, port)`` of a Kafka listener of every broker under ``/brokers/endpoints``, by broker id (empty if
    none): the first listener whose security protocol is ``security_protocol`` (None: the first listener); a
    broker without one, and a node that vanishes or holds junk, are skipped."""
    from ingest.client.kafka.security import matching_listener   # deferred: 0.7 readers never need it

    try:
        children = zk.retry(zk.get_children, znodes.BROKER_ENDPOINTS)
    except NoNodeError:
        return ()
    out = []
    for child in sorted(children, key=lambda c: (len(c), c)):
        try:
            data, _ = zk.retry(zk.get, znodes.broker_endpoints_path(int(child)))
            found = matching_listener(data, security_protocol)
        except (NoNodeError, ValueError) as exc:
            log.debug("skipping endpoints znode %s: %s", child, exc)
            continue
        if found is None:
            log.debug("broker %s registered no %s listener", child, security_protocol)
            continue
        out.append(found)
    return tuple(out)


def read_topics(zk) -> list[str]:
    """Every topic some broker registered under ``/brokers/topics`` (sorted; empty if none)."""
    try:
        return sorted(zk.retry(zk.get_children, znodes.BROKER_TOPICS))
    except NoNodeError:
        return []


def read_topic_partition_counts(zk, topic: str) -> dict[int, int]:
    """``{broker_id: #partitions}`` the brokers registered for ``topic`` (empty if unknown).

    This is the ZooKeeper side of a topic's partition count: each broker
    announces its own count (its ``topic.partition.count.map`` entry or
    ``num.partitions``, raised by logs already on disk); readers never derive
    one themselves.
    """
    path = znodes.topic_dir(topic)
    try:
        children = zk.retry(zk.get_children, path)
    except NoNodeError:
        return {}
    out: dict[int, int] = {}
    for child in children:
        try:
            bid = int(child)
            data, _ = zk.retry(zk.get, znodes.topic_path(topic, bid))
            out[bid] = znodes.parse_partition_count(data)
        except (NoNodeError, ValueError):
            continue
    return out


class Discovery:
    """Base: a snapshot of live brokers plus change listeners."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[], None]] = []
        self._brokers: dict[int, BrokerAddress] = {}
        self._changed = threading.Condition()
        self._version = 0

    def brokers(self) -> dict[int, BrokerAddress]:
        return self._brokers

    def kafka_servers(self, security_protocol: str | None = None) -> tuple[tuple[str, int], ...]:
        """Kafka listeners found by this discovery (ZooKeeper's ``/brokers/endpoints``), of ``security_protocol``
        (None: each broker's first); none for a static list."""
        return ()

    def add_listener(self, fn: Callable[[], None]) -> None:
        self._listeners.append(fn)

    @property
    def version(self) -> int:
        """Bumped on every change (after the listeners ran); pass it to :meth:`wait_for_change`."""
        return self._version

    def wait_for_change(self, version: int, timeout_s: float, clock: Clock) -> None:
        """Return once the view changed since ``version``, or after ``timeout_s``, or once closed.

        A view that never changes (a static list) just sleeps on ``clock``.
        """
        clock.sleep(timeout_s)

    @property
    def closed(self) -> bool:
        return False

    def _notify(self) -> None:
        for fn in list(self._listeners):
            try:
                fn()
            except Exception:  # a listener bug must not kill the watch thread
                log.exception("discovery listener failed")
        with self._changed:
            self._version += 1
            self._changed.notify_all()

    def close(self) -> None:
        pass


class StaticDiscovery(Discovery):
    """Brokers from ``broker.list``; never changes."""

    def __init__(self, broker_list: str) -> None:
        super().__init__()
        self._brokers = {b.broker_id: b for b in parse_broker_list(broker_list)}


def start_kazoo(connect: str, *, session_timeout_ms: int = 6000, connection_timeout_ms: int = 6000,
                security: ZkSecurity | None = None):
    """A started KazooClient (authenticated and setting ACLs as ``security`` says), or CoordinationError
    naming the connect string."""
    # deferred: kazoo's client (and its handler threads' machinery) only when ZooKeeper is used
    from kazoo.retry import KazooRetry

    client = new_kazoo(connect, security, timeout=session_timeout_ms / 1000.0,
                       connection_retry=KazooRetry(max_tries=-1, max_delay=2),
                       command_retry=KazooRetry(max_tries=10, max_delay=2))
    try:
        client.start(timeout=connection_timeout_ms / 1000.0)
    except Exception as exc:
        client.close()
        raise CoordinationError(
            f"cannot connect to ZooKeeper at {connect!r} within {connection_timeout_ms} ms: {exc}") from exc
    return client


class ZkDiscovery(Discovery):
    """Live brokers from ``/brokers/ids``, kept current by ZooKeeper watches.

    Args:
        client: a started KazooClient (owned by the caller unless ``own_client``).
    """

    def __init__(self, client, *, own_client: bool = False) -> None:
        super().__init__()
        self._client = client
        self._own = own_client
        self._lock = threading.Lock()
        self._closed = False
        client.retry(client.ensure_path, znodes.BROKER_IDS)
        client.retry(client.ensure_path, znodes.BROKER_TOPICS)
        self._ready = threading.Event()
        # kazoo's ChildrenWatch recipe retries its own get_children
        client.ChildrenWatch(znodes.BROKER_IDS, self._on_ids)
        client.ChildrenWatch(znodes.BROKER_TOPICS, self._on_topics)
        self._ready.wait(10)

    @property
    def closed(self) -> bool:
        return self._closed

    def kafka_servers(self, security_protocol: str | None = None) -> tuple[tuple[str, int], ...]:
        return read_kafka_servers(self._client, security_protocol)

    def wait_for_change(self, version: int, timeout_s: float, clock: Clock) -> None:
        # a real-time wait: the watch thread wakes it (an injected clock cannot)
        with self._changed:
            self._changed.wait_for(lambda: self._version != version or self._closed, max(0.0, timeout_s))

    def _on_ids(self, _children: list[str]) -> bool:
        if self._closed:
            return False
        found = read_brokers(self._client)
        with self._lock:
            changed = found != self._brokers
            self._brokers = found
        self._ready.set()
        if changed:
            log.info("live brokers: %s", ", ".join(str(b) for b in sorted(found.values())) or "none")
            self._notify()
        return True

    def _on_topics(self, children: list[str]) -> bool:
        if self._closed:
            return False
        self._notify()
        return True

    def close(self) -> None:
        self._closed = True
        with self._changed:
            self._changed.notify_all()
        if self._own:
            self._client.stop()
            self._client.close()


def make_discovery(config) -> Discovery:
    """ZkDiscovery when ``zk.connect`` is set, else StaticDiscovery over ``broker.list``; with neither but
    ``bootstrap.servers`` (a client of Kafka-format topics only), a discovery of no 0.7 broker."""
    if config["zk.connect"]:
        client = start_kazoo(config["zk.connect"],
                             session_timeout_ms=config["zk.sessiontimeout.ms"],
                             connection_timeout_ms=config["zk.connectiontimeout.ms"],
                             security=ZkSecurity.from_config(config))
        return ZkDiscovery(client, own_client=True)
    if config["broker.list"]:
        return StaticDiscovery(config["broker.list"])
    if config.get("bootstrap.servers"):
        return Discovery()
    raise ConfigError("set zk.connect (ZooKeeper discovery), broker.list ('id:host:port,...') or "
                      "bootstrap.servers (Kafka listeners 'host:port,...', for Kafka-format topics)")

"""Broker discovery: a static ``broker.list`` or ZooKeeper watches on ``/brokers``.

ZooKeeper layout read here (written by the brokers, see ``ingest.broker.zk_registry``)::

    /brokers/ids/[broker_id]               -> "host:port"    (ephemeral; extra leading
                                                              fields such as "creator:" ignored)
    /brokers/topics/[topic]/[broker_id]    -> "#partitions"  (ephemeral)

Both discoveries answer :meth:`brokers` (a snapshot ``{broker_id: BrokerAddress}``)
and call their listeners (no arguments) whenever the broker or topic registry
changed; listeners run on kazoo's event thread and must not block.

Concurrency: ``brokers()`` returns an immutable snapshot and is safe from any thread.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable

from ingest.errors import ConfigError, CoordinationError

log = logging.getLogger(__name__)

BROKER_IDS_PATH = "/brokers/ids"
BROKER_TOPICS_PATH = "/brokers/topics"


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
            broker_id, port = int(parts[0]), int(parts[2])
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
    """The value of ``/brokers/ids/[id]``: ``host:port`` (Kafka 0.7 wrote ``creator:host:port``)."""
    text = data.decode("utf-8").strip()
    if text.startswith("{"):
        import json

        obj = json.loads(text)
        return BrokerAddress(broker_id, str(obj["host"]), int(obj["port"]))
    host, _, port = text.rpartition(":")
    host = host.rpartition(":")[2] if ":" in host else host
    return BrokerAddress(broker_id, host, int(port))


class Discovery:
    """Base: a snapshot of live brokers plus change listeners."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[], None]] = []
        self._brokers: dict[int, BrokerAddress] = {}

    def brokers(self) -> dict[int, BrokerAddress]:
        return self._brokers

    def add_listener(self, fn: Callable[[], None]) -> None:
        self._listeners.append(fn)

    def _notify(self) -> None:
        for fn in list(self._listeners):
            try:
                fn()
            except Exception:  # a listener bug must not kill the watch thread
                log.exception("discovery listener failed")

    def close(self) -> None:
        pass


class StaticDiscovery(Discovery):
    """Brokers from ``broker.list``; never changes."""

    def __init__(self, broker_list: str) -> None:
        super().__init__()
        self._brokers = {b.broker_id: b for b in parse_broker_list(broker_list)}


def start_kazoo(connect: str, *, session_timeout_ms: int = 6000, connection_timeout_ms: int = 6000):
    """A started KazooClient, or CoordinationError naming the connect string."""
    from kazoo.client import KazooClient
    from kazoo.retry import KazooRetry

    client = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000.0,
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
        client.ensure_path(BROKER_IDS_PATH)
        client.ensure_path(BROKER_TOPICS_PATH)
        self._ready = threading.Event()
        client.ChildrenWatch(BROKER_IDS_PATH, self._on_ids)
        client.ChildrenWatch(BROKER_TOPICS_PATH, self._on_topics)
        self._ready.wait(10)

    def _on_ids(self, children: list[str]) -> bool:
        if self._closed:
            return False
        found: dict[int, BrokerAddress] = {}
        for child in children:
            try:
                data, _ = self._client.get(f"{BROKER_IDS_PATH}/{child}")
                found[int(child)] = parse_broker_znode(int(child), data)
            except Exception as exc:  # node vanished between list and get, or junk
                log.debug("skipping broker znode %s: %s", child, exc)
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

    def topic_brokers(self, topic: str) -> dict[int, int]:
        """``{broker_id: #partitions}`` registered for a topic (empty if unknown)."""
        from kazoo.exceptions import NoNodeError

        path = f"{BROKER_TOPICS_PATH}/{topic}"
        out: dict[int, int] = {}
        try:
            children = self._client.get_children(path)
        except NoNodeError:
            return out
        for child in children:
            try:
                data, _ = self._client.get(f"{path}/{child}")
                out[int(child)] = int(data.decode().strip())
            except (NoNodeError, ValueError):
                continue
        return out

    def all_topics(self) -> list[str]:
        return sorted(self._client.get_children(BROKER_TOPICS_PATH))

    def close(self) -> None:
        self._closed = True
        if self._own:
            self._client.stop()
            self._client.close()


def make_discovery(config) -> Discovery:
    """ZkDiscovery when ``zk.connect`` is set, else StaticDiscovery over ``broker.list``."""
    if config["zk.connect"]:
        client = start_kazoo(config["zk.connect"],
                             session_timeout_ms=config["zk.sessiontimeout.ms"],
                             connection_timeout_ms=config["zk.connectiontimeout.ms"])
        return ZkDiscovery(client, own_client=True)
    if config["broker.list"]:
        return StaticDiscovery(config["broker.list"])
    raise ConfigError("set either zk.connect (ZooKeeper discovery) or broker.list ('id:host:port,...')")

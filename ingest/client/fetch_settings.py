"""Fetch settings: how a reader fetches a partition (sizes, waits, timeouts), one value with one set of defaults.

Every reader of the product takes one :class:`FetchSettings`: the high-level
consumer's fetchers, the loader's discovery and tasks, the public Spark source and
the mirror's source reader. Each makes it from its own configuration keys with
:meth:`FetchSettings.from_config` (Kafka 0.7's names: ``fetch.size``,
``max.fetch.size``, ``socket.timeout.ms``; a component's defaults for them are in
its key table, docs/configuration tables). :class:`~ingest.client.simple_consumer.SimpleConsumer`
and :class:`~ingest.client.leader_consumer.LeaderConsumer` take the same values as
keywords, with these defaults. docs/clients.md, "Fetch settings", lists who uses what.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ingest.client.kafka.security import ClientSecurity

DEFAULT_FETCH_SIZE = 300 * 1024
"""Bytes asked per fetch: Kafka 0.7's consumer ``fetch.size`` default."""
DEFAULT_MAX_FETCH_SIZE = 64 * 1024 * 1024
"""The most one fetch grows to, to read a message larger than the fetch size."""
DEFAULT_SOCKET_TIMEOUT_S = 30.0
"""Socket timeout of one request: Kafka 0.7's ``socket.timeout.ms`` default."""
_KEYS = ("fetch.size", "max.fetch.size", "socket.timeout.ms")


@dataclass(frozen=True, slots=True)
class FetchSettings:
    """How one reader fetches (small, frozen, picklable: Spark tasks carry it).

    Attributes:
        fetch_size: bytes asked per fetch (``fetch.size``).
        max_fetch_size: the most a fetch grows to for one message larger than ``fetch_size``
            (``max.fetch.size``); a larger message fails with FetchSizeTooSmallError.
        socket_timeout_s: socket timeout of one request (``socket.timeout.ms``).
        leader_wait_s: how long a call to a replicated partition keeps retrying through a
            failover (a new leader elected, its metadata looked up again) before it fails.
        security: how a Kafka-format topic's reader connects (``security.protocol``, ``ssl.*``, ``sasl.*``:
            :mod:`ingest.client.kafka.security`); 0.7 readers ignore it.
    """

    fetch_size: int = DEFAULT_FETCH_SIZE
    max_fetch_size: int = DEFAULT_MAX_FETCH_SIZE
    socket_timeout_s: float = DEFAULT_SOCKET_TIMEOUT_S
    leader_wait_s: float = DEFAULT_SOCKET_TIMEOUT_S
    security: ClientSecurity = ClientSecurity()

    def __post_init__(self) -> None:
        if isinstance(self.security, Mapping):   # from dataclasses.asdict through JSON (a Spark source's options)
            object.__setattr__(self, "security", ClientSecurity(**self.security))

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, leader_wait_s: float | None = None) -> "FetchSettings":
        """From a component's keys ``fetch.size``, ``max.fetch.size`` and ``socket.timeout.ms`` (a key the
        component does not have keeps the default here), and the Kafka client's security keys
        (:class:`~ingest.client.kafka.security.ClientSecurity`). A failover is waited out for ``leader_wait_s``,
        by default as long as one request may take (``socket.timeout.ms``)."""
        timeout_s = config.get("socket.timeout.ms", DEFAULT_SOCKET_TIMEOUT_S * 1000) / 1000.0
        return cls(fetch_size=config.get("fetch.size", DEFAULT_FETCH_SIZE),
                   max_fetch_size=config.get("max.fetch.size", DEFAULT_MAX_FETCH_SIZE),
                   socket_timeout_s=timeout_s,
                   leader_wait_s=timeout_s if leader_wait_s is None else leader_wait_s,
                   security=ClientSecurity.from_config(config))

    @classmethod
    def defaults_of(cls, definition, *, leader_wait_s: float | None = None) -> "FetchSettings":
        """:meth:`from_config` of the defaults of a component's key table (a ``ConfigDef``): what its
        readers use when no configuration was read (tests, tools)."""
        keys = {k.name: k.default for k in definition.keys if k.name in _KEYS}   # security: PLAINTEXT
        return cls.from_config(keys, leader_wait_s=leader_wait_s)

    def to_json(self) -> dict[str, Any]:
        return {"fetch_size": self.fetch_size, "max_fetch_size": self.max_fetch_size,
                "socket_timeout_s": self.socket_timeout_s, "leader_wait_s": self.leader_wait_s,
                "security": self.security.to_json()}


DEFAULT_FETCH = FetchSettings()
"""The defaults of every reader that is not told otherwise."""

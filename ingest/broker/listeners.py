"""The Kafka listeners of a broker: ``listeners``, ``advertised.listeners``, ``inter.broker.listener.name``.

Kafka's syntax and rules (``SocketServerConfigs``, ``EndPoint``)::

    listeners                       NAME://host:port[,NAME://host:port ...]
    advertised.listeners            the same; default: the listeners
    listener.security.protocol.map  NAME:PROTOCOL[,...]; default PLAINTEXT:PLAINTEXT
    inter.broker.listener.name      the listener followers fetch from; default: the first listener

A name appears once in each list; two listeners never share a port. ``host`` may be empty (every
interface: ``0.0.0.0``) or an IPv6 address in brackets; port 0 binds any free port (tests). An empty
``listeners`` turns the Kafka listener off. A listener advertises its own host (the ``hostname`` key
when it binds every interface: a client cannot connect to 0.0.0.0) and the port it bound, unless
``advertised.listeners`` names it. Every security protocol of Kafka is served: PLAINTEXT, SSL (its keys:
:mod:`ingest.broker.tls_config`), SASL_PLAINTEXT and SASL_SSL (the SASL login:
:mod:`ingest.broker.kafka.sasl`; SASL_SSL's TLS is SSL's).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ingest.config import KeyType
from ingest.errors import ConfigError

PLAINTEXT = "PLAINTEXT"
SUPPORTED_PROTOCOLS = frozenset({PLAINTEXT, "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
KNOWN_PROTOCOLS = frozenset({PLAINTEXT, "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
ANY_HOST = "0.0.0.0"

_URL = re.compile(r"(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[0-9A-Fa-f:.]+\]|[^:/\[\]\s]*):(?P<port>[0-9]{1,5})")
_NAME = re.compile(r"[A-Za-z0-9_]+")


@dataclass(frozen=True)
class Endpoint:
    """One listener: its name, the host it binds (or advertises) and its port."""

    name: str
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_endpoint(text: str) -> Endpoint:
    """``NAME://host:port`` as an :class:`Endpoint`.

    Raises:
        ValueError: naming the entry and the form expected.
    """
    m = _URL.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"{text.strip()!r} is not NAME://host:port (e.g. PLAINTEXT://127.0.0.1:29092)")
    port = int(m["port"])
    if port > 65535:
        raise ValueError(f"{text.strip()!r}: port {port} is not in [0, 65535]")
    return Endpoint(m["name"].upper(), m["host"].strip("[]"), port)


def parse_endpoints(text: str | tuple) -> tuple[Endpoint, ...]:
    """A comma-separated list of listeners, each name once, each port once (port 0 aside).

    Raises:
        ValueError: a malformed entry, a name or a port used twice.
    """
    entries = list(text) if isinstance(text, (list, tuple)) else [p for p in str(text).split(",") if p.strip()]
    out = tuple(parse_endpoint(e) if not isinstance(e, Endpoint) else e for e in entries)
    names = [e.name for e in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"listener name(s) {twice} appear more than once; each listener needs its own name")
    ports = [e.port for e in out if e.port]
    shared = sorted({p for p in ports if ports.count(p) > 1})
    if shared:
        raise ValueError(f"port(s) {shared} used by more than one listener; each listener needs its own port")
    return out


class ListenerList(KeyType):
    """``NAME://host:port,...`` (Kafka's ``listeners`` syntax), kept as the canonical URLs."""

    allowed = "comma-separated NAME://host:port entries (e.g. PLAINTEXT://127.0.0.1:29092), or empty"

    def parse(self, raw: Any) -> tuple[str, ...]:
        return tuple(e.url for e in parse_endpoints(raw))


class ProtocolMap(KeyType):
    """``NAME:PROTOCOL,...`` (Kafka's ``listener.security.protocol.map``)."""

    allowed = "comma-separated NAME:PROTOCOL pairs, PROTOCOL one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"

    def parse(self, raw: Any) -> str:
        parse_protocol_map(str(raw))
        return str(raw).strip()


def parse_protocol_map(text: str) -> dict[str, str]:
    """``{listener name: security protocol}``.

    Raises:
        ValueError: an entry that is not NAME:PROTOCOL with a known protocol.
    """
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, proto = part.partition(":")
        if not sep or not _NAME.fullmatch(name.strip()) or proto.strip().upper() not in KNOWN_PROTOCOLS:
            raise ValueError(f"{part!r} is not NAME:PROTOCOL with PROTOCOL one of {sorted(KNOWN_PROTOCOLS)}")
        out[name.strip().upper()] = proto.strip().upper()
    return out


@dataclass(frozen=True)
class Listeners:
    """A broker's Kafka listeners, checked: what each binds, what each advertises, which one followers use."""

    bind: tuple[Endpoint, ...]
    advertised: tuple[Endpoint, ...]
    inter_broker: str | None

    def advertised_for(self, name: str) -> Endpoint | None:
        return next((e for e in self.advertised if e.name == name), None)

    def with_bound_ports(self, ports: dict[str, int]) -> "Listeners":
        """The listeners once bound: port 0 replaced by the port each listener got, in what is bound and,
        for listeners whose advertised port was 0 too (the default), in what is advertised."""
        bind = tuple(Endpoint(e.name, e.host, ports.get(e.name, e.port)) for e in self.bind)
        adv = tuple(Endpoint(e.name, e.host, ports.get(e.name, e.port) if e.port == 0 else e.port)
                    for e in self.advertised)
        return Listeners(bind, adv, self.inter_broker)


def listeners_of(config) -> Listeners:
    """The Kafka listeners a broker config asks for (SERVER_CONFIG keys), checked together.

    Raises:
        ConfigError: naming the key, the value and what is allowed: a listener whose protocol is not
            served or not in ``listener.security.protocol.map``, an advertised
            listener that is not a listener, ``inter.broker.listener.name`` not a listener, an
            advertised host 0.0.0.0.
    """
    bind = parse_endpoints(config["listeners"])
    protocols = parse_protocol_map(config["listener.security.protocol.map"])
    for e in bind:
        proto = protocols.get(e.name)
        if proto is None:
            raise ConfigError(f"listeners: listener {e.name!r} has no security protocol in "
                              f"listener.security.protocol.map={config['listener.security.protocol.map']!r}; add "
                              f"{e.name}:PLAINTEXT there, or name the listener PLAINTEXT")
        if proto not in SUPPORTED_PROTOCOLS:
            raise ConfigError(f"listeners: listener {e.name!r} uses security protocol {proto}, which this broker "
                              f"does not serve yet; allowed: {sorted(SUPPORTED_PROTOCOLS)}")
    names = [e.name for e in bind]
    given = parse_endpoints(config["advertised.listeners"]) if config["advertised.listeners"] else ()
    for e in given:
        if e.name not in names:
            raise ConfigError(f"advertised.listeners: {e.url} names listener {e.name!r}, which is not in "
                              f"listeners {list(config['listeners'])}")
        if e.host in ("", ANY_HOST, "::"):
            raise ConfigError(f"advertised.listeners: {e.url} advertises the meta-address {e.host or '(empty)'!r}, "
                              "which no client can connect to; advertise the broker's host name or address")
    advertised = tuple(next((g for g in given if g.name == e.name), None)
                       or Endpoint(e.name, config["hostname"] if e.host in ("", ANY_HOST, "::") else e.host, e.port)
                       for e in bind)
    bind = tuple(Endpoint(e.name, e.host or ANY_HOST, e.port) for e in bind)
    inter = config["inter.broker.listener.name"].strip().upper() or (names[0] if names else None)
    if bind and inter not in names:
        raise ConfigError(f"inter.broker.listener.name={config['inter.broker.listener.name']!r} is not one of the "
                          f"listeners {names}")
    return Listeners(bind, advertised, inter if bind else None)

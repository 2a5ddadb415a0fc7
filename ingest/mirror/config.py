"""The mirror's configuration: ``mirror.properties`` keys and the per-source ``source.<name>.*`` keys.

``MIRROR_CONFIG`` declares every fixed key (``ingest config docs`` renders them). The source
clusters are named in ``sources`` (comma list; the order is the mapping order, see
docs/mirroring.md) and each is configured by keys under its name::

    sources=dc1,dc2
    source.dc1.zk.connect=zk-dc1:2181/ingest       # topics and brokers found in ZooKeeper
    source.dc2.broker.list=0:10.1.0.5:9092,1:10.1.0.6:9092   # or a static broker list

:func:`load_mirror_config` reads the file (plus ``--set`` overrides) and checks the ``source.``
keys too: every name in ``sources`` has exactly one of ``zk.connect`` / ``broker.list``, no
``source.`` key names a source not in ``sources`` or a setting a source does not have, the
broker list parses, and the mirror's own topics are not the same. A violation raises
:class:`MirrorConfigError` naming the key, the value and what is allowed.
"""
from __future__ import annotations

import logging
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ingest.client.discovery import parse_broker_list
from ingest.client.fetch_settings import FetchSettings
from ingest.client.kafka.security import SECURITY_KEY_NAMES, ClientSecurity, security_keys
from ingest.config import REQUIRED, Config, ConfigDef, Int, Key, Regex, Str, StrList
from ingest.errors import ConfigError, MirrorConfigError
from ingest.metrics.keys import METRICS_KEYS
from ingest.zk_security import ZK_SECURITY_KEYS
from ingest.registry_client_config import REGISTRY_CLIENT_KEYS

log = logging.getLogger(__name__)

NAME_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
SOURCE_PREFIX = "source."
# the settings one source cluster has: source.<name>.<setting>; the Kafka client's security keys are per cluster
# (source.<name>.security.protocol, target.security.protocol), as MirrorMaker 2's <cluster alias>.security.protocol
SOURCE_SETTINGS = ("zk.connect", "broker.list") + SECURITY_KEY_NAMES
SECURITY_TYPES = {k.name: k for k in security_keys()}

MIRROR_LEADER_WAIT_S = 5.0
"""How long a copier's read or append keeps retrying through a failover before the copier reports
``waiting`` and retries the whole step (its loop retries forever; a short wait shows a failover in
``ingest mirror status`` at once). The mirror's one departure from the readers' common defaults."""

MIRROR_CONFIG = ConfigDef("mirror", (
    Key("mirror.group", Str(pattern=NAME_PATTERN), "mirror",
        "the mirror group: processes with the same group share the partitions (and their checkpoints)"),
    Key("mirror.id", Str(pattern=NAME_PATTERN), None,
        "this process's member id in the group (default <host>-<pid>); must be unique among running members"),
    Key("sources", StrList(), REQUIRED,
        "comma list of source cluster names; each needs source.<name>.zk.connect or source.<name>.broker.list; "
        "the order is the mapping order of target partitions"),
    Key("target.zk.connect", Str(nonempty=True), REQUIRED,
        "the target cluster's ZooKeeper (brokers, topic creation) and the mirror's coordination and checkpoints"),
    Key("whitelist", Regex(), ".*",
        "topics to mirror: a regex matched against the whole topic name"),
    Key("blacklist", Regex(), "",
        "topics never mirrored (whole-name regex; empty = none); monitoring.topic and lost.topic never are"),
    Key("target.acks", Int(-1, 1), -1,
        "acknowledgement of each append to the target: -1 = every in-sync replica, 1 = the leader "
        "(0 is not allowed: the copy must be acknowledged)"),
    Key("target.replication.factor", Int(1, 100), 1,
        "replication factor of the topics the mirror creates on the target"),
    Key("target.partitions.reserve", Int(-1, 10_000), -1,
        "spare partitions of a target topic the mirror creates (or grows, when a source topic grew past the "
        "spares), for source partitions that appear later (each takes the next spare one, still one to one); "
        "-1 = max(4, the partitions the mapping needs)"),
    Key("target.timeout.ms", Int(100, 600_000), 10_000,
        "how long the target may take to acknowledge one append"),
    Key("fetch.size", Int(1024, 64 * 1024 * 1024), 1024 * 1024,
        "bytes fetched from a source partition per request (a larger first message is fetched whole)"),
    Key("checkpoint.interval.ms", Int(10, 3_600_000), 1000,
        "how often each partition's (source offset, target offset) checkpoint is written"),
    Key("topic.refresh.ms", Int(10, 3_600_000), 5000,
        "how often the source clusters' topics and partitions are read again (ZooKeeper changes also wake it)"),
    Key("registry.url", Str(), None,
        "schema registry URL, to read event headers for the per-window counts (none: every message in window 0)"),
    *REGISTRY_CLIENT_KEYS,
    Key("monitoring.topic", Str(pattern=NAME_PATTERN), "audit-mirror",
        "target topic of the mirror's monitoring events (what it read and what the target acknowledged)"),
    Key("lost.topic", Str(pattern=NAME_PATTERN), "audit-mirror-lost",
        "target topic of the lost-range records (source data gone before it was mirrored: retention or missing "
        "segments)"),
    Key("monitoring.window.ms", Int(1000, 86_400_000), 600_000,
        "event-time window of the mirror's counts (like the producers' monitoring.window.ms)"),
    Key("monitoring.interval.ms", Int(100, 86_400_000), 60_000,
        "how often the counts of open windows are published"),
    Key("status.log.interval.ms", Int(100, 86_400_000), 30_000,
        "how often each owned partition's lag (bytes and seconds) is logged"),
    Key("zk.sessiontimeout.ms", Int(1000, 600_000), 6000,
        "ZooKeeper session timeout of the mirror (a killed member's partitions move after this long)"),
    Key("zk.connectiontimeout.ms", Int(100, 600_000), 10_000,
        "how long to wait for the first ZooKeeper connection"),
    Key("socket.timeout.ms", Int(100, 3_600_000), 30_000,
        "socket timeout of one request to a source or target broker"),
) + security_keys("target.", whose="the target's Kafka listeners (each source's: source.<name>.<the same key>)")
  + ZK_SECURITY_KEYS + METRICS_KEYS, prefixes=(SOURCE_PREFIX,))

MIRROR_FETCH = FetchSettings.defaults_of(MIRROR_CONFIG, leader_wait_s=MIRROR_LEADER_WAIT_S)
"""The copiers' fetch settings when none are configured (the defaults of ``fetch.size``, ``socket.timeout.ms``)."""


def fetch_settings(config: Mapping[str, Any]) -> FetchSettings:
    """A mirror process's fetch settings: its ``fetch.size`` and ``socket.timeout.ms``, and
    :data:`MIRROR_LEADER_WAIT_S` (security: PLAINTEXT; each end takes its cluster's, :func:`target_security`,
    :attr:`SourceSpec.security`)."""
    return FetchSettings.from_config({k: config[k] for k in ("fetch.size", "socket.timeout.ms") if k in config},
                                     leader_wait_s=MIRROR_LEADER_WAIT_S)


def target_security(config: Mapping[str, Any]) -> ClientSecurity:
    """How the mirror connects to the target's Kafka listeners (``target.security.protocol``, ``target.ssl.*``,
    ``target.sasl.*``)."""
    return ClientSecurity.from_config(config, "target.")


@dataclass(frozen=True)
class SourceSpec:
    """One source cluster: its name and how its brokers and topics are found (exactly one is set)."""

    name: str
    zk_connect: str | None = None
    broker_list: str | None = None
    security: ClientSecurity = ClientSecurity()
    """How the mirror connects to this cluster's Kafka listeners (``source.<name>.security.protocol`` ...)."""

    @property
    def where(self) -> str:
        return f"zk {self.zk_connect}" if self.zk_connect else f"brokers {self.broker_list}"


def load_mirror_config(path: str | Path | None, overrides: Mapping[str, Any] | None = None) -> Config:
    """Read ``mirror.properties`` plus overrides and check every key (the ``source.`` ones too).

    Raises:
        ConfigError: a fixed key is unknown, missing or invalid.
        MirrorConfigError: a ``source.`` key is wrong (see :func:`source_specs`) or the
            mirror's topics collide.
    """
    config = MIRROR_CONFIG.load(path, overrides)
    check(config)
    return config


def parse_mirror_config(raw: Mapping[str, Any]) -> Config:
    """:func:`load_mirror_config` for a dict (the Python API)."""
    config = MIRROR_CONFIG.parse(raw, source="mirror config")
    check(config)
    return config


def check(config: Config) -> None:
    """Everything the declared types cannot say (raises MirrorConfigError)."""
    source_specs(config)
    if config["target.acks"] == 0:
        raise MirrorConfigError("target.acks 0 is not allowed: the copy must be acknowledged; "
                                "allowed are -1 (every in-sync replica) or 1 (the leader)")
    if config["monitoring.topic"] == config["lost.topic"]:
        raise MirrorConfigError(
            f"monitoring.topic and lost.topic are both {config['lost.topic']!r}: they must differ")


def source_specs(config: Config) -> list[SourceSpec]:
    """The source clusters in ``sources`` order.

    Raises:
        MirrorConfigError: ``sources`` is empty or repeats a name, a name is not allowed, a source has
            neither or both of zk.connect / broker.list, a ``source.`` key names a source that is not in
            ``sources`` or an unknown setting, or a broker list does not parse.
    """
    names = list(config["sources"])
    if not names:
        raise MirrorConfigError("sources is empty: name at least one source cluster (sources=dc1,dc2)")
    for name in names:
        if not re.fullmatch(NAME_PATTERN, name):
            raise MirrorConfigError(f"sources: name {name!r} is not allowed: use letters, digits, '_', '.', '-'")
        if names.count(name) > 1:
            raise MirrorConfigError(f"sources names {name!r} twice ({','.join(names)})")
    settings: dict[str, dict[str, str]] = {n: {} for n in names}
    for key in sorted(k for k in config if k.startswith(SOURCE_PREFIX)):
        name, setting = _split_source_key(key, names)
        settings[name][setting] = str(config[key]).strip()
    out = []
    for name in names:
        s = settings[name]
        zk, brokers = s.get("zk.connect") or None, s.get("broker.list") or None
        if zk and brokers:
            raise MirrorConfigError(f"source {name!r} sets both source.{name}.zk.connect and "
                                    f"source.{name}.broker.list: set exactly one")
        if not zk and not brokers:
            raise MirrorConfigError(f"source {name!r} has no source.{name}.zk.connect or "
                                    f"source.{name}.broker.list: set exactly one")
        if brokers:
            try:
                parse_broker_list(brokers)
            except ConfigError as exc:
                raise MirrorConfigError(f"source.{name}.broker.list: {exc}") from None
        out.append(SourceSpec(name, zk, brokers, _source_security(name, s)))
    return out


def _source_security(name: str, settings: Mapping[str, str]) -> ClientSecurity:
    values = {}
    for setting, key in SECURITY_TYPES.items():
        if setting not in settings:
            continue
        try:
            values[setting] = key.type.parse(settings[setting])
        except ValueError:
            raise MirrorConfigError(f"source.{name}.{setting}: {settings[setting]!r} is not allowed; allowed: "
                                    f"{key.type.allowed}") from None
    return ClientSecurity.from_config(values)


def _split_source_key(key: str, names: list[str]) -> tuple[str, str]:
    rest = key[len(SOURCE_PREFIX):]
    for setting in SOURCE_SETTINGS:
        if rest.endswith("." + setting):
            name = rest[: -len(setting) - 1]
            if name in names:
                return name, setting
            raise MirrorConfigError(f"{key}: source {name!r} is not in sources ({','.join(names)}): "
                                    f"add it to sources or remove the key")
    raise MirrorConfigError(f"{key}: unknown source setting; allowed are "
                            + ", ".join(f"source.<name>.{s}" for s in SOURCE_SETTINGS))


def mirror_id(config: Config) -> str:
    """``mirror.id``, or ``<host>-<pid>`` when not set."""
    return config["mirror.id"] or f"{socket.gethostname()}-{os.getpid()}"


def excluded_topics(config: Config) -> frozenset[str]:
    """The mirror's own topics: never mirrored, whatever the whitelist says."""
    return frozenset({config["monitoring.topic"], config["lost.topic"]})

"""Configuration keys of the Kafka-protocol client, under the names of Kafka's own client settings.

Two definitions, as Kafka's ``ProducerConfig`` and ``ConsumerConfig`` share its
``CommonClientConfigs``: :data:`KAFKA_PRODUCER_CONFIG` (read by
:class:`ingest.client.kafka.producer.KafkaProducer`) and :data:`KAFKA_CONSUMER_CONFIG` (read by
:class:`ingest.client.kafka.fetcher.KafkaFetcher`), both starting with :data:`COMMON_KEYS`. Defaults
are Kafka's (Apache Kafka 4.0 clients) except where the key's doc says why not. Every value is
validated when the config is parsed: a bad one fails with the key, the value and what is allowed
(:mod:`ingest.config`). docs/kafka-protocol.md, "The product's own Kafka client", lists them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ingest.config import REQUIRED, Bool, Choice, Config, ConfigDef, Int, Key, KeyType, Str, parse_int
from ingest.errors import ConfigError
from ingest.records.compression import CODECS_BY_NAME
from ingest.wire.kafka.connection import SaslLogin
from ingest.wire.tls import client_context

INT32_MAX = 2 ** 31 - 1
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}
"""``acks`` values (Kafka's): 0 no answer, 1 the leader appended, all (-1) every in-sync replica has it."""


@dataclass(frozen=True)
class HostPorts(KeyType):
    """``host:port[,host:port...]`` (Kafka's ``bootstrap.servers``), parsed to ``((host, port), ...)``."""

    allowed: str = "a comma-separated list of host:port (port 1-65535), at least one"

    def parse(self, raw: Any) -> tuple[tuple[str, int], ...]:
        items = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
        out = []
        for item in items:
            if isinstance(item, tuple):
                host, port = item
            else:
                text = str(item).strip()
                if not text:
                    continue
                host, sep, port_text = text.rpartition(":")
                if not sep or not host:
                    raise ValueError(f"{text!r} is not host:port")
                port = parse_int(port_text)
            host = str(host).strip().strip("[]")
            if not host or not 1 <= int(port) <= 65535:
                raise ValueError(f"{item!r}: bad host or port")
            out.append((host, int(port)))
        if not out:
            raise ValueError("no server named")
        return tuple(out)


@dataclass(frozen=True)
class Acks(KeyType):
    """``acks``: ``all``, ``-1``, ``0`` or ``1``, parsed to -1, 0 or 1."""

    allowed: str = "one of all, -1, 0, 1"

    def parse(self, raw: Any) -> int:
        if isinstance(raw, bool):
            raise ValueError("booleans are not acks")
        text = str(raw).strip().lower()
        if text not in ACKS:
            raise ValueError(text)
        return ACKS[text]


class SaslMechanism(KeyType):
    """``sasl.mechanism``: one of the implemented mechanisms, or empty (not set)."""

    allowed = f"one of {', '.join(SASL_MECHANISMS)}, or empty (not set)"

    def parse(self, raw: Any) -> str:
        text = str(raw).strip()
        if text and text not in SASL_MECHANISMS:
            raise ValueError(text)
        return text


COMMON_KEYS = (
    Key("bootstrap.servers", HostPorts(), REQUIRED,
        "where to start: Kafka listeners host:port,... (any of them; the rest of the cluster comes from "
        "Metadata)"),
    Key("client.id", Str(pattern=r"[A-Za-z0-9._-]{0,249}"), "ingest",
        "the client id of every request's header (the broker's logs and quotas name it)"),
    Key("request.timeout.ms", Int(1, INT32_MAX), 30_000,
        "how long one request may wait for its response (a socket that stays silent longer is closed and "
        "the request fails or is retried); a Fetch waits fetch.max.wait.ms more"),
    Key("retry.backoff.ms", Int(0, INT32_MAX), 100,
        "first wait before a retry (and between metadata refreshes); doubles per attempt up to "
        "retry.backoff.max.ms"),
    Key("retry.backoff.max.ms", Int(0, INT32_MAX), 1000,
        "cap of the doubling back-off"),
    Key("metadata.max.age.ms", Int(0, INT32_MAX), 300_000,
        "metadata older than this is read again even without an error"),
    # TLS and SASL, under librdkafka's names (docs/security.md, "TLS" and "SASL")
    Key("security.protocol", Choice(SECURITY_PROTOCOLS), "PLAINTEXT",
        "PLAINTEXT; SSL: every connection to the brokers speaks TLS; SASL_PLAINTEXT: every connection logs in with"
        " sasl.mechanism, sasl.username, sasl.password; SASL_SSL: both (the listener's protocol must match)"),
    Key("ssl.ca.location", Str(), "",
        "PEM bundle of the CAs that sign the brokers' certificates (empty: the system's CAs)"),
    Key("ssl.certificate.location", Str(), "",
        "PEM file with this client's certificate (chain), for brokers with ssl.client.auth; its subject is the"
        " client's principal"),
    Key("ssl.key.location", Str(), "",
        "PEM file with the private key of ssl.certificate.location (empty: the key is in that file)"),
    Key("ssl.key.password", Str(), "", "password of that private key, if it is encrypted"),
    Key("ssl.endpoint.identification.algorithm", Choice(("https", "none")), "https",
        "https: the broker's certificate must name the host connected to; none: not checked (the certificate is"
        " still verified against ssl.ca.location)"),
    Key("sasl.mechanism", SaslMechanism(), "",
        "the SASL mechanism with security.protocol=SASL_*: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (Kafka's default,"
        " GSSAPI, is not implemented: name one)"),
    Key("sasl.username", Str(), "", "the SASL user name"),
    Key("sasl.password", Str(), "", "the SASL user's password"),
)


def ssl_context_of(config: Config):
    """The SSL context of a client config with ``security.protocol=SSL`` or ``SASL_SSL``, or None.

    Raises:
        ConfigError: a file of ``ssl.*.location`` missing or not PEM, naming the key.
    """
    if config["security.protocol"] not in ("SSL", "SASL_SSL"):
        return None
    return client_context(ca_location=config["ssl.ca.location"],
                          certificate_location=config["ssl.certificate.location"],
                          key_location=config["ssl.key.location"], key_password=config["ssl.key.password"],
                          check_hostname=config["ssl.endpoint.identification.algorithm"] == "https")

KAFKA_PRODUCER_CONFIG = ConfigDef("kafka producer", COMMON_KEYS + (
    Key("acks", Acks(), -1,
        "0: no answer, nothing is known; 1: the leader appended the batch; all (-1): every in-sync replica "
        "has it"),
    Key("linger.ms", Int(0, INT32_MAX), 5,
        "a partition's records wait at most this long for more before their batch is sent (checked when "
        "send() or flush() runs: the client has no thread of its own)"),
    Key("batch.size", Int(0, INT32_MAX), 16_384,
        "bytes of records after which a partition's batch is sent at once (a larger record goes alone)"),
    Key("max.request.size", Int(1, INT32_MAX), 1_048_576,
        "the largest record (and the largest Produce request) the client sends; larger raises "
        "RecordTooLargeError at send()"),
    Key("retries", Int(0, INT32_MAX), INT32_MAX,
        "times a batch refused with a retriable error is sent again (within delivery.timeout.ms)"),
    Key("delivery.timeout.ms", Int(1, INT32_MAX), 120_000,
        "time budget of one batch from its first send: retries end when it runs out"),
    Key("max.block.ms", Int(0, INT32_MAX), 60_000,
        "how long send() waits for a topic's metadata (an unknown topic fails after it)"),
    Key("compression.type", Choice(tuple(CODECS_BY_NAME)), "none",
        "codec of each record batch: " + ", ".join(CODECS_BY_NAME)),
    Key("enable.idempotence", Bool(), True,
        "batches carry a producer id and sequence numbers, so a retried batch is stored once (needs acks=all "
        "and retries > 0: by default it is off when they are not; set true with them it is refused)"),
))

KAFKA_CONSUMER_CONFIG = ConfigDef("kafka consumer", COMMON_KEYS + (
    Key("fetch.max.wait.ms", Int(0, INT32_MAX), 500,
        "how long the broker may hold a Fetch while it has less than fetch.min.bytes"),
    Key("fetch.min.bytes", Int(0, INT32_MAX), 1,
        "the broker answers a Fetch as soon as it has this many bytes (or fetch.max.wait.ms passed)"),
    Key("fetch.max.bytes", Int(0, INT32_MAX), 52_428_800,
        "most bytes of one Fetch answer over all partitions (the first batch comes whole even if larger)"),
    Key("max.partition.fetch.bytes", Int(0, INT32_MAX), 1_048_576,
        "most bytes of one partition in a Fetch answer (the first batch comes whole even if larger)"),
    Key("check.crcs", Bool(), True,
        "check every fetched batch's CRC-32C (one call per batch); off only to measure"),
    Key("allow.auto.create.topics", Bool(), False,
        "let Metadata create a topic the broker does not have (Kafka's consumer default is true; a reader "
        "here never creates topics by default)"),
))


def as_config(definition: ConfigDef, config: Config | Mapping[str, Any] | None, overrides: Mapping[str, Any]
              ) -> Config:
    """``config`` (a Config of ``definition``, a mapping, or None) with ``overrides`` applied; keys may be
    written with ``_`` for ``.`` in overrides (``bootstrap_servers=...``).

    Raises:
        ConfigError: a key is unknown, missing (bootstrap.servers) or a value is not allowed (naming
            the key, the value and what is allowed).
    """
    extra = {k.replace("_", "."): v for k, v in overrides.items()}
    if isinstance(config, Config):
        return config.with_overrides(extra) if extra else config
    return definition.parse({**dict(config or {}), **extra}, source=f"{definition.name} config")


def sasl_login(config: Config) -> SaslLogin | None:
    """The SASL login a client config asks for (``security.protocol=SASL_*``), or None.

    Raises:
        ConfigError: SASL without ``sasl.mechanism``, ``sasl.username`` or ``sasl.password``.
    """
    if not config["security.protocol"].startswith("SASL_"):
        return None
    missing = [k for k in ("sasl.mechanism", "sasl.username", "sasl.password") if not config[k]]
    if missing:
        raise ConfigError(f"security.protocol={config['security.protocol']} needs {', '.join(missing)} (allowed "
                          f"mechanisms: {', '.join(SASL_MECHANISMS)})")
    return SaslLogin(config["sasl.mechanism"], config["sasl.username"], config["sasl.password"])

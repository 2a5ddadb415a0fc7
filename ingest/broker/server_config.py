"""The broker's configuration: the log keys plus the server keys (Kafka 0.7 names).

``SERVER_CONFIG`` is what ``ingest broker start --config conf/server.properties``
validates; a value out of range fails at start-up naming key, value and range.
"""
from __future__ import annotations

from ingest.broker.authorizer.config import AUTHORIZER_KEYS
from ingest.broker.groups.config import GROUP_KEYS
from ingest.broker.kafka.sasl_config import SASL_KEYS
from ingest.broker.kafka.tier_counts_config import TIER_COUNT_KEYS
from ingest.broker.listeners import ListenerList, ProtocolMap
from ingest.broker.log_config import LOG_CONFIG
from ingest.broker.port07_security import PORT07_SECURITY_KEYS
from ingest.broker.tls_config import TLS_KEYS
from ingest.config import Bool, Config, Int, Key, Str
from ingest.errors import ConfigError
from ingest.metrics.keys import METRICS_KEYS
from ingest.zk_security import ZK_SECURITY_KEYS

SERVER_KEYS = (
    Key("brokerid", Int(0, 2**31 - 1), doc="unique id of this broker in the cluster"),
    Key("hostname", Str(nonempty=True), "127.0.0.1",
        "address to bind and to register in ZooKeeper (loopback unless set)"),
    Key("port", Int(-1, 65535), 9092,
        "TCP port of the Kafka 0.7 protocol (0.7 clients, 0.7 topics; 0 = any free port, for tests; -1 = no 0.7"
        " port: only the Kafka listeners, docs/security.md)"),
    # the Kafka protocol (Kafka's names; docs/kafka-protocol.md): its own port, never the 0.7 one
    Key("listeners", ListenerList(), ("PLAINTEXT://127.0.0.1:29092",),
        "the Kafka protocol's listeners, NAME://host:port,... (empty host: every interface; port 0: any free"
        " port; empty: no Kafka listener)"),
    Key("advertised.listeners", ListenerList(), (),
        "the listeners clients are told to connect to, NAME://host:port,... (default: the listeners, with"
        " 'hostname' for a listener on every interface and the bound port for port 0)"),
    Key("listener.security.protocol.map", ProtocolMap(), "PLAINTEXT:PLAINTEXT",
        "each listener name's security protocol, NAME:PROTOCOL,... (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL;"
        " docs/security.md)"),
    Key("inter.broker.listener.name", Str(), "",
        "the listener other brokers (followers) connect to (default: the first of 'listeners')"),
    Key("enable.zookeeper", Bool(), False, "register the broker and its topics in ZooKeeper"),
    Key("zk.connect", Str(), "", "ZooKeeper connect string host:port[,host:port][/chroot]"),
    Key("zk.connectiontimeout.ms", Int(100, 600_000), 6000,
        "how long to wait for the first ZooKeeper connection, and how long a request that needs ZooKeeper (a"
        " produce to a topic this broker does not know) waits for it before COORDINATION_UNAVAILABLE (30)"),
    Key("zk.sessiontimeout.ms", Int(1000, 600_000), 6000, "ZooKeeper session timeout; ephemeral nodes vanish this long after a crash"),
    Key("max.socket.request.bytes", Int(64, 2**31 - 1), 100 * 1024 * 1024,
        "largest request frame accepted; larger frames get REQUEST_TOO_LARGE and the connection is closed"),
    Key("socket.send.buffer", Int(0, 64 * 1024 * 1024), 100 * 1024, "SO_SNDBUF of client connections (0 = OS default)"),
    Key("socket.receive.buffer", Int(0, 64 * 1024 * 1024), 100 * 1024, "SO_RCVBUF of client connections (0 = OS default)"),
    Key("num.threads", Int(1, 64), 2, "network processor threads, each with its own selector and connections"),
    Key("background.threads", Int(1, 64), 2,
        "threads of the broker's scheduler (Kafka's KafkaScheduler), shared by its periodic and background"
        " tasks: the log flusher, retention, the verifier of old segments, the topic registrar, the"
        " storage-failure publisher and the leader's repair of damaged ranges; with 2 or more, one task"
        " held by a slow fsync or repair read does not hold up the others"),
    Key("shutdown.timeout.ms", Int(0, 600_000), 10_000,
        "on SIGTERM, how long to wait for in-flight responses to drain before closing connections"
        " (bounded whatever clients do)"),
    Key("queued.max.request.bytes", Int(1024 * 1024, 2**40), 128 * 1024 * 1024,
        "bytes of large request frames (over 64 KB) buffered across all connections; a connection whose"
        " frame does not fit waits unread until bytes free up, a frame larger than this is refused"
        " with REQUEST_TOO_LARGE"),
    Key("connections.max.idle.ms", Int(1000, 2**31 - 1), 600_000,
        "close a connection that has sent and received nothing for this long"),
    Key("request.partial.timeout.ms", Int(100, 3_600_000), 30_000,
        "close a connection whose started request frame is not complete this long after its first byte"
        " (time spent waiting for queued.max.request.bytes does not count)"),
    # replication (Kafka 0.8 names; docs/replication.md). Needs enable.zookeeper=true.
    Key("default.replication.factor", Int(1, 100), 1,
        "replication factor of a topic auto-created by a produce (1 = the Kafka 0.7 unreplicated topic on the"
        " broker that received it; above 1 the broker writes a replicated topic's assignment to ZooKeeper)"),
    Key("min.insync.replicas", Int(1, 100), 1,
        "with acks=-1, a write is refused (NOT_ENOUGH_REPLICAS) while fewer replicas are in sync, so an"
        " acknowledged write is on at least this many brokers"),
    Key("replica.lag.time.max.ms", Int(100, 3_600_000), 10_000,
        "a follower that has not caught up with the leader's log end for this long leaves the in-sync set"),
    Key("replica.fetch.wait.max.ms", Int(0, 60_000), 500,
        "how long a leader holds a follower's fetch while it has nothing new for it"),
    Key("replica.fetch.max.bytes", Int(1024, 2**31 - 1), 1024 * 1024,
        "bytes a follower asks for per fetch (raised automatically for a larger message)"),
    Key("replica.fetch.response.max.bytes", Int(1024, 2**31 - 1), 10 * 1024 * 1024,
        "bytes a follower asks for in one fetch of a Kafka topic's partitions from one leader, all of them"
        " together (replica.fetch.max.bytes bounds each partition; a first batch larger than either still comes)"),
    Key("num.replica.fetchers", Int(1, 64), 1,
        "fetcher threads a broker runs per leader it copies Kafka topics' partitions from; each fetches all"
        " its partitions in one request (a partition's thread: hash of topic and partition, as Kafka)"),
    Key("replication.quota.window.num", Int(1, 1000), 11,
        "samples the replication throttle measures its rate over (Kafka's name and default)"),
    Key("replication.quota.window.size.seconds", Int(1, 3600), 1,
        "length of one sample of the replication throttle's rate (Kafka's name and default)"),
    Key("replica.high.watermark.checkpoint.interval.ms", Int(100, 3_600_000), 5000,
        "how often each replica saves its high watermarks to <log.dir>/replication-offset-checkpoint"),
    Key("unclean.leader.election.enable", Bool(), False,
        "when no in-sync replica is alive, elect a live replica outside the in-sync set (availability over"
        " consistency: acknowledged writes it lacks are lost)"),
    Key("replica.socket.timeout.ms", Int(100, 600_000), 10_000,
        "socket timeout of a follower's fetches from its leader"),
    Key("auto.leader.rebalance.enable", Bool(), True,
        "the controller gives each partition back to its preferred replica (the first of its assignment)"
        " once that replica is alive, in sync and able to write, when a broker's share of preferred"
        " partitions led elsewhere is above leader.imbalance.per.broker.percentage"),
    Key("controller.batch.partitions", Int(1, 1000), 100,
        "partition states the controller reads pipelined and writes per fenced ZooKeeper transaction when one"
        " decision changes many partitions (a broker failure, preferred elections), and a leader writes per"
        " ZooKeeper transaction when one pass changes many in-sync sets (a follower rejoining); 1 reads and"
        " writes each partition on its own"),
    Key("leader.imbalance.check.interval.seconds", Int(1, 86_400), 300,
        "how often the controller checks the leader imbalance (auto.leader.rebalance.enable)"),
    Key("leader.imbalance.per.broker.percentage", Int(0, 100), 10,
        "the share of a broker's preferred partitions that may be led elsewhere before the controller"
        " moves them back (auto.leader.rebalance.enable)"),
    Key("controlled.shutdown.enable", Bool(), True,
        "on SIGTERM, ask the controller to move the leadership of every partition this broker leads to another"
        " in-sync replica before stopping (docs/replication.md, \"Controlled shutdown\")"),
    Key("controlled.shutdown.max.retries", Int(1, 100), 3,
        "attempts of a controlled shutdown; after the last, the broker stops anyway"),
    Key("controlled.shutdown.retry.backoff.ms", Int(10, 600_000), 5000,
        "how long each attempt of a controlled shutdown waits for the leaderships to move"),
)

SERVER_CONFIG = LOG_CONFIG.extend("broker", SERVER_KEYS + ZK_SECURITY_KEYS + TLS_KEYS + AUTHORIZER_KEYS
                                  + PORT07_SECURITY_KEYS + GROUP_KEYS + TIER_COUNT_KEYS + SASL_KEYS + METRICS_KEYS)
"""Every key ``ingest broker start`` accepts: the log keys and the server keys."""


def check_replication_keys(config: Config) -> None:
    """Refuse ``min.insync.replicas`` above ``default.replication.factor`` when that factor is above 1.

    Such a broker would auto-create replicated topics on which every acks=-1 write is refused
    (NOT_ENOUGH_REPLICAS). With factor 1 auto-created topics are unreplicated (acks=-1 acts as
    acks=1 there), so a larger ``min.insync.replicas`` only governs topics created with more
    replicas (``ingest topics create`` checks those).

    Raises:
        ConfigError: naming both keys, their values and what is allowed.
    """
    rf, min_isr = config["default.replication.factor"], config["min.insync.replicas"]
    if rf > 1 and min_isr > rf:
        raise ConfigError(
            f"min.insync.replicas={min_isr} exceeds default.replication.factor={rf}: every acks=-1 write to an "
            f"auto-created topic would be refused (NOT_ENOUGH_REPLICAS); allowed is min.insync.replicas 1..{rf}, "
            "or a larger default.replication.factor")

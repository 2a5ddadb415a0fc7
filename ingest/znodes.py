"""The ZooKeeper znode layout: every path and node value the project reads or writes.

Paths are relative to the chroot of the connect string (``host:port/chroot``)::

    /brokers/ids/[broker_id]                                 -> "creator:host:port"       ephemeral
    /brokers/topics/[topic]/[broker_id]                      -> "<partition count>"       ephemeral
    /brokers/topics/[topic]  (replicated topic, no children) -> {"version":1,"partitions":{"0":[1,2,3],...}}
                                                                (+ "format":"kafka" for a Kafka topic)
                                                                (+ "adding_replicas":{"0":[4]},
                                                                "removing_replicas":{"0":[1]} while a
                                                                partition is being reassigned, KIP-455)
    /brokers/endpoints/[broker_id]                           -> {"version":5,"host":H,"port":P,
                                                                 "endpoints":["NAME://H:P",...],
                                                                 "listener_security_protocol_map":{...},
                                                                 "timestamp":"ms"         ephemeral
                                                                 [,"principal":"User:..."]} (the inter-broker
                                                                principal, which fetches naming this replica
                                                                id must come from)
                                                                 [,"private_apis":[10000,...]] (the private
                                                                Kafka api keys its listeners serve)
    /kafka-acl/..., /kafka-acl-extended/..., /kafka-acl-changes/..., /kafka-acl-extended-changes/...
                                                                Kafka's ACLs (ingest.broker.authorizer.zk_store)
    /cluster/id                                              -> {"version":"1","id":"<22 chars>"} persistent
    /latest_producer_id_block                                -> {"version":1,"broker":B,"block_start":"S",
                                                                 "block_end":"E"}  persistent, versioned writes
    /brokers/partition_states/[topic]/[p]                    -> {"controller_epoch":E,"leader":L,
                                                                 "leader_epoch":N,"isr":[...],"version":1}
    /brokers/replica_stalls/[topic]/[p]/[broker_id]          -> {"offset":O,"leader":L,"reason":...,
                                                                 "version":1,...}     ephemeral
    /brokers/storage_failures/[broker_id]                    -> {"version":1,"partitions":[{"topic":T,
                                                                 "partition":P,"error":E},...]}  ephemeral
    /controller                                              -> {"version":1,"brokerid":B,"timestamp":ms} ephemeral
    /controller_epoch                                        -> "<epoch>"                 persistent
    /admin/preferred_replica_election                        -> {"version":1,"partitions":[{"topic":T,
                                                                 "partition":P},...]}  persistent, deleted when done
    /admin/controlled_shutdown/[broker_id]                   -> {"version":1,"attempt":N}  ephemeral: that broker
                                                                asks the controller to move its leaderships away
    /admin/reassign_partitions                               -> {"version":1,"partitions":[{"topic":T,
                                                                 "partition":P,"replicas":[...]},...]}
                                                                persistent: target replicas; the controller
                                                                removes each partition when its move is done
                                                                and the node when none is left
    /admin/delete_topics/[topic]                             -> (empty)  a Kafka topic marked for deletion
    /admin/delete_topics/[topic]/[broker_id]                 -> (empty)  that broker deleted its replicas' logs
    /config/topics/[topic]                                   -> {"version":1,"config":{"retention.ms":"1000",...}}
                                                                a Kafka topic's configs (strings, as Kafka's)
    /config/users/[url-encoded user name]                    -> {"version":1,"config":{"SCRAM-SHA-256":
                                                                "salt=..,stored_key=..,server_key=..,iterations=4096"}}
                                                                a user's SASL/SCRAM credentials (Kafka's form)
    /consumers/[group]/ids/[consumer_id]                     -> {"topic": #streams, ...}  ephemeral, JSON
    /consumers/[group]/owners/[topic]/[broker_id-partition]  -> owning thread id          ephemeral
    /consumers/[group]/offsets/[topic]/[broker_id-partition] -> next offset to consume    persistent
    /schema-registry/ids/id-[10 digits]                      -> canonical schema text     persistent, sequential
    /schema-registry/hashes/[sha256]                         -> schema id                 persistent
    /schema-registry/subjects/[subject key]/[version]        -> schema id                 persistent
    /schema-registry/config/[_global | subject key]          -> compatibility level       persistent
    /schema-registry/mode/[_global | subject key]            -> mode (READWRITE...)       persistent
    /schema-registry/lock                                    -> kazoo Lock recipe

The replicated-topic nodes follow Kafka 0.8's layout (docs/replication.md) but for
one move: a topic's assignment is the data of ``/brokers/topics/[topic]`` (written
once, by ``ingest topics create`` or a broker auto-creating it); its partitions'
states are written by the controller (elections) and by each partition's leader
(in-sync set changes), always with a conditional (versioned) write, under
``/brokers/partition_states`` and not, as in Kafka 0.8, under
``/brokers/topics/[topic]/partitions``: Kafka 0.7 clients (samsa, brod, Kafka's own)
read every child of ``/brokers/topics/[topic]`` as a broker id, and crashed on
``partitions``. A replicated topic's node therefore has no children: 0.7 clients see
a topic that no broker registered. States an earlier version wrote at the 0.8 place
(:func:`legacy_partition_state_path`) are moved by the controller
(:mod:`ingest.broker.controller`). A legacy (Kafka 0.7, unreplicated) topic's node
has no data and one ephemeral child per broker; the two kinds never share a name.

Brokers write ``/brokers`` (:mod:`ingest.broker.zk_registry`); producers and
consumers read it (:mod:`ingest.client.discovery`). A consumer group's members
write ``/consumers/[group]`` (:mod:`ingest.client.consumer_group`). The schema
registry's ZooKeeper store owns ``/schema-registry``
(:mod:`ingest.events.registry_store`). Directories (``/brokers/ids``,
``/brokers/topics/[topic]``, ``/consumers/[group]/...``) are persistent and
created on demand. A broker's value is Kafka 0.7's ``creator:host:port``
(``creator`` = ``<host>-<epoch ms>``, as 0.7's ``KafkaZooKeeper.registerBrokerInZk``
writes it), which 0.7 clients parse by splitting on ``:``; readers also accept the
plain ``host:port`` that earlier versions of this project wrote, and JSON.

With ``zookeeper.set.acl=true`` every node gets an ACL by its path (:mod:`ingest.zk_security`):
the product's identity ALL and everyone READ; nothing for others under :data:`SENSITIVE_ROOTS`;
open to all under :data:`OPEN_ROOTS`.

Only this module spells paths; callers use these functions, so the layout can
change in one place (replication will add to it).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONSUMERS = "/consumers"
SCHEMA_REGISTRY = "/schema-registry"
SCHEMA_REGISTRY_DIRS = ("ids", "hashes", "subjects", "config", "mode")
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
ADMIN = "/admin"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
PARTITION_STATES = "/brokers/partition_states"
REPLICA_STALLS = "/brokers/replica_stalls"
LEGACY_PARTITIONS = "partitions"
STORAGE_FAILURES = "/brokers/storage_failures"
BROKER_ENDPOINTS = "/brokers/endpoints"
CLUSTER_ID = "/cluster/id"
DELETE_TOPICS = "/admin/delete_topics"
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
CONFIG_TOPICS = "/config/topics"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
KAFKA_FORMAT = "kafka"
"""The ``format`` of a Kafka topic's assignment; a topic whose assignment has none is a 0.7 topic."""


# --- /brokers -----------------------------------------------------------------------------

def broker_path(broker_id: int) -> str:
    """``/brokers/ids/[broker_id]``: one live broker's address."""
    return f"{BROKER_IDS}/{broker_id}"


def topic_dir(topic: str) -> str:
    """``/brokers/topics/[topic]``: one child per broker holding the topic."""
    return f"{BROKER_TOPICS}/{topic}"


def topic_path(topic: str, broker_id: int) -> str:
    """``/brokers/topics/[topic]/[broker_id]``: that broker's partition count of the topic."""
    return f"{topic_dir(topic)}/{broker_id}"


def broker_value(host: str, port: int, registered_ms: int | None = None) -> bytes:
    """The value of a broker node, as Kafka 0.7 writes it: ``creator:host:port``.

    ``creator`` is ``<host>-<registered_ms>`` (the time of registration in epoch ms, now by
    default): 0.7's ``KafkaZooKeeper`` builds ``creatorId = hostName + "-" +
    System.currentTimeMillis`` and ``Broker.getZKString`` joins ``creatorId:host:port``.
    """
    if registered_ms is None:
        registered_ms = int(time.time() * 1000)
    return f"{host}-{registered_ms}:{host}:{port}".encode()


def parse_broker_value(data: bytes) -> tuple[str, int]:
    """``(host, port)`` from a broker node: ``host:port``, Kafka 0.7's ``creator:host:port``, or JSON.

    Raises:
        ValueError: the value is none of these forms.
    """
    text = data.decode("utf-8").strip()
    if text.startswith("{"):
        import json  # rare (a JSON-writing broker); keeps the common path free of it

        obj = json.loads(text)
        return str(obj["host"]), int(obj["port"])
    host, _, port = text.rpartition(":")
    host = host.rpartition(":")[2] if ":" in host else host
    return host, int(port)


def partition_count_value(count: int) -> bytes:
    """The value of a ``/brokers/topics/[topic]/[broker_id]`` node: the partition count in decimal."""
    return str(count).encode()


def parse_partition_count(data: bytes) -> int:
    """The partition count a broker registered for a topic.

    Raises:
        ValueError: not a decimal integer.
    """
    return int(data.decode().strip())


def broker_endpoints_path(broker_id: int) -> str:
    """``/brokers/endpoints/[broker_id]``: that broker's Kafka listeners (ephemeral, beside ``/brokers/ids``,
    whose 0.7 value 0.7 clients parse)."""
    return f"{BROKER_ENDPOINTS}/{broker_id}"


def broker_endpoints_value(endpoints: list[tuple[str, str, int]], protocols: dict[str, str],
                           registered_ms: int | None = None, principal: str | None = None,
                           private_apis: tuple[int, ...] = ()) -> bytes:
    """A broker's Kafka listeners in Kafka's registration shape (``/brokers/ids/[id]`` of Kafka 2.x, v5):
    ``endpoints`` as ``(listener name, host, port)``, the first also as ``host``/``port``;
    ``protocols`` maps each listener name to its security protocol; ``principal`` (a field of this product:
    Kafka has none) the principal the broker authenticates as on the inter-broker listener, which the
    other brokers require of a fetch naming this broker's id as its replica id; ``private_apis`` (also this
    product's) the private Kafka api keys its listeners serve, which no ApiVersions advertises: another
    broker sends such a key only to a broker that registered it (an older one closes the connection)."""
    if registered_ms is None:
        registered_ms = int(time.time() * 1000)
    host, port = (endpoints[0][1], endpoints[0][2]) if endpoints else ("", -1)
    value = {"version": 5, "host": host, "port": port,
             "endpoints": [f"{n}://{h}:{p}" for n, h, p in endpoints],
             "listener_security_protocol_map": dict(protocols),
             "timestamp": str(registered_ms)}
    if principal is not None:
        value["principal"] = principal
    if private_apis:
        value["private_apis"] = sorted(private_apis)
    return json.dumps(value, separators=(",", ":")).encode()


def parse_broker_principal(data: bytes) -> str | None:
    """The ``principal`` of a ``/brokers/endpoints/[id]`` value (None: not registered, or not readable)."""
    try:
        principal = json.loads(data.decode("utf-8")).get("principal")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None
    return principal if isinstance(principal, str) else None


def parse_private_apis(data: bytes) -> frozenset[int]:
    """The ``private_apis`` of a ``/brokers/endpoints/[id]`` value (empty: none registered, or not readable)."""
    try:
        keys = json.loads(data.decode("utf-8")).get("private_apis") or ()
        return frozenset(int(k) for k in keys)
    except (ValueError, TypeError, AttributeError, UnicodeDecodeError):
        return frozenset()


def parse_broker_endpoints(data: bytes) -> dict[str, tuple[str, int]]:
    """``{listener name: (host, port)}`` from a ``/brokers/endpoints/[id]`` value (ValueError if malformed)."""
    try:
        out = {}
        for url in json.loads(data.decode("utf-8"))["endpoints"]:
            name, sep, rest = str(url).partition("://")
            host, _, port = rest.rpartition(":")
            if not sep or not name or not host:
                raise ValueError(f"endpoint {url!r} is not NAME://host:port")
            out[name] = (host.strip("[]"), int(port))
        return out
    except (KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a broker endpoints node: {data[:200]!r}") from exc


def cluster_id_value(cluster_id: str) -> bytes:
    """The data of ``/cluster/id``, as Kafka writes it."""
    return json.dumps({"version": "1", "id": cluster_id}, separators=(",", ":")).encode()


def parse_cluster_id(data: bytes) -> str:
    """The id in ``/cluster/id`` (ValueError if not one)."""
    try:
        cid = json.loads(data.decode("utf-8"))["id"]
    except (KeyError, TypeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a cluster id node: {data[:200]!r}") from exc
    if not isinstance(cid, str) or not cid:
        raise ValueError(f"not a cluster id node: {data[:200]!r}")
    return cid


def producer_id_block_value(broker_id: int, start: int, end: int) -> bytes:
    """The data of ``/latest_producer_id_block``: the last block of producer ids a broker took, as Kafka writes it."""
    return json.dumps({"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)},
                      separators=(",", ":")).encode()


def parse_producer_id_block(data: bytes) -> tuple[int, int]:
    """``(block_start, block_end)`` of ``/latest_producer_id_block`` (ValueError if not one)."""
    try:
        d = json.loads(data.decode("utf-8"))
        start, end = int(d["block_start"]), int(d["block_end"])
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a producer id block node: {data[:200]!r}") from exc
    if not 0 <= start <= end:
        raise ValueError(f"not a producer id block node: {data[:200]!r}")
    return start, end


# --- replication (Kafka 0.8 layout) -------------------------------------------------------

def partition_states_dir(topic: str) -> str:
    """``/brokers/partition_states/[topic]``: one child per partition of a replicated topic."""
    return f"{PARTITION_STATES}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    """``/brokers/partition_states/[topic]/[p]``: leader, leader epoch, in-sync set."""
    return f"{partition_states_dir(topic)}/{partition}"


def legacy_partitions_dir(topic: str) -> str:
    """``/brokers/topics/[topic]/partitions``: where earlier versions (and Kafka 0.8) kept the states."""
    return f"{topic_dir(topic)}/{LEGACY_PARTITIONS}"


def legacy_partition_dir(topic: str, partition: int | str) -> str:
    """``/brokers/topics/[topic]/partitions/[p]``: the directory of one moved state, removed after."""
    return f"{legacy_partitions_dir(topic)}/{partition}"


def legacy_partition_state_path(topic: str, partition: int) -> str:
    """``/brokers/topics/[topic]/partitions/[p]/state``: a state an earlier version wrote, to be moved."""
    return f"{legacy_partition_dir(topic, partition)}/state"


def replica_stalls_dir(topic: str, partition: int) -> str:
    """``/brokers/replica_stalls/[topic]/[p]``: one ephemeral child per follower that cannot copy
    past a range of the leader's log (ingest.broker.replica_stalls). Not under
    ``/brokers/topics/[topic]``, whose children Kafka 0.7 clients read as broker ids."""
    return f"{REPLICA_STALLS}/{topic}/{partition}"


def replica_stall_path(topic: str, partition: int, broker_id: int) -> str:
    """``/brokers/replica_stalls/[topic]/[p]/[broker_id]``: that follower's stall (ephemeral, its own session)."""
    return f"{replica_stalls_dir(topic, partition)}/{broker_id}"


def replica_stall_value(stall: dict) -> bytes:
    """The data of a stall node: the stall's JSON object (``offset``, ``leader``, ``reason``, ...)."""
    return json.dumps({"version": 1, **stall}, sort_keys=True, separators=(",", ":")).encode()


def parse_replica_stall(data: bytes) -> dict:
    """A stall node's object (without ``version``). Raises ValueError on anything else."""
    try:
        obj = json.loads(data.decode("utf-8"))
        obj.pop("version")
        return {**obj, "offset": int(obj["offset"]), "leader": int(obj["leader"])}
    except (KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a replica stall: {data[:200]!r}") from exc


def assignment_value(assignment: dict[int, list[int]], topic_format: str | None = None,
                     moves: "dict[int, ReplicaMove] | None" = None) -> bytes:
    """The data of a replicated topic's node: partition -> replica list (first = preferred), and for a
    Kafka topic ``"format":"kafka"`` (:data:`KAFKA_FORMAT`; absent: a 0.7 topic, as every earlier version
    wrote it). ``moves``: the partitions being reassigned, written as Kafka's (KIP-455) ``adding_replicas``
    and ``removing_replicas`` (absent when none is)."""
    obj: dict = {"version": 1, "partitions": {str(p): list(r) for p, r in sorted(assignment.items())}}
    if topic_format is not None:
        if topic_format != KAFKA_FORMAT:
            raise ValueError(f"topic format {topic_format!r} is not one: use {KAFKA_FORMAT!r} or None (0.7)")
        obj["format"] = topic_format
    if moves:
        obj["adding_replicas"] = {str(p): list(m.adding) for p, m in sorted(moves.items())}
        obj["removing_replicas"] = {str(p): list(m.removing) for p, m in sorted(moves.items())}
    return json.dumps(obj, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class ReplicaMove:
    """A partition being reassigned (KIP-455's fields of the topic node): the replicas being added (not yet
    in the original assignment) and those being removed (not in the target). The assignment meanwhile lists
    the original replicas, in their order, followed by the ones being added."""

    adding: tuple[int, ...]
    removing: tuple[int, ...]


def parse_moves(data: bytes | None) -> dict[int, ReplicaMove]:
    """partition -> :class:`ReplicaMove` of a topic node's data (empty: nothing is being reassigned).

    Raises:
        ValueError: the fields are there but not objects of partition -> broker ids.
    """
    if not data:
        return {}
    obj = json.loads(data.decode("utf-8"))
    adding, removing = obj.get("adding_replicas") or {}, obj.get("removing_replicas") or {}
    try:
        return {int(p): ReplicaMove(tuple(int(b) for b in adding.get(p, ())),
                                    tuple(int(b) for b in removing.get(p, ())))
                for p in sorted(set(adding) | set(removing), key=int)}
    except (TypeError, AttributeError) as exc:
        raise ValueError(f"adding_replicas/removing_replicas must map partitions to broker ids: {obj}") from exc


def reassignment_value(targets: dict[tuple[str, int], "list[int] | tuple[int, ...]"]) -> bytes:
    """The data of ``/admin/reassign_partitions``: each partition's target replicas, as Kafka writes it."""
    return json.dumps({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                                    for (t, p), r in sorted(targets.items())]},
                      separators=(",", ":")).encode()


def parse_reassignment(data: bytes) -> dict[tuple[str, int], tuple[int, ...]]:
    """``{(topic, partition): target replicas}`` of ``/admin/reassign_partitions`` (or of a plan file, the
    same JSON; Kafka's ``log_dirs`` field is accepted and ignored).

    Raises:
        ValueError: not that JSON, or a partition listed twice.
    """
    try:
        out: dict[tuple[str, int], tuple[int, ...]] = {}
        for x in json.loads(data.decode("utf-8"))["partitions"]:
            key = (str(x["topic"]), int(x["partition"]))
            if key in out:
                raise ValueError(f"partition {key[0]}-{key[1]} is listed twice")
            if isinstance(x["replicas"], (str, bytes)) or isinstance(x["partition"], bool):
                raise TypeError(x)
            out[key] = tuple(int(b) for b in x["replicas"])
        return out
    except (KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise ValueError('not a reassignment: expected {"version":1,"partitions":[{"topic":T,"partition":P,'
                         '"replicas":[B,...]},...]}, got ' + repr(data[:200])) from exc


def parse_topic_format(data: bytes | None) -> str | None:
    """``"kafka"`` for a Kafka topic's assignment, None for a 0.7 topic (replicated or not).

    Raises:
        ValueError: the data is JSON whose ``format`` is not one this version knows (a newer writer's).
    """
    if not data:
        return None
    fmt = json.loads(data.decode("utf-8")).get("format")
    if fmt is not None and fmt != KAFKA_FORMAT:
        raise ValueError(f"unknown topic format {fmt!r} (known: {KAFKA_FORMAT!r}, or none for 0.7)")
    return fmt


def parse_assignment(data: bytes | None) -> dict[int, tuple[int, ...]] | None:
    """partition -> replicas from a topic node's data; None for a legacy (0.7, unreplicated) topic.

    Raises:
        ValueError: the data is JSON but not an assignment.
    """
    if not data:
        return None
    obj = json.loads(data.decode("utf-8"))
    parts = obj["partitions"]
    out = {int(p): tuple(int(b) for b in r) for p, r in parts.items()}
    if sorted(out) != list(range(len(out))) or any(not r for r in out.values()):
        raise ValueError(f"assignment partitions must be 0..n-1 with at least one replica each: {obj}")
    return out


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A replicated partition's state in ZooKeeper (Kafka 0.8's ``LeaderAndIsr``).

    ``leader`` is -1 while the partition has none. ``leader_epoch`` grows with every
    change the controller makes (elections, replicas dropped on a broker's death);
    a leader's own in-sync set changes keep it. ``controller_epoch`` is the epoch of
    the controller that last wrote the state.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int = 0
    zk_version: int = field(default=-1, compare=False)
    mzxid: int = field(default=-1, compare=False)   # ZooKeeper's zxid of the write (-1 unknown)

    def encode(self) -> bytes:
        return json.dumps({"controller_epoch": self.controller_epoch, "leader": self.leader, "version": 1,
                           "leader_epoch": self.leader_epoch, "isr": list(self.isr)},
                          separators=(",", ":")).encode()

    @classmethod
    def parse(cls, data: bytes, zk_version: int = -1, mzxid: int = -1) -> "PartitionState":
        """Raises ValueError on anything but a state node's JSON."""
        try:
            obj = json.loads(data.decode("utf-8"))
            return cls(int(obj["leader"]), int(obj["leader_epoch"]), tuple(int(b) for b in obj["isr"]),
                       int(obj.get("controller_epoch", 0)), zk_version, mzxid)
        except (KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise ValueError(f"not a partition state: {data[:200]!r}") from exc


# --- topic deletion and topic configs (Kafka's /admin/delete_topics and /config/topics) -----

def delete_topic_path(topic: str) -> str:
    """``/admin/delete_topics/[topic]``: the topic is marked for deletion (the controller removes it once every
    replica's broker acknowledged)."""
    return f"{DELETE_TOPICS}/{topic}"


def controlled_shutdown_path(broker_id: int) -> str:
    """``/admin/controlled_shutdown/[broker_id]``: that broker is shutting down and asks the controller to
    move the leadership of every partition it leads to another in-sync replica (ephemeral: it goes with
    the broker's session)."""
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"


def controlled_shutdown_value(attempt: int) -> bytes:
    """The data of a controlled-shutdown request node: which attempt of the broker it is (1, 2, ...)."""
    return json.dumps({"version": 1, "attempt": attempt, "timestamp": str(int(time.time() * 1000))}).encode()


def delete_ack_path(topic: str, broker_id: int) -> str:
    """``/admin/delete_topics/[topic]/[broker_id]``: that broker deleted its logs of the topic."""
    return f"{delete_topic_path(topic)}/{broker_id}"


def topic_config_path(topic: str) -> str:
    """``/config/topics/[topic]``: a Kafka topic's configs that differ from the brokers' defaults."""
    return f"{CONFIG_TOPICS}/{topic}"


def topic_config_value(configs: dict[str, str]) -> bytes:
    """The data of ``/config/topics/[topic]``, as Kafka writes it: ``{"version":1,"config":{name: value}}``."""
    return json.dumps({"version": 1, "config": {k: str(v) for k, v in sorted(configs.items())}},
                      separators=(",", ":")).encode()


def parse_topic_config(data: bytes | None) -> dict[str, str]:
    """name -> value from ``/config/topics/[topic]``; empty for no data.

    Raises:
        ValueError: not JSON of that form.
    """
    if not data:
        return {}
    obj = json.loads(data.decode("utf-8"))
    config = obj.get("config", {})
    if not isinstance(config, dict):
        raise ValueError(f"topic config must be an object of name -> value: {obj}")
    return {str(k): str(v) for k, v in config.items()}


def broker_config_path(broker_id: int) -> str:
    """``/config/brokers/[broker_id]``: a broker's dynamic configs (Kafka's node; here the replication
    throttle's rates), as ``/config/topics/[topic]``: ``{"version":1,"config":{name: value}}``."""
    return f"{CONFIG_BROKERS}/{int(broker_id)}"


def broker_config_value(configs: dict[str, str]) -> bytes:
    """The data of ``/config/brokers/[broker_id]`` (the layout of :func:`topic_config_value`)."""
    return topic_config_value(configs)


def parse_broker_config(data: bytes | None) -> dict[str, str]:
    """name -> value from ``/config/brokers/[broker_id]``; empty for no data. Raises ValueError as
    :func:`parse_topic_config`."""
    return parse_topic_config(data)


def user_path(name: str) -> str:
    """``/config/users/[name]``: a user's SCRAM credentials; the name URL-encoded as Kafka's ``Sanitizer``
    writes it (``alice`` stays ``alice``, ``a/b`` is ``a%2Fb``)."""
    return f"{CONFIG_USERS}/{quote(name, safe='')}"


def user_name(node: str) -> str:
    """A child name of ``/config/users`` back to the user's name."""
    return unquote(node)


def user_value(credentials: dict[str, str]) -> bytes:
    """The data of ``/config/users/[name]``: ``{"version":1,"config":{mechanism: stored credential}}``."""
    return topic_config_value(credentials)


def parse_user(data: bytes | None) -> dict[str, str]:
    """mechanism -> stored credential text from ``/config/users/[name]`` (ValueError: not that JSON)."""
    return parse_topic_config(data)


def controller_value(broker_id: int) -> bytes:
    """The data of ``/controller``."""
    return json.dumps({"version": 1, "brokerid": broker_id, "timestamp": str(int(time.time() * 1000))},
                      separators=(",", ":")).encode()


def parse_controller(data: bytes) -> int:
    """The broker id in ``/controller`` (ValueError if not one)."""
    try:
        return int(json.loads(data.decode("utf-8"))["brokerid"])
    except (KeyError, TypeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a controller node: {data[:200]!r}") from exc


def preferred_election_value(partitions: list[tuple[str, int]]) -> bytes:
    """The data of ``/admin/preferred_replica_election``."""
    return json.dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]},
                      separators=(",", ":")).encode()


def parse_preferred_election(data: bytes) -> list[tuple[str, int]]:
    """``[(topic, partition)]`` of a preferred-replica election request (ValueError if malformed)."""
    try:
        return [(str(x["topic"]), int(x["partition"])) for x in json.loads(data.decode("utf-8"))["partitions"]]
    except (KeyError, TypeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a preferred replica election request: {data[:200]!r}") from exc


def storage_failures_path(broker_id: int) -> str:
    """``/brokers/storage_failures/[broker_id]``: the replicas of that broker that cannot write now (ephemeral,
    present only while there is one; the controller moves their leadership and in-sync membership)."""
    return f"{STORAGE_FAILURES}/{broker_id}"


def storage_failures_value(failures: dict[tuple[str, int], str]) -> bytes:
    """The data of a broker's storage-failures node: each failed replica with its error's name."""
    return json.dumps({"version": 1, "partitions": [{"topic": t, "partition": p, "error": e}
                                                    for (t, p), e in sorted(failures.items())]},
                      separators=(",", ":")).encode()


def parse_storage_failures(data: bytes) -> dict[tuple[str, int], str]:
    """``{(topic, partition): error name}`` of a storage-failures node (ValueError if malformed)."""
    try:
        return {(str(x["topic"]), int(x["partition"])): str(x.get("error", "STORAGE_ERROR"))
                for x in json.loads(data.decode("utf-8"))["partitions"]}
    except (KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a storage failures node: {data[:200]!r}") from exc


# --- /consumers ---------------------------------------------------------------------------

def group_path(group: str) -> str:
    """``/consumers/[group]``."""
    return f"{CONSUMERS}/{group}"


def group_ids_dir(group: str) -> str:
    """``/consumers/[group]/ids``: one ephemeral child per member."""
    return f"{group_path(group)}/ids"


def group_owners_dir(group: str) -> str:
    """``/consumers/[group]/owners``."""
    return f"{group_path(group)}/owners"


def group_offsets_dir(group: str) -> str:
    """``/consumers/[group]/offsets``."""
    return f"{group_path(group)}/offsets"


def group_topic_offsets_dir(group: str, topic: str) -> str:
    """``/consumers/[group]/offsets/[topic]``: one child per partition (``broker_id-partition``)."""
    return f"{group_offsets_dir(group)}/{topic}"


def consumer_path(group: str, consumer_id: str) -> str:
    """``/consumers/[group]/ids/[consumer_id]``: the member's subscription."""
    return f"{group_ids_dir(group)}/{consumer_id}"


def owner_path(group: str, topic: str, broker_id: int, partition: int) -> str:
    """``/consumers/[group]/owners/[topic]/[broker_id-partition]``: the owning thread."""
    return f"{group_owners_dir(group)}/{topic}/{partition_name(broker_id, partition)}"


def offset_path(group: str, topic: str, broker_id: int, partition: int) -> str:
    """``/consumers/[group]/offsets/[topic]/[broker_id-partition]``: the committed offset."""
    return f"{group_topic_offsets_dir(group, topic)}/{partition_name(broker_id, partition)}"


def partition_name(broker_id: int, partition: int) -> str:
    """The node name of a partition in the owners/offsets registries: ``broker_id-partition``."""
    return f"{broker_id}-{partition}"


def parse_partition_name(name: str) -> tuple[int, int]:
    """``(broker_id, partition)`` from ``broker_id-partition``.

    Raises:
        ValueError: not two decimal integers joined by ``-``.
    """
    b, sep, p = name.partition("-")
    if not sep:
        raise ValueError(f"partition node name {name!r} is not broker_id-partition")
    return int(b), int(p)


# --- /schema-registry ---------------------------------------------------------------------

def registry_dir(name: str) -> str:
    """``/schema-registry/[name]`` for ``name`` in :data:`SCHEMA_REGISTRY_DIRS`."""
    return f"{SCHEMA_REGISTRY}/{name}"


def registry_id_prefix() -> str:
    """Prefix of the sequential schema nodes: ZooKeeper appends 10 digits."""
    return f"{SCHEMA_REGISTRY}/ids/id-"


def registry_id_path(schema_id: int) -> str:
    """``/schema-registry/ids/id-[10 digits]`` of ``schema_id`` (= sequence number + 1)."""
    return f"{registry_id_prefix()}{schema_id - 1:010d}"


def registry_id_from_path(path: str) -> int:
    """The schema id a sequential create returned the path of."""
    return int(path.rsplit("-", 1)[1]) + 1


def registry_hash_path(schema_hash: str) -> str:
    """``/schema-registry/hashes/[sha256]``."""
    return f"{SCHEMA_REGISTRY}/hashes/{schema_hash}"


def registry_subject_dir(subject_key: str) -> str:
    """``/schema-registry/subjects/[subject key]``: one child per version."""
    return f"{SCHEMA_REGISTRY}/subjects/{subject_key}"


def registry_version_path(subject_key: str, version: int | str) -> str:
    """``/schema-registry/subjects/[subject key]/[version]``: that version's schema id."""
    return f"{registry_subject_dir(subject_key)}/{version}"


def registry_config_path(name: str) -> str:
    """``/schema-registry/config/[name]``."""
    return f"{SCHEMA_REGISTRY}/config/{name}"


def registry_mode_path(name: str) -> str:
    """``/schema-registry/mode/[name]``: the global mode (``_global``) or a subject's."""
    return f"{SCHEMA_REGISTRY}/mode/{name}"


def registry_lock_path() -> str:
    """``/schema-registry/lock``: the kazoo Lock around a subject's read-check-write."""
    return f"{SCHEMA_REGISTRY}/lock"


# --- /mirrors (the mirror's coordination, in the target cluster's ZooKeeper) ---------------

MIRRORS = "/mirrors"


def mirror_group_path(group: str) -> str:
    """``/mirrors/[group]``: one mirror group (processes copying the same sources to one target)."""
    return f"{MIRRORS}/{group}"


def mirror_ids_dir(group: str) -> str:
    """``/mirrors/[group]/ids``: one ephemeral child per running mirror process."""
    return f"{mirror_group_path(group)}/ids"


def mirror_member_path(group: str, mirror_id: str) -> str:
    """``/mirrors/[group]/ids/[mirror_id]``: the member (JSON: host, pid, started_at_ms)."""
    return f"{mirror_ids_dir(group)}/{mirror_id}"


def mirror_mappings_dir(group: str) -> str:
    """``/mirrors/[group]/mappings``: one child per mirrored topic."""
    return f"{mirror_group_path(group)}/mappings"


def mirror_mapping_path(group: str, topic: str) -> str:
    """``/mirrors/[group]/mappings/[topic]``: source partition -> target partition (JSON, written once)."""
    return f"{mirror_mappings_dir(group)}/{topic}"


def mirror_checkpoints_dir(group: str) -> str:
    """``/mirrors/[group]/checkpoints``."""
    return f"{mirror_group_path(group)}/checkpoints"


def mirror_topic_checkpoints_dir(group: str, source: str, topic: str) -> str:
    """``/mirrors/[group]/checkpoints/[source]/[topic]``: the checkpoints of one source's partitions of a topic."""
    return f"{mirror_checkpoints_dir(group)}/{source}/{topic}"


def mirror_checkpoint_path(group: str, source: str, topic: str, broker_id: int, partition: int) -> str:
    """``/mirrors/[group]/checkpoints/[source]/[topic]/[broker_id-partition]``: the partition's checkpoint (JSON)."""
    return f"{mirror_topic_checkpoints_dir(group, source, topic)}/{partition_name(broker_id, partition)}"


def mirror_lost_dir(group: str) -> str:
    """``/mirrors/[group]/lost``: source ranges deleted by retention before they were mirrored (sequential children)."""
    return f"{mirror_group_path(group)}/lost"


def mirror_lost_range_prefix(group: str) -> str:
    """``/mirrors/[group]/lost/range-``: prefix of the sequential lost-range children (JSON MirrorLostRange)."""
    return f"{mirror_lost_dir(group)}/range-"


def mirror_lost_range_path(group: str, child: str) -> str:
    """``/mirrors/[group]/lost/[child]``: one recorded lost range."""
    return f"{mirror_lost_dir(group)}/{child}"


# --- znode ACLs (``zookeeper.set.acl``; :mod:`ingest.zk_security`) ---------------------------

CONFIG = "/config"
CONFIG_USERS = "/config/users"
"""SASL/SCRAM credentials, one child per user (Kafka's ``/config/users/[name]``)."""
CONFIG_BROKERS = "/config/brokers"
KAFKA_ACL_ROOTS = ("/kafka-acl", "/kafka-acl-extended", "/kafka-acl-changes", "/kafka-acl-extended-changes")
"""The authorizer's ACLs and their change notifications (Kafka 2.x's layout)."""

PRODUCT_ROOTS = ("/brokers", CONTROLLER, CONTROLLER_EPOCH, ADMIN, "/cluster", CONFIG, LATEST_PRODUCER_ID_BLOCK,
                 CONSUMERS, SCHEMA_REGISTRY, MIRRORS) + KAFKA_ACL_ROOTS
"""Every top-level node the product writes: what ``ingest zk-acls`` walks (nothing else in a shared ensemble)."""
SENSITIVE_ROOTS = (CONFIG_USERS, CONFIG_BROKERS) + KAFKA_ACL_ROOTS
"""Subtrees nobody but the product may read once ACLs are set (Kafka's ``ZkData.SensitiveRootPaths`` plus the
authorizer's ACLs)."""
OPEN_ROOTS = (CONSUMERS,)
"""Subtrees that stay open to everyone: the 0.7 consumers' own state, written by clients that cannot
authenticate to ZooKeeper (Kafka keeps ``/consumers`` open for its old consumers)."""


def under(path: str, roots: tuple[str, ...]) -> bool:
    """Whether ``path`` is one of ``roots`` or inside one of them (``/config/users2`` is not under ``/config/users``)."""
    return any(path == r or path.startswith(r + "/") for r in roots)

"""``ingest topics describe``: every topic's partitions with leader, replicas, in-sync set, high watermark.

Assignments and partition states come from ZooKeeper (the source of truth; this
works while brokers are down); the high watermark is asked of each partition's
current leader over the wire (OFFSETS latest, -1, which a leader answers with its
high watermark). A leader that cannot be reached shows ``-`` (JSON ``null``).
For a Kafka topic (``format`` kafka) it is asked of the leader's Kafka listener (the first endpoint
in ``/brokers/endpoints/[id]``) with ListOffsets latest, for a 0.7 topic of its 0.7 port.
Unreplicated (Kafka 0.7) topics get one line with their partition count per broker.
A follower that cannot copy past a range of its leader's log (the leader's bytes
there are damaged) says so in an ephemeral node of its own
(:mod:`ingest.broker.replica_stalls`); each partition's record lists them as
``stalled_replicas`` and the text output adds one line per stalled replica.
Replicas whose broker reported that they cannot write (``/brokers/storage_failures/[id]``:
disk full, a failed write or fsync, the log offline) are listed after the table,
and in JSON as ``cannot_write`` (``{broker id: error name}``) per partition.
A partition being reassigned lists the replicas being added and removed (KIP-455's fields of its topic
node; JSON ``adding_replicas`` and ``removing_replicas``, empty otherwise), one line each after the table.
A topic marked for deletion (Kafka's ``MarkedForDeletion``; JSON ``marked_for_deletion``) gets one line
after the table naming the brokers that have not deleted their replicas yet (:mod:`ingest.client.topics_delete`).
"""
from __future__ import annotations

import json
import logging
from typing import Iterable, Mapping, Sequence, TextIO

from kazoo.exceptions import NoNodeError

from ingest import znodes
from ingest.client.discovery import BrokerAddress, read_brokers, read_topics
from ingest.client.simple_consumer import SimpleConsumer
from ingest.client.topics_admin import cell, read_all_topics, read_state
from ingest.client.topics_delete import pending
from ingest.errors import IngestError, UnknownTopicError
from ingest.wire.connection import BrokerConnection
from ingest.wire.kafka.list_offsets import (LATEST, ListOffsetsPartition, ListOffsetsRequest, ListOffsetsResponse,
                                            ListOffsetsTopic)
from ingest.wire.kafka.message import decode_response, encode_request

log = logging.getLogger(__name__)



def high_watermarks(partitions: Iterable[tuple[str, int, int]], brokers: Mapping[int, BrokerAddress],
                    timeout_s: float = 5.0) -> dict[tuple[str, int], int | None]:
    """``{(topic, p): HW or None}`` asking each ``(topic, p, leader)``'s leader OFFSETS latest (-1)."""
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for t, p, leader in partitions:
        by_leader.setdefault(leader, []).append((t, p))
    out: dict[tuple[str, int], int | None] = {}
    for leader, parts in sorted(by_leader.items()):
        addr = brokers.get(leader)
        out.update({tp: None for tp in parts})
        if addr is None:
            continue
        try:
            with SimpleConsumer(addr.host, addr.port, timeout_s=timeout_s) as c:
                for t, p in parts:
                    try:
                        out[(t, p)] = c.latest_offset(t, p)
                    except IngestError as exc:  # e.g. NOT_LEADER during an election: this one unknown
                        log.debug("high watermark of %s/%d from broker %d: %s", t, p, leader, exc)
        except (IngestError, OSError) as exc:
            log.debug("leader %s unreachable: %s", addr, exc)
    return out


def read_stalls(client, topic: str, partition: int) -> list[dict]:
    """The stalled followers of one partition (``broker`` plus the node's fields), by broker id."""
    try:
        children = client.retry(client.get_children, znodes.replica_stalls_dir(topic, partition))
    except NoNodeError:
        return []
    out = []
    for child in children:
        try:
            data, _ = client.retry(client.get, znodes.replica_stall_path(topic, partition, int(child)))
            out.append({"broker": int(child), **znodes.parse_replica_stall(data)})
        except (NoNodeError, ValueError) as exc:   # gone meanwhile (the stall ended), or not ours
            log.debug("stall node %s of %s-%d: %s", child, topic, partition, exc)
    return sorted(out, key=lambda x: x["broker"])


def read_storage_failures(client) -> dict[tuple[str, int], dict[int, str]]:
    """``{(topic, partition): {broker id: error name}}`` of every replica that cannot write now."""
    try:
        children = client.retry(client.get_children, znodes.STORAGE_FAILURES)
    except NoNodeError:
        return {}
    out: dict[tuple[str, int], dict[int, str]] = {}
    for child in children:
        try:
            data, _ = client.retry(client.get, znodes.storage_failures_path(int(child)))
            for key, error in znodes.parse_storage_failures(data).items():
                out.setdefault(key, {})[int(child)] = error
        except (NoNodeError, ValueError) as exc:   # gone meanwhile, or not a broker's node
            log.debug("storage failures of %s: %s", child, exc)
    return out


def kafka_high_watermarks(client, partitions: Iterable[tuple[str, int, int]],
                          timeout_s: float = 5.0) -> dict[tuple[str, int], int | None]:
    """``{(topic, p): HW or None}`` of Kafka topics, asking each leader's Kafka listener ListOffsets latest."""
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for t, p, leader in partitions:
        by_leader.setdefault(leader, []).append((t, p))
    out: dict[tuple[str, int], int | None] = {}
    for leader, parts in sorted(by_leader.items()):
        out.update({tp: None for tp in parts})
        try:
            data, _ = client.retry(client.get, znodes.broker_endpoints_path(leader))
            host, port = next(iter(znodes.parse_broker_endpoints(data).values()))
        except (NoNodeError, ValueError, StopIteration):
            continue
        req = ListOffsetsRequest(topics=tuple(ListOffsetsTopic(t, (ListOffsetsPartition(p, timestamp=LATEST),))
                                              for t, p in parts))
        conn = BrokerConnection(host, port, broker_id=leader, timeout_s=timeout_s)
        try:
            resp = decode_response(ListOffsetsResponse, conn.request_buffer(
                encode_request(req, 1, 1, "ingest-topics-describe")), 1)[1]
        except (IngestError, OSError) as exc:
            log.debug("leader %d's Kafka listener %s:%d unreachable: %s", leader, host, port, exc)
            continue
        finally:
            conn.close()
        for t in resp.topics:
            for pr in t.partitions:
                if pr.error_code == 0:
                    out[(t.name, pr.partition_index)] = pr.offset
    return out


def describe_records(client, topic: str | None = None, *, timeout_s: float = 5.0) -> list[dict]:
    """One record per replicated partition and per unreplicated topic (sorted by topic).

    Raises:
        UnknownTopicError: ``topic`` is given and does not exist.
    """
    topics = read_all_topics(client, only=topic)
    if topic is not None and topic not in topics.replicated and topic not in topics.legacy \
            and topic not in topics.unreadable:
        known = read_topics(client)
        raise UnknownTopicError(f"topic {topic!r} does not exist in ZooKeeper; topics there: "
                                f"{', '.join(known) or 'none yet'}")
    states = {(t, p): read_state(client, t, p) for t, plan in topics.replicated.items() for p in plan}
    brokers = read_brokers(client)
    led = [(t, p, s.leader) for (t, p), s in states.items() if s is not None and s.leader >= 0]
    hws = high_watermarks([x for x in led if x[0] not in topics.kafka], brokers, timeout_s)
    hws.update(kafka_high_watermarks(client, [x for x in led if x[0] in topics.kafka], timeout_s))
    failures = read_storage_failures(client)
    moves = {t: read_moves(client, t) for t in topics.replicated}
    deleting = {t: pending(client, t) for t in topics.replicated
                if client.retry(client.exists, znodes.delete_topic_path(t)) is not None}
    records: list[dict] = []
    for (t, p), s in sorted(states.items()):
        replicas = list(topics.replicated[t][p])
        leader = s.leader if s is not None and s.leader >= 0 else None
        records.append({"topic": t, "replicated": True, "format": "kafka" if t in topics.kafka else "0.7",
                        "partition": p, "leader": leader,
                        "replicas": replicas, "isr": list(s.isr) if s is not None else [],
                        "leader_epoch": s.leader_epoch if s is not None else None,
                        "high_watermark": hws.get((t, p)), "preferred_replica": replicas[0],
                        "leader_is_preferred": leader == replicas[0], "stalled_replicas": read_stalls(client, t, p),
                        "cannot_write": {str(b): e for b, e in sorted(failures.get((t, p), {}).items())},
                        "adding_replicas": list(moves[t][p].adding) if p in moves[t] else [],
                        "removing_replicas": list(moves[t][p].removing) if p in moves[t] else [],
                        "marked_for_deletion": t in deleting,
                        "deletion_waits_for": list(deleting[t].waiting) if t in deleting else []})
    for t, counts in topics.legacy.items():
        records.append({"topic": t, "replicated": False, "format": "0.7",
                        "partitions_per_broker": {str(b): n for b, n in sorted(counts.items())}})
    for t, why in topics.unreadable.items():
        records.append({"topic": t, "replicated": None, "error": why})
    records.sort(key=lambda r: (r["topic"], r.get("partition", -1)))
    return records


def read_moves(client, topic: str) -> dict[int, znodes.ReplicaMove]:
    """The partitions of ``topic`` being reassigned (empty when none, or when its node is gone or unreadable)."""
    try:
        data, _ = client.retry(client.get, znodes.topic_dir(topic))
        return znodes.parse_moves(data)
    except (NoNodeError, ValueError, UnicodeDecodeError):
        return {}


def under_replicated(records: Sequence[dict]) -> list[dict]:
    """The replicated partitions whose in-sync set is smaller than their replicas, or that have no leader
    (Kafka's ``kafka-topics --describe --under-replicated-partitions``; a rolling restart waits for none)."""
    return [r for r in records if r["replicated"] and (r["leader"] is None or set(r["isr"]) != set(r["replicas"]))]


def format_records(records: Sequence[dict], controller: tuple[int | None, int | None], out: TextIO) -> None:
    """The text form of :func:`describe_records`: a table of replicated partitions, a line per other topic."""
    bid, epoch = controller
    out.write(f"controller: {'none' if bid is None else f'broker {bid}'}"
              f"{'' if epoch is None else f' (controller epoch {epoch})'}\n")
    header = ("topic", "partition", "leader", "replicas", "isr", "leader_epoch", "high_watermark",
              "preferred_leader", "format")
    rows = [header]
    for r in records:
        if r["replicated"]:
            pref = "-" if r["leader"] is None else ("yes" if r["leader_is_preferred"]
                                                   else f"no (preferred {r['preferred_replica']})")
            rows.append((r["topic"], str(r["partition"]), cell(r["leader"]), cell(r["replicas"]),
                         cell(r["isr"]), cell(r["leader_epoch"]), cell(r["high_watermark"]), pref, r.get("format", "0.7")))
    if len(rows) > 1:
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            out.write("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")
    failed = [f"{r['topic']}-{r['partition']} on broker {b} ({e})" for r in records if r["replicated"]
              for b, e in r.get("cannot_write", {}).items()]
    if failed:
        out.write(f"replicas that cannot write: {', '.join(failed)}\n")
    for r in records:
        if r.get("adding_replicas") or r.get("removing_replicas"):
            out.write(f"{r['topic']}-{r['partition']}: being reassigned: adding {r['adding_replicas']}, removing "
                      f"{r['removing_replicas']} (ingest topics reassign --verify)\n")
    marked = {r["topic"]: r["deletion_waits_for"] for r in records if r.get("marked_for_deletion")}
    for t, waiting in sorted(marked.items()):
        out.write(f"{t}: marked for deletion"
                  + (f"; waiting for broker(s) {waiting} to delete their replicas" if waiting else "")
                  + " (ingest topics delete --wait)\n")
    for r in records:
        for st in r.get("stalled_replicas") or ():
            where = (f"{st['damaged_start']}..{st['damaged_end']}" if st.get("damaged_start", -1) >= 0
                     else str(st["offset"]))
            out.write(f"{r['topic']}-{r['partition']}: replica {st['broker']} stalled at offset {st['offset']}: "
                      f"{st.get('reason', '?')} (leader {st['leader']}, range {where}); it stays out of the "
                      f"in-sync set until the leader repairs the range (docs/operations.md)\n")
    for r in records:
        if r["replicated"] is False:
            per = ", ".join(f"{b} ({n} partition{'s' if n != 1 else ''})"
                            for b, n in r["partitions_per_broker"].items()) or "no live broker now"
            out.write(f"{r['topic']}  unreplicated, per broker: {per}\n")
        elif r["replicated"] is None:
            out.write(f"{r['topic']}  {r['error']}\n")


def write_records_json(records: Sequence[dict], out: TextIO) -> None:
    for r in records:
        out.write(json.dumps(r, sort_keys=True) + "\n")

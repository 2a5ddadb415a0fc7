"""The golden frames of real Kafka clients (tests/kafka/golden/, captured by golden/capture_clients.py
against a peer broker advertising the version table of docs/kafka-protocol.md) are what they claim to be,
and what the clients send passes the product's record validation.

They pin down facts the Kafka listener is built on: which (api key, version) each client sends, that the
flexible versions carry request header v2, what an ApiVersions v3+ request names, and that every record
batch (magic 2) and legacy message set (magic 0/1) a client wrote validates and reads back as produced.
"""
from __future__ import annotations

import json

import pytest

from ingest.records.batch import iter_batches
from ingest.records.legacy import validate_legacy_produced
from ingest.records.record import iter_records
from ingest.records.validation import validate_produced
from tests.kafka.golden_frames import GOLDEN, compact_string, load, produce_records, profiles, request_header

PROFILES = profiles()
LIMIT = 1 << 20


@pytest.mark.parametrize("folder", sorted({p.parent for p in GOLDEN.rglob("INDEX.md")}))
def test_every_profile_of_the_index_has_its_frames(folder):
    named = [line[3:] for line in (folder / "INDEX.md").read_text().splitlines() if line.startswith("## ")]
    assert named == [json.loads((folder / f"{p}.jsonl").read_text().splitlines()[0])["profile"] for p in named]
    assert sorted(named) == sorted(p.stem for p in folder.glob("*.jsonl")) and len(named) >= 4


@pytest.mark.parametrize("profile", PROFILES)
def test_request_labels_match_the_bytes_and_responses_answer_a_request(profile):
    _, frames = load(profile)
    asked = {}
    for f in frames:
        if f.direction == "request":
            key, version, corr, _, _ = request_header(f.data)
            assert (key, version, corr) == (f.api_key, f.api_version, f.correlation_id)
            asked[(f.conn, corr)] = (key, version)
        else:
            assert int.from_bytes(f.data[:4], "big", signed=True) == f.correlation_id
            assert asked.get((f.conn, f.correlation_id)) == (f.api_key, f.api_version)


@pytest.mark.parametrize("profile", PROFILES)
def test_apiversions_v3_and_later_name_the_client_software(profile):
    head, frames = load(profile)
    for f in frames:
        if f.direction == "request" and f.api_key == 18 and f.api_version >= 3:
            _, _, _, _, pos = request_header(f.data)
            name, pos = compact_string(f.data, pos)
            version, pos = compact_string(f.data, pos)
            assert name and version, (profile, name, version)
            assert f.data[pos:] == b"\x00"  # no tagged fields


def _expected(step: str) -> list:
    """What capture_clients.py produced in a step: (key, value, headers) per record."""
    return [(None if i == 0 else f"key-{i}".encode(), f"{step} value {i}".encode()) for i in range(3)]


@pytest.mark.parametrize("profile", PROFILES)
def test_every_produced_batch_validates_and_reads_back_as_produced(profile):
    head, frames = load(profile)
    seen = 0
    for f in frames:
        if f.direction != "request" or f.api_key != 0:
            continue
        for _, _, records in produce_records(f.data):
            got = []
            if records[16] == 2:  # record batch v2
                info = validate_produced(records, inflate_limit=LIMIT)
                assert info.header.records_count == 3
                for pos, _ in iter_batches(records):
                    got += [(None if r.key is None else bytes(r.key), bytes(r.value))
                            for r in iter_records(records, pos)]
            else:  # a legacy message set, magic 0 or 1
                got = [(None if r.key is None else bytes(r.key), bytes(r.value))
                       for r in validate_legacy_produced(records, max_message_size=LIMIT, inflate_limit=LIMIT)]
            assert got == _expected(f.step)
            seen += 1
    produced = any(r["step"].startswith("produce") and r["ok"] for r in head["results"])
    assert seen > 0 or not produced


def test_what_the_clients_negotiate_against_the_proposed_table():
    """The index's headline facts (docs/kafka-protocol.md, "What the clients send") as the frames show them."""
    def versions(profile, key):
        return sorted({f.api_version for f in load(profile)[1] if f.direction == "request" and f.api_key == key})

    assert versions("kafka-python-2.3", 18) == [4] and versions("kafka-python-2.3", 0) == [8]
    assert versions("kafka-python-2.3", 1) == [10] and versions("kafka-python-2.3", 3) == [8]
    assert versions("kafka-python-3.0", 0) == [9] and versions("kafka-python-3.0", 22) == [4]
    assert versions("kafka-python-3.0", 1) == [12] and versions("kafka-python-3.0", 3) == [9]
    assert versions("aiokafka-0.14", 18) == [0] and versions("aiokafka-0.14", 0) == [7]
    assert versions("aiokafka-0.14", 1) == [11] and versions("aiokafka-0.14", 2) == [3]
    assert versions("confluent-kafka-2.16", 18) == [3] and versions("confluent-kafka-2.16", 0) == [10]
    assert versions("confluent-kafka-2.16", 1) == [12] and versions("confluent-kafka-2.16", 2) == [7]
    assert versions("kafka-python-2.3-api-0.8.0", 0) == [0] and versions("kafka-python-2.3-api-0.10.0", 0) == [2]
    assert versions("confluent-kafka-2.16-fallback-0.8.2", 0) == [0]
    assert versions("confluent-kafka-2.16-fallback-0.8.2", 18) == []
    # KIP-511: asked with a newer ApiVersions than the broker knows, kafka-python retries with the
    # version the answer names (2), librdkafka with v0, aiokafka only ever sends v0
    assert versions("kafka-python-2.3-apiversions-max-2", 18) == [2, 4]
    assert versions("confluent-kafka-2.16-apiversions-max-2", 18) == [0, 3]


def test_librdkafka_sends_lz4_uncompressed_unless_findcoordinator_is_advertised():
    def codec(profile):
        (f,) = [f for f in load(profile)[1] if f.step == "produce-lz4" and f.api_key == 0 and f.direction == "request"]
        ((_, _, records),) = produce_records(f.data)
        return records[22] & 0x07  # attributes' low byte: the codec

    assert codec("confluent-kafka-2.16") == 3  # lz4
    assert codec("confluent-kafka-2.16-without-findcoordinator") == 0  # none: its LZ4 feature needs key 10


def test_what_the_clients_send_to_log_in():
    """The SASL captures (tests/kafka/golden/sasl/): SaslHandshake v1 from every client, then SaslAuthenticate
    at its own version; a refused login is answered SASL_AUTHENTICATION_FAILED (58) with Kafka's message."""
    def versions(profile, key):
        return sorted({f.api_version for f in load(profile)[1] if f.direction == "request" and f.api_key == key})

    for profile, authenticate in (("sasl/confluent-kafka-2.16-scram-sha-256", [1]),
                                  ("sasl/kafka-python-3.0-scram-sha-512", [2]), ("sasl/aiokafka-0.14-plain", [1])):
        assert versions(profile, 17) == [1] and versions(profile, 36) == authenticate, profile
    refused = [f for f in load("sasl/confluent-kafka-2.16-wrong-password")[1]
               if f.direction == "response" and f.api_key == 36]
    assert refused and all(f.data[4:6] == b"\x00\x3a" for f in refused)   # error code 58
    assert all(b"Authentication failed: Invalid username or password" in f.data for f in refused)

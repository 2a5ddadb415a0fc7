"""AppendAt (private api key 10000) on the Kafka listener of a real broker process: batches keep their offsets,
the append happens only at the expected log end, a re-sent append is refused with the log end, a source's gap
stays a gap, bad requests get one clear code each and append nothing, and ApiVersions never lists the key."""
from __future__ import annotations

import pytest

from ingest import znodes
from ingest.client.discovery import start_kazoo
from ingest.client.kafka.fetcher import KafkaFetcher
from ingest.client.kafka_append_at import KafkaAppender
from ingest.errors import OffsetMismatchError
from ingest.records.batch import CRC_OFFSET, MAGIC_OFFSET, PARTITION_LEADER_EPOCH_OFFSET, iter_batches
from ingest.records.builder import SimpleRecord, build_batch
from ingest.records.compression import GZIP
from ingest.wire.errors import KafkaErrorCode as K
from ingest.wire.kafka.api_versions import ApiVersionsRequest, ApiVersionsResponse
from ingest.wire.kafka.append_at import AppendAtRequest, AppendAtResponse
from ingest.wire.kafka.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from tests.harness import replicated as r
from tests.harness.brokers import broker_cluster, broker_factory, stop_all  # noqa: F401  (fixture)
from tests.kafka.test_hostile_kafka import _call
from tests.mirror.mirror_setup import produce

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=1)
    yield brokers[0]
    stop_all(brokers)


def _kaddr(broker):
    return (broker.host, broker.kafka_port)


def _create(broker, topic: str) -> None:
    answer = _call(_kaddr(broker), MetadataRequest(topics=(MetadataRequestTopic(topic),),
                                                   allow_auto_topic_creation=True), 9, MetadataResponse)
    assert answer.topics[0].error_code in (0, K.LEADER_NOT_AVAILABLE), answer


def _batch(base: int, n: int, tag: str, codec: int = 0, epoch: int = 7) -> bytes:
    recs = [SimpleRecord(f"{tag}-{base + i}".encode(), b"k", (("h", b"x"),), 1_700_000_000_000 + base + i)
            for i in range(n)]
    return bytes(build_batch(recs, codec=codec, base_offset=base, partition_leader_epoch=epoch))


def _read_all(broker, topic: str, start: int) -> list[tuple[int, bytes, int]]:
    """``(base offset, bytes from the magic byte on, partition leader epoch)`` of every batch from ``start``."""
    out = []
    with KafkaFetcher(bootstrap_servers=f"{broker.host}:{broker.kafka_port}", fetch_max_wait_ms=0) as f:
        end = f.latest(topic, 0)
        pos = start
        while pos < end:
            got = f.fetch(topic, 0, pos)
            for p, h in got.batches:
                raw = bytes(got.data[p:p + h.size])
                out.append((h.base_offset, raw[MAGIC_OFFSET:], h.partition_leader_epoch))
            pos = got.next_offset
    return out


def _append(broker, topic: str, expected: int, records: bytes | None, acks: int = -1) -> AppendAtResponse:
    return _call(_kaddr(broker), AppendAtRequest(topic, 0, expected, acks, 5000, records), 0, AppendAtResponse)


def test_batches_keep_their_offsets_and_a_resent_append_is_refused_with_the_log_end(broker):
    _create(broker, "copy")
    appender = KafkaAppender(bootstrap_servers=f"{broker.host}:{broker.kafka_port}")
    try:
        assert appender.log_end("copy", 0) == 0
        first = _batch(0, 3, "a") + _batch(3, 2, "a", codec=GZIP)
        assert appender.append("copy", 0, 0, first) == 5
        with pytest.raises(OffsetMismatchError) as err:        # the same append again: a copier restarted
            appender.append("copy", 0, 0, first)
        assert err.value.log_end == 5
        assert appender.log_end("copy", 0) == 5
        later = _batch(5, 4, "a")
        assert appender.append("copy", 0, 5, later, acks=1) == 9
    finally:
        appender.close()
    got = _read_all(broker, "copy", 0)
    sent = [(h.base_offset, (first + later)[p:p + h.size][MAGIC_OFFSET:]) for p, h in iter_batches(first + later)]
    assert [(b, raw) for b, raw, _e in got] == sent          # byte-identical from the magic byte (CRC'd part) on
    assert {e for _b, _raw, e in got} == {0}                 # the target leader's epoch, not the source's 7


def test_a_gap_in_the_source_stays_a_gap_and_an_empty_log_starts_where_the_source_does(broker):
    _create(broker, "gappy")
    assert _append(broker, "gappy", 0, _batch(100, 2, "g")).log_end_offset == 102
    r = _append(broker, "gappy", 102, _batch(150, 3, "g"))
    assert (r.error_code, r.log_end_offset, r.log_start_offset) == (0, 153, 100)
    assert [b for b, _raw, _e in _read_all(broker, "gappy", 100)] == [100, 150]
    with KafkaFetcher(bootstrap_servers=f"{broker.host}:{broker.kafka_port}", fetch_max_wait_ms=0) as f:
        assert f.earliest("gappy", 0) == 100
        assert [h.base_offset for _p, h in f.fetch("gappy", 0, 120).batches] == [150]   # as Kafka: the next batch


def test_bad_appends_get_one_code_each_and_append_nothing(broker):
    _create(broker, "strict")
    assert _append(broker, "strict", 0, _batch(0, 2, "s")).error_code == 0
    bad_crc = bytearray(_batch(2, 2, "s"))
    bad_crc[CRC_OFFSET + 8] ^= 0xFF
    behind = _batch(1, 2, "s")
    cases = {
        "acks 0": (2, _batch(2, 1, "s"), 0, K.INVALID_REQUIRED_ACKS),
        "query with records": (-1, _batch(2, 1, "s"), -1, K.INVALID_REQUEST),
        "negative offset": (-7, _batch(2, 1, "s"), -1, K.OFFSET_MISMATCH),
        "bad crc": (2, bytes(bad_crc), -1, K.CORRUPT_MESSAGE),
        "starts before the expected offset": (2, behind, -1, K.INVALID_RECORD),
        "wrong expected offset": (1, _batch(1, 1, "s"), -1, K.OFFSET_MISMATCH),
        "no records": (2, b"", -1, K.INVALID_RECORD),
    }
    for name, (expected, records, acks, code) in cases.items():
        r = _append(broker, "strict", expected, records, acks)
        assert r.error_code == code, name
    assert _append(broker, "strict", -1, None).log_end_offset == 2
    produce(broker, "old07", 0, [b"0.7 message"])              # a 0.7 topic is the other kind
    assert _append(broker, "old07", 0, _batch(0, 1, "o")).error_code == K.INVALID_TOPIC_EXCEPTION
    assert _append(broker, "missing", -1, None).error_code == K.UNKNOWN_TOPIC_OR_PARTITION   # never created
    assert [b for b, _raw, _e in _read_all(broker, "strict", 0)] == [0]


def test_api_versions_never_advertises_the_private_key(broker):
    answer = _call(_kaddr(broker), ApiVersionsRequest("t", "1"), 3, ApiVersionsResponse)
    assert answer.error_code == 0 and all(a.api_key < 10000 for a in answer.api_keys)
    assert 0 in {a.api_key for a in answer.api_keys}
    assert PARTITION_LEADER_EPOCH_OFFSET < MAGIC_OFFSET < CRC_OFFSET   # the epoch is outside what the CRC covers


def test_a_replicated_target_acknowledges_a_gap_with_acks_all_and_its_follower_keeps_the_same_gap(
        broker_factory, zk_connect):  # noqa: F811
    brokers = broker_factory(2, zk_connect, overrides=r.replication_overrides(min_isr=2))
    zk = start_kazoo(zk_connect, connection_timeout_ms=30_000)
    try:
        zk.retry(zk.create, znodes.topic_dir("rgap"), znodes.assignment_value({0: [0, 1]}, znodes.KAFKA_FORMAT),
                 makepath=True)
        r.wait_for_state(zk, "rgap", 0, lambda s: s.leader >= 0 and len(s.isr) == 2, 60, "both replicas in sync")
        appender = KafkaAppender(bootstrap_servers=",".join(f"{b.host}:{b.kafka_port}" for b in brokers))
        try:
            assert appender.append("rgap", 0, 0, _batch(0, 2, "r")) == 2
            assert appender.append("rgap", 0, 2, _batch(40, 3, "r")) == 43      # acks=-1: the follower has it too
            assert appender.append("rgap", 0, 43, _batch(43, 1, "r")) == 44
        finally:
            appender.close()
        state = r.partition_state(zk, "rgap", 0)
        assert set(state.isr) == {0, 1}
        for b in brokers:   # each replica's own log: the same batches at the same offsets
            segs = sorted((b.log_dir / "rgap-0").glob("*.log"))
            assert [int(p.stem) for p in segs][-1] == 40, [p.name for p in segs]
    finally:
        zk.stop()
        zk.close()

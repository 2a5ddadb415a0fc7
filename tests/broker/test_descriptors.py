"""A broker under a real descriptor limit: topics do not exhaust it, the caps refuse cleanly, restarts work.

Each broker is started with a soft ``RLIMIT_NOFILE`` of :data:`NOFILE` (set in
this process around the ``Popen``, inherited by the broker: the limit the
kernel enforces on the broker process, checked in ``/proc/<pid>/limits``).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from ingest.wire import protocol as p
from ingest.broker.handlers import BrokerHandlers
from ingest.broker.log_config import LOG_CONFIG
from ingest.broker.log_manager import LogManager
from ingest.wire.errors import ErrorCode
from ingest.records.message_set import encode_message_set
from tests.harness.brokers import BrokerProcess
from tests.harness.limits import nofile
from tests.harness.wire import WireClient

NOFILE = 128
TOPICS = 300


def _start_limited(b: BrokerProcess) -> BrokerProcess:
    with nofile(NOFILE):
        b.start(timeout=60)
    limits = Path(f"/proc/{b.pid}/limits").read_text()
    line = next(ln for ln in limits.splitlines() if ln.startswith("Max open files"))
    assert line.split()[3] == str(NOFILE), line  # the soft limit the kernel enforces on the broker
    return b


def _open_fds(b: BrokerProcess) -> int:
    return len(os.listdir(f"/proc/{b.pid}/fd"))


def _topic(i: int) -> str:
    return f"topic-{i:04d}"


@pytest.mark.processes
def test_topics_beyond_the_descriptor_limit_are_served_and_a_restart_recovers_them_all(tmp_path):
    """Default config, 128 descriptors, 300 auto-created topics: every produce is acknowledged, the
    broker's descriptors stay below the limit, and a restart under the same limit serves every topic."""
    b = BrokerProcess(0, tmp_path / "broker", overrides={"num.partitions": 1})
    _start_limited(b)
    try:
        c = WireClient(b.host, b.port)
        errors = {}
        peak = 0
        for i in range(TOPICS):
            resp = c.produce_ack(_topic(i), [b"m-%d-0" % i, b"m-%d-1" % i])
            if resp.error != ErrorCode.NONE:
                errors[_topic(i)] = ErrorCode(resp.error).name
            if i % 25 == 0:
                peak = max(peak, _open_fds(b))
        assert not errors, f"{len(errors)} of {TOPICS} produces refused, first: {list(errors.items())[:3]}"
        assert peak < NOFILE * 3 // 4, f"the broker held {peak} descriptors for {TOPICS} partitions"
        for i in range(0, TOPICS, 7):  # reads of idle partitions reopen their files on demand
            assert c.fetch_all(_topic(i)) == [b"m-%d-0" % i, b"m-%d-1" % i]
        c.close()
        assert b.stop() == 0
        assert "Traceback" not in b.output()

        _start_limited(b)  # recovery opens, checks and closes: more partitions than descriptors
        c = WireClient(b.host, b.port)
        meta = c.ask(p.MetadataRequest(()), p.MetadataResponse)
        assert len(meta.topics) == TOPICS
        for i in range(TOPICS):
            assert c.fetch_all(_topic(i)) == [b"m-%d-0" % i, b"m-%d-1" % i], _topic(i)
        assert c.produce_ack(_topic(0), [b"after"]).error == ErrorCode.NONE
        assert _open_fds(b) < NOFILE * 3 // 4
        c.close()
        assert "Traceback" not in b.output()
    finally:
        b.kill()


@pytest.mark.processes
def test_topics_past_max_topics_are_refused_cleanly_and_the_broker_keeps_serving(tmp_path):
    b = BrokerProcess(0, tmp_path / "broker", overrides={"num.partitions": 1, "max.topics": 40})
    _start_limited(b)
    try:
        c = WireClient(b.host, b.port)
        codes = [c.produce_ack(_topic(i), [b"x"]).error for i in range(TOPICS)]
        assert codes == [ErrorCode.NONE] * 40 + [ErrorCode.TOPIC_CREATION_REFUSED] * (TOPICS - 40)
        assert c.produce_ack(_topic(3), [b"y"]).error == ErrorCode.NONE  # existing topics still take produces
        assert c.fetch_all(_topic(3)) == [b"x", b"y"]
        meta = c.ask(p.MetadataRequest(()), p.MetadataResponse)
        assert sorted(t.name for t in meta.topics) == [_topic(i) for i in range(40)]
        # fire-and-forget PRODUCE to a refused topic (0.7 has no reply): refused, logged, and the
        # connection serves the client's next request instead of dropping it
        c.sock.sendall(p.ProduceRequest(_topic(999), 0, encode_message_set([b"z"])).encode())
        assert c.produce_ack(_topic(5), [b"z"]).error == ErrorCode.NONE
        assert c.fetch_all(_topic(5)) == [b"x", b"z"]
        c.close()
        out = b.output()
        assert "Traceback" not in out
        refused = [ln for ln in out.splitlines() if "TOPIC_CREATION_REFUSED" in ln]
        assert refused and "max.topics=40" in refused[0]
        assert not (b.log_dir / f"{_topic(40)}-0").exists()  # a refused topic leaves nothing on disk
    finally:
        b.kill()


# --- in process: the limits and the auto-creation switch ------------------------------------------------


def _handlers(tmp_path, **overrides) -> tuple[LogManager, BrokerHandlers]:
    cfg = LOG_CONFIG.parse({"log.dir": str(tmp_path / "logs"), "log.flush.interval": 1, **overrides})
    lm = LogManager(cfg)
    lm.startup()
    return lm, BrokerHandlers(lm, cfg, broker_id=0, host="127.0.0.1", port=0)


def _ack_code(h: BrokerHandlers, topic: str, partition: int = 0) -> int:
    body = memoryview(p.ProduceAckRequest(topic, partition, encode_message_set([b"v"])).encode())[6:]
    reply = h.dispatch(p.RequestType.PRODUCE_ACK, body, "test")
    return p.ProduceAckResponse.decode(b"".join(bytes(x) for x in reply.parts)[4:]).error


def test_auto_create_off_takes_produces_only_for_topics_on_disk_or_configured(tmp_path):
    lm, h = _handlers(tmp_path)
    assert _ack_code(h, "old") == ErrorCode.NONE
    lm.shutdown()
    lm, h = _handlers(tmp_path, **{"auto.create.topics.enable": "false", "topic.partition.count.map": "conf:2"})
    try:
        assert _ack_code(h, "old") == ErrorCode.NONE        # on disk
        assert _ack_code(h, "conf", 1) == ErrorCode.NONE    # configured
        assert _ack_code(h, "new") == ErrorCode.TOPIC_CREATION_REFUSED
        assert lm.get_log("new", 0) is None and not (tmp_path / "logs" / "new-0").exists()
    finally:
        lm.shutdown()


def test_max_broker_partitions_and_a_refused_multiproduce_part_appends_nothing(tmp_path):
    lm, h = _handlers(tmp_path, **{"num.partitions": 2, "max.broker.partitions": 3})
    try:
        assert _ack_code(h, "a", 0) == ErrorCode.NONE
        assert _ack_code(h, "a", 1) == ErrorCode.NONE
        req = p.MultiProduceRequest((p.ProduceRequest("a", 0, encode_message_set([b"part"])),
                                     p.ProduceRequest("b", 0, encode_message_set([b"part"])),
                                     p.ProduceRequest("c", 0, encode_message_set([b"part"]))))
        reply = h.dispatch(p.RequestType.MULTIPRODUCE, memoryview(req.encode())[6:], "test")
        assert reply is None  # refused: no reply (0.7 has none), counted, and the connection serves on
        assert sum(h.produce_refusals.totals().values()) == 1
        assert lm.get_log("a", 0).read_bytes(0, 1 << 20) == encode_message_set([b"v"])  # nothing appended
        assert lm.get_log("c", 0) is None
        assert _ack_code(h, "d", 0) == ErrorCode.TOPIC_CREATION_REFUSED
        assert _ack_code(h, "a", 1) == ErrorCode.NONE
    finally:
        lm.shutdown()

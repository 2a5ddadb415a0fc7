"""A fuzzing loop of random and mutated frames leaves the broker serving and its logs valid."""
from __future__ import annotations

import logging
import os
import random
import socket

from ingest.wire import protocol as p
from ingest.broker.log_manager import LogManager
from ingest.records.message_set import encode_message_set
from ingest.records.message_batch import iter_messages
from ingest.broker.broker import BrokerServer
from ingest.broker.server_config import SERVER_CONFIG
from ingest.records.message_batch import MessageBatch
from tests.harness.brokers import RawClient, broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.hostile import mutate_frame, valid_frames

CASES = 3000
SEED = int(os.environ.get("INGEST_FUZZ_SEED", "20261122"))


def _count(buf, **kw) -> int:
    """Outer messages of a set validated for append (raises what the broker refuses)."""
    return MessageBatch.for_append(buf, **kw).count


def test_fuzzed_frames_leave_the_broker_serving_and_the_logs_valid(tmp_path, caplog):
    caplog.set_level(logging.ERROR)    # thousands of expected warnings; errors still captured
    cfg = SERVER_CONFIG.parse({"brokerid": 0, "port": 0, "listeners": "PLAINTEXT://127.0.0.1:0", "log.dir": str(tmp_path / "logs"),
                               "log.flush.interval": 1, "num.partitions": 2,
                               "max.socket.request.bytes": 1 << 20})
    broker = BrokerServer(cfg).start()
    rng = random.Random(SEED)
    frames = valid_frames()
    good = encode_message_set([b"bystander"])
    bystander = RawClient(broker.host, broker.port)
    acked = 0
    try:
        for i in range(CASES):
            data = mutate_frame(rng, frames)
            s = socket.create_connection((broker.host, broker.port), timeout=10)
            try:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
                while s.recv(65536):       # whatever the answer, the broker must end it
                    pass
            except (ConnectionResetError, BrokenPipeError):
                pass
            finally:
                s.close()
            if i % 250 == 0:
                resp = p.ProduceAckResponse.decode(bystander.request(p.ProduceAckRequest("by", 0, good)))
                assert resp.error == 0, f"case {i} (seed {SEED}): bystander refused: {resp}"
                acked += 1
        assert broker.network.alive()
        data = p.FetchResponse.decode(bystander.request(p.FetchRequest("by", 0, 0, 1 << 20))).message_set
        assert [m.payload for m in iter_messages(data)] == [b"bystander"] * acked
        ends = {k: lg.end_offset for k, lg in broker.log_manager.logs().items()}
    finally:
        bystander.close()
        broker.stop()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "unexpected errors during fuzzing"
    # every log holds only valid messages, and recovery finds nothing to truncate
    lm = LogManager(cfg)
    lm.startup()
    try:
        for key, lg in lm.logs().items():
            assert lg.end_offset == ends[key], key
            pos = lg.start_offset
            while pos < lg.end_offset:
                chunk = lg.read_bytes(pos, 1 << 20)
                assert _count(chunk) > 0
                pos += len(chunk)
    finally:
        lm.shutdown()


def test_fuzzed_frames_against_a_real_broker_process(broker_factory):
    (b,) = broker_factory(n=1, num_partitions=2, max_socket_request_bytes=1 << 20)
    rng = random.Random(SEED + 1)
    frames = valid_frames()
    with RawClient(b.host, b.port) as bystander:
        for i in range(1000):
            s = socket.create_connection((b.host, b.port), timeout=10)
            try:
                s.sendall(mutate_frame(rng, frames))
                s.shutdown(socket.SHUT_WR)
                while s.recv(65536):
                    pass
            except (ConnectionResetError, BrokenPipeError):
                pass
            finally:
                s.close()
        resp = p.ProduceAckResponse.decode(bystander.request(p.ProduceAckRequest("by", 0, encode_message_set([b"x"]))))
        assert resp.error == 0
    assert b.ping()
    assert b.stop() == 0
    out = b.output()
    assert "Traceback" not in out and " ERROR " not in out
    assert "WARNING" in out      # the bad frames were noticed and logged

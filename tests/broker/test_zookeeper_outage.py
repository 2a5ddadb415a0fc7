"""A ZooKeeper outage never stalls a broker's network threads (a real ZooKeeper, SIGKILLed and restarted).

A produce naming a topic the broker does not know needs ZooKeeper: is the topic replicated (created
there a moment ago), and, with ``default.replication.factor`` > 1, writing its assignment. While
ZooKeeper is down such a request is answered COORDINATION_UNAVAILABLE (30, retriable) within
``zk.connectiontimeout.ms`` (a request without a response closes its connection), and every other
client of the broker, on either network thread, is served meanwhile as if nothing happened. Once
ZooKeeper is back the same produce creates the topic.

The broker runs the default two network threads; each request to a new topic comes on a connection
of its own, so both threads hold some.
"""
from __future__ import annotations

import threading
import time

import pytest

from ingest.wire import protocol as p
from ingest.wire import protocol as pm
from ingest.client.producer import Producer
from ingest.wire.errors import ErrorCode
from ingest.records.message_set import encode_message_set
from ingest.znodes import parse_assignment, topic_dir, topic_path
from tests.harness.brokers import BrokerProcess, RawClient
from tests.harness.wait import wait_until
from tests.harness.wire import WireClient
from tests.harness.zookeeper import ZooKeeperServer, zookeeper_available

pytestmark = pytest.mark.processes  # ZooKeeper servers of their own, broker processes

ZK_WAIT_MS = 3000
"""The broker's zk.connectiontimeout.ms: how long a request that needs ZooKeeper waits for it."""
ANSWER_WITHIN_S = 60.0
"""How long the test waits for the answers to the new topics' requests while ZooKeeper is down (the
code before the fix answered only after ZooKeeper came back; here it stays down that long)."""
BYSTANDERS = 6


@pytest.fixture
def zk_server():
    """A ZooKeeper of this test's own: the session's shared one must not be killed."""
    if not zookeeper_available():
        pytest.skip("Debian package zookeeper is not installed")
    server = ZooKeeperServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=[1, 2], ids=["0.7-topics", "replicated-topics"])
def broker(request, zk_server, tmp_path):
    """default.replication.factor 1: a new topic is a Kafka 0.7 topic once ZooKeeper says it is not a
    replicated one; 2: the broker writes a new topic's assignment to ZooKeeper (replicated, on the one
    live broker)."""
    b = BrokerProcess(0, tmp_path / "broker", zk_connect=zk_server.connect,
                      overrides={"num.threads": 2, "zk.connectiontimeout.ms": ZK_WAIT_MS, "num.partitions": 1,
                                 "default.replication.factor": request.param}).start()
    b.replication_factor = request.param
    try:
        yield b
    finally:
        b.stop()


class Bystander(threading.Thread):
    """A client of topics the broker knows: PRODUCE_ACK to ``old`` and METADATA in turn, on its own
    connection, until stopped; ``answers`` holds the monotonic time of every answered pair."""

    def __init__(self, broker, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.broker, self.stop = broker, stop
        self.answers: list[float] = []
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            with WireClient(self.broker.host, self.broker.port, timeout=3 * ANSWER_WITHIN_S) as c:
                while not self.stop.is_set():
                    assert c.produce_ack("old", [b"bystander"]).error == ErrorCode.NONE
                    assert c.ask(p.MetadataRequest(("old",)), p.MetadataResponse).error == ErrorCode.NONE
                    self.answers.append(time.monotonic())
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.failure = exc


def _answered(broker, request, response_cls):
    """Send ``request`` on a connection of its own: its error code, or "closed" when the broker
    closed the connection (a request without a response); "no answer" after ANSWER_WITHIN_S."""
    with RawClient(broker.host, broker.port, timeout=ANSWER_WITHIN_S) as c:
        if response_cls is None:
            c.send(request)
            return "closed" if c.closed_by_peer(ANSWER_WITHIN_S) else "no answer"
        try:
            return response_cls.decode(c.request(request)).error
        except OSError:
            return "no answer"


def _new_topic_requests():
    """{what: (request, response class or None)}: every produce kind, each to a topic of its own."""
    s = encode_message_set([b"new"])
    return {
        "PRODUCE_ACK brandnew-1": (p.ProduceAckRequest("brandnew-1", 0, s), p.ProduceAckResponse),
        "PRODUCE_ACK brandnew-2": (p.ProduceAckRequest("brandnew-2", 0, s), p.ProduceAckResponse),
        "PRODUCE_ACKS brandnew-3": (p.ProduceAcksRequest(-1, 5000, p.ProduceRequest("brandnew-3", 0, s)),
                                    p.ProduceAckResponse),
        "APPEND_AT brandnew-4": (p.AppendAtRequest("brandnew-4", 0, 0, 1, 5000, s), p.ProduceAckResponse),
        "PRODUCE brandnew-5": (p.ProduceRequest("brandnew-5", 0, s), None),
        # a known topic and a new one: refused whole, nothing appended to old2
        "MULTIPRODUCE old2+brandnew-6": (p.MultiProduceRequest((p.ProduceRequest("old2", 0, s),
                                                                 p.ProduceRequest("brandnew-6", 0, s))), None),
    }


def _acked(broker, topic: str, payload: bytes) -> None:
    """PRODUCE_ACK until acknowledged (a replicated topic just created answers LEADER_NOT_AVAILABLE,
    and ZooKeeper just back may answer COORDINATION_UNAVAILABLE, appending nothing)."""
    def produced():
        with WireClient(broker.host, broker.port) as c:
            return c.produce_ack(topic, [payload]).error == ErrorCode.NONE

    wait_until(produced, 60, f"a produce to {topic} acknowledged", interval=0.2)


def test_a_zookeeper_outage_answers_new_topics_retriably_and_stalls_no_other_client(zk_server, broker):
    _acked(broker, "old", b"before")
    _acked(broker, "old2", b"before")
    stop = threading.Event()
    bystanders = [Bystander(broker, stop) for _ in range(BYSTANDERS)]
    for t in bystanders:
        t.start()
    wait_until(lambda: all(t.answers for t in bystanders), 30, "every bystander served once")

    zk_server.kill()
    answers: dict[str, object] = {}

    def ask(what, request, response_cls):
        answers[what] = _answered(broker, request, response_cls)

    requests = _new_topic_requests()
    askers = [threading.Thread(target=ask, args=(what, *req), daemon=True) for what, req in requests.items()]
    sent = time.monotonic()
    for t in askers:
        t.start()
    # new connections meanwhile (round robin over both network threads) are served too
    new_connections = [broker.ping(timeout=10.0) for _ in range(4)]
    for t in askers:
        t.join(ANSWER_WITHIN_S + 10)
    answered = time.monotonic()
    producer_result: dict[str, object] = {}
    # the product's own producer takes 30 for retriable: it keeps re-sending until ZooKeeper is back
    producer = Producer({"broker.list": broker.address, "message.send.max.retries": 100,
                         "delivery.timeout.ms": 180_000})

    def produce() -> None:
        try:
            producer.send("brandnew-producer", [b"through the outage"])
            producer_result["ok"] = True
        except BaseException as exc:  # noqa: BLE001 - reported below
            producer_result["error"] = exc

    sender = threading.Thread(target=produce, daemon=True)
    sender.start()
    time.sleep(2 * ZK_WAIT_MS / 1000.0)   # at least one of its attempts answered while ZooKeeper is down
    zk_server.start()
    try:
        got = {what: answers.get(what, "no answer") for what in requests}
        coordination = ErrorCode.COORDINATION_UNAVAILABLE
        assert got == {"PRODUCE_ACK brandnew-1": coordination, "PRODUCE_ACK brandnew-2": coordination,
                       "PRODUCE_ACKS brandnew-3": coordination, "APPEND_AT brandnew-4": coordination,
                       "PRODUCE brandnew-5": "closed", "MULTIPRODUCE old2+brandnew-6": "closed"}
        assert new_connections == [True] * 4
        # every other client was served while those requests waited for ZooKeeper
        for t in bystanders:
            assert t.failure is None, t.failure
            assert len([a for a in t.answers if sent <= a <= answered]) >= 3, \
                f"a bystander was answered {len([a for a in t.answers if sent <= a])} times after {sent:.1f}"
    finally:
        stop.set()
        for t in bystanders:
            t.join(ANSWER_WITHIN_S)

    # ZooKeeper is back: the same produce creates the topic
    _acked(broker, "brandnew-1", b"after")
    with WireClient(broker.host, broker.port) as c:
        assert c.fetch_all("brandnew-1") == [b"after"]
        assert c.fetch_all("old2") == [b"before"]      # the refused MULTIPRODUCE appended nothing
    sender.join(120)
    producer.close()
    assert producer_result == {"ok": True}
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zk_server.connect)
    zk.start(timeout=15)
    try:
        if broker.replication_factor == 1:   # a Kafka 0.7 topic, registered by the broker
            wait_until(lambda: zk.exists(topic_path("brandnew-1", 0)) is not None, 30, "brandnew-1 registered")
        else:                                # a replicated topic: its assignment
            assert parse_assignment(zk.get(topic_dir("brandnew-1"))[0]) == {0: (0,)}
    finally:
        zk.stop()
        zk.close()


def _start_in_process(server_cls, cfg, attempts: int = 5):
    """The broker started in this process; its short ZooKeeper connection timeout (the request wait under
    test) can pass before a loaded machine's running ZooKeeper answers, so a failed start is tried again."""
    from ingest.errors import CoordinationError

    for attempt in range(attempts):
        try:
            return server_cls(cfg).start()
        except CoordinationError:
            if attempt == attempts - 1:
                raise


def test_clients_that_leave_while_their_request_waits_for_zookeeper_leave_nothing_behind(zk_server, tmp_path):
    """Each of 20 connections sends a PRODUCE (no response) to a new topic during the outage and closes at
    once: its refusal is counted, and once answered no per-connection state of it remains (a held
    connection is not read, so its close is noticed after the answer, never before)."""
    from ingest.broker.broker import BrokerServer
    from ingest.broker.server_config import SERVER_CONFIG

    cfg = SERVER_CONFIG.parse({"brokerid": 0, "port": 0, "listeners": "PLAINTEXT://127.0.0.1:0", "log.dir": str(tmp_path / "l"), "num.partitions": 1,
                               "enable.zookeeper": "true", "zk.connect": zk_server.connect,
                               "zk.connectiontimeout.ms": ZK_WAIT_MS})
    b = _start_in_process(BrokerServer, cfg)
    try:
        zk_server.kill()
        clients = []
        for i in range(20):
            with RawClient(b.host, b.port) as c:
                c.send(p.ProduceRequest(f"left-{i}", 0, encode_message_set([b"x"])))
                clients.append("%s:%d" % c.sock.getsockname()[:2])
        refusals = b.handlers.produce_refusals
        wait_until(lambda: refusals.totals().get("PRODUCE COORDINATION_UNAVAILABLE") == 20, 60,
                   "every request answered")
        wait_until(lambda: [refusals.on_connection(c) for c in clients] == [{}] * 20, 30,
                   "no refusal counts kept for the closed connections")
        with WireClient(b.host, b.port) as c:   # the broker still serves known topics meanwhile
            assert c.ask(p.MetadataRequest(()), p.MetadataResponse).error == ErrorCode.NONE
    finally:
        b.stop()

"""Producers with ZooKeeper discovery across a real ZooKeeper outage that expires a broker's session.

ZooKeeper is frozen (SIGSTOP) longer than the broker's session timeout, then
thawed (SIGCONT): the server expires the broker's session, ``/brokers/ids`` is
empty until the broker re-registers, and a producer that finds no broker waits
for one (within ``delivery.timeout.ms``) instead of failing.

On an idle loopback machine the broker re-registers 0.1-0.5 s after ZooKeeper
resumes; under the attack's load it took longer than the producer's ~0.7 s of
retries. To make that window deterministic, the broker reaches ZooKeeper through
a loopback proxy (``tests/client/zk_proxy.py``) that stays cut for
``RECONNECT_DELAY_S`` after ZooKeeper resumes: the broker's link comes back late. With a tiny budget
the sends fail, and are counted failed by the producer and the event producer's
monitoring counts.
"""
from __future__ import annotations

import collections
import os
import signal
import threading
import time

import pytest

from ingest.wire import protocol as p
from ingest.records.message_batch import iter_messages
from ingest.client.producer import Producer
from ingest.clock import FakeClock
from ingest.errors import BrokerUnavailableError, IngestError
from ingest.events.event_producer import EventProducer
from ingest.events.loadgen import EventGenerator
from ingest.events.registry_client import RegistryClient
from ingest.znodes import broker_path
from tests.client.zk_proxy import ZkProxy
from tests.events.readback import latest_revisions, read_topic
from tests.harness.brokers import BrokerProcess, RawClient
from tests.harness.registry import RegistryProcess
from tests.harness.wait import wait_until
from tests.harness.zookeeper import ZooKeeperServer, zookeeper_available

SESSION_MS = 3000    # the broker's zk.sessiontimeout.ms
OUTAGE_S = 5.0       # longer than the broker's session: it expires when ZooKeeper resumes
RECONNECT_DELAY_S = 2.5  # the broker's ZooKeeper link returns this long after ZooKeeper
TOPIC = "outage"


@pytest.fixture
def zk_server():
    """Our own ZooKeeper (the session one must not be frozen)."""
    if not zookeeper_available():
        pytest.skip("Debian package zookeeper is not installed")
    server = ZooKeeperServer().start()
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is None:
            os.kill(server.proc.pid, signal.SIGCONT)   # never leave it frozen
        server.stop()


@pytest.fixture
def broker_link(zk_server):
    """The proxy the broker reaches ZooKeeper through."""
    proxy = ZkProxy(("127.0.0.1", zk_server.port))
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture
def broker(zk_server, broker_link, tmp_path):
    b = BrokerProcess(0, tmp_path / "broker", zk_connect=f"127.0.0.1:{broker_link.port}",
                      overrides={"zk.sessiontimeout.ms": SESSION_MS, "num.partitions": 1}).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def registry(tmp_path):
    proc = RegistryProcess(tmp_path / "registry").start()
    try:
        yield RegistryClient(proc.url)
    finally:
        proc.stop()


def _owner(zk_server) -> int | None:
    """The session owning the broker's registration (None when it is not registered)."""
    from kazoo.client import KazooClient

    c = KazooClient(hosts=zk_server.connect)
    c.start(timeout=15)
    try:
        stat = c.exists(broker_path(0))
        return stat.ephemeralOwner if stat else None
    finally:
        c.stop()
        c.close()


def _send_through_outage(zk_server, broker_link, send) -> dict[str, list]:
    """Call ``send(i)`` continuously while ZooKeeper is frozen and the broker re-registers.

    Returns the indexes sent ``ok`` and ``failed``. Asserts that the broker's session
    really expired (it re-registered under a new session).
    """
    before = _owner(zk_server)
    assert before is not None
    outcome: dict[str, list] = {"ok": [], "failed": []}
    stop = threading.Event()

    def run() -> None:
        i = 0
        while not stop.is_set():
            try:
                send(i)
                outcome["ok"].append(i)
            except IngestError as exc:
                outcome["failed"].append((i, exc))
            i += 1
            time.sleep(0.02)

    sender = threading.Thread(target=run, name="outage-sender")
    sender.start()
    try:
        time.sleep(1.0)
        os.kill(zk_server.proc.pid, signal.SIGSTOP)
        broker_link.cut()
        time.sleep(OUTAGE_S)
        os.kill(zk_server.proc.pid, signal.SIGCONT)
        wait_until(lambda: _owner(zk_server) is None, timeout=30, what="the broker's session to expire")
        time.sleep(RECONNECT_DELAY_S)
        broker_link.heal()
        wait_until(lambda: _owner(zk_server) not in (None, before), timeout=60,
                   what="the broker to re-register under a new session")
        time.sleep(2.0)   # keep sending after the re-registration
    finally:
        stop.set()
        sender.join(120)
    assert not sender.is_alive()
    return outcome


def _payloads_on_broker(b: BrokerProcess) -> list[bytes]:
    with RawClient(b.host, b.port) as c:
        resp = p.FetchResponse.decode(c.request(p.FetchRequest(TOPIC, 0, 0, 4 << 20)))
    assert resp.error == 0, resp
    return [m.payload for m in iter_messages(resp.message_set)]


@pytest.mark.parametrize("retries, elapsed, resends", [(100, 2.0, 7), (2, 0.3, 2)])
def test_retries_end_with_the_attempts_or_the_time_budget_whichever_first(retries, elapsed, resends):
    """Back-off 100 ms doubling, capped at 400 ms; budget 2 s (a dead port: every attempt fails)."""
    clock = FakeClock()
    cfg = {"broker.list": "0:127.0.0.1:1", "message.send.max.retries": retries, "retry.backoff.ms": 100,
           "retry.backoff.max.ms": 400, "delivery.timeout.ms": 2000}
    with Producer(cfg, clock=clock) as producer:
        start = clock.monotonic()
        with pytest.raises(BrokerUnavailableError):
            producer.send("t", [b"x"])
        # 0.1+0.2+0.4+0.4+0.4+0.4, then the 0.1 s left (FakeClock sleeps whole ms)
        assert clock.monotonic() - start == pytest.approx(elapsed, abs=0.01)
        assert producer.stats["retries"] == resends and producer.stats["failed"] == 1


@pytest.mark.processes
@pytest.mark.slow
def test_sends_outlast_a_zookeeper_outage_with_default_settings(zk_server, broker_link, broker):
    """Before the fix the retries (~0.7 s) ran out while /brokers/ids was empty and sends failed."""
    producer = Producer({"zk.connect": zk_server.connect, "topic.format.default": "0.7"})
    try:
        outcome = _send_through_outage(
            zk_server, broker_link, lambda i: producer.send(TOPIC, [b"m-%d" % i], key=b"k"))
    finally:
        producer.close()
    assert outcome["failed"] == []
    assert len(outcome["ok"]) > 100
    assert producer.stats["failed"] == 0 and producer.stats["acked"] == len(outcome["ok"])
    held = collections.Counter(_payloads_on_broker(broker))
    assert held == collections.Counter(b"m-%d" % i for i in outcome["ok"])   # each exactly once


@pytest.mark.processes
@pytest.mark.slow
def test_with_a_tiny_budget_sends_fail_and_are_counted_failed(zk_server, broker_link, broker, registry):
    """delivery.timeout.ms below the re-registration window: failures, counted by the producer
    and in the event producer's monitoring counts (what its monitoring events report)."""
    producer = Producer({"zk.connect": zk_server.connect, "topic.format.default": "0.7", "delivery.timeout.ms": 50,
                         "message.send.max.retries": 0})
    events = EventProducer(producer, registry, background=False, service_name="outage-test")
    gen = EventGenerator(seed=11)
    try:
        outcome = _send_through_outage(zk_server, broker_link,
                                       lambda i: events.send(TOPIC, gen.batch(1), key=b"k"))
    finally:
        totals = events.close(timeout_s=5)
        producer.close()
    failed = len(outcome["failed"])
    assert failed > 0, "the tiny budget should have run out while no broker was registered"
    assert all("no live broker" in str(exc) for _, exc in outcome["failed"])
    assert producer.stats["failed"] == failed and producer.stats["acked"] == len(outcome["ok"])
    assert totals["failed"] == failed and totals["acked"] == len(outcome["ok"])
    assert totals["attempted"] == failed + len(outcome["ok"])
    assert len(_payloads_on_broker(broker)) == len(outcome["ok"])
    # what the monitoring events published at close() report for the topic
    mon, undecodable = read_topic([broker], events.audit_topic, registry)
    assert undecodable == []
    latest = [m for m in latest_revisions(mon).values() if m["topic"] == TOPIC]
    assert sum(m["count_failed"] for m in latest) == failed
    assert sum(m["count_acked"] for m in latest) == len(outcome["ok"])

"""Consumer groups with real ZooKeeper and real broker processes: rebalance, failures, at-least-once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from kazoo.exceptions import NoNodeError

from ingest.client.consumer_group import ConsumerConnector
from ingest.client.producer import Producer
from ingest.client.rebalance import assign, subscribed_threads
from ingest.errors import ConfigError, ConsumerTimeoutError, FetchSizeTooSmallError
from ingest.znodes import partition_name
from tests.client.conftest import create_topic, wait_until
from tests.harness.zookeeper import ZooKeeperServer, expire_session, fresh_chroot
from tests.harness import reaper

REPO = Path(__file__).resolve().parents[2]
FAST = {"zk.sessiontimeout.ms": 2000, "autocommit.interval.ms": 100, "rebalance.backoff.ms": 100,
        "backoff.increment.ms": 20}


class Member:
    """A group consumer plus a thread draining its one stream into a shared sink."""

    def __init__(self, zk_connect, group, topic, sink, lock, name):
        self.connector = ConsumerConnector({"zk.connect": zk_connect, "groupid": group, "consumer.id": name,
                                            **FAST})
        self.name = name
        self.stream = self.connector.create_streams({topic: 1})[topic][0]
        self.thread = threading.Thread(target=self._drain, args=(sink, lock), daemon=True)
        self.thread.start()

    def _drain(self, sink, lock):
        for m in self.stream:
            with lock:
                sink.append(m.payload)

    def stop(self):
        self.connector.shutdown()
        self.thread.join(10)


def live_partitions(zk, topic):
    out = []
    ids = set(zk.get_children("/brokers/ids"))
    try:
        registered = zk.get_children(f"/brokers/topics/{topic}")
    except NoNodeError:  # the brokers register topics from a background thread: "not yet"
        return out
    for b in registered:
        if b in ids:
            try:
                n = int(zk.get(f"/brokers/topics/{topic}/{b}")[0])
            except NoNodeError:
                continue
            out.extend((int(b), p) for p in range(n))
    return sorted(out)


def ownership_is_settled(zk, group, topic, members, expected_partitions):
    """True when ZooKeeper's owners registry and every member agree with the pure assignment."""
    parts = live_partitions(zk, topic)
    if parts != expected_partitions:
        return False
    plan = assign(parts, subscribed_threads({m.name: {topic: 1} for m in members}, topic))
    base = f"/consumers/{group}/owners/{topic}"
    try:
        owners = {c: zk.get(f"{base}/{c}")[0].decode() for c in zk.get_children(base)}
    except NoNodeError:  # an owner released between listing and reading: not settled yet
        return False
    want = {partition_name(b, p): t for t, ps in plan.items() for b, p in ps}
    if owners != want:
        return False
    return all(m.connector.owned_partitions().get(topic, []) == plan[f"{m.name}-0"] for m in members)


@pytest.mark.slow
def test_groups_of_one_to_five_rebalance_and_lose_nothing_across_broker_restart(broker_factory, zk_connect, zk):
    brokers = broker_factory(n=3, zk_connect=zk_connect, num_partitions=4)
    topic = "g-clicks"
    create_topic(brokers, topic)
    all_parts = [(b.broker_id, p) for b in brokers for p in range(4)]
    wait_until(lambda: live_partitions(zk, topic) == all_parts, 20, "12 partitions registered")
    produced = [b"init"] * 3
    producer = Producer({"zk.connect": zk_connect, "topic.format.default": "0.7", "retry.backoff.ms": 20, "reconnect.backoff.max.ms": 500})

    def produce(n):
        batch = [b"m%05d" % (len(produced) + i) for i in range(n)]
        for i in range(0, n, 10):
            producer.send(topic, batch[i:i + 10], key=b"k%d" % i)
        produced.extend(batch)

    sink: list[bytes] = []
    lock = threading.Lock()
    members: list[Member] = []
    try:
        for k in range(5):  # join one by one: groups of 1..5
            members.append(Member(zk_connect, "g1", topic, sink, lock, f"c{k}"))
            produce(60)
            wait_until(lambda: ownership_is_settled(zk, "g1", topic, members, all_parts), 30,
                       f"ownership settled with {len(members)} consumers")
        brokers[2].kill()
        remaining = [bp for bp in all_parts if bp[0] != 2]
        wait_until(lambda: ownership_is_settled(zk, "g1", topic, members, remaining), 30,
                   "rebalance after broker 2 died")
        produce(60)
        brokers[2].start()
        wait_until(lambda: ownership_is_settled(zk, "g1", topic, members, all_parts), 30,
                   "rebalance after broker 2 returned")
        produce(60)
        for _ in range(4):  # leave one by one: groups of 4..1
            members.pop(0).stop()
            produce(30)
            wait_until(lambda: ownership_is_settled(zk, "g1", topic, members, all_parts), 30,
                       f"ownership settled with {len(members)} consumers")
        wait_until(lambda: set(sink) >= set(produced), 30, "every produced message consumed")
        with lock:
            assert set(produced) - set(sink) == set()
    finally:
        producer.close()
        for m in members:
            m.stop()


@pytest.mark.slow
def test_consumer_sigkilled_mid_stream_loses_nothing_for_its_group(broker_factory, zk_connect):
    brokers = broker_factory(n=1, zk_connect=zk_connect, num_partitions=2)
    topic = "g-kill"
    expected = [b"e%05d" % i for i in range(3000)]
    with Producer({"zk.connect": zk_connect, "topic.format.default": "0.7"}) as p:
        for i in range(0, len(expected), 100):
            p.send(topic, expected[i:i + 100], key=b"%d" % i)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "tests.client.group_consumer_proc", zk_connect, "gk", topic,
                             "0.5"],
                            stdout=subprocess.PIPE, env=env, cwd=str(REPO), start_new_session=True)
    reaper.watch(proc)  # stopped even if pytest itself is killed
    first: list[bytes] = []
    try:
        assert proc.stdout.readline().strip() == b"ready"
        while len(first) < 1500:
            line = proc.stdout.readline()
            assert line, "consumer subprocess ended early"
            first.append(line.strip())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    first.extend(line.strip() for line in proc.stdout.read().splitlines())
    connector = ConsumerConnector({"zk.connect": zk_connect, "groupid": "gk", "consumer.timeout.ms": 3000, **FAST})
    second: list[bytes] = []
    try:
        for m in connector.create_streams({topic: 1})[topic][0]:
            second.append(m.payload)
            if set(first) | set(second) >= set(expected) and len(second) >= len(expected) - len(first):
                break
    except Exception as exc:  # ConsumerTimeoutError: nothing more came
        assert type(exc).__name__ == "ConsumerTimeoutError"
    finally:
        connector.shutdown()
    assert set(expected) - set(first) - set(second) == set(), "messages lost"
    assert len(second) < len(expected), "the killed consumer's committed offsets were used"


@pytest.mark.slow
def test_expired_session_reregisters_and_rebalances(broker_factory, zk_connect, zk):
    brokers = broker_factory(n=1, zk_connect=zk_connect, num_partitions=2)
    topic = "g-expire"
    create_topic(brokers, topic)
    sink, lock = [], threading.Lock()
    member = Member(zk_connect, "ge", topic, sink, lock, "solo")
    parts = [(brokers[0].broker_id, 0), (brokers[0].broker_id, 1)]
    try:
        wait_until(lambda: ownership_is_settled(zk, "ge", topic, [member], parts), 20, "initial ownership")
        old_session = member.connector.zk.client_id[0]
        expire_session(member.connector.zk, zk_connect)
        wait_until(lambda: (member.connector.zk.client_id or (old_session,))[0] != old_session, 20,
                   "a new ZooKeeper session")
        wait_until(lambda: zk.exists("/consumers/ge/ids/solo"), 20, "re-registration after expiry")
        wait_until(lambda: ownership_is_settled(zk, "ge", topic, [member], parts), 20, "ownership re-claimed")
        with Producer({"zk.connect": zk_connect, "topic.format.default": "0.7"}) as p:
            p.send(topic, [b"after-expiry"])
        wait_until(lambda: b"after-expiry" in sink, 20, "message after expiry consumed")
    finally:
        member.stop()


def test_whitelist_streams_follow_new_topics_and_reset_largest(broker_factory, zk_connect):
    brokers = broker_factory(n=1, zk_connect=zk_connect, num_partitions=1)
    with Producer({"zk.connect": zk_connect, "topic.format.default": "0.7"}) as p:
        p.send("wl-a", [b"a-old"])
        p.send("other", [b"o"])
        c = ConsumerConnector({"zk.connect": zk_connect, "groupid": "gw", "autooffset.reset": "largest",
                               "consumer.timeout.ms": 10000, **FAST})
        try:
            stream = c.create_streams_by_filter(r"wl-.*")[0]
            wait_until(lambda: c.owned_partitions().get("wl-a"), 20, "wl-a owned")
            p.send("wl-a", [b"a-new"])
            p.send("wl-b", [b"b-old"])  # a topic created after the subscription ...
            wait_until(lambda: c.owned_partitions().get("wl-b"), 20, "wl-b owned")
            p.send("wl-b", [b"b-new"])  # ... is followed from its latest offset (autooffset.reset=largest)
            got = set()
            while got != {b"a-new", b"b-new"}:
                m = next(stream)
                assert m.topic in ("wl-a", "wl-b") and m.payload not in (b"a-old", b"b-old")
                got.add(m.payload)
        finally:
            c.shutdown()


def test_commit_offsets_on_demand_and_resume(broker_factory, zk_connect, zk):
    brokers = broker_factory(n=1, zk_connect=zk_connect, num_partitions=1)
    with Producer({"zk.connect": zk_connect, "topic.format.default": "0.7"}) as p:
        p.send("g-commit", [b"%d" % i for i in range(10)])
    cfg = {"zk.connect": zk_connect, "groupid": "gc", "autocommit.enable": False, "consumer.timeout.ms": 5000,
           **FAST}
    c = ConsumerConnector(cfg)
    stream = c.create_streams({"g-commit": 1})["g-commit"][0]
    first = [next(stream).payload for _ in range(4)]
    assert c.commit_offsets() == 1
    bid = brokers[0].broker_id
    assert int(zk.get(f"/consumers/gc/offsets/g-commit/{bid}-0")[0]) == 4 * 11
    c.shutdown()
    c2 = ConsumerConnector(cfg)
    stream2 = c2.create_streams({"g-commit": 1})["g-commit"][0]
    rest = [next(stream2).payload for _ in range(6)]
    c2.shutdown()
    assert first + rest == [b"%d" % i for i in range(10)]


def test_group_fetcher_grows_fetch_size_for_a_large_message_then_hits_the_ceiling(broker_factory, zk_connect):
    brokers = broker_factory(n=1, zk_connect=zk_connect, num_partitions=1,
                             overrides={"max.message.size": 2_000_000})
    big = b"B" * 500_000
    with Producer({"zk.connect": zk_connect, "topic.format.default": "0.7", "max.message.size": 2_000_000}) as p:
        p.send("g-big", [b"small", big, b"after"])
    base = {"zk.connect": zk_connect, "fetch.size": 4096, "consumer.timeout.ms": 10000, **FAST}
    c = ConsumerConnector({**base, "groupid": "gbig", "max.fetch.size": 1_000_000})
    try:
        stream = c.create_streams({"g-big": 1})["g-big"][0]
        assert [next(stream).payload for _ in range(3)] == [b"small", big, b"after"]
    finally:
        c.shutdown()
    c = ConsumerConnector({**base, "groupid": "gbig2", "max.fetch.size": 100_000})
    try:
        stream = c.create_streams({"g-big": 1})["g-big"][0]
        assert next(stream).payload == b"small"
        with pytest.raises(FetchSizeTooSmallError, match="500010 bytes, above max.fetch.size 100000"):
            next(stream)
    finally:
        c.shutdown()


def test_several_streams_per_consumer_split_the_partitions(broker_factory, zk_connect, zk):
    brokers = broker_factory(n=1, zk_connect=zk_connect, num_partitions=4)
    topic = "g-streams"
    create_topic(brokers, topic)
    expected = {b"init"}
    with Producer({"zk.connect": zk_connect, "topic.format.default": "0.7"}) as p:
        for i in range(40):
            p.send(topic, [b"s%02d" % i], key=b"key%d" % i)
            expected.add(b"s%02d" % i)
    c = ConsumerConnector({"zk.connect": zk_connect, "groupid": "gs", "consumer.id": "multi",
                           "consumer.timeout.ms": 1500, **FAST})
    try:
        streams = c.create_streams({topic: 3})[topic]
        bid = brokers[0].broker_id
        plan = assign([(bid, q) for q in range(4)], ["multi-0", "multi-1", "multi-2"])
        owners = {n: zk.get(f"/consumers/gs/owners/{topic}/{n}")[0].decode()
                  for n in zk.get_children(f"/consumers/gs/owners/{topic}")}
        assert owners == {partition_name(b, q): t for t, ps in plan.items() for b, q in ps}
        seen: dict[int, set] = {}
        got = set()
        for i, stream in enumerate(streams):
            try:
                for m in stream:
                    seen.setdefault(i, set()).add(m.partition)
                    got.add(m.payload)
            except Exception as exc:  # ConsumerTimeoutError ends each stream
                assert type(exc).__name__ == "ConsumerTimeoutError"
        assert got == expected
        for i, parts in seen.items():
            assert parts <= {q for _, q in plan[f"multi-{i}"]}
    finally:
        c.shutdown()


def test_one_subscription_per_connector(broker_factory, zk_connect):
    broker_factory(n=1, zk_connect=zk_connect)
    c = ConsumerConnector({"zk.connect": zk_connect, "groupid": "g-once", **FAST})
    try:
        c.create_streams({"t-once": 1})
        with pytest.raises(ConfigError, match="already subscribed"):
            c.create_streams({"t-other": 1})
    finally:
        c.shutdown()


def _in_call(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` is inside a call of ``function`` now (its frames, as a traceback shows them)."""
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


@pytest.mark.slow
def test_a_commit_racing_the_application_still_writes_where_it_got_to(broker_factory):
    """The committer (autocommit, or ``commit_offsets`` from another thread) reads a partition's consumed
    offset and writes it to ZooKeeper, while the application's thread moves that offset on at any time.
    Here ZooKeeper stalls in the middle of such a write (SIGSTOP: a long GC pause, or a loaded machine),
    and the application consumes every other message meanwhile: the next commit must write the offset it
    got to, not take the stalled write's older value for committed (which left the group's offset behind
    what it consumed, so a restarted member consumed those messages again)."""
    server = ZooKeeperServer().start()  # this test's own: it pauses it
    c = None
    try:
        zk_connect = fresh_chroot(server)
        brokers = broker_factory(n=1, zk_connect=zk_connect, num_partitions=1)
        with Producer({"zk.connect": zk_connect, "topic.format.default": "0.7"}) as p:
            p.send("g-race", [b"%d" % i for i in range(20)])
        c = ConsumerConnector({"zk.connect": zk_connect, "groupid": "gr", "autocommit.enable": False,
                               "consumer.timeout.ms": 3000, **FAST, "zk.sessiontimeout.ms": 30000})
        stream = c.create_streams({"g-race": 1})["g-race"][0]
        first = [next(stream) for _ in range(5)]  # the 5th is the current one: offsets up to the 4th consumed
        committer = threading.Thread(target=c.commit_offsets, kwargs={"include_current": False}, daemon=True)
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            committer.start()
            wait_until(lambda: _in_call(committer, "_put"), 30, "the committer inside its ZooKeeper write")
            rest = []
            with pytest.raises(ConsumerTimeoutError):  # every message handed out and counted as consumed
                for m in stream:
                    rest.append(m)
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        committer.join(60)
        assert not committer.is_alive()
        assert [m.payload for m in first + rest] == [b"%d" % i for i in range(20)]
        c.commit_offsets()
        path = f"/consumers/gr/offsets/g-race/{brokers[0].broker_id}-0"
        committed = int(c.zk.get(path)[0])
        assert committed == rest[-1].next_offset, (committed, [m.next_offset for m in first + rest])
    finally:
        if c is not None:
            c.shutdown()
        server.stop()

"""Producer ids from blocks in a real ZooKeeper: distinct across brokers, restarts and racing brokers, taken on
the coordination thread only (a network thread is sent there), and a broker without ZooKeeper's own ids."""
from __future__ import annotations

import json
import threading

import pytest

from ingest import znodes
from ingest.broker.coordinated import CoordinatedRequests
from ingest.broker.kafka.producer_ids import BLOCK_SIZE, LocalProducerIds, ZkProducerIds
from ingest.broker.zk_deadline import DeadlineCalls
from ingest.errors import NeedsZooKeeperError


@pytest.fixture
def coordination():
    """A real coordination thread per allocator (a broker's), stopped afterwards."""
    started: list[CoordinatedRequests] = []

    def make() -> CoordinatedRequests:
        c = CoordinatedRequests(15.0, 1 << 20).start()
        started.append(c)
        return c

    yield make
    for c in started:
        c.stop()


def on_worker(coordinated: CoordinatedRequests, fn):
    """``fn()`` run on the coordination thread, as a request sent there is; its result or error."""
    out: list = []
    done = threading.Event()

    def serve():
        try:
            out.append(fn())
        except Exception as exc:   # noqa: BLE001 - handed back to the test
            out.append(exc)
        done.set()

    def refuse(exc):
        out.append(exc)
        done.set()

    coordinated.submit(serve, refuse, 1)
    assert done.wait(30), "the coordination thread did not serve"
    return out[0]


def allocator(zk, coordination, broker_id: int) -> tuple[ZkProducerIds, CoordinatedRequests]:
    c = coordination()
    return ZkProducerIds(broker_id, DeadlineCalls(zk), zk, c), c


def take(ids: ZkProducerIds, coordinated: CoordinatedRequests) -> int:
    """The next id as InitProducerId gets it: on the network thread, or on the coordination thread when the
    block is used up."""
    try:
        return ids.next()
    except NeedsZooKeeperError:
        got = on_worker(coordinated, ids.next)
        assert isinstance(got, int), got
        return got


def test_a_network_thread_never_calls_zookeeper_and_blocks_never_overlap(zk, coordination):
    a, ca = allocator(zk, coordination, 0)
    b, cb = allocator(zk, coordination, 1)
    with pytest.raises(NeedsZooKeeperError):
        a.next()                                             # no block yet: sent to the coordination thread
    assert not zk.exists(znodes.LATEST_PRODUCER_ID_BLOCK)
    first = on_worker(ca, a.next)
    assert first == 0
    got = [first] + [a.next() for _ in range(BLOCK_SIZE - 1)]   # the rest of its block: no ZooKeeper
    with pytest.raises(NeedsZooKeeperError):
        a.next()
    got += [take(b, cb) for _ in range(2500)] + [take(a, ca) for _ in range(1500)]
    assert len(set(got)) == len(got) == 5000
    block = json.loads(zk.get(znodes.LATEST_PRODUCER_ID_BLOCK)[0])
    assert block["version"] == 1 and block["broker"] in (0, 1)
    assert int(block["block_end"]) == max(got) + (BLOCK_SIZE - 1 - max(got) % BLOCK_SIZE)
    # a broker that restarts takes a new block after every block taken before
    again, cr = allocator(zk, coordination, 0)
    assert take(again, cr) > max(got)


def test_brokers_racing_for_blocks_never_get_the_same_one(zk, coordination):
    pairs = [allocator(zk, coordination, i) for i in range(3)]
    results: list[list[int]] = [[] for _ in pairs]

    def run(i: int) -> None:
        ids, c = pairs[i]
        for _ in range(8):   # a block each time: the allocator's block is used up
            n = on_worker(c, ids.next)
            results[i].append(n)
            ids._next = ids._end + 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    starts = [n for r in results for n in r]
    assert len(starts) == 24 and len({n // BLOCK_SIZE for n in starts}) == 24


def test_without_zookeeper_ids_differ_across_restarts_and_brokers():
    a = LocalProducerIds(0, now_ms=1_800_000_000_000)
    ids = [a.next() for _ in range(70_000)]                 # past one counter's 65,536
    later = LocalProducerIds(0, now_ms=1_800_000_001_000)
    other = LocalProducerIds(1, now_ms=1_800_000_000_000)
    more = [later.next() for _ in range(10)] + [other.next() for _ in range(10)]
    assert len(set(ids + more)) == len(ids) + len(more)

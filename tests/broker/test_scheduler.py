"""The broker's scheduler (``background.threads``) and the purgatories' shared timer.

Waits are on events with generous bounds, never on a measured duration: a test fails because something
did not happen (or happened when it must not), not because the machine was slow.
"""
from __future__ import annotations

import threading

import pytest

from ingest.broker.delayed import DelayedOp, DelayTimer, Purgatory
from ingest.broker.scheduler import KafkaScheduler
from tests.harness.wait import wait_until

LONG = 30.0   # bound of a wait for something that must happen; never reached when it works


@pytest.fixture
def scheduler():
    s = KafkaScheduler(2, name="test-scheduler").start()
    yield s
    s.shutdown(10)


def test_a_woken_task_runs_long_before_its_period(scheduler):
    ran = threading.Event()
    task = scheduler.schedule("hourly", ran.set, period_s=3600)
    assert not ran.is_set()
    task.wake()
    assert ran.wait(LONG)


def test_a_periodic_task_keeps_running(scheduler):
    task = scheduler.schedule("often", lambda: None, period_s=0.01)
    wait_until(lambda: task.runs >= 5, LONG, "five runs of a 10 ms task")


def test_a_task_never_runs_on_two_threads_at_once_and_a_wake_during_a_run_runs_it_again(scheduler):
    inside, release = threading.Event(), threading.Event()
    active, most = [0], [0]
    lock = threading.Lock()

    def run():
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        inside.set()
        release.wait(LONG)
        with lock:
            active[0] -= 1

    task = scheduler.schedule("one-at-a-time", run)
    task.wake()
    assert inside.wait(LONG)
    inside.clear()
    task.wake()             # the other thread is free: it must not start a second run
    task.wake()
    release.set()
    wait_until(lambda: task.runs >= 2, LONG, "the run asked for during the first")
    assert most[0] == 1


def test_a_task_held_by_slow_work_does_not_hold_up_the_others(scheduler):
    held, release = threading.Event(), threading.Event()
    slow = scheduler.schedule("slow-fsync", lambda: (held.set(), release.wait(LONG)))
    fast_ran = threading.Event()
    fast = scheduler.schedule("flusher", fast_ran.set)
    slow.wake()
    assert held.wait(LONG)
    fast.wake()
    try:
        assert fast_ran.wait(LONG), "a task waited for another's slow run although a thread was free"
        assert slow.running
    finally:
        release.set()


def test_with_one_thread_a_slow_task_does_hold_up_the_others():
    """The other side of the test above: why ``background.threads`` defaults to 2."""
    s = KafkaScheduler(1, name="one").start()
    held, release, fast_ran = threading.Event(), threading.Event(), threading.Event()
    try:
        s.schedule("slow", lambda: (held.set(), release.wait(LONG))).wake()
        assert held.wait(LONG)
        s.schedule("fast", fast_ran.set).wake()
        assert not fast_ran.wait(0.3)
        release.set()
        assert fast_ran.wait(LONG)
    finally:
        release.set()
        s.shutdown(10)


def test_a_failing_task_runs_again_at_its_next_period(scheduler):
    calls = []

    def fail():
        calls.append(1)
        raise RuntimeError("a bad pass")

    scheduler.schedule("failing", fail, period_s=0.01)
    wait_until(lambda: len(calls) >= 3, LONG, "three runs of a task that raises every time")


def test_cancel_waits_for_the_run_in_progress_and_none_starts_after(scheduler):
    inside, release = threading.Event(), threading.Event()
    task = scheduler.schedule("cancelled", lambda: (inside.set(), release.wait(LONG)), period_s=0.01)
    task.wake()
    assert inside.wait(LONG)
    done = threading.Event()
    canceller = threading.Thread(target=lambda: (task.cancel(LONG), done.set()))
    canceller.start()
    assert not done.wait(0.2), "cancel returned while the task still ran"
    release.set()
    assert done.wait(LONG)
    runs = task.runs
    task.wake()
    marker = scheduler.schedule("marker", lambda: None)
    marker.wake()
    wait_until(lambda: marker.runs == 1, LONG, "a later task's run")
    assert task.runs == runs == 1


def test_shutdown_ends_every_thread():
    s = KafkaScheduler(3, name="ending").start()
    names = {f"ending-{i}" for i in range(3)}
    assert names <= {t.name for t in threading.enumerate()}
    s.shutdown(10)
    assert not names & {t.name for t in threading.enumerate()}


def test_background_threads_must_be_at_least_one():
    with pytest.raises(ValueError, match="background.threads must be at least 1, got 0"):
        KafkaScheduler(0)


def _op(deadline_s: float, expired: list, name: str) -> DelayedOp:
    import time
    return DelayedOp(time.monotonic() + deadline_s, lambda: False, lambda: expired.append(name))


def test_two_purgatories_share_one_timer_thread_and_each_closes_only_its_own():
    timer = DelayTimer("shared-timer")
    before = threading.active_count()
    p07, kafka = Purgatory("p07", timer), Purgatory("kafka", timer)
    assert threading.active_count() == before   # no thread of their own
    expired: list[str] = []
    try:
        p07.add(("produce", "t", 0), _op(0.01, expired, "07 soon"))
        kafka.add(("fetch", "t", 0), _op(0.01, expired, "kafka soon"))
        wait_until(lambda: sorted(expired) == ["07 soon", "kafka soon"], LONG, "both expired by the one timer")
        p07.add(("produce", "t", 0), _op(3600, expired, "07 later"))
        kafka.add(("fetch", "t", 0), _op(0.01, expired, "kafka again"))
        p07.close()   # answers its own waiting op at once
        assert "07 later" in expired
        wait_until(lambda: "kafka again" in expired, LONG, "the other purgatory's op expired after one closed")
        late: list[str] = []
        p07.add(("produce", "t", 1), _op(3600, late, "after close"))
        assert late == ["after close"]   # a closed purgatory expires at once
    finally:
        kafka.close()
        timer.close()
    assert "shared-timer" not in {t.name for t in threading.enumerate()}


def test_a_purgatory_without_a_timer_has_its_own_and_stops_it():
    p = Purgatory("alone")
    assert "alone" in {t.name for t in threading.enumerate()}
    expired: list[str] = []
    p.add("k", _op(0.01, expired, "op"))
    wait_until(lambda: expired == ["op"], LONG, "expired by its own timer")
    p.close()
    assert "alone" not in {t.name for t in threading.enumerate()}


@pytest.mark.processes   # a ZooKeeper of its own, SIGKILLed and restarted
def test_a_zookeeper_outage_does_not_hold_the_scheduler_and_the_nodes_are_written_once_it_is_back(tmp_path):
    """The topic registrar and the storage-failure publisher share the scheduler's threads: while ZooKeeper
    is down (SIGKILLed) with work pending for both, a task on the same single thread still runs, again and
    again; once ZooKeeper is back both nodes are written. (With ``client.retry``'s wait, the thread held by
    the first ZooKeeper task would run nothing else until ZooKeeper came back.)"""
    from ingest import znodes
    from ingest.broker.storage_failures import StorageFailurePublisher
    from ingest.broker.zk_registry import BrokerRegistry
    from tests.harness.zookeeper import ZooKeeperServer, zookeeper_available

    if not zookeeper_available():
        pytest.skip("Debian package zookeeper is not installed")
    server = ZooKeeperServer().start()
    s = KafkaScheduler(1, name="outage").start()
    registry = publisher = None
    try:
        registry = BrokerRegistry(server.connect, 7, "127.0.0.1", 1, session_timeout_ms=30_000, connection_timeout_ms=60_000,
                                  scheduler=s).start()
        publisher = StorageFailurePublisher(registry.client, 7, s).start()
        server.kill()
        wait_until(lambda: not registry.client.connected, LONG, "the broker's session disconnected")
        registry.register_topic("legacy", 2)
        publisher.update({("t", 0): "KafkaStorageError"})
        probe = s.schedule("probe", lambda: None, period_s=0.05)
        wait_until(lambda: probe.runs >= 3, LONG, "three runs of another task while ZooKeeper is down")
        assert not registry.client.connected   # still down: the runs were not waiting for it
        server.start()
        wait_until(lambda: registry.client.connected, LONG, "the session connected again")
        check = registry.client
        wait_until(lambda: check.exists(znodes.topic_path("legacy", 7)) is not None, LONG,
                   "the topic registered once ZooKeeper is back")
        wait_until(lambda: check.exists(znodes.storage_failures_path(7)) is not None, LONG,
                   "the storage failures published once ZooKeeper is back")
        assert check.get(znodes.topic_path("legacy", 7))[0] == znodes.partition_count_value(2)
    finally:
        if publisher is not None:
            publisher.stop()
        if registry is not None:
            registry.close()
        s.shutdown(10)
        server.stop()

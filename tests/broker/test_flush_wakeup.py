"""A topic's small flush interval makes its messages visible that soon, whatever the scheduler key says.

A message is visible once flushed; the flusher thread flushes each log whose flush interval
elapsed. It used to wake only every ``log.default.flush.scheduler.interval.ms``, so a topic with
``topic.flush.intervals.ms`` of 100 ms still waited for the scheduler's tick. Now it wakes at the
smallest configured flush interval (never more often than every 10 ms).

Why the scheduler is set to 60 s here rather than left at its 3 s default: with 3 s, the old
flusher made a message visible anywhere between 0 and 3 s after it was produced, so a bound that
tells the two apart (say 1.5 s) would pass by chance on old code and could fail on a loaded
2-core machine with the fix. With 60 s the old flusher's first tick comes a minute after the
broker started: the message is not visible for tens of seconds on old code, and the bound used
here (20 s, 200 times the topic's interval) leaves any scheduling delay of a loaded machine far
behind. No timing is asserted beyond that bound.
"""
from __future__ import annotations

import time

from ingest.client.producer import Producer
from ingest.client.simple_consumer import SimpleConsumer
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.wait import wait_until

SCHEDULER_MS = 60_000


def test_a_small_topic_flush_interval_is_not_held_back_by_the_scheduler_interval(broker_factory):
    [broker] = broker_factory(n=1, overrides={
        "log.flush.interval": 100_000,                       # no flush by message count
        "log.default.flush.interval.ms": SCHEDULER_MS,
        "log.default.flush.scheduler.interval.ms": SCHEDULER_MS,
        "topic.flush.intervals.ms": "fast:100",
    })
    started = time.monotonic()
    with Producer({"broker.list": broker.address}) as producer:       # acks=1: written, not yet flushed
        producer.send("slow", [b"waits for its own 60 s interval"])
        producer.send("fast", [b"visible within about 100 ms"])
    with SimpleConsumer(broker.host, broker.port) as consumer:
        wait_until(lambda: consumer.latest_offset("fast", 0) > 0, timeout=20,
                   what="the message of topic fast (flush interval 100 ms) to become visible")
        if time.monotonic() - started < SCHEDULER_MS / 1000 - 10:
            assert consumer.latest_offset("slow", 0) == 0   # its own interval (60 s) still holds it back
        [message] = list(consumer.iter_range("fast", 0, 0, consumer.latest_offset("fast", 0)))
        assert message.payload == b"visible within about 100 ms"


def test_the_flusher_wakes_at_the_smallest_interval_but_not_below_10_ms(tmp_path):
    from ingest.broker.log_manager import LogManager
    from ingest.broker.server_config import SERVER_CONFIG

    def check_ms(**keys) -> int:
        return LogManager(SERVER_CONFIG.parse({"brokerid": 0, "log.dir": str(tmp_path), **keys})) \
            .flush_check_interval_ms()

    assert check_ms() == 3000                                                       # the defaults: 3 s
    assert check_ms(**{"topic.flush.intervals.ms": "a:250,b:400"}) == 250
    assert check_ms(**{"log.default.flush.interval.ms": 500}) == 500
    assert check_ms(**{"topic.flush.intervals.ms": "a:1"}) == 10                   # floor
    assert check_ms(**{"log.default.flush.scheduler.interval.ms": 5}) == 5         # the scheduler key still rules
    assert check_ms(**{"log.default.flush.interval.ms": 60_000}) == 3000           # a longer interval waits for it

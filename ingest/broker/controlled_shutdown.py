"""Controlled shutdown: before a broker stops, the controller moves away the leadership of what it leads.

Kafka's design (``KafkaServer.controlledShutdown``, ``KafkaController.shutdownBroker``) with its keys
and defaults: ``controlled.shutdown.enable`` (true), ``controlled.shutdown.max.retries`` (3),
``controlled.shutdown.retry.backoff.ms`` (5000). Kafka's broker sends ControlledShutdown (api key 7)
to the controller; this product's controller takes every decision from ZooKeeper nodes (brokers watch
state nodes rather than receive LeaderAndIsr), so the request is a node it watches instead: the
ephemeral ``/admin/controlled_shutdown/[broker_id]`` (docs/replication.md, "Controlled shutdown").

What the stopping broker does (:func:`shut_down_controlled`), before it stops serving anything:

1. attempt n (1 .. ``controlled.shutdown.max.retries``): write the request node anew, so that the
   controller looks at every partition again (:mod:`ingest.broker.controller` moves each partition
   this broker leads to another live in-sync replica that can write, and takes this broker out of
   every in-sync set);
2. wait, up to ``controlled.shutdown.retry.backoff.ms``, until its own view of the partition states
   (:class:`~ingest.broker.replication_view.ReplicationView`) shows no partition it still leads that
   another live replica could take;
3. done, or after the last attempt, stop anyway and log which partitions it still leads.

Without ZooKeeper (not connected, or the request cannot be written within a few seconds) nothing can
move, and the broker stops at once, as before controlled shutdown.

A partition that only this broker can lead (its other replicas are out of the in-sync set) stays
led by it, as in Kafka, and the broker waits the whole bound for a follower to catch up; one whose
other replicas' brokers are all down (the last broker of a cluster stopping) has nothing it could
ever move to, and is not waited for. The node is ephemeral: it goes with the broker's session when
the broker stops, so a restarted broker is a candidate again; a broker killed mid-way leaves nothing
behind.

Thread-safety: called once, from the thread that stops the broker; the view's listeners only set an
event.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from ingest import znodes
from ingest.errors import IngestError

log = logging.getLogger(__name__)

ZK_CALL_S = 5.0
"""The longest one ZooKeeper call of the request may take (a broker whose ZooKeeper is gone still stops)."""


@dataclass(frozen=True)
class ControlledShutdownSettings:
    """Kafka's keys and defaults."""

    enable: bool = True            # controlled.shutdown.enable
    max_retries: int = 3           # controlled.shutdown.max.retries
    retry_backoff_ms: int = 5000   # controlled.shutdown.retry.backoff.ms

    @classmethod
    def from_config(cls, config) -> "ControlledShutdownSettings":
        return cls(config["controlled.shutdown.enable"], config["controlled.shutdown.max.retries"],
                   config["controlled.shutdown.retry.backoff.ms"])


def led_partitions(view, broker_id: int) -> list[tuple[str, int]]:
    """The replicated partitions (more than one replica) whose state names ``broker_id`` as leader."""
    return sorted(key for key, state in view.states.items()
                  if state.leader == broker_id and not view.is_deleting(key[0])
                  and len(view.assignments.get(key[0], {}).get(key[1], ())) > 1)


def could_move(view, broker_id: int, key: tuple[str, int]) -> bool:
    """Whether another replica of ``key`` is alive and not shutting down: one the leadership may go to."""
    replicas = view.assignments.get(key[0], {}).get(key[1], ())
    return any(r != broker_id and r in view.brokers and r not in view.shutting_down for r in replicas)


def _request(zk, broker_id: int, attempt: int) -> None:
    """Write ``/admin/controlled_shutdown/[broker_id]`` anew (deleted first: the controller watches children)."""
    path = znodes.controlled_shutdown_path(broker_id)
    try:
        zk.call(time.monotonic() + ZK_CALL_S, zk.client.delete_async, path, what="controlled shutdown request")
    except NoNodeError:
        pass
    try:
        zk.call(time.monotonic() + ZK_CALL_S, zk.client.create_async, path,
                znodes.controlled_shutdown_value(attempt), ephemeral=True, makepath=True,
                what="controlled shutdown request")
    except NodeExistsError:
        pass   # a create that timed out and landed after all


def shut_down_controlled(zk, view, broker_id: int, settings: ControlledShutdownSettings) -> list[tuple[str, int]]:
    """Ask the controller to move this broker's leaderships away and wait (bounded) until it has.

    Args:
        zk: the broker's :class:`~ingest.broker.zk_deadline.DeadlineCalls` (its session's client).
        view: the broker's started :class:`~ingest.broker.replication_view.ReplicationView`.

    Returns:
        the partitions this broker still leads when it gives up (empty when everything moved).
    """
    changed = threading.Event()
    view.on_state(lambda _t, _p, _s: changed.set())
    view.on_brokers(lambda _b: changed.set())

    def waiting() -> list[tuple[str, int]]:
        return [k for k in led_partitions(view, broker_id) if could_move(view, broker_id, k)]

    if not waiting():
        return led_partitions(view, broker_id)
    if not zk.client.connected:
        # nobody can move anything without ZooKeeper (the controller decides through it): do not wait
        log.warning("broker %d: ZooKeeper is not connected; stopping without a controlled shutdown (the partitions "
                    "it leads fail over once its session expires)", broker_id)
        return led_partitions(view, broker_id)
    start = time.monotonic()
    for attempt in range(1, settings.max_retries + 1):
        log.info("broker %d: controlled shutdown, attempt %d of %d: asking the controller to move the leadership "
                 "of %d partition(s)", broker_id, attempt, settings.max_retries, len(waiting()))
        try:
            _request(zk, broker_id, attempt)
        except (IngestError, KazooException) as exc:
            log.warning("broker %d: controlled shutdown request not written (%s); stopping without it", broker_id,
                        exc)
            return led_partitions(view, broker_id)
        deadline = time.monotonic() + settings.retry_backoff_ms / 1000.0
        while waiting():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            changed.wait(min(left, 1.0))
            changed.clear()
        left_over = waiting()
        if not left_over:
            log.info("broker %d: controlled shutdown: the controller moved every leadership that could move "
                     "(%.1f s)", broker_id, time.monotonic() - start)
            return led_partitions(view, broker_id)
    log.warning("broker %d: controlled shutdown gave up after %d attempt(s) (controlled.shutdown.max.retries); "
                "still the leader of %s: no other in-sync replica could take it; stopping anyway", broker_id,
                settings.max_retries, [f"{t}-{p}" for t, p in left_over][:20])
    return led_partitions(view, broker_id)

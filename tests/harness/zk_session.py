"""Really expiring a broker's ZooKeeper session, from outside the broker process.

A test cannot reach a broker process's kazoo client, so the session-twin trick
of :func:`tests.harness.zookeeper.expire_session` (reconnect with the same
session id and password, then close) is not available: ZooKeeper does not hand
out session passwords. Two techniques make the server itself expire the session
(its ephemeral nodes vanish, its watches die) while the broker process lives on:

(a) **network cut** (:func:`expire_by_cut`): isolate the broker's network
    namespace (:class:`tests.harness.netns.NetnsLab`) for longer than the
    session timeout. The broker's client stops hearing pings, the server stops
    hearing them too and expires the session after ``zk.sessiontimeout.ms``.
    The broker keeps running and keeps serving whoever is on its side of the
    cut; that is the "partitioned leader" case.

(b) **pause** (:func:`expire_by_pause`): SIGSTOP the broker process until the
    server has expired its session, then SIGCONT. The process (every thread,
    the kazoo client included) is frozen, so nothing is sent, and on SIGCONT
    it finds its session gone (kazoo ``LOST``). This is the "long GC pause" of
    the Kafka literature and needs no namespaces, so it runs everywhere.

Proof that the session really expired (not just that the broker deregistered):
the ephemeral ``/brokers/ids/[id]`` node vanishes while the process is alive,
and when it comes back its ``ephemeralOwner`` is a different session id
(:func:`wait_reregistered`).
"""
from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Callable

from ingest import znodes

log = logging.getLogger(__name__)


@dataclass
class Expiry:
    """What happened to one session: its id, and monotonic times of each step."""

    broker_id: int
    session_id: int
    started: float
    vanished: float | None = None
    resumed: float | None = None
    notes: dict[str, float] = field(default_factory=dict)

    @property
    def time_to_expiry(self) -> float | None:
        """Seconds from the pause/cut to the node's disappearance."""
        return None if self.vanished is None else self.vanished - self.started


def ephemeral_owner(zk, path: str) -> int | None:
    """The session id owning the ephemeral node ``path``; None when the node does not exist."""
    stat = zk.retry(zk.exists, path)
    return None if stat is None else stat.ephemeralOwner


def registration_owner(zk, broker_id: int) -> int | None:
    """The session id of a broker's ``/brokers/ids/[id]`` registration (None: not registered)."""
    return ephemeral_owner(zk, znodes.broker_path(broker_id))


def wait_vanished(zk, broker_id: int, timeout: float) -> float:
    """Until ``/brokers/ids/[id]`` is gone; returns the monotonic time it was seen gone."""
    path = znodes.broker_path(broker_id)
    deadline = time.monotonic() + timeout
    while zk.retry(zk.exists, path) is not None:
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} still exists {timeout}s later: the session did not expire")
        time.sleep(0.05)
    return time.monotonic()


def wait_reregistered(zk, broker_id: int, old_session: int, timeout: float) -> int:
    """Until ``/brokers/ids/[id]`` exists again, owned by a session other than ``old_session``."""
    deadline = time.monotonic() + timeout
    while True:
        owner = registration_owner(zk, broker_id)
        if owner is not None and owner != old_session:
            return owner
        if time.monotonic() > deadline:
            raise AssertionError(f"broker {broker_id} did not re-register with a new ZooKeeper session "
                                 f"within {timeout}s (owner now: {owner}, old session {old_session:#x})")
        time.sleep(0.1)


def _session_of(zk, broker_id: int) -> int:
    owner = registration_owner(zk, broker_id)
    if owner is None:
        raise AssertionError(f"broker {broker_id} is not registered at {znodes.broker_path(broker_id)}")
    return owner


def expire_by_pause(zk, broker, *, session_timeout_s: float,
                    while_paused: Callable[[Expiry], None] | None = None) -> Expiry:
    """Technique (b): SIGSTOP ``broker`` (a BrokerProcess) until ZooKeeper expired its session, SIGCONT.

    ``while_paused(expiry)`` runs after the node vanished and before SIGCONT
    (e.g. to wait for the controller to elect another leader). The process is
    always continued, also when waiting fails.
    """
    expiry = Expiry(broker.broker_id, _session_of(zk, broker.broker_id), time.monotonic())
    os.kill(broker.pid, signal.SIGSTOP)
    log.info("SIGSTOP broker %d (pid %d), session %#x", broker.broker_id, broker.pid, expiry.session_id)
    try:
        expiry.vanished = wait_vanished(zk, broker.broker_id, timeout=session_timeout_s * 4 + 10)
        if not broker.running:
            raise AssertionError(f"broker {broker.broker_id} exited while paused")
        if while_paused is not None:
            while_paused(expiry)
    finally:
        os.kill(broker.pid, signal.SIGCONT)
        expiry.resumed = time.monotonic()
        log.info("SIGCONT broker %d after %.1fs", broker.broker_id, expiry.resumed - expiry.started)
    return expiry


def expire_by_cut(zk, lab, ns, broker, *, session_timeout_s: float) -> Expiry:
    """Technique (a): cut ``ns`` (where ``broker`` runs) off the network until its session expired.

    The namespace stays cut; the caller heals it (``lab.heal(ns)``) when it wants.
    ``zk`` must be a client outside ``ns``.
    """
    expiry = Expiry(broker.broker_id, _session_of(zk, broker.broker_id), 0.0)
    expiry.started = lab.cut(ns)
    expiry.vanished = wait_vanished(zk, broker.broker_id, timeout=session_timeout_s * 4 + 10)
    if not broker.running:
        raise AssertionError(f"broker {broker.broker_id} exited while cut off")
    return expiry

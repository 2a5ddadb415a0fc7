"""Which tests start processes (the ``processes`` marker), and a guard that the others start none.

A test is marked ``processes`` when it starts a process of any kind: ZooKeeper, a broker, the
schema registry, a SparkSession or spark-submit, Airflow, the Python 2.7 clients, or any other
subprocess. tests/conftest.py marks every test that uses one of :data:`PROCESS_FIXTURES`
(directly or through another fixture); a test that starts a process in another way carries the
mark itself (``pytestmark = pytest.mark.processes`` in its module, or the decorator).
``./scripts/test.sh -m "not processes"`` then runs the pure-logic tests only.

The guard proves the marks right. In a session that runs no test marked ``processes`` (the
``-m "not processes"`` run, or any run of pure tests alone), a process started while a test runs
fails that test, naming the command:

- an audit hook (PEP 578) refuses ``subprocess.Popen``, ``os.fork``, ``os.forkpty``,
  ``os.posix_spawn``, ``os.spawn*``, ``os.exec*`` and ``os.system`` with
  :class:`ProcessStartRefused`, and records the attempt, so that a test which swallows the
  error fails all the same;
- after each test, a child of pytest that was not there before it (started by a way the hook does
  not see, such as ``_posixsubprocess`` directly) fails the test too.

In a session that runs marked tests as well, the guard is not installed: the fixtures of marked
tests start processes from background threads at any time, and would be blamed on whichever test
runs meanwhile.
"""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

MARK = "processes"

#: fixtures that start a process (or need one started): a test using any of them, even through
#: another fixture, is marked ``processes`` by tests/conftest.py
PROCESS_FIXTURES = frozenset({
    "zookeeper",        # the session's ZooKeeper JVM (zk_connect, zk and every cluster fixture use it)
    "spark",            # the session's SparkSession (a JVM through py4j)
    "registry_url",     # a schema registry process (tests/conftest.py)
    "registry_proc",    # a schema registry process (tests/events/conftest.py)
    "brokers",          # broker processes on a static broker list (tests/conftest.py)
    "broker_factory",   # broker processes (tests/harness/brokers.py)
    "datacenters",      # brokers, mirrors and a registry (tests/harness/datacenters.py)
    "netns_lab",        # `ip netns` / `ip link` (tests/harness/netns.py)
    "failing_disk",     # losetup, mkfs, mount (tests/harness/failing_disk.py)
    "airflow_db",       # `airflow db migrate` in .venv-airflow (tests/airflow/conftest.py)
    "py27",             # scripts/py27_env.sh, then the Python 2.7 clients (tests/kafka07/conftest.py)
    "tansu",            # a Tansu broker, a Kafka-protocol peer (tests/harness/tansu.py)
    "tansu_own",        # a Tansu broker of one test's own (tests/harness/tansu.py)
    "kafka_cluster",    # broker processes, with and without ZooKeeper (tests/kafka/conftest.py)
})

_EVENTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec",
                     "os.system"})


class ProcessStartRefused(RuntimeError):
    """A test not marked ``processes`` tried to start a process."""


def mark_items(items) -> None:
    """Mark every item that uses a fixture of :data:`PROCESS_FIXTURES` (its whole fixture closure)."""
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(MARK)


def starts_processes(item) -> bool:
    return item.get_closest_marker(MARK) is not None


def _children() -> dict[int, str]:
    """The live children of this process (every thread's), pid -> command line."""
    found: dict[int, str] = {}
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            pids = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in map(int, pids):
            try:
                found[pid] = (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                              .decode("utf-8", "replace").strip())
            except OSError:
                pass
    return found


def _describe(event: str, args: tuple) -> str:
    if event == "subprocess.Popen":
        executable, argv = args[0], args[1]
        shown = argv if isinstance(argv, (str, bytes)) else " ".join(map(str, argv or ()))
        return f"subprocess.Popen({shown or executable!s})"
    if event == "os.system":
        return f"os.system({args[0]!s})"
    if event in ("os.exec", "os.posix_spawn"):
        return f"{event}({args[0]!s} {' '.join(map(str, args[1] or ()))})"
    if event == "os.spawn":
        return f"os.spawn({args[1]!s} {' '.join(map(str, args[2] or ()))})"
    return event + "()"


class Guard:
    """The guard of a session of pure tests: :meth:`begin` before a test's setup, :meth:`problems`
    after each phase (:func:`guarded_phase`), :meth:`end` after its teardown. Threads of the test may start processes at
    any time; the hook takes a lock only to record one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._test: str | None = None
        self._attempts: list[str] = []
        self._before: dict[int, str] = {}
        sys.addaudithook(self._hook)  # cannot be removed again; idle between tests

    def _hook(self, event: str, args: tuple) -> None:
        if event not in _EVENTS or self._test is None:
            return
        what = _describe(event, args)
        with self._lock:
            self._attempts.append(what)
        raise ProcessStartRefused(fail_message(self._test, [what]))

    def begin(self, nodeid: str) -> None:
        self._before = _children()
        with self._lock:
            self._attempts = []
        self._test = nodeid

    def problems(self) -> list[str]:
        """What the running test started so far (each reported once)."""
        with self._lock:
            found, self._attempts = self._attempts, []
        now = _children()
        found += [f"child process {pid}: {cmd}" for pid, cmd in now.items()
                  if pid not in self._before and cmd and pid != os.getpid()]
        self._before.update(now)
        return found

    def end(self) -> None:
        self._test = None


def fail_message(nodeid: str, found: list[str]) -> str:
    return (f"{nodeid} is not marked {MARK!r} but starts a process: " + "; ".join(found)
            + f". Mark it (pytest.mark.{MARK}) or use a fixture of PROCESS_FIXTURES (tests/harness/processes.py).")


def guarded_phase(guard: Guard | None, nodeid: str):
    """The body of tests/conftest.py's hook wrappers around a test's setup, call and teardown
    (``return (yield from guarded_phase(...))``): the phase fails if it started a process."""
    try:
        result = yield
    except BaseException:
        if guard is not None:
            guard.problems()  # the phase failed already, often by the refusal itself: report nothing twice
        raise
    if guard is not None:
        found = guard.problems()
        if found:
            pytest.fail(fail_message(nodeid, found), pytrace=False)
    return result

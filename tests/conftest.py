"""Fixtures shared by every test package: real ZooKeeper, one SparkSession, a clock, the brokers and
the registry of the loader-style tests; the class-data-sharing archive of the Spark JVMs; the
``processes`` marker and its guard (tests/harness/processes.py)."""
from __future__ import annotations

import os
import signal
import threading

import pytest

from ingest.clock import FakeClock
from tests.harness import processes, spark_cds
from tests.harness.brokers import broker_cluster, stop_all
from tests.harness.registry import RegistryProcess
from tests.harness.zookeeper import ZooKeeperServer, fresh_chroot, zookeeper_available


_cds = {"training": None, "applied": False}
# what pytest runs with; a test that calls a command's main() in this process (``ingest broker start``
# installs its stop handler) must not leave its handler to the tests after it
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_HANDLERS = {s: signal.getsignal(s) for s in _STOP_SIGNALS}
_guard: processes.Guard | None = None


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config, items):
    """Mark ``processes`` every test that uses a fixture starting a process (tests/harness/processes.py)."""
    processes.mark_items(items)


def pytest_collection_finish(session):
    """With tests that start processes selected: start making the CDS archive of Spark's classes in the
    background if it does not exist yet (tests/harness/spark_cds.py; the tests do not wait for it).
    With none: guard that no test starts a process."""
    global _guard
    if session.config.option.collectonly:
        return
    if any(processes.starts_processes(item) for item in session.items):
        try:
            _cds["training"] = spark_cds.start_training()
        except ImportError:  # no pyspark: the Spark tests skip or fail on their own
            pass
    elif session.items:
        _guard = processes.Guard()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """Once the archive exists, every spark-submit a test starts (they inherit ``SPARK_SUBMIT_OPTS``)
    and the session's SparkSession map it. Each phase of a test runs under the guard, if any."""
    if _guard is not None:
        _guard.begin(item.nodeid)
    if not _cds["applied"] and processes.starts_processes(item):
        try:
            _cds["applied"] = spark_cds.add_to_spark_submit_opts(os.environ, spark_cds.ready_options())
        except ImportError:  # no pyspark
            _cds["applied"] = True
    return (yield from processes.guarded_phase(_guard, item.nodeid))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from processes.guarded_phase(_guard, item.nodeid))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield from processes.guarded_phase(_guard, item.nodeid))
    finally:
        if _guard is not None:
            _guard.end()
        if threading.current_thread() is threading.main_thread():
            for sig, handler in _HANDLERS.items():
                if signal.getsignal(sig) is not handler and handler is not None:
                    signal.signal(sig, handler)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup``: a file or an ``xdist_group`` at a time (tests/harness/xdist_scheduling.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.harness.xdist_scheduling import FileOrGroupScheduling

    return FileOrGroupScheduling(config, log)


def pytest_unconfigure(config):
    spark_cds.stop_training(_cds["training"])


@pytest.fixture(scope="session")
def zookeeper():
    """A real ZooKeeper server for the whole test session."""
    if not zookeeper_available():
        pytest.skip("Debian package zookeeper is not installed (scripts/bootstrap.sh installs it)")
    server = ZooKeeperServer().start()
    yield server
    server.stop()


@pytest.fixture
def zk_connect(zookeeper) -> str:
    """A connect string with a fresh chroot, so tests never see each other's znodes."""
    return fresh_chroot(zookeeper)


@pytest.fixture
def zk(zk_connect):
    """A started kazoo client on the test's own chroot."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zk_connect)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


@pytest.fixture(scope="session")
def spark():
    """The one local[2] SparkSession shared by all tests of this session."""
    from tests.harness.spark import make_session

    session = make_session()
    yield session
    session.stop()


@pytest.fixture(scope="module")
def registry_url(tmp_path_factory):
    """A real schema registry process (file store) for the module's tests."""
    proc = RegistryProcess(tmp_path_factory.mktemp("registry")).start()
    yield proc.url
    proc.stop()


@pytest.fixture(scope="module")
def brokers(request, tmp_path_factory):
    """Real broker processes on a static broker list for the module's tests, two partitions per topic
    each: two brokers, or the module's ``BROKERS``."""
    started = broker_cluster(tmp_path_factory, n=getattr(request.module, "BROKERS", 2), num_partitions=2)
    yield started
    stop_all(started)


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()

"""Replay after compaction, end to end: real broker and registry, the loader and the audit on the session's
Spark, compaction gated on the audit's verdict. Exact counts throughout.

One topic, one broker with two partitions and segments so small that every produce request is its own
segment: a reset to a wall-clock time then starts exactly at the newest chunk sent before that time
(offsets-before, as in Kafka 0.7). Chunks (5 events each) and the loads between them::

    warm  H0 (p0)                                     load 1
    a     H0 p0 | b H0 p1                             (load 1)
    ---- T_BEFORE ----
    c1    H1 p0 | c2 H1 p1                            load 2
    c3    H1 p0 | c4 H2 p1                            load 3
    ---- T_IN ----
    c5    H1 p0                                       load 4
    c6    H2 p0 | c7 H2 p1                            load 5
    ---- T_AFTER ----

A reset offset is moved to the start of the committed range holding it (a load task's range: all the
hour files of one task share it), so the loads above set where each replay starts. Hour H1 is audited
and compacted into one file holding c1, c3, c5 (p0) and c2 (p1). Then, on the same destination:

* ``--reset-offsets T_AFTER`` (after H1): only c6 and c7 are reloaded; the compacted H1 file stays;
* ``--reset-offsets T_IN`` (inside H1): p0 replays from c3, p1 from c4 (after its H1 range): the compacted
  file is rewritten holding exactly c1 and c2 (the other partition's rows untouched), then audited and
  compacted again;
* ``--reset-offsets T_BEFORE`` (before H1): everything is reloaded, the compacted file withdrawn whole;
* ``ingest loader reset-offsets --to earliest`` then a plain load: the same through the offsets-only
  path, then audited and compacted again.

After each: every produced message is in the warehouse exactly once (rows = distinct ids = produced).
A refused reset is refused by ``jobs/load.py`` in one line with exit 2 before any Spark work.
"""
from __future__ import annotations

import collections
import io
import subprocess
import sys
import time
import zlib
from pathlib import Path

import fastavro
import pytest

from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import run_audit
from ingest.clock import FakeClock
from ingest.compaction.config import COMPACTION_CONFIG
from ingest.compaction.runner import run as run_compaction
from ingest.events.event_producer import EventProducer
from ingest.events.loadgen import EventGenerator
from ingest.events.registry_client import RegistryClient
from ingest.loader.job import run_load
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.harness.brokers import broker_cluster, broker_list, stop_all
from tests.harness.registry import RegistryProcess
from tests.loader.helpers import loader_config

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TOPIC = "rp-views"
HOUR = 3_600_000
NOW = int(time.time() * 1000)
H0 = NOW // HOUR * HOUR - 3 * HOUR
H1, H2 = H0 + HOUR, H0 + 2 * HOUR
PER_CHUNK = 5


def key_for(partition: int) -> str:
    """A key the default partitioner (CRC-32 modulo 2) sends to ``partition``."""
    return next(k for k in (f"k{i}" for i in range(100)) if zlib.crc32(k.encode()) % 2 == partition)


class World:
    """Broker, registry, destination, and what was sent: chunk name -> (partition, hour, ids)."""

    def __init__(self, tmp: Path, broker, registry_url: str, spark) -> None:
        self.broker, self.registry_url, self.spark = broker, registry_url, spark
        self.dest = tmp / "dest"
        self.conf = loader_config(self.dest, [broker], registry_url, topics=f"{TOPIC}|audit-.*")
        self.chunks: dict[str, tuple[int, int, list[tuple[str, int]]]] = {}
        self.gen = EventGenerator(seed=3)

    def producer(self) -> EventProducer:
        return EventProducer({"broker.list": broker_list([self.broker]), "producer.type": "sync"},
                             RegistryClient(self.registry_url), background=False, monitoring_window_ms=HOUR,
                             monitoring_grace_ms=1000, monitoring_interval_ms=86_400_000)

    def send(self, ep: EventProducer, name: str, partition: int, hour: int) -> None:
        headers = ep.send(TOPIC, self.gen.batch(PER_CHUNK), key=key_for(partition), time_ms=hour + len(self.chunks) * 1000)
        self.chunks[name] = (partition, hour, [(h["session"], h["seq"]) for h in headers])

    def ids(self, *names: str) -> list[tuple[str, int]]:
        return sorted(i for n in names for i in self.chunks[n][2])

    @staticmethod
    def iso(ms: int) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"

    def load(self, **kw):
        return run_load(self.conf, self.spark, **kw)

    def state(self) -> LoaderState:
        return LoaderState.load(open_storage(str(self.dest)))

    def audit_h1(self) -> tuple[dict, str]:
        cfg = AUDIT_CONFIG.parse({"destination": str(self.dest), "window.ms": HOUR, "grace.ms": 1000,
                                  "window.lookback": 0, "topics": TOPIC})
        run = run_audit(self.spark, cfg, clock=FakeClock(int(time.time() * 1000)), from_ms=H1, to_ms=H1 + HOUR)
        rows = [r for r in run.rows if r["row_type"] == "window" and r["topic"] == TOPIC]
        assert len(rows) == 1, rows
        return rows[0], run.history_path

    def compact_h1(self, verdict: str) -> dict:
        cfg = COMPACTION_CONFIG.parse({"destination": str(self.dest)})
        out = run_compaction(cfg, start_ms=H1, end_ms=H1 + HOUR, topics=[TOPIC], audit_reports=[verdict],
                             clock=FakeClock(int(time.time() * 1000)))
        [h1] = [o for o in out if o["hour"].startswith(f"{TOPIC}/dt=") and o["hour"].endswith(f"hour={(H1 // HOUR) % 24}")]
        return h1


def mark() -> int:
    """A wall-clock time strictly between the segments appended before and after it."""
    time.sleep(0.05)
    t = int(time.time() * 1000)
    time.sleep(0.05)
    return t


def file_ids(state: LoaderState, rec) -> list[tuple[str, int]]:
    data = state.storage.read_bytes(state.full_path(rec))
    if rec.format == "avro":
        rows = list(fastavro.reader(io.BytesIO(data)))
    else:
        import pyarrow.parquet as pq

        rows = pq.read_table(io.BytesIO(data)).to_pylist()
    return sorted((r["header"]["session"], r["header"]["seq"]) for r in rows)


def warehouse_ids(state: LoaderState) -> collections.Counter:
    return collections.Counter(i for rec in state.files(TOPIC) for i in file_ids(state, rec))


def h1_files(state: LoaderState):
    return [f for f in state.files(TOPIC) if f.dt is not None and f.hour == (H1 // HOUR) % 24
            and f.dt == time.strftime("%Y-%m-%d", time.gmtime(H1 / 1000))]


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory):
    registry = RegistryProcess(tmp_path_factory.mktemp("registry")).start()
    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=2, log_file_size=256)
    try:
        w = World(tmp_path_factory.mktemp("replay"), brokers[0], registry.url, spark)
        warm = w.producer()  # creates the topic (both partitions) so that the next producer sees two
        w.send(warm, "warm", 0, H0)
        warm.close()
        ep = w.producer()
        w.send(ep, "a", 0, H0)
        w.send(ep, "b", 1, H0)
        w.load()
        w.t_before = mark()
        w.send(ep, "c1", 0, H1)
        w.send(ep, "c2", 1, H1)
        w.load()
        w.send(ep, "c3", 0, H1)
        w.send(ep, "c4", 1, H2)
        w.load()
        w.t_in = mark()
        w.send(ep, "c5", 0, H1)
        w.load()
        w.send(ep, "c6", 0, H2)
        w.send(ep, "c7", 1, H2)
        ep.close()  # its monitoring reports (one window per hour) go to the audit topic
        w.load()
        w.t_after = mark()
        w.all_ids = w.ids(*w.chunks)
        yield w
    finally:
        stop_all(brokers)
        registry.stop()


def check_exactly_once(w: World) -> None:
    got = warehouse_ids(w.state())
    assert sorted(got.elements()) == w.all_ids  # rows = distinct ids = produced
    assert len(got) == len(w.all_ids) == 10 * PER_CHUNK


def audit_and_compact(w: World, expected_files_in: int) -> None:
    row, verdict = w.audit_h1()
    h1_ids = w.ids("c1", "c2", "c3", "c5")
    assert (row["status"], row["produced_acked"], row["loaded_rows"], row["loaded_distinct"]) == (
        "COMPLETE", len(h1_ids), len(h1_ids), len(h1_ids))
    out = w.compact_h1(verdict)
    assert (out["action"], out["files_in"], out["files_out"], out["rows_out"], out["duplicates"]) == (
        "compacted", expected_files_in, 1, len(h1_ids), 0), out
    [compacted] = h1_files(w.state())
    assert file_ids(w.state(), compacted) == h1_ids
    check_exactly_once(w)


def test_replay_after_inside_and_before_a_compacted_hour(world):
    w = world
    check_exactly_once(w)
    # H1 as loaded: c1 and c2 (load 2), c3 (load 3), c5 (load 4): four loader files
    audit_and_compact(w, expected_files_in=4)
    [compacted] = h1_files(w.state())
    p0 = sorted(s[2:] for s in compacted.sources if s[1] == 0)
    p1 = [s[2:] for s in compacted.sources if s[1] == 1]
    assert len(p0) == 3 and len(p1) == 1

    # --- after H1: c6 and c7 only; the compacted H1 file is not touched ----------------------------
    r = w.load(reset_spec=str(w.t_after), reset_topics=[TOPIC])
    assert r.status == "committed" and r.record["totals"]["messages"] == 2 * PER_CHUNK
    assert h1_files(w.state()) == [compacted]
    check_exactly_once(w)

    # --- inside H1: p0 from c3, p1 from c4 (its H1 range, c2, ends before) -------------------------
    r = w.load(reset_spec=w.iso(w.t_in), reset_topics=[TOPIC])
    starts = {p.key[2]: p.start for p in r.plan.partitions if p.key[0] == TOPIC}
    assert starts == {0: p0[1][0], 1: p1[0][1]}
    assert r.record["totals"]["messages"] == 5 * PER_CHUNK  # c3, c5, c6 and c4, c7
    state = w.state()
    [rewrite] = [f for f in h1_files(state) if f.sources]
    assert rewrite.path != compacted.path and rewrite.run_id == r.run_id
    assert file_ids(state, rewrite) == w.ids("c1", "c2")  # c1 and the other partition's rows stay
    assert sorted(s[1:] for s in rewrite.sources) == [(0, *p0[0]), (1, *p1[0])]
    with open(state.full_path(rewrite), "rb") as fh:
        assert fastavro.reader(fh).codec == "deflate"  # the compacted file's own codec
    reloaded = sorted(i for f in h1_files(state) if not f.sources for i in file_ids(state, f))
    assert reloaded == w.ids("c3", "c5")
    assert not state.storage.exists(state.storage.join(compacted.path))  # withdrawn and deleted
    check_exactly_once(w)
    audit_and_compact(w, expected_files_in=2)  # the rewrite + one reloaded file (c3 and c5, one task)

    # --- before H1: everything from the start; the compacted file has no row left -------------------
    r = w.load(reset_spec=str(w.t_before), reset_topics=[TOPIC])
    assert r.record["totals"]["messages"] == 10 * PER_CHUNK  # warm and a, b were loaded from offset 0
    assert [tuple(f.sources) for f in h1_files(w.state())] == [(), ()]  # p0's and p1's reloaded H1 files
    check_exactly_once(w)


def test_offsets_only_reset_then_a_load_replaces_the_compacted_hour(world, tmp_path, capsys):
    from ingest.cli import main

    w = world  # as the previous test left it: H1 replayed from before, as two loader files
    audit_and_compact(w, expected_files_in=2)
    [compacted] = h1_files(w.state())
    conf = tmp_path / "loader.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in w.conf.as_properties().items()))
    assert main(["loader", "reset-offsets", "--config", str(conf), "--to", "earliest", "--topic", TOPIC]) == 0
    state = w.state()
    assert all(o.offset == 0 for k, o in state.offsets.items() if k[0] == TOPIC)
    assert [f.path for f in state.files(TOPIC)] == [compacted.path]  # loader files withdrawn; compacted until the load
    assert file_ids(state, compacted) == w.ids("c1", "c2", "c3", "c5")
    r = w.load()
    assert r.record["totals"]["messages"] == 10 * PER_CHUNK
    assert not [f for f in h1_files(w.state()) if f.sources]
    check_exactly_once(w)
    audit_and_compact(w, expected_files_in=2)  # one reloaded H1 file per partition


@pytest.mark.parametrize("args, message", [
    (["--reset-offsets", "yesterday", "--topic", TOPIC], "allowed are earliest, latest, epoch milliseconds"),
    (["--reset-offsets", "2999-01-01T00:00:00Z", "--topic", TOPIC], "is in the future: allowed are earliest"),
    (["--reset-offsets", "earliest"], "needs --topic T"),
    (["--reset-offsets", "earliest", "--topic", "no-such"], f"unknown topic(s) no-such; allowed are the brokers' topics"),
])
def test_a_refused_reset_is_one_line_exit_2_before_spark_and_commits_nothing(world, tmp_path, args, message):
    w = world
    seq = w.state().seq
    conf = tmp_path / "loader.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in w.conf.as_properties().items()))
    # plain python, not spark-submit: a refusal must come before any SparkSession is built
    proc = subprocess.run([sys.executable, str(REPO / "jobs" / "load.py"), "--config", str(conf), *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.strip() and " INFO " not in line and " WARNING " not in line]
    assert len(errors) == 1 and message in errors[0], proc.stderr
    assert "log4j" not in proc.stderr and "SparkContext" not in proc.stderr  # no JVM was started
    assert w.state().seq == seq

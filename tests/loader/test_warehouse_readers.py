"""Every common reader gets the warehouse right: the snippets of docs/reading-the-warehouse.md, run as
written (only the ``warehouse = ...`` line replaced) against a real load, with state beside the data.

Engines: duckdb (Parquet; Avro through the ``duckdb-ext-avro`` package), polars, pyarrow.dataset,
Spark (the session ``spark``) and fastavro. Each snippet leaves ``views`` (one topic) and
``everything`` (every topic, ``audit-monitoring`` included). The tests count rows exactly, check
that ``dt`` is a date and ``hour`` an integer, filter numerically on both, and compare every column's
values, row by row, with what the producers wrote: no data column may be dropped (a topic's or a
schema version's), duplicated or overwritten by a column taken from the path (``audit-monitoring``
rows have a ``topic`` field of their own; the path's topic is ``_topic``). A second warehouse is the
Parquet one plus what the code before the ``hour=H`` layout left (``hour=05``, a ``.parquet``
revision, a ``.parquet`` staged leftover).
"""
from __future__ import annotations

import collections
import datetime
import json
import re
from pathlib import Path

import pytest

from tests.loader.warehouse_build import CLICKS, MONITORING, NCLICKS, NLEGACY, VIEWS, Written, add_legacy, build

DOC = Path(__file__).resolve().parents[2] / "docs" / "reading-the-warehouse.md"
WAREHOUSE_LINE = re.compile(r'^warehouse = "/data/warehouse".*$', re.M)
LAST_DAY = datetime.date(2026, 11, 23)


def snippets() -> dict[str, str]:
    """``{"duckdb, Parquet": code, ...}`` of every python block of the page (its first line names it)."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    return {b.splitlines()[0].lstrip("# ").strip(): b for b in blocks}


BROKERS = 1  # the module's `brokers` (tests/conftest.py): the warehouses' file names say broker 0


@pytest.fixture(scope="module")
def warehouses(spark, brokers, registry_url, tmp_path_factory):
    root = tmp_path_factory.mktemp("warehouses")
    built = build(spark, brokers, registry_url, root)
    built["legacy"] = add_legacy(built["parquet"], root / "legacy")
    return built


# -- engine adapters: (rows, dt is a date, hour is an integer, rows with hour < 10, rows of the last day,
#    rows per _topic or None) and (column names, rows as dicts)

def _duckdb(rel):
    def n(where):
        return rel.filter(where).aggregate("count(*)").fetchone()[0]
    types = dict(zip(rel.columns, (str(t) for t in rel.types)))
    topics = dict(rel.aggregate("_topic, count(*)").fetchall()) if "_topic" in rel.columns else None
    return (n("true"), types["dt"] == "DATE", types["hour"] in ("INTEGER", "BIGINT"), n("hour < 10"),
            n(f"dt = DATE '{LAST_DAY}'"), topics)


def _duckdb_rows(rel):
    return rel.columns, [dict(zip(rel.columns, row)) for row in rel.fetchall()]


def _polars(frame):
    import polars as pl

    lf = frame.lazy()
    schema = lf.collect_schema()

    def n(expr):
        return lf.filter(expr).select(pl.len()).collect().item()
    topics = (dict(lf.group_by("_topic").len().collect().iter_rows()) if "_topic" in schema else None)
    return (n(pl.lit(True)), schema["dt"] == pl.Date, schema["hour"].is_integer(), n(pl.col("hour") < 10),
            n(pl.col("dt") == LAST_DAY), topics)


def _polars_rows(frame):
    df = frame.lazy().collect()
    return df.columns, df.to_dicts()


def _pyarrow(dataset):
    import pyarrow as pa
    import pyarrow.dataset as ds

    s = dataset.schema
    topics = (dict(collections.Counter(dataset.to_table(columns=["_topic"]).column("_topic").to_pylist()))
              if "_topic" in s.names else None)
    return (dataset.count_rows(), s.field("dt").type == pa.date32(), pa.types.is_integer(s.field("hour").type),
            dataset.count_rows(filter=ds.field("hour") < 10), dataset.count_rows(filter=ds.field("dt") == LAST_DAY),
            topics)


def _pyarrow_rows(dataset):
    table = dataset.to_table()
    return table.column_names, table.to_pylist()


def _spark(df):
    """One Spark job per frame: counts grouped by _topic (when there is one), summed here."""
    from pyspark.sql import functions as F

    types = dict(df.dtypes)
    has_topic = "_topic" in df.columns
    aggs = [F.count(F.lit(1)).alias("n"), F.count_if(F.col("hour") < 10).alias("early"),
            F.count_if(F.col("dt") == F.lit(LAST_DAY)).alias("last_day")]
    rows = (df.groupBy("_topic") if has_topic else df).agg(*aggs).collect()
    return (sum(r.n for r in rows), types["dt"] == "date", types["hour"] in ("int", "bigint"),
            sum(r.early for r in rows), sum(r.last_day for r in rows),
            {r._topic: r.n for r in rows} if has_topic else None)


def _spark_rows(df):
    return df.columns, [r.asDict(recursive=True) for r in df.collect()]


def _rows(rows):
    topics = dict(collections.Counter(r["_topic"] for r in rows)) if all("_topic" in r for r in rows) else None
    return (len(rows), all(type(r["dt"]) is datetime.date for r in rows), all(type(r["hour"]) is int for r in rows),
            sum(r["hour"] < 10 for r in rows), sum(r["dt"] == LAST_DAY for r in rows), topics)


def _rows_rows(rows):
    columns = list(dict.fromkeys(c for r in rows for c in r))
    return columns, rows


ENGINES = {
    "duckdb, Parquet": ("parquet", _duckdb, _duckdb_rows), "duckdb, Avro": ("avro", _duckdb, _duckdb_rows),
    "polars, Parquet": ("parquet", _polars, _polars_rows), "polars, Avro": ("avro", _polars, _polars_rows),
    "pyarrow.dataset, Parquet": ("parquet", _pyarrow, _pyarrow_rows),
    "Spark, Parquet": ("parquet", _spark, _spark_rows), "fastavro, Avro": ("avro", _rows, _rows_rows),
}


def _run(name, path, spark, capsys):
    code = WAREHOUSE_LINE.sub(f'warehouse = "{path}"', snippets()[name])
    ns = {"__name__": "snippet", "spark": spark}
    exec(compile(code, f"{DOC.name}: {name}", "exec"), ns)
    capsys.readouterr()  # what the snippet prints is for the reader of the page
    return ns


def test_the_page_has_one_snippet_per_engine_and_format():
    assert sorted(snippets()) == sorted(ENGINES)


CASES = [("fresh", n) for n in sorted(ENGINES)] + [("legacy", n) for n in sorted(ENGINES) if ENGINES[n][0] == "parquet"]
"""Every snippet on the fresh warehouse of its format; the Parquet ones on the old-layout one too."""


def _warehouse(warehouses, name, which):
    return warehouses[ENGINES[name][0] if which == "fresh" else "legacy"]


def _counts(written: list[Written]) -> tuple[int, int, int]:
    """(rows, rows with hour < 10, rows of the last day)."""
    return len(written), sum(w.hour < 10 for w in written), sum(w.dt == LAST_DAY for w in written)


@pytest.mark.parametrize(("which", "name"), CASES)
def test_snippet_reads_exact_rows_with_typed_dt_and_hour(name, which, warehouses, spark, capsys):
    adapt = ENGINES[name][1]
    w = _warehouse(warehouses, name, which)
    ns = _run(name, w.path, spark, capsys)
    views = _counts([x for x in w.written if x.topic == VIEWS])
    rows, dt_is_date, hour_is_int, early, last_day, topics = adapt(ns["views"])
    assert ((rows, early, last_day), dt_is_date, hour_is_int) == (views, True, True)
    assert topics in (None, {VIEWS: views[0]})
    rows, dt_is_date, hour_is_int, early, last_day, topics = adapt(ns["everything"])
    assert ((rows, early, last_day), dt_is_date, hour_is_int) == (_counts(w.written), True, True)
    assert topics == w.expected  # every topic, audit-monitoring included, named by the path's _topic


def _expected_rows(written: list[Written], *, with_topic: bool) -> list[dict]:
    """The rows a reader must return: every written field, dt and hour of the directory, and _topic."""
    return [{**w.record, "dt": w.dt, "hour": w.hour, **({"_topic": w.topic} if with_topic else {})} for w in written]


def _canonical(row: dict, columns) -> str:
    """One row over ``columns`` (a column a row's schema does not have is null), as comparable text."""
    return json.dumps({c: row.get(c) for c in columns}, sort_keys=True, default=str)


def _first_difference(got: list[dict], want: list[dict], columns) -> str:
    """The first written row the reader did not return as written: which columns differ, and how."""
    def ident(row):
        h = row.get("header") or {}
        return h.get("session"), h.get("seq")
    read = collections.defaultdict(list)
    for r in got:
        read[ident(r)].append(r)
    left = collections.Counter(_canonical(r, columns) for r in got)
    for row in want:
        key = _canonical(row, columns)
        if left[key]:
            left[key] -= 1
            continue
        diffs = [{c: (row.get(c), r.get(c)) for c in columns if row.get(c) != r.get(c)} for r in read[ident(row)]]
        return (f"the row of header.session, header.seq = {ident(row)} in {row.get('_topic', row.get('topic'))} "
                f"was read as (written, read) per column: {diffs or 'no row'}")
    return f"rows read that were never written: {[k for k, n in left.items() if n][:3]}"


@pytest.mark.parametrize(("which", "name"), CASES)
def test_snippet_returns_every_column_with_the_written_values(name, which, warehouses, spark, capsys):
    """Row for row and column for column, what the readers return is what the producers wrote, plus
    ``dt``, ``hour`` and ``_topic`` from the path: ``topic`` of audit-monitoring rows is the counted
    topic, page views keep ``page_key`` and ``member_id`` and their second version's field, and no
    column name appears twice."""
    to_rows = ENGINES[name][2]
    w = _warehouse(warehouses, name, which)
    ns = _run(name, w.path, spark, capsys)
    wrong = []
    for frame, written in (("everything", w.written), ("views", [x for x in w.written if x.topic == VIEWS])):
        columns, got = to_rows(ns[frame])
        twice = sorted(c for c, n in collections.Counter(columns).items() if n > 1)
        want = _expected_rows(written, with_topic=frame == "everything" or "_topic" in columns)
        wanted = {c for r in want for c in r}
        if twice or set(columns) != wanted:
            wrong.append(f"{frame}: columns named twice {twice}, missing {sorted(wanted - set(columns))}, "
                         f"not written {sorted(set(columns) - wanted)}")
        shared = sorted(wanted.intersection(columns).difference(twice))  # the values of what is there
        if sorted(_canonical(r, shared) for r in got) != sorted(_canonical(r, shared) for r in want):
            wrong.append(f"{frame}: " + _first_difference(got, want, shared))
        elif frame == "everything" and not wrong:
            monitoring = sorted(r["topic"] for r in got if r["_topic"] == MONITORING)
            assert monitoring == sorted(x.record["topic"] for x in written if x.topic == MONITORING)
            assert set(monitoring) == {VIEWS, CLICKS}  # the topics counted, not the path's topic
    assert not wrong, "\n".join(wrong)


def test_the_warehouse_holds_every_kind_of_state(warehouses):
    """The readers above were exact with state present: staged files (real Parquet/Avro bytes),
    revisions, compaction records, manifests, run records and a quarantine file."""
    import fastavro
    import pyarrow.parquet as pq

    for fmt in ("parquet", "avro"):
        root = warehouses[fmt].path
        staged = sorted((root / "_ingest/staging/crashed-run").rglob("*.staged"))
        assert staged and all(not p.name.endswith((".parquet", ".avro")) for p in staged)
        data = [p for p in staged if ".jsonl" not in p.name]
        rows = sum(pq.read_metadata(p).num_rows if fmt == "parquet" else sum(1 for _ in fastavro.reader(open(p, "rb")))
                   for p in data)
        assert rows > 0  # real data bytes: a glob that matched them would count them
        [revision] = [p.name for p in (root / "_audit/revisions").iterdir()]
        assert re.fullmatch(r"\d{15}-audit-before-compaction\.revision", revision), revision
        assert len(list((root / "_compaction/runs").glob("*.json"))) == 1
        assert len(list((root / f"_ingest/quarantine/{VIEWS}").glob("*.jsonl"))) == 1
        assert list((root / "_ingest/commits").glob("*.json")) and list((root / "_ingest/runs").glob("*.json"))
        assert sorted(p.name for p in (root / VIEWS).glob("dt=*/hour=*")) == ["hour=13", "hour=5"]
        assert [p.name.split(".")[1] for p in (root / VIEWS / "dt=2026-11-22/hour=13").iterdir()] == ["compacted"]


def test_a_fresh_warehouse_needs_no_reader_option(warehouses):
    """Since this change: duckdb types ``hour`` as an integer by default, and a ``**/*.parquet`` glob
    from the root, of duckdb or polars, reads data only."""
    import duckdb
    import polars as pl

    w = warehouses["parquet"]
    rel = duckdb.sql(f"SELECT * FROM read_parquet('{w.path}/{VIEWS}/**/*.parquet', union_by_name = true)")
    assert dict(zip(rel.columns, map(str, rel.types)))["hour"] == "BIGINT"
    assert rel.filter("hour < 10").aggregate("count(*)").fetchone()[0] == _counts(
        [x for x in w.written if x.topic == VIEWS])[1]
    n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{w.path}/**/*.parquet', union_by_name = true, "
                   f"hive_partitioning = true)").fetchone()[0]
    assert n == w.total
    lf = pl.scan_parquet(f"{w.path}/**/*.parquet", hive_partitioning=True, missing_columns="insert",
                         extra_columns="ignore")
    assert lf.select(pl.len()).collect().item() == w.total


def test_an_older_warehouse_reads_right_with_the_documented_options_only(warehouses):
    """Why the page's duckdb options are needed on destinations of the old layout: without them
    ``hour`` is text, and a ``**`` glob reads the old state files as rows."""
    import duckdb

    w = warehouses["legacy"]
    rel = duckdb.sql(f"SELECT * FROM read_parquet('{w.path}/{VIEWS}/*/*/*.parquet', union_by_name = true)")
    assert dict(zip(rel.columns, map(str, rel.types)))["hour"] == "VARCHAR"
    n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{w.path}/**/*.parquet', union_by_name = true)").fetchone()[0]
    assert n == w.total + 6 + NLEGACY  # + the old-named revision's 6 rows + the old-named staged leftover's


def test_this_project_reads_an_older_warehouse_unchanged(warehouses):
    from ingest.audit import history
    from ingest.audit.inputs import load_state
    from ingest.loader.state import open_state

    w = warehouses["legacy"]
    state = open_state(str(w.path))
    paths = [f.path for f in state.files(VIEWS)]
    assert sorted(p for p in paths if "hour=07" in p) == [
        f"{VIEWS}/dt=2026-11-21/hour=07/{VIEWS}.b0.p{p}.0-{NLEGACY // 2}.parquet" for p in (8, 9)]
    assert sum(f.rows for f in state.files(VIEWS)) == w.expected[VIEWS]
    assert sum(f.rows for f in state.files(CLICKS)) == NCLICKS
    hours = {f.hour_start_ms for f in load_state(str(w.path)).files if "hour=07" in f.path}
    assert hours == {int(datetime.datetime(2026, 11, 21, 7, tzinfo=datetime.timezone.utc).timestamp() * 1000)}
    # both revisions (the legacy one is a renamed copy of the new one: same 6 rows, oldest first)
    history_rows = history.read_history(str(w.path)).to_pylist()
    assert [r["audit_run_id"] for r in history_rows] == ["audit-before-compaction"] * 12
    assert [r["window_start_ms"] for r in history_rows[:6]] == [r["window_start_ms"] for r in history_rows[6:]]
    assert history.run_revision(str(w.path), "legacy-run").endswith(f"{0:015d}-legacy-run.parquet")


def test_compaction_moves_an_old_hour_to_the_new_spelling(warehouses, tmp_path):
    import shutil

    from ingest.compaction import runner
    from ingest.compaction.config import COMPACTION_CONFIG
    from ingest.loader.state import open_state

    dest = tmp_path / "legacy"
    shutil.copytree(warehouses["legacy"].path, dest)
    cfg = COMPACTION_CONFIG.parse({"destination": str(dest), "compaction.grace.ms": "0",
                                   "compaction.require.audit": "false"}, source="test")
    start = int(datetime.datetime(2026, 11, 21, 7, tzinfo=datetime.timezone.utc).timestamp() * 1000)
    [outcome] = runner.run(cfg, start_ms=start, end_ms=start + 3_600_000)
    assert (outcome["hour"], outcome["action"], outcome["files_in"], outcome["rows_out"]) == (
        f"{VIEWS}/dt=2026-11-21/hour=7", "compacted", 2, NLEGACY)
    [merged] = [f for f in open_state(str(dest)).files(VIEWS) if f.dt == "2026-11-21"]
    assert merged.path.startswith(f"{VIEWS}/dt=2026-11-21/hour=7/") and merged.rows == NLEGACY
    assert not list((dest / VIEWS / "dt=2026-11-21" / "hour=07").iterdir())  # the old files are withdrawn

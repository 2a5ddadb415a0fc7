"""Distinct message counts of loaded data: one Spark aggregation into 64-seq blocks, summed in Spark or on the driver.

A message is identified by ``(header.session, header.seq)``. Per topic and
event-time window the audit needs how many rows were loaded and how many
distinct ids they hold, over everything committed so far (every load run,
every reload): duplicates then equal ``rows - distinct`` and can never make a
loss look complete, and a reload that replaced files cannot inflate anything.

Ids are counted as blocks of 64 seqs (``ingest.audit.id_blocks``): one aggregation whose
result also answers which seqs of a range are missing.

Events whose ``header.time`` is ``<= 0`` or later than ``now + future.skew.ms``
are out of range: they get no window (``window_start_ms`` null) and are counted
in a separate per-topic bucket instead of being dropped.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from ingest.audit import id_blocks

log = logging.getLogger(__name__)

SAMPLE_RANGE_CAP = 5_000_000
"""Longest seq range per session and window expanded to look for missing ids;
larger ranges are sampled from their first SAMPLE_RANGE_CAP seqs."""


@dataclass(frozen=True)
class LoadedCount:
    """Loaded rows and distinct ids of one topic window (window None: out-of-range bucket)."""

    topic: str
    window_start_ms: int | None
    server: str | None
    rows: int
    distinct: int


def with_windows(ids_df, *, window_ms: int, plausible_hi_ms: int):
    """Add ``window_start_ms``: the event-time window, null for out-of-range timestamps."""
    from pyspark.sql import functions as F

    in_range = (F.col("time") > 0) & (F.col("time") <= F.lit(plausible_hi_ms))
    ws = F.floor(F.col("time") / F.lit(window_ms)).cast("long") * F.lit(window_ms)
    return ids_df.withColumn("window_start_ms", F.when(in_range, ws))


def loaded_blocks(windowed_df):
    """DataFrame ``topic, window_start_ms, server, session, block, rows, mask``: the ids as 64-seq blocks.

    One Spark aggregation over every row (``ingest.audit.id_blocks``): ``rows`` counts the rows,
    ``mask`` has the bit of each distinct seq. :func:`loaded_counts` sums it in Spark;
    :func:`collect_blocks` brings it to the driver, where it answers the counts, the sessions'
    topics and the missing-id sample without another Spark job.
    """
    from pyspark.sql import functions as F

    block, bit = id_blocks.block_columns("seq")
    return (windowed_df.select("topic", "window_start_ms", "server", "session", block, bit)
            .groupBy("topic", "window_start_ms", "server", "session", "block")
            .agg(F.count("*").alias("rows"), F.bit_or("bit").alias("mask")))


def loaded_counts(
    blocks_df, *, lo_ms: int, hi_ms: int, topics: Sequence[str] | None = None,
) -> list[LoadedCount]:
    """Rows and distinct ids per (topic, window, server) for windows starting in [lo_ms, hi_ms).

    ``blocks_df``: :func:`loaded_blocks`. Out-of-range rows (null window) are always included.
    A window's distinct ids are the set bits of its blocks' masks.
    """
    from pyspark.sql import functions as F

    df = blocks_df
    if topics is not None:
        df = df.where(F.col("topic").isin(list(topics)))
    df = df.where(
        F.col("window_start_ms").isNull()
        | ((F.col("window_start_ms") >= F.lit(lo_ms)) & (F.col("window_start_ms") < F.lit(hi_ms)))
    )
    per_window = df.groupBy("topic", "window_start_ms", "server").agg(
        F.sum("rows").alias("rows"), F.sum(F.bit_count("mask")).alias("distinct")
    )
    return [
        LoadedCount(r.topic, None if r.window_start_ms is None else int(r.window_start_ms), r.server,
                    int(r.rows), int(r["distinct"]))
        for r in per_window.collect()
    ]


def collect_blocks(blocks_df, max_rows: int):
    """:func:`loaded_blocks` as an Arrow table on the driver, with each block's ``bits`` (its distinct ids),
    or None when it has more than ``max_rows`` rows (``counts.driver.max.blocks``; 0: always None).

    About one row per 64 loaded ids when seqs are consecutive, as producers number them; scattered
    seqs can make a row per id, which the bound keeps off the driver.
    """
    from pyspark.sql import functions as F

    if max_rows <= 0:
        return None
    table = blocks_df.withColumn("bits", F.bit_count("mask")).limit(max_rows + 1).toArrow()
    if table.num_rows > max_rows:
        log.info("more than %d id blocks: counted in Spark", max_rows)
        return None
    log.info("%d id blocks collected to the driver", table.num_rows)
    return table


def loaded_counts_of(table, *, lo_ms: int, hi_ms: int, topics: Sequence[str] | None = None) -> list[LoadedCount]:
    """:func:`loaded_counts` of the blocks :func:`collect_blocks` collected."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ws = table.column("window_start_ms")
    keep = pc.or_kleene(pc.is_null(ws), pc.and_(pc.greater_equal(ws, lo_ms), pc.less(ws, hi_ms)))
    if topics is not None:
        keep = pc.and_(keep, pc.is_in(table.column("topic"), pa.array(list(topics), pa.string())))
    sums = table.filter(keep).group_by(["topic", "window_start_ms", "server"]).aggregate(
        [("rows", "sum"), ("bits", "sum")])
    return [LoadedCount(r["topic"], r["window_start_ms"], r["server"], int(r["rows_sum"]), int(r["bits_sum"]))
            for r in sums.to_pylist()]


def session_topics_of(table, sessions: Sequence[str]) -> set[tuple[str, str]]:
    """:func:`session_topics` of the blocks :func:`collect_blocks` collected."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not sessions:
        return set()
    rows = table.filter(pc.is_in(table.column("session"), pa.array(list(sessions), pa.string())))
    return set(zip(rows.column("session").to_pylist(), rows.column("topic").to_pylist()))


def session_topics(windowed_df, sessions: Sequence[str]) -> set[tuple[str, str]]:
    """(session, topic) pairs with loaded data, for the given sessions (``windowed_df``: ids or :func:`loaded_blocks`)."""
    from pyspark.sql import functions as F

    if not sessions:
        return set()
    rows = windowed_df.where(F.col("session").isin(list(sessions))).select("session", "topic").distinct().collect()
    return {(r.session, r.topic) for r in rows}


RANGES_FIELDS = (("topic", "string"), ("window_start_ms", "long"), ("session", "string"), ("seq_min", "long"),
                 ("seq_max", "long"))
BOUNDS_FIELDS = (("gap", "string"), ("b_topic", "string"), ("b_session", "string"), ("lo", "long"), ("hi", "long"))


def local_frame(spark, fields: Sequence[tuple[str, str]], rows: Sequence[tuple]):
    """A DataFrame of the driver's ``rows`` (``fields``: name and ``string``/``long``), through Arrow.

    Spark plans an Arrow table as a local relation, evaluated in the JVM; a plain Python list
    becomes an RDD of pickled rows, whose scan starts Python workers (1.5-2 s of a small
    audit, docs/performance.md, "The audit's fixed cost").
    """
    import pyarrow as pa

    kinds = {"string": pa.string(), "long": pa.int64()}
    columns = list(zip(*rows)) if rows else [()] * len(fields)
    table = pa.table({name: pa.array(list(col), kinds[kind]) for (name, kind), col in zip(fields, columns)})
    return spark.createDataFrame(table, ", ".join(f"{name} {kind}" for name, kind in fields))


def _missing_seqs(spark, ids_df, ranges: Sequence[tuple[str, int, str, int, int]]):
    """DataFrame ``topic, window_start_ms, session, seq`` of every seq in the ranges loaded in no topic.

    Ranges longer than SAMPLE_RANGE_CAP are expanded from their start only.
    """
    from pyspark.sql import functions as F

    ranges_df = local_frame(spark, RANGES_FIELDS, list(ranges))
    expected = ranges_df.select(
        "topic", "window_start_ms", "session",
        F.explode(F.sequence("seq_min", F.least("seq_max", F.col("seq_min") + F.lit(SAMPLE_RANGE_CAP - 1))))
        .alias("seq"),
    )
    sessions = sorted({r[2] for r in ranges})
    seq_lo, seq_hi = min(r[3] for r in ranges), max(r[4] for r in ranges)
    # Only ids that can match: the sessions asked about, within the seq bounds (pushed down to the scan).
    loaded = (
        ids_df.where(F.col("session").isin(sessions) & F.col("seq").between(seq_lo, seq_hi))
        .select("session", "seq").distinct()
    )
    return expected.join(loaded, ["session", "seq"], "left_anti")


def _expanded(seq_min: int, seq_max: int) -> tuple[int, int]:
    """Lowest and highest seq :func:`_missing_seqs` expands a range to (``sequence`` from ``seq_min`` on)."""
    last = min(seq_max, seq_min + SAMPLE_RANGE_CAP - 1)
    return min(seq_min, last), max(seq_min, last)


def sample_bounds(ranges: Sequence[tuple[str, int, str, int, int]]) -> dict[str, tuple[int, int]]:
    """Per session, the lowest and highest seq any of its ranges expands to: what the sample reads."""
    out: dict[str, tuple[int, int]] = {}
    for _, _, session, seq_min, seq_max in ranges:
        lo, hi = _expanded(seq_min, seq_max)
        if session in out:
            lo, hi = min(lo, out[session][0]), max(hi, out[session][1])
        out[session] = (lo, hi)
    return out


def expected_ids(ranges: Sequence[tuple[str, int, str, int, int]]) -> int:
    """How many seqs the ranges expand to (the size of the sample's search)."""
    return sum(hi - lo + 1 for lo, hi in (_expanded(r[3], r[4]) for r in ranges))


def missing_samples(
    spark, loaded_df, ranges: Sequence[tuple[str, int, str, int, int]], sample_size: int, *,
    driver_max_ids: int = 0,
) -> dict[tuple[str, int], list[str]]:
    """Up to ``sample_size`` missing ids per (topic, window).

    Args:
        loaded_df: loaded ids, at least columns ``session, seq`` (every topic's: a seq loaded
            in any topic is not missing), e.g. ``inputs.read_session_seqs`` of :func:`sample_bounds`.
        ranges: ``(topic, window_start_ms, session, seq_min, seq_max)`` from the
            window's monitoring; every seq in the range that was loaded in no topic at all is missing
            (seq counts per session across topics).
        driver_max_ids: when the ranges expand to at most this many seqs (:func:`expected_ids`),
            the loaded seqs of their sessions and bounds are collected and the missing ones taken on
            the driver (one scan, no shuffle); above it (or 0), an anti-join in Spark.
    Returns:
        ``{(topic, window_start_ms): ["session:seq", ...]}`` sorted by session, seq.
    """
    if not ranges or sample_size <= 0:
        return {}
    expected = expected_ids(ranges)
    if expected <= driver_max_ids:
        return _missing_samples_on_driver(loaded_df, ranges, sample_size)
    log.info("missing-id sample in Spark: the ranges hold %d ids, more than the driver's %d", expected, driver_max_ids)
    return _missing_samples_in_spark(spark, loaded_df, ranges, sample_size)


def _missing_samples_on_driver(loaded_df, ranges, sample_size: int) -> dict[tuple[str, int], list[str]]:
    """:func:`missing_samples` from the loaded seqs of the ranges' sessions and bounds, collected through Arrow."""
    from pyspark.sql import functions as F

    bounds = sample_bounds(ranges)
    # Nothing beyond the sessions and seq bounds is collected, whatever frame is given.
    table = loaded_df.where(
        F.col("session").isin(sorted(bounds))
        & F.col("seq").between(min(lo for lo, _ in bounds.values()), max(hi for _, hi in bounds.values()))
    ).select("session", "seq").toArrow()
    log.info("missing-id sample on the driver: %d loaded ids of %d sessions", table.num_rows, len(bounds))
    masks = id_blocks.add_seqs({}, table.column("session").to_pylist(), table.column("seq").to_pylist())
    return samples_from_masks(masks, ranges, sample_size)


def block_masks_of(table, bounds: dict[str, tuple[int, int]]) -> id_blocks.Masks:
    """The masks of the sessions' blocks within their seq bounds (:func:`sample_bounds`), OR-ed over topics,
    windows and servers, from the blocks :func:`collect_blocks` collected."""
    import pyarrow as pa
    import pyarrow.compute as pc

    blocks = {s: (lo >> id_blocks.BLOCK_BITS, hi >> id_blocks.BLOCK_BITS) for s, (lo, hi) in bounds.items()}
    first, last = min(lo for lo, _ in blocks.values()), max(hi for _, hi in blocks.values())
    block = table.column("block")
    rows = table.filter(pc.and_(pc.is_in(table.column("session"), pa.array(sorted(blocks), pa.string())),
                                pc.and_(pc.greater_equal(block, first), pc.less_equal(block, last))))
    kept = [(session, number, mask) for session, number, mask in zip(
        rows.column("session").to_pylist(), rows.column("block").to_pylist(), rows.column("mask").to_pylist())
        if blocks[session][0] <= number <= blocks[session][1]]
    return id_blocks.add_blocks({}, *zip(*kept)) if kept else {}


def samples_from_masks(masks: id_blocks.Masks, ranges, sample_size: int) -> dict[tuple[str, int], list[str]]:
    """:func:`missing_samples` from the loaded seqs' masks (every topic's) of the ranges' sessions."""
    found: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for topic, ws, session, seq_min, seq_max in ranges:
        lo, hi = _expanded(seq_min, seq_max)
        missing = id_blocks.first_missing(masks.get(session, {}), lo, hi, sample_size)
        found.setdefault((topic, int(ws)), []).extend((session, q) for q in missing)
    out: dict[tuple[str, int], list[str]] = {}
    for key in sorted(found):
        if found[key]:
            out[key] = [f"{s}:{q}" for s, q in sorted(found[key])[:sample_size]]
    return out


def _missing_samples_in_spark(spark, loaded_df, ranges, sample_size: int) -> dict[tuple[str, int], list[str]]:
    """:func:`missing_samples` as an anti-join of the expanded ranges with the loaded ids, in Spark."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    missing = _missing_seqs(spark, loaded_df, ranges)
    w = Window.partitionBy("topic", "window_start_ms").orderBy("session", "seq")
    rows = missing.withColumn("_n", F.row_number().over(w)).where(F.col("_n") <= sample_size).collect()
    # At most sample_size rows per window: sorted here rather than by a global sort in Spark
    # (its range partitioning costs a sampling job and a shuffle).
    rows.sort(key=lambda r: (r.topic, r.window_start_ms, r["_n"]))
    out: dict[tuple[str, int], list[str]] = {}
    for r in rows:
        out.setdefault((r.topic, int(r.window_start_ms)), []).append(f"{r.session}:{r.seq}")
    return out


def session_distinct(windowed_df, windows: Sequence[tuple[str, int]]) -> dict[tuple[str, int, str], int]:
    """Distinct loaded ids per (topic, window_start, session) of the given topic windows."""
    from pyspark.sql import functions as F

    if not windows:
        return {}
    topics = sorted({t for t, _ in windows})
    starts = sorted({w for _, w in windows})
    rows = (
        windowed_df.where(F.col("topic").isin(topics) & F.col("window_start_ms").isin(starts))
        .select("topic", "window_start_ms", "session", "seq").distinct()
        .groupBy("topic", "window_start_ms", "session").count()
        .collect()
    )
    wanted = set(windows)
    return {(r.topic, int(r.window_start_ms), r.session): int(r["count"]) for r in rows
            if (r.topic, int(r.window_start_ms)) in wanted}


def gap_atoms(
    spark, ids_df, ranges: Sequence[tuple[str, int, str, int, int]],
    gaps: Sequence[tuple[str, str, tuple[tuple[str, int | None, int | None], ...]]],
) -> dict[tuple[str, int, str], list[tuple[frozenset[str], int]]]:
    """Missing seqs per (topic, window, session), grouped by the set of bounded gaps that can hold them.

    Args:
        ranges: as for :func:`missing_samples` (the windows' monitoring seq ranges).
        gaps: ``(gap ident, topic, session bounds)`` of bounded gaps; a seq of
            session s lies in a gap when ``after_seq < seq < before_seq`` for s
            (None = open), or when s is not listed by that gap.
    Returns:
        ``{(topic, window_start_ms, session): [(gap idents, count), ...]}``; seqs in no gap are left out.
        The join runs in Spark (candidates are expanded per seq, SAMPLE_RANGE_CAP per range).
    """
    from pyspark.sql import functions as F

    if not ranges or not gaps:
        return {}
    missing = _missing_seqs(spark, ids_df, ranges)
    listed = [(gid, topic, s, lo, hi) for gid, topic, bounds in gaps for s, lo, hi in bounds]
    # A seq is matched against the listed bounds only (one left join with the small bounds table);
    # the gaps that do not list its session hold it anyway and are added per session on the driver,
    # so the join never multiplies every missing seq by every gap.
    bounds_df = local_frame(spark, BOUNDS_FIELDS, listed)
    cond = ((missing.topic == bounds_df.b_topic) & (missing.session == bounds_df.b_session)
            & (bounds_df.lo.isNull() | (missing.seq > bounds_df.lo))
            & (bounds_df.hi.isNull() | (missing.seq < bounds_df.hi)))
    rows = (
        missing.join(F.broadcast(bounds_df), cond, "left")
        .groupBy("topic", "window_start_ms", "session", "seq")
        .agg(F.array_sort(F.collect_set("gap")).alias("gaps"))
        .groupBy("topic", "window_start_ms", "session", "gaps").count()
        .collect()
    )
    listing = {}
    for gid, topic, bounds in gaps:
        listing[gid] = (topic, {s for s, _, _ in bounds})
    out: dict[tuple[str, int, str], list[tuple[frozenset[str], int]]] = {}
    for r in sorted(rows, key=lambda r: (r.topic, r.window_start_ms, r.session, list(r.gaps))):
        unlisted = {gid for gid, (topic, sessions) in listing.items() if topic == r.topic and r.session not in sessions}
        held = frozenset(r.gaps) | unlisted
        if held:
            out.setdefault((r.topic, int(r.window_start_ms), r.session), []).append((held, int(r["count"])))
    return out

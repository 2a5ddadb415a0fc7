"""SQL settings for the audit's queries over a small input: fixed cost, not rows, is what they spend.

The audit's queries (distinct counts, attribution, missing-id samples) over at most
:data:`SMALL_INPUT_ROWS` loaded rows run with :func:`small_input_settings` (docs/audit.md,
"Decisions"); :func:`small_input_sql` applies them around those queries and restores the
session's values after.
"""
from __future__ import annotations

import contextlib
import logging

log = logging.getLogger(__name__)


SMALL_INPUT_ROWS = 1_000_000
"""Loaded rows (the commit records' counts) up to which the audit's queries run with
:func:`small_input_settings`."""


def small_input_settings(default_parallelism: int) -> dict[str, str]:
    """SQL settings for an input of at most :data:`SMALL_INPUT_ROWS` rows (docs/audit.md, "Decisions").

    Such an audit is fixed cost: the SQL engine's planning and code generation, not rows.
    One shuffle partition per core instead of 200; no adaptive re-planning between stages
    (nothing to coalesce or skew at this size); no whole-stage code generation (compiling
    the generated classes costs more than it saves on a few thousand rows).
    """
    return {"spark.sql.shuffle.partitions": str(default_parallelism), "spark.sql.adaptive.enabled": "false",
            "spark.sql.codegen.wholeStage": "false"}


@contextlib.contextmanager
def small_input_sql(spark, data_files):
    """:func:`small_input_settings` for the queries inside, when the input is small; restored after.

    Applied only when every data file's row count is recorded and they add up to at most
    :data:`SMALL_INPUT_ROWS`, and only to keys that neither the audit's config nor
    spark-submit's ``--conf`` set.
    """
    rows = [f.rows for f in data_files]
    settings: dict[str, str] = {}
    if all(r is not None for r in rows) and sum(rows) <= SMALL_INPUT_ROWS:
        given = spark.sparkContext.getConf()
        settings = {k: v for k, v in small_input_settings(spark.sparkContext.defaultParallelism).items()
                    if not given.contains(k)}
    previous = {key: spark.conf.get(key, None) for key in settings}
    if settings:
        log.info("small input (%d rows): %s", sum(rows), ", ".join(f"{k}={v}" for k, v in settings.items()))
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)

"""Exploring topics from Spark: the public data source ``spark.read.format("ingest")`` (read-only).

``register(spark)`` makes the format known in a session where Spark's
auto-discovery of the top-level ``pyspark_ingest`` module does not reach
(docs/spark-source.md, "Registration").
"""


def register(spark) -> None:
    """``spark.dataSource.register`` of the ``ingest`` format (idempotent)."""
    from ingest.explore.source import register as _register  # deferred: imports pyspark

    _register(spark)

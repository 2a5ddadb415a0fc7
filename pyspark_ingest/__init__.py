"""Spark 4's auto-registration hook for ``spark.read.format("ingest")``.

Spark looks, once per JVM, at every top-level module of its Python workers' path
whose name starts with ``pyspark_`` and registers its ``DefaultSource`` under
``DefaultSource.name()`` (pyspark/sql/worker/lookup_data_sources.py). Installing
this project puts this module there, so no register call is needed; the source
itself lives in :mod:`ingest.explore.source`.
"""
from ingest.explore.source import IngestDataSource as DefaultSource

__all__ = ["DefaultSource"]

"""The record columns (:mod:`ingest.loader.record_columns`) of a Kafka-format batch as Arrow arrays, for
the loader's batch path to Parquet: one array per column for the whole batch instead of five values per
row. Their types are the ones the Parquet writer gives :data:`~ingest.loader.record_columns.FIELDS`
(:func:`ingest.loader.writers.arrow_schema`), so the arrays join the event's own columns as they are.
Tasks only (imports pyarrow).
"""
from __future__ import annotations

import pyarrow as pa

from ingest.loader import record_columns
from ingest.loader.writers import arrow_schema

_TYPES = [f.type for f in arrow_schema({"type": "record", "name": "RecordColumns",
                                         "fields": list(record_columns.FIELDS)})]
KEY, HEADERS, TIMESTAMP, PARTITION, OFFSET = _TYPES


def record_arrays(batch, start: int, partition: int) -> list[pa.Array]:
    """``_key``, ``_headers``, ``_timestamp``, ``_partition``, ``_offset`` of the records ``start..`` of
    ``batch`` (a :class:`~ingest.loader.kafka_fetch.KafkaBatch`)."""
    cut = (lambda c: c) if start == 0 else (lambda c: c[start:])
    offsets = cut(batch.offsets)
    n = len(offsets)
    if batch.headers is None:   # no record has a header: n empty lists, all offsets 0
        headers = pa.ListArray.from_arrays(pa.array([0] * (n + 1), pa.int32()),
                                           pa.array([], HEADERS.value_type), type=HEADERS)
    else:
        headers = pa.array([[{"key": k, "value": v} for k, v in hs] for hs in cut(batch.headers)], HEADERS)
    return [pa.array(cut(batch.keys), KEY), headers, pa.array(cut(batch.timestamps), TIMESTAMP),
            pa.array([partition] * n, PARTITION), pa.array(offsets, OFFSET)]

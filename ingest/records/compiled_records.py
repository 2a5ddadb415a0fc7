"""The records of a v2 batch read as columns by the C extension ``ingest.records._crecords``.

:func:`read_columns` gives what :func:`~ingest.records.record.iter_records` would yield, as five lists
(offsets, timestamps, keys, values, headers) instead of one tuple per record, for the loader's batch
path. It returns None when the extension is not built, or when the records are anything
iter_records would refuse (the C reader refuses without a reason; the caller then reads the batch
with iter_records, which raises the precise error), or when the offsets within the batch do not
increase. A null value is ``b""`` (the loader's per-message path loads it as such). Header keys are
decoded as strictly as iter_records decodes them. ``tests/records/test_compiled_records.py`` runs both
readers over randomized corruptions in a child process with a deadline.
"""
from __future__ import annotations

import logging
from typing import NamedTuple

from ingest.records.batch import LOG_APPEND_TIME, read_header
from ingest.records.record import DEFAULT_INFLATE_LIMIT, records_body

log = logging.getLogger(__name__)

try:
    from ingest.records import _crecords as _module
except ImportError as exc:  # not built: callers read with iter_records
    _module = None
    log.debug("ingest.records._crecords is not importable (%s): batches are read record by record", exc)


class RecordColumns(NamedTuple):
    """A batch's records, one list per field; ``headers`` None when no record has one."""

    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes]
    headers: list[tuple[tuple[str, bytes | None], ...]] | None


def available() -> bool:
    """Whether the compiled reader is importable here."""
    return _module is not None


def read_columns(buf, pos: int = 0, *, inflate_limit: int = DEFAULT_INFLATE_LIMIT) -> RecordColumns | None:
    """The records of the batch at ``pos`` of ``buf`` as columns, or None (see the module docstring).

    Raises:
        CorruptRecordError / RecordTooLargeError: a compressed batch does not inflate (within ``inflate_limit``).
    """
    if _module is None:
        return None
    h = read_header(buf, pos)
    body = records_body(buf, pos, h, inflate_limit=inflate_limit)
    got = _module.read_records(body, h.records_count, h.base_offset, h.base_timestamp,
                               h.timestamp_type == LOG_APPEND_TIME, h.max_timestamp)
    if got is None:
        return None
    offsets, timestamps, keys, values, headers = got
    if headers is not None:
        try:
            headers = [tuple((str(k, "utf-8"), v) for k, v in hs) if hs else () for hs in headers]
        except UnicodeDecodeError:
            return None
    return RecordColumns(offsets, timestamps, keys, values, headers)

"""The audit's verdicts on a window (:class:`Status`) and the named sets of them that callers act on.

A ``StrEnum``: a member is equal to, hashes like and prints as its name, so
JSON reports, Parquet revisions and HTML keep the same text, and a status
read back from a report (a plain ``str``) is found in these sets.

Two sets answer two different questions and must not be confused:

* :data:`NO_PROBLEM_STATUSES`: the audit has nothing to report about the row
  (``ingest audit show --problems`` hides them); PENDING is here because a
  window not judged yet is not a problem yet. A run whose window rows are all
  PENDING judged nothing, though: it exits 5, not 0 (ingest/audit/verdict.py).
* :data:`COMPACTABLE_STATUSES`: compaction may rewrite the window's files;
  only a judged, COMPLETE window qualifies (never PENDING).

Only the standard library is imported: the Airflow DAG support loads this from
the project checkout (the Airflow venv has no ``ingest`` dependencies).
"""
from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """Verdict of one report row; docs/audit.md explains each for readers of the report."""

    COMPLETE = "COMPLETE"
    PENDING = "PENDING"
    DATA_LOSS = "DATA_LOSS"
    RETENTION_LOSS = "RETENTION_LOSS"
    CORRUPTION_LOSS = "CORRUPTION_LOSS"
    OVER_DELIVERY = "OVER_DELIVERY"
    DUPLICATES = "DUPLICATES"
    NO_MONITORING = "NO_MONITORING"
    MONITORING_GAP = "MONITORING_GAP"


LOSS_STATUSES = frozenset({Status.DATA_LOSS, Status.RETENTION_LOSS, Status.CORRUPTION_LOSS})
"""Acknowledged messages are missing (audit exit code 3)."""

NO_PROBLEM_STATUSES = frozenset({Status.COMPLETE, Status.PENDING})
"""Nothing to report about the row; every other status is a problem (exit 0, or 5 when no window is judged)."""

COMPACTABLE_STATUSES = frozenset({Status.COMPLETE})
"""Compaction may merge the files of a window with this status (judged and complete)."""

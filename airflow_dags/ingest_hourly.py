"""Hourly warehouse ingest: load >> audit >> compact.

- ``load``: ``spark-submit jobs/load.py`` drains every broker/topic/partition from
  the committed offsets to the end offsets fixed at job start, and commits files
  plus offsets in one atomic step (a retry never duplicates or loses).
- ``audit``: ``spark-submit jobs/audit.py`` for the data interval. The audit
  re-judges its ``window.lookback`` windows before the interval too, and judges a
  window only after its end plus ``grace.ms``; younger windows are PENDING and are
  judged by a later run. A DATA_LOSS verdict fails the task at once (no retries),
  with the report's summary in the log, and fires the alert callback.
- ``compact``: ``spark-submit jobs/compact.py`` merges the small files of the hours
  this run's audit report judged COMPLETE (every window of the hour).

Scheduling decisions:

- ``max_active_runs=1``: offsets are sequential; two loads at once would only
  make one lose its commit (CommitConflictError) and retry.
- ``catchup=False``: the load is not interval-scoped (it always drains to the
  latest offsets), so catch-up runs after downtime would load nothing; and the
  audit's lookback re-judges the recent past every run. After an outage longer
  than the lookback, backfill the audit of the missed hours
  (docs/operations.md, "Backfill"); on first deploy no run is created for hours
  before it.
- retries 3 with exponential backoff (2, 4, 8 minutes, at most 30): broker
  restarts and NameNode failovers pass; the jobs are idempotent, so a retry is safe.

Settings: Airflow Variables and the ``ingest_spark`` connection, see
``ingest_dag_support`` and docs/airflow.md. This file only declares.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, CronTriggerTimetable

from ingest_dag_support import DEFAULT_ARGS, FROM, TO, alert, audit_task, compact_task, load_task

with DAG(
    dag_id="ingest_hourly",
    description="hourly load of every topic, audit against monitoring events, compaction of complete hours",
    # at the top of every hour, for the hour that just ended: data_interval = [H-1, H)
    # (a bare "@hourly" gives zero-length intervals in Airflow 3)
    schedule=CronTriggerTimetable("0 * * * *", timezone="UTC", interval=timedelta(hours=1)),
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    default_args={**DEFAULT_ARGS, "on_failure_callback": alert},
    dagrun_timeout=timedelta(hours=3),
    tags=["ingest"],
    doc_md=__doc__,
) as dag:
    hour = timedelta(hours=1)
    load = load_task("load", execution_timeout=hour)
    audit = audit_task(from_time=FROM, to_time=TO, execution_timeout=hour)
    compact = compact_task(execution_timeout=hour)
    load >> audit >> compact

"""Replay (re-load) a topic from a point in time, then re-audit and compact the affected windows.

Trigger it by hand when data was loaded wrongly (a decoder bug, a bad schema)
or when an outage or data loss needs a reload from the brokers' retained logs:

    airflow dags trigger ingest_replay \\
        --conf '{"topic": "page-views", "from_time": "2026-11-22T01:00:00Z"}'

- ``reload``: ``spark-submit jobs/load.py --reset-offsets FROM --topic TOPIC``:
  rewinds the topic's committed offsets to an offset at or before ``from_time``
  (the start of the newest segment last written at or before it, then the start
  of the committed range holding that offset, so the reload can reach back
  before ``from_time``; hours before ``from_time`` that it reloads are not in this
  run's audit range and stay uncompacted until an audit covering them is given
  to compaction) and reloads everything from there; in the same atomic commit the
  previously loaded files of those ranges are withdrawn (no duplicates, no gap).
  Then the load continues to the latest offsets, like the hourly load.
- ``audit``: re-audits ``[from_time, to_time)`` (``to_time`` defaults to when the
  run was triggered); the audit counts distinct ids across all loads, so the
  replay cannot inflate counts.
- ``compact``: merges the replayed hours that the audit now judges complete.

``max_active_runs=1`` and the loader's commit protocol keep a replay and the
hourly load from interleaving (a concurrent commit loses cleanly and is
retried). Step by step, with checks: docs/operations.md, "Replay".
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, Param

from ingest_dag_support import DEFAULT_ARGS, alert, audit_task, compact_task, load_task

FROM = "{{ params.from_time }}"
TO = "{{ params.to_time or dag_run.run_after.isoformat() }}"  # run_after: when it was triggered (aware, UTC)

with DAG(
    dag_id="ingest_replay",
    description="re-load a topic from a time (offset reset), re-audit and compact the affected windows",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    default_args={**DEFAULT_ARGS, "on_failure_callback": alert},
    params={
        "topic": Param(type="string", pattern=r"^[A-Za-z0-9._-]{1,249}$", description="topic to replay"),
        "from_time": Param(type="string", description="replay from this time: ISO-8601 (UTC when no zone) "
                                                       "or epoch ms"),
        "to_time": Param("", type="string", description="end of the re-audited range (empty: when triggered)"),
    },
    tags=["ingest"],
    doc_md=__doc__,
) as dag:
    reload = load_task("reload", extra_args=("--reset-offsets", FROM, "--topic", "{{ params.topic }}"),
                       name="ingest-replay",
                       retries=1,  # a replay is run by a person who is watching
                       execution_timeout=timedelta(hours=3))
    audit = audit_task(from_time=FROM, to_time=TO, name="ingest-reaudit")
    compact = compact_task()
    reload >> audit >> compact

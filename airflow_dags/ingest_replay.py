"""Replay (re-load) a topic from a point in time, then re-audit and compact the affected windows.

Trigger it by hand when data was loaded wrongly (a decoder bug, a bad schema)
or when an outage or data loss needs a reload from the brokers' retained logs:

    airflow dags trigger ingest_replay \\
        --conf '{"topic": "page-views", "from_time": "2026-11-22T01:00:00Z"}'

- ``reload``: ``spark-submit jobs/load.py --reset-offsets FROM --topic TOPIC``:
  rewinds the topic's committed offsets to the first message at or after
  ``from_time`` and reloads everything from there; in the same atomic commit the
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

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param

from ingest_dag_support import (AUDIT_APP, AUDIT_CONFIG, COMPACT_APP, COMPACTION_CONFIG, COMPACTION_SUMMARY,
                                DEFAULT_ARGS, LOAD_APP, LOADER_CONFIG, REPORT, SPARK_CONN_ID, SPARK_ENV,
                                AuditSubmitOperator, alert)

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
    reload = SparkSubmitOperator(
        task_id="reload",
        conn_id=SPARK_CONN_ID,
        application=LOAD_APP,
        application_args=["--config", LOADER_CONFIG, "--reset-offsets", FROM, "--topic", "{{ params.topic }}"],
        env_vars=SPARK_ENV,
        name="ingest-replay",
        retries=1,  # a replay is run by a person who is watching
        execution_timeout=timedelta(hours=3),
    )
    audit = AuditSubmitOperator(
        task_id="audit",
        conn_id=SPARK_CONN_ID,
        application=AUDIT_APP,
        application_args=["--config", AUDIT_CONFIG, "--from", FROM, "--to", TO, "--report", REPORT],
        report=REPORT,
        env_vars=SPARK_ENV,
        name="ingest-reaudit",
    )
    compact = SparkSubmitOperator(
        task_id="compact",
        conn_id=SPARK_CONN_ID,
        application=COMPACT_APP,
        application_args=["--config", COMPACTION_CONFIG, "--audit-report", REPORT, "--summary", COMPACTION_SUMMARY],
        env_vars=SPARK_ENV,
        name="ingest-compact",
    )
    reload >> audit >> compact

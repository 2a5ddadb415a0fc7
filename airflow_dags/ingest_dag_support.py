"""Shared pieces of the ingest DAGs: templated settings, the audit operator, alerting.

Kept light on purpose: the scheduler imports this on every parse, so nothing
here does I/O or imports Spark or the ``ingest`` package at module level (the
DAGs call the project's ``spark-submit``; Airflow runs in its own venv).

Settings come from Airflow Variables, rendered when a task runs (never at
parse time). Defaults assume the project is checked out at ``ingest_home``::

    ingest_home                    /opt/ingest           project checkout (jobs/, conf/)
    ingest_python                  <home>/.venv/bin/python   the driver's python (and the executors' by default)
    ingest_archives                (unset)               spark.archives, e.g. hdfs:///apps/ingest/ingest-env.tar.gz#environment
    ingest_executor_python         <ingest_python>       spark.pyspark.python, e.g. ./environment/bin/python
    ingest_loader_config           <home>/conf/loader.properties
    ingest_audit_config            <home>/conf/audit.properties
    ingest_compaction_config       <home>/conf/compaction.properties
    ingest_report_dir              <home>/reports        audit reports, one directory per run
    ingest_alert_command           (unset)               shell command fed the alert text on stdin

The Spark connection is ``ingest_spark`` (conn type ``spark``; host = master,
e.g. ``local[2]``, ``yarn``, ``k8s://https://...``; extra ``deploy-mode``,
``queue``, ``namespace``). ``spark-submit`` must be on the worker's PATH (the
provider allows only the names spark-submit / spark2-submit / spark3-submit).
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from datetime import timedelta
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

log = logging.getLogger(__name__)

SPARK_CONN_ID = "ingest_spark"
LOAD_POOL = "ingest_load"

HOME = "var.value.get('ingest_home', '/opt/ingest')"


def var(name: str, default_expr: str) -> str:
    """A template rendering Variable ``name`` or the Jinja expression ``default_expr``."""
    return "{{ var.value.get('%s', %s) }}" % (name, default_expr)


INGEST_HOME = "{{ " + HOME + " }}"
PYTHON = var("ingest_python", HOME + " ~ '/.venv/bin/python'")
LOAD_APP = "{{ " + HOME + " }}/jobs/load.py"
AUDIT_APP = "{{ " + HOME + " }}/jobs/audit.py"
COMPACT_APP = "{{ " + HOME + " }}/jobs/compact.py"
LOADER_CONFIG = var("ingest_loader_config", HOME + " ~ '/conf/loader.properties'")
AUDIT_CONFIG = var("ingest_audit_config", HOME + " ~ '/conf/audit.properties'")
COMPACTION_CONFIG = var("ingest_compaction_config", HOME + " ~ '/conf/compaction.properties'")
RUN_KEY = "{{ run_id | replace(':', '') | replace('+', '') | replace('~', '') }}"  # file-name-safe run id
REPORT_DIR = var("ingest_report_dir", HOME + " ~ '/reports'") + "/{{ dag.dag_id }}/" + RUN_KEY
REPORT = REPORT_DIR + "/audit.jsonl"  # JSON lines; the HTML report is written next to it (audit.html)
# Names the audit's revision under <destination>/_audit/: compaction reads this run's verdict from there,
# so it reaches compaction in cluster mode too (REPORT exists only where the audit's driver ran).
AUDIT_RUN_ID = "{{ dag.dag_id }}." + RUN_KEY
COMPACTION_SUMMARY = REPORT_DIR + "/compaction.json"

# The data interval in the form every job's --from/--to accepts (ISO 8601, UTC).
FROM = "{{ data_interval_start.in_timezone('UTC').isoformat() }}"
TO = "{{ data_interval_end.in_timezone('UTC').isoformat() }}"

SPARK_ENV = {"PYSPARK_PYTHON": PYTHON, "PYSPARK_DRIVER_PYTHON": PYTHON}
# The cluster artifact of `ingest package` (docs/cluster.md): the packed environment is shipped with
# spark.archives (= --archives) and the executors run its python; the driver keeps ingest_python
# (client mode: the environment unpacked on the worker). Passed as conf because the operator does not
# template its `archives` argument; an unset Variable renders empty and IngestSubmitOperator drops it.
EXECUTOR_PYTHON = var("ingest_executor_python", "var.value.get('ingest_python', " + HOME + " ~ '/.venv/bin/python')")
ARCHIVES = var("ingest_archives", "''")
SPARK_CONF = {"spark.archives": ARCHIVES, "spark.pyspark.python": EXECUTOR_PYTHON,
              "spark.pyspark.driver.python": PYTHON}

DEFAULT_ARGS: dict[str, Any] = {
    "owner": "data-eng",
    "retries": 3,
    "retry_delay": timedelta(minutes=2),
    "retry_exponential_backoff": True,   # 2, 4, 8 minutes: broker restarts and NameNode failovers pass
    "max_retry_delay": timedelta(minutes=30),
}


def _report_reader(home: str):
    """The project's one parser of audit reports (``ingest.audit.report_reader``) and its statuses.

    Imported when a task runs, never when the DAG is parsed. The Airflow venv
    does not install the ``ingest`` package, so when it is not importable the
    project checkout at ``home`` (Variable ``ingest_home``, which holds jobs/
    anyway) goes on sys.path of this task process: the two modules need only
    the standard library and ``ingest.errors``.
    """
    try:
        from ingest.audit import report_reader, status
    except ImportError:
        if home not in sys.path:
            sys.path.append(home)
        from ingest.audit import report_reader, status
    return report_reader, status


def report_summary(path: str, home: str, since: float | None = None) -> str | None:
    """A few lines summarising an audit report, or None when there is none (or it is older than ``since``)."""
    try:
        if since is not None and os.path.getmtime(path) < since:
            return None
    except OSError:
        return None
    try:
        reader, status = _report_reader(home)
    except ImportError as exc:
        log.error("cannot import the audit report reader from ingest_home=%s (%s): is the project checked out "
                  "there?", home, exc)
        return None
    try:
        every = list(reader.read_report(path))
        rows = [r for r in every if r.get("row_type", "window") == "window"]
    except Exception as exc:  # noqa: BLE001 - ConfigError of the project: unreadable or not a report
        log.error("audit report %s unreadable: %s", path, exc)
        return None
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    lines = [f"audit report {path}: {len(rows)} windows: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))]
    # the report's closing verdict row (exit 3 loss, 4 problems, 5 nothing judged), first: it says why
    verdicts = [r for r in every if r.get("row_type") == "verdict"]
    if verdicts:
        lines.insert(0, str(verdicts[-1].get("verdict") or verdicts[-1].get("status")))
    bad = [r for r in rows if r["status"] not in status.NO_PROBLEM_STATUSES]
    for r in bad[:10]:
        lines.append(
            f"  {r.get('status')} {r.get('topic')} window starting {r.get('window_start_ms')} ms: "
            f"acked {r.get('produced_acked')}, loaded {r.get('loaded_distinct')} distinct, "
            f"missing {r.get('missing')}, completeness {r.get('completeness')}, causes {r.get('causes')}"
        )
    if len(bad) > 10:
        lines.append(f"  ... and {len(bad) - 10} more problem windows")
    html = os.path.splitext(path)[0] + ".html"
    if os.path.exists(html):
        lines.append(f"  HTML report: {html}")
    return "\n".join(lines)


class IngestSubmitOperator(SparkSubmitOperator):
    """spark-submit with the ingest settings: ``conf`` entries that render empty (an unset Variable such as
    ``ingest_archives``) are left out of the command line instead of being passed as ``--conf key=``."""

    def _get_hook(self) -> Any:  # the one place the provider turns the rendered conf into the command line
        self.conf = {k: v for k, v in (self.conf or {}).items() if str(v).strip() != ""}
        return super()._get_hook()


class AuditSubmitOperator(IngestSubmitOperator):
    """spark-submit of ``jobs/audit.py`` that turns a data-loss verdict into a non-retried failure.

    The audit exits non-zero when it judges a window below the threshold and
    then has written its report: that is a verdict, not a hiccup, so the task
    fails at once (no retries) with the report's summary in the log. A failure
    without a fresh report (Spark or storage trouble) is retried as usual.
    """

    template_fields = (*SparkSubmitOperator.template_fields, "report", "ingest_home")

    def __init__(self, *, report: str, ingest_home: str = INGEST_HOME, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.report = report
        self.ingest_home = ingest_home

    def execute(self, context: Any) -> Any:
        import time

        started = time.time()
        os.makedirs(os.path.dirname(self.report), exist_ok=True)
        try:
            super().execute(context)
        except AirflowException as exc:
            summary = report_summary(self.report, self.ingest_home, since=started)
            if summary is None:
                raise  # no verdict: infrastructure trouble, let retries handle it
            log.error("AUDIT FAILED\n%s", summary)
            # a verdict (data loss, problems, or nothing judged: exit 3, 4, 5), not a hiccup: no retry
            raise AirflowFailException(f"audit verdict not OK; {summary}") from exc
        summary = report_summary(self.report, self.ingest_home, since=started)
        log.info("%s", summary or f"audit wrote no report at {self.report}")
        return self.report


def alert(context: Any) -> None:
    """on_failure_callback: one ALERT line in the log, plus ``ingest_alert_command`` when set.

    Replace or extend this for Slack / PagerDuty / e-mail; the command form
    (e.g. ``mail -s 'ingest alert' oncall@example.com``) needs no code change.
    """
    ti = context.get("task_instance") or context.get("ti")
    dag_run = context.get("dag_run")
    exc = context.get("exception")
    text = (
        f"ALERT ingest: dag={getattr(ti, 'dag_id', '?')} task={getattr(ti, 'task_id', '?')} "
        f"run={getattr(dag_run, 'run_id', '?')} try={getattr(ti, 'try_number', '?')} "
        f"interval=[{context.get('data_interval_start')}, {context.get('data_interval_end')}) error={exc}"
    )
    log.error("%s", text)
    try:
        from airflow.sdk import Variable

        command = Variable.get("ingest_alert_command", default=None)
    except Exception:  # noqa: BLE001 - alerting must never raise
        command = None
    if command:
        try:
            subprocess.run(command, shell=True, input=text.encode(), timeout=60, check=False)
        except Exception as err:  # noqa: BLE001
            log.error("ingest_alert_command failed: %s", err)


# --- task factories: the three steps every ingest DAG chains (load/reload >> audit >> compact) ---------

def load_task(task_id: str, *, extra_args: tuple[str, ...] = (), name: str = "ingest-load",
              **kwargs: Any) -> IngestSubmitOperator:
    """``spark-submit jobs/load.py --config <loader config> [extra_args]``."""
    return IngestSubmitOperator(task_id=task_id, conn_id=SPARK_CONN_ID, application=LOAD_APP,
                                application_args=["--config", LOADER_CONFIG, *extra_args],
                                conf=dict(SPARK_CONF), env_vars=SPARK_ENV, name=name, **kwargs)


def audit_task(*, from_time: str, to_time: str, name: str = "ingest-audit", **kwargs: Any) -> AuditSubmitOperator:
    """``spark-submit jobs/audit.py`` of ``[from_time, to_time)`` writing this run's report."""
    return AuditSubmitOperator(task_id="audit", conn_id=SPARK_CONN_ID, application=AUDIT_APP,
                               application_args=["--config", AUDIT_CONFIG, "--from", from_time, "--to", to_time,
                                                 "--report", REPORT, "--run-id", AUDIT_RUN_ID],
                               report=REPORT, conf=dict(SPARK_CONF), env_vars=SPARK_ENV, name=name, **kwargs)


def compact_task(**kwargs: Any) -> IngestSubmitOperator:
    """``spark-submit jobs/compact.py`` of the hours this run's audit judged complete.

    The verdict comes from the audit's revision under ``<destination>/_audit/``
    (``--audit-run``), not from the local report file.
    """
    return IngestSubmitOperator(task_id="compact", conn_id=SPARK_CONN_ID, application=COMPACT_APP,
                                application_args=["--config", COMPACTION_CONFIG, "--audit-run", AUDIT_RUN_ID,
                                                  "--summary", COMPACTION_SUMMARY],
                                conf=dict(SPARK_CONF), env_vars=SPARK_ENV, name="ingest-compact", **kwargs)

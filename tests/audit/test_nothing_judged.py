"""An audit that judged nothing says so and exits 5: both causes reproduced with real runs.

The destination is tests/audit/report_pipeline.py's (real broker, registry,
producers and loader; 1-minute producer windows). Three audits of its windows:

* every window still pending: ``spark-submit jobs/audit.py`` with ``grace.ms`` of
  4 hours, on the real clock (the data is about 2 hours old): exit 5, the summary's
  first line, the JSON report's last line and the HTML page say "NOTHING JUDGED"
  and until when;
* a window size that does not match the producers': ``window.ms`` of 1 hour over
  1-minute producer windows, 40 minutes after the data (in-process, the session's
  Spark): the hour is pending, the line names both sizes;
* an audit window smaller than the producers' is refused (exit 2 in the job), naming both.

The spark-submit runs in the background while the in-process audits run.
"""
from __future__ import annotations

import html
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import run_audit
from ingest.audit.report_json import summary
from ingest.audit.report_reader import read_report
from ingest.audit.times import iso
from ingest.clock import FakeClock
from ingest.errors import ConfigError
from ingest.jobs_support import EXIT_NOTHING_JUDGED
from tests.audit.report_pipeline import END_MINUTE, HOUR, MINUTE
from tests.harness import reaper
from tests.harness.spark import SHORT_JVM_OPTS

REPO = Path(__file__).resolve().parents[2]
LONG_GRACE = 4 * HOUR


def audit_config(dest, **kw):
    return AUDIT_CONFIG.parse({"destination": str(dest), "window.lookback": 0, "history.enabled": "false", **kw})


@pytest.fixture(scope="module")
def pending_submit(gap_and_loss, tmp_path_factory):
    """``spark-submit jobs/audit.py`` of minutes 0-26 with grace.ms=4 h, started in the background."""
    b = gap_and_loss
    tmp = tmp_path_factory.mktemp("nothing-judged")
    conf = tmp / "audit.properties"
    conf.write_text(f"destination={b.dest}\nwindow.ms={MINUTE}\ngrace.ms={LONG_GRACE}\nwindow.lookback=0\n"
                    "history.enabled=false\n")
    py = sys.executable
    env = dict(os.environ, PYSPARK_PYTHON=py, PYSPARK_DRIVER_PYTHON=py,
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [str(Path(py).parent / "spark-submit"), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
         "--driver-java-options", SHORT_JVM_OPTS, str(REPO / "jobs" / "audit.py"), "--config", str(conf),
         "--from", str(b.minute(0)), "--to", str(b.minute(END_MINUTE)), "--report", str(tmp / "audit.jsonl"),
         "--run-id", "nothing-judged-1"],
        cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    reaper.watch(proc)
    yield proc, tmp
    if proc.poll() is None:
        proc.kill()  # our own child, by its handle
        proc.wait()


def test_a_window_size_that_does_not_match_the_producers_judges_nothing_and_says_both_sizes(
        spark, gap_and_loss, pending_submit):
    b = gap_and_loss
    run = run_audit(spark, audit_config(b.dest, **{"window.ms": HOUR}), clock=FakeClock(b.minute(40)),
                    from_ms=b.minute(0), to_ms=b.minute(END_MINUTE))
    assert run.exit_code == EXIT_NOTHING_JUDGED == 5
    windows = [r for r in run.rows if r["row_type"] == "window"]
    assert [(r["topic"], r["window_start_ms"], r["status"], r["produced_acked"], r["loaded_distinct"])
            for r in windows] == [("rep-lossy", b.start_ms, "PENDING", 15, 10), ("rep-pv", b.start_ms, "PENDING", 45, 45)]
    why = (f"every window is still pending until {iso(b.start_ms + HOUR + 1_800_000)} UTC (2 topic windows in "
           f"{iso(b.start_ms)} .. {iso(b.start_ms + HOUR)} UTC; a window is judged grace.ms=1800000 (30 min) after "
           f"it ends); the audit's window.ms is 3600000 ms (1 h) but the producers' monitoring windows are "
           f"60000 ms (1 min): set window.ms to 60000 to judge each producer window once it closes")
    assert run.nothing_judged == why
    assert summary(run).splitlines()[0] == f"audit {run.run_id}: NOTHING JUDGED: {why} (exit 5)"
    assert run.inputs["producer_window_ms"] == [MINUTE]


def test_an_audit_window_smaller_than_the_producers_is_refused_naming_both(spark, gap_and_loss, pending_submit):
    b = gap_and_loss
    with pytest.raises(ConfigError, match=r"does not fit the audit's window.ms=30000; set window.ms to the "
                                          r"producers' --window-ms \(60000\)"):
        run_audit(spark, audit_config(b.dest, **{"window.ms": 30_000}), clock=FakeClock(b.minute(40)),
                  from_ms=b.minute(0), to_ms=b.minute(END_MINUTE))


def test_every_window_pending_exits_5_with_one_line_saying_why_in_stdout_json_and_html(gap_and_loss, pending_submit):
    b = gap_and_loss
    proc, tmp = pending_submit
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == EXIT_NOTHING_JUDGED, (stdout[-2000:], stderr[-3000:])
    why = (f"every window is still pending until {iso(b.minute(1) + LONG_GRACE)} UTC (7 topic windows in "
           f"{iso(b.start_ms)} .. {iso(b.minute(END_MINUTE))} UTC; a window is judged grace.ms={LONG_GRACE} (4 h) "
           f"after it ends)")
    line = f"NOTHING JUDGED: {why} (exit 5)"
    assert [x for x in stdout.splitlines() if "NOTHING JUDGED" in x] == [f"audit nothing-judged-1: {line}"]
    rows = read_report(tmp / "audit.jsonl")
    windows = [r for r in rows if r["row_type"] == "window"]
    assert len(windows) == 7 and {r["status"] for r in windows} == {"PENDING"}
    assert rows[-1] == {"row_type": "verdict", "status": "NOTHING_JUDGED", "exit_code": 5, "verdict": line,
                        "nothing_judged": why, "range_start_ms": b.start_ms, "range_end_ms": b.minute(END_MINUTE),
                        "windows": 7, "windows_judged": 0, "audit_run_id": "nothing-judged-1",
                        "audited_at_ms": rows[-1]["audited_at_ms"], "figures": rows[-1]["figures"]}
    figures = rows[-1]["figures"]  # the run's figures: in the verdict line and printed on stdout
    assert figures["windows"] == 7 and figures["judged_windows"] == 0 and figures["rows_read"] > 0
    assert [x for x in stdout.splitlines() if x.startswith("audit nothing-judged-1 read ")] == [
        f"audit nothing-judged-1 read {figures['data_files']} data files ({figures['rows_read']} rows counted) "
        f"and {figures['monitoring_files']} monitoring files; 7 windows, 0 judged; {figures['elapsed_s']} s "
        + stdout.split(f"0 judged; {figures['elapsed_s']} s ", 1)[1].splitlines()[0]]
    page = (tmp / "audit.html").read_text()
    assert f"<div class='verdict' style='background:#455a64'>{html.escape(line)}</div>" in page

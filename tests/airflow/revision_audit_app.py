"""A spark-submit application standing in for jobs/audit.py (for test_verdict_passing).

Run by the real spark-submit with the project's python: writes the rows of the JSON file after
``--rows`` as the revision of audit run ``--run-id`` under ``--destination``/_audit/, exactly where
jobs/audit.py writes its revision, and writes NO local report file.
"""
import json
import sys

from ingest.audit import history


def arg(name: str) -> str:
    return sys.argv[sys.argv.index(name) + 1]


rows = json.loads(open(arg("--rows")).read())
starts = [r["window_start_ms"] for r in rows]
path = history.write_revision(arg("--destination"), rows, run_id=arg("--run-id"), audited_at_ms=1,
                              range_start_ms=min(starts), range_end_ms=max(r["window_end_ms"] for r in rows))
print(f"revision {path}")

"""A spark-submit application standing in for an audit that found data loss (for test_audit_failure).

Run by the real spark-submit: writes a one-window DATA_LOSS report to the path after
``--report`` and exits 3, exactly like jobs/audit.py does on a loss verdict.
"""
import json
import sys

report = sys.argv[sys.argv.index("--report") + 1]
row = {"topic": "page-views", "row_type": "window", "window_start_ms": 1795312800000,
       "window_end_ms": 1795313400000, "status": "DATA_LOSS", "produced_acked": 100, "loaded_distinct": 95,
       "missing": 5, "completeness": 0.95, "causes": {"unexplained": 5}}
with open(report, "w") as f:
    f.write(json.dumps(row) + "\n")
print("audit: DATA LOSS: 5 acknowledged messages missing (exit 3)")
sys.exit(3)

"""spark-submit entry point of the audit (a thin main over ingest.audit.job).

    spark-submit jobs/audit.py --config conf/audit.properties [--from TIME --to TIME]
                 --report PATH [--html PATH] [--by-producer] [--run-id ID] [--set key=value ...]

TIME is epoch milliseconds or ISO 8601 (UTC when no zone is given). Writes the
JSON-lines report to PATH, the HTML report next to it (PATH with ``.html``)
unless ``--html`` says otherwise, a revision under ``<destination>/_audit/``,
and a short summary to stdout.

Exit codes (the first that applies; docs/operations.md): 3 data loss found
(DATA_LOSS, RETENTION_LOSS or CORRUPTION_LOSS); 4 other problems without loss
(MONITORING_GAP, NO_MONITORING, OVER_DELIVERY, DUPLICATES); 5 nothing judged: no
window of the range is judged yet, the summary's first line says why
("NOTHING JUDGED: ..."); 0 every judged window COMPLETE (later ones may be
PENDING); 2 bad input or the audit could not run (one line on stderr, also for
an error raised in an executor); 1 an internal error.
"""
from __future__ import annotations

import argparse
import os
import sys

PROG = "jobs/audit.py"


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog=PROG, description="Reconcile loaded data with producers' monitoring events.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  spark-submit jobs/audit.py --config conf/audit.properties --report /tmp/audit.jsonl\n"
               "  spark-submit jobs/audit.py --config conf/audit.properties --from 2026-11-21T00:00:00Z "
               "--to 2026-11-21T06:00:00Z --report /tmp/audit.jsonl --html /tmp/audit.html\n",
    )
    p.add_argument("--config", required=True, help="audit .properties file (see docs/audit.md)")
    p.add_argument("--from", dest="from_time", metavar="TIME", help="first window to audit (epoch ms or ISO 8601)")
    p.add_argument("--to", dest="to_time", metavar="TIME", help="end of the audited range (exclusive)")
    p.add_argument("--report", required=True, metavar="PATH", help="JSON-lines report to write")
    p.add_argument("--html", metavar="PATH", help="HTML report to write (default: the report path with .html)")
    p.add_argument("--by-producer", action="store_true", help="also report per producer server")
    p.add_argument("--run-id", metavar="ID", help="name this run's revision under <destination>/_audit/ "
                                                  "(default: random); jobs/compact.py --audit-run ID gates on it")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging and the traceback of a failure")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from ingest.jobs_support import build_spark, report_failure, setup_logging

    setup_logging(args.verbose)
    from ingest.audit.config import AUDIT_CONFIG
    from ingest.audit.job import figures_text, parse_time, run_audit
    from ingest.audit.report_html import write_html
    from ingest.audit.report_json import summary, write_json_lines
    from ingest.config import parse_overrides
    from ingest.errors import IngestError

    try:
        config = AUDIT_CONFIG.load(args.config, parse_overrides(args.set))
        from_ms = parse_time(args.from_time) if args.from_time else None
        to_ms = parse_time(args.to_time) if args.to_time else None
    except IngestError as exc:
        return report_failure(PROG, exc, verbose=args.verbose)
    spark = build_spark(config, "ingest-audit")
    try:
        run = run_audit(spark, config, from_ms=from_ms, to_ms=to_ms, by_producer=args.by_producer or None,
                        run_id=args.run_id)
        write_json_lines(run, args.report)
        html_path = args.html or (os.path.splitext(args.report)[0] + ".html")
        write_html(run, html_path, docs_url=config["report.docs.url"] or None)
        print(summary(run))
        print(figures_text(run))
        print(f"report: {args.report}\nhtml: {html_path}")
        return run.exit_code
    except Exception as exc:  # the product's errors, also those raised in executors and wrapped by PySpark
        return report_failure(PROG, exc, verbose=args.verbose)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())

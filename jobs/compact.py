"""spark-submit entry point: compact the small files of audited-complete hours.

    spark-submit jobs/compact.py --config conf/compaction.properties \\
        --from 2026-11-22T03:00 --to 2026-11-22T04:00 --audit-report reports/audit.json
    spark-submit jobs/compact.py --config conf/compaction.properties --audit-run ingest_hourly-scheduled__2026...

One Spark task per hour (hours are independent); the work itself is
:mod:`ingest.compaction`. Exit code 0 when every hour was compacted, was a no-op
or was skipped on purpose; 2 on bad input or a failed run (nothing of it is
visible; one line on stderr, also for an error raised in a task); 1 on an
internal error (a bug).
"""
from __future__ import annotations

import argparse
import os
import sys

PROG = "jobs/compact.py"


def spark_map(spark):
    """A runner ``map_fn`` that merges each hour in its own Spark task (results come back to the driver)."""

    def mapper(fn, plans):
        plans = list(plans)
        return spark.sparkContext.parallelize(plans, max(1, len(plans))).map(fn).collect()

    return mapper


def main(argv: list[str] | None = None) -> int:
    from ingest.compaction.cli import add_common
    from ingest.errors import IngestError

    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  spark-submit jobs/compact.py --config conf/compaction.properties --audit-report /tmp/audit.jsonl\n"
               "  spark-submit jobs/compact.py --config conf/compaction.properties --summary /tmp/compaction.json\n",
    )
    add_common(parser)
    parser.add_argument("--audit-report", action="append", default=[], metavar="PATH")
    parser.add_argument("--audit-run", action="append", default=[], metavar="RUN_ID",
                        help="gate on the revision this audit run (jobs/audit.py --run-id) wrote under "
                             "<destination>/_audit/: works wherever the audit's driver ran")
    parser.add_argument("--summary", metavar="PATH", help="write the outcomes as JSON here")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging and the traceback of a failure")
    args = parser.parse_args(argv)
    from ingest.jobs_support import build_spark, report_failure, setup_logging

    setup_logging(args.verbose)
    from ingest.compaction.cli import _range, audit_sources, existing_destination, load_config
    from ingest.compaction.runner import run, summary_table, write_summary

    try:
        config = load_config(args)
        start, end = _range(args)
        existing_destination(config)
        reports = audit_sources(config, args.audit_report, args.audit_run)
    except IngestError as exc:
        return report_failure(PROG, exc, verbose=args.verbose)

    spark = build_spark(config, "ingest-compact")

    try:
        results = run(config, start_ms=start, end_ms=end, topics=args.topic,
                      audit_reports=reports, map_fn=spark_map(spark))
    except Exception as exc:  # the product's errors, also those raised in tasks and wrapped by PySpark
        return report_failure(PROG, exc, verbose=args.verbose)
    finally:
        spark.stop()
    print(summary_table(results))
    if args.summary:
        # the directory may not exist on this host: nothing else of the DAG run wrote there in cluster mode
        os.makedirs(os.path.dirname(os.path.abspath(args.summary)), exist_ok=True)
        write_summary(args.summary, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

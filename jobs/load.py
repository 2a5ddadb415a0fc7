"""spark-submit entry point of the hourly load (a thin main over ingest.loader.job).

    spark-submit jobs/load.py --config conf/loader.properties [--set key=value ...]
                 [--reset-offsets earliest|latest|TIME --topic T [--topic T2]]

Exit codes: 0 committed or nothing to do, 2 bad input or the run failed (nothing of it
is visible), 3 retention data loss with fail.on.data.loss=true, 1 an internal error (a
bug). A failure is one line on stderr, also when it was raised in an executor (a broker
or the registry unreachable); the summary goes to stdout.
"""
from __future__ import annotations

import argparse
import sys

PROG = "jobs/load.py"


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog=PROG, description="Load everything new from the brokers, exactly once.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  spark-submit --master 'local[*]' jobs/load.py --config conf/loader.properties\n"
               "  spark-submit jobs/load.py --config conf/loader.properties --set format=parquet\n"
               "  spark-submit jobs/load.py --config conf/loader.properties --reset-offsets 2026-11-20T00:00:00Z --topic page-views\n",
    )
    p.add_argument("--config", required=True, help="loader .properties file (see docs/loader.md)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--reset-offsets", metavar="SPEC", help="earliest, latest, epoch ms or ISO-8601 time: replay topics")
    p.add_argument("--topic", action="append", default=[], help="topic to reset (with --reset-offsets)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging and the traceback of a failure")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from ingest.jobs_support import build_spark, product_error, report_failure, setup_logging

    setup_logging(args.verbose)
    from ingest.config import parse_overrides
    from ingest.errors import IngestError
    from ingest.loader.config import LOADER_CONFIG
    from ingest.loader.job import run_load
    from ingest.loader.runrecord import summary_text
    from ingest.loader.reset import check_reset_args

    try:
        check_reset_args(args.reset_offsets, args.topic)  # a refused reset: one line, exit 2, nothing read or started
        config = LOADER_CONFIG.load(args.config, parse_overrides(args.set))
    except IngestError as exc:
        return report_failure(PROG, exc, verbose=args.verbose)
    sessions = []

    def spark_factory():
        # Started only when there is something to load: recovery, planning and
        # "nothing new" runs need no Spark at all. The default task runner (rdd) needs
        # a SparkContext only, no SQL session (docs/performance.md, "A small hourly load's fixed cost").
        sessions.append(build_spark(config, "ingest-load", sql=config["task.runner"] == "datasource"))
        return sessions[-1]

    try:
        result = run_load(config, spark_factory, reset_spec=args.reset_offsets, reset_topics=args.topic)
        print(summary_text(result.record))
        return 0
    except Exception as exc:  # the product's errors, also those raised in executors and wrapped by PySpark
        record = getattr(exc, "run_record", None)
        if record:
            found = product_error(exc)  # the summary names the error, not PySpark's wrapping of it
            print(summary_text({**record, "error": f"{found.error_class.__name__}: {found.message}"} if found
                               else record))
        return report_failure(PROG, exc, verbose=args.verbose)
    finally:
        for s in sessions:
            s.stop()


if __name__ == "__main__":
    sys.exit(main())

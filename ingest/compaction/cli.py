"""``ingest compaction run|status``: compaction without Spark, for operators and the demo.

The scheduled path is ``spark-submit jobs/compact.py`` (one Spark task per
hour); both go through :mod:`ingest.compaction.runner`.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys

from ingest.compaction.config import COMPACTION_CONFIG
from ingest.compaction.plan import committed_hours, is_compacted_set
from ingest.compaction.records import ARCHIVE_DIR, archived_count, read_records
from ingest.config import parse_overrides
from ingest.errors import IngestError, UnknownTopicError
from ingest.loader.state import LoaderState
from ingest.storage import open_storage

log = logging.getLogger(__name__)

EXAMPLES = """examples:
  ingest compaction run --config conf/compaction.properties --audit-report reports/audit.json
  ingest compaction run --config conf/compaction.properties --audit-run ingest_hourly.scheduled__2026-11-22T03
  ingest compaction run --config conf/compaction.properties --from 2026-11-22T00:00 --to 2026-11-22T06:00 \\
      --set compaction.require.audit=false
  ingest compaction status --config conf/compaction.properties --topic page-views
"""


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="compaction .properties file (conf/compaction.properties)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--topic", action="append", default=[], help="only this topic (repeatable)")
    p.add_argument("--from", dest="start", help="first hour (ISO-8601 UTC or epoch ms)")
    p.add_argument("--to", dest="end", help="end of the range, exclusive")


def register(subparsers) -> None:
    parser = subparsers.add_parser("compaction", help="merge small files of completed hours",
                                   epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="compaction_command", metavar="ACTION", required=True)
    run_p = sub.add_parser("run", help="compact qualifying hours now", epilog=EXAMPLES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(run_p)
    run_p.add_argument("--audit-report", action="append", default=[], metavar="PATH",
                       help="audit report (JSON lines, or a revision .parquet) judging the hours; repeatable")
    run_p.add_argument("--audit-run", action="append", default=[], metavar="RUN_ID",
                       help="gate on the revision this audit run (jobs/audit.py --run-id) wrote under "
                            "<destination>/_audit/; repeatable")
    run_p.add_argument("--summary", metavar="PATH", help="also write the outcomes as JSON here")
    run_p.set_defaults(func=_run)
    st = sub.add_parser("status", help="list compaction records per hour", epilog=EXAMPLES,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(st)
    st.add_argument("--json", action="store_true", help="print records as JSON lines")
    st.set_defaults(func=_status)


def load_config(args):
    return COMPACTION_CONFIG.load(args.config, parse_overrides(args.set))


def _range(args):
    from ingest.compaction.runner import parse_time_ms  # deferred: imports pyarrow

    return (parse_time_ms(args.start) if args.start else None, parse_time_ms(args.end) if args.end else None)


def existing_destination(config):
    """The storage of ``config["destination"]``; IngestError when it does not exist (a typo would list nothing)."""
    storage = open_storage(config["destination"])
    if not storage.exists(storage.root):
        raise IngestError(f"destination {storage.uri} does not exist: set destination= (or --set destination=URI) "
                          f"to the loader's destination")
    return storage


def audit_sources(config, reports: list[str], runs: list[str]) -> list[str]:
    """The verdicts compaction gates on: report files as given, plus the revision of each named audit run."""
    from ingest.audit.history import run_revision  # deferred: imports pyarrow

    return list(reports) + [run_revision(config["destination"], run_id) for run_id in runs]


def _run(args) -> int:
    from ingest.compaction.runner import run, summary_table, write_summary  # deferred: imports pyarrow

    start, end = _range(args)
    config = load_config(args)
    existing_destination(config)
    reports = audit_sources(config, args.audit_report, args.audit_run)
    results = run(config, start_ms=start, end_ms=end, topics=args.topic, audit_reports=reports)
    print(summary_table(results))
    if args.summary:
        write_summary(args.summary, results)
    return 0


def _status(args) -> int:
    storage = existing_destination(load_config(args))
    state = LoaderState.load(storage)  # reads only: status never changes the destination
    start, end = _range(args)
    hours = committed_hours(state, args.topic)
    if args.topic and not hours:
        loaded = sorted({f.topic for f in state.files()})
        raise UnknownTopicError(f"--topic {', '.join(args.topic)}: no committed hours in {storage.uri}; "
                                f"topics there: {', '.join(loaded) or 'none (nothing loaded yet)'}")
    if state.seq == 0:
        print(f"no committed load in {storage.uri} yet (nothing to compact)", file=sys.stderr)
    for hour, files in sorted(hours.items(), key=lambda kv: (kv[0].topic, kv[0].start_ms)):
        if start is not None and hour.start_ms + 3_600_000 <= start or end is not None and hour.start_ms >= end:
            continue
        size = sum(f.bytes for f in files)
        status = "compacted" if is_compacted_set(files) else "small files"
        if args.json:
            print(json.dumps({"hour": str(hour), "files": len(files), "bytes": size, "status": status}))
        else:
            print(f"{str(hour):<40} {len(files):>5} file(s) {size:>12} bytes  {status}")
    for record in read_records(storage):
        if args.json:
            print(json.dumps({"run": record}))
        else:
            print(f"run {record['id']}: {record['state']}, {len(record['old'])} -> {len(record['new'])} files")
    older = archived_count(storage)
    if older and not args.json:
        print(f"{older} older run record(s) in {storage.join(ARCHIVE_DIR)}")
    return 0

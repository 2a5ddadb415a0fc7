"""``ingest audit show``: the latest audit verdict of every window, from the revisions under ``_audit/``.

examples:

    ingest audit show --destination /data/events                 # every window's latest revision
    ingest audit show --destination /data/events --problems      # only windows not COMPLETE/PENDING
    ingest audit show --report out/audit.jsonl                   # a JSON-lines report file (+ the run's verdict)

The audit itself runs under Spark: ``spark-submit jobs/audit.py`` (docs/audit.md).
"""
from __future__ import annotations

import argparse
from typing import Any

from ingest.audit.report_json import status_table
from ingest.audit.report_reader import read_report
from ingest.audit.status import NO_PROBLEM_STATUSES
from ingest.errors import IngestError, UnknownTopicError


def register(subparsers: Any) -> None:
    audit = subparsers.add_parser("audit", help="read audit reports (the audit runs via spark-submit jobs/audit.py)",
                                  description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = audit.add_subparsers(dest="audit_command", metavar="SUBCOMMAND")
    show = sub.add_parser(
        "show", help="latest verdict per topic window", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = show.add_mutually_exclusive_group(required=True)
    src.add_argument("--destination", help="the loader's destination URI (reads <destination>/_audit/)")
    src.add_argument("--report", help="a JSON-lines report written by jobs/audit.py --report")
    show.add_argument("--topic", help="only this topic")
    show.add_argument("--problems", action="store_true", help="only windows that are not COMPLETE or PENDING")
    show.set_defaults(func=_show)
    audit.set_defaults(func=lambda args: (audit.print_help(), 2)[1])


def _show(args) -> int:
    if args.destination:
        from ingest.audit.history import latest_rows  # deferred: history needs pyarrow

        rows = latest_rows(args.destination)
        if not rows:
            raise IngestError(f"no audit revisions under {args.destination}/_audit: run spark-submit jobs/audit.py "
                              f"first, or check the destination (it must be the loader's)")
    else:
        rows = read_report(args.report)
    verdicts = [r.get("verdict") for r in rows if r.get("row_type") == "verdict"]  # a report's last line
    rows = [r for r in rows if r.get("row_type", "window") in ("window", "out_of_range")]  # not producer, verdict
    if args.topic:
        audited = sorted({r["topic"] for r in rows})
        rows = [r for r in rows if r["topic"] == args.topic]
        if not rows:
            raise UnknownTopicError(f"--topic {args.topic!r} was never audited in {args.destination or args.report}; "
                                    f"audited topics: {', '.join(audited) or 'none'}")
    if args.problems:
        rows = [r for r in rows if r["status"] not in NO_PROBLEM_STATUSES]
    print(status_table(rows))
    if verdicts and verdicts[-1]:
        print(f"run verdict: {verdicts[-1]}")
    return 0 if all(r["status"] in NO_PROBLEM_STATUSES for r in rows) else 1

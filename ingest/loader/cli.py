"""``ingest loader status`` and ``ingest loader reset-offsets`` (registered into ``ingest``)."""
from __future__ import annotations

import argparse
import json
import logging

from ingest.config import parse_overrides
from ingest.loader.config import LOADER_CONFIG

log = logging.getLogger(__name__)

STATUS_EXAMPLES = """\
examples:
  ingest loader status --config conf/loader.properties
  ingest loader status --config conf/loader.properties --set destination=hdfs://nn/data/events --json
"""

RESET_EXAMPLES = """\
examples:
  ingest loader reset-offsets --config conf/loader.properties --topic clicks --to 2026-11-20T06:00:00Z
  ingest loader reset-offsets --config conf/loader.properties --topic clicks --topic page_views --to earliest
  then: spark-submit jobs/load.py --config conf/loader.properties   (reloads, replacing, never duplicating)
"""


def register(subparsers) -> None:
    p = subparsers.add_parser("loader", help="the hourly load: status, offsets reset",
                              description="The load itself runs as spark-submit jobs/load.py (docs/loader.md).",
                              epilog=STATUS_EXAMPLES + RESET_EXAMPLES.replace("examples:\n", ""), formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="loader_command", metavar="SUBCOMMAND")
    st = sub.add_parser("status", help="committed offsets, lag and retention risk per partition",
                        epilog=STATUS_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    st.add_argument("--config", required=True, help="loader .properties file")
    st.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=_status)
    rs = sub.add_parser("reset-offsets", help="rewind or skip topics (one commit; data returns with the next load)",
                        epilog=RESET_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    rs.add_argument("--config", required=True)
    rs.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    rs.add_argument("--to", required=True, metavar="SPEC", help="earliest, latest, epoch ms or ISO-8601 time")
    rs.add_argument("--topic", action="append", required=True, help="topic to reset (repeatable)")
    rs.set_defaults(func=_reset)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _config(args):
    return LOADER_CONFIG.load(args.config, parse_overrides(args.set))


def _status(args) -> int:
    from ingest.loader.status import as_json, render, status  # deferred: imports kazoo

    rows = status(_config(args))
    print(json.dumps(as_json(rows), indent=1) if args.json else render(rows))
    return 0


def _reset(args) -> int:
    from ingest.loader.reset import reset_offsets  # deferred: imports kazoo

    manifest = reset_offsets(_config(args), args.to, args.topic)
    print(f"reset {', '.join(args.topic)} to {args.to}: commit {manifest.seq}, "
          f"{len(manifest.removed)} files withdrawn (they are reloaded by the next load)")
    return 0

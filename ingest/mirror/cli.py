"""``ingest mirror --config FILE [--set key=value ...]`` and ``ingest mirror status --config FILE [--json]``.

``ingest mirror`` runs one mirror group member in the foreground. SIGTERM or SIGINT stops it
cleanly: every copier writes its final checkpoint, the member leaves the group, exit 0. Exit codes
(as every ``ingest`` command): 0 after a clean stop; 2 with one ``ingest mirror: error: ...`` line
for a bad configuration (unknown key, bad regex, unknown source, missing target.zk.connect, ...) or
an unreachable ZooKeeper; 1 when the mirror's control thread died (a bug: see the log).
A SIGKILLed mirror loses nothing and copies nothing twice: the next start resumes from the
checkpoints (docs/mirroring.md).

``ingest mirror status`` prints one line per source partition (see :mod:`ingest.mirror.status`).
"""
from __future__ import annotations

import argparse
import json
import logging

from ingest.config import parse_overrides
from ingest.mirror.config import load_mirror_config
from ingest.mirror.mirror_maker import MirrorMaker
from ingest.mirror.status import as_json, render, status
from ingest.stop_signals import stop_on_signals

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_DIED = 1

EXAMPLES = """\
examples:
  ingest mirror --config conf/mirror.properties
  ingest mirror --config conf/mirror.properties --set mirror.id=mirror-a --set whitelist='clicks|views'
  ingest mirror status --config conf/mirror.properties
  ingest mirror status --config conf/mirror.properties --json
"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "mirror", help="mirror topics from source clusters into a target cluster (exactly once)",
        description=__doc__, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="mirror.properties file (see conf/mirror.properties)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key (repeatable)")
    sub = p.add_subparsers(dest="mirror_command", metavar="SUBCOMMAND")
    st = sub.add_parser("status", help="position, ends and lag (bytes, seconds) per source partition",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    st.add_argument("--config", required=True, help="mirror.properties file")
    st.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=_status)
    p.set_defaults(func=lambda args: _run(args, p))


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if not args.config:
        parser.error("the following arguments are required: --config")  # exits 2 like any usage error
    config = load_mirror_config(args.config, parse_overrides(args.set))
    stop = stop_on_signals()
    mirror = MirrorMaker(config).start()
    print(f"mirror {mirror.mirror_id} running in group {mirror.group_name}", flush=True)
    while not stop.wait(1.0):
        if not mirror.alive:
            log.error("the mirror's control thread died; stopping")
            mirror.stop()
            return EXIT_DIED
    mirror.stop()
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    rows = status(load_mirror_config(args.config, parse_overrides(args.set)))
    print(json.dumps(as_json(rows), indent=1) if args.json else render(rows))
    return EXIT_OK

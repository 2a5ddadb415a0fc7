"""ingest broker start --config FILE [--set key=value ...]: run a broker in the foreground.

SIGTERM or SIGINT stops it gracefully (with ZooKeeper, first a controlled
shutdown: the controller moves its leaderships to other in-sync replicas;
then stop accepting, finish in-flight requests, flush and close the logs,
deregister from ZooKeeper) and the command exits 0. A bad config or a taken broker id exits 2 with one clear line.
"""
from __future__ import annotations

import argparse
import logging

from ingest.broker.broker import BrokerServer
from ingest.broker.server_config import SERVER_CONFIG
from ingest.config import parse_overrides
from ingest.stop_signals import stop_on_signals

log = logging.getLogger(__name__)

EXAMPLES = """\
examples:
  ingest broker start --config conf/server.properties
  ingest broker start --config conf/server.properties --set brokerid=1 --set port=9093 --set log.dir=/tmp/b1
"""


def register(subparsers) -> None:
    broker = subparsers.add_parser("broker", help="run a broker", epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = broker.add_subparsers(dest="broker_command", metavar="SUBCOMMAND")
    start = sub.add_parser("start", help="run a broker in the foreground until SIGTERM/SIGINT",
                           description=__doc__, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    start.add_argument("--config", required=True, help="server.properties file (see conf/server.properties)")
    start.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override one config key (repeatable)")
    start.set_defaults(func=start_command)
    broker.set_defaults(func=lambda _args: (broker.print_help(), 2)[1])


def start_command(args: argparse.Namespace) -> int:
    config = SERVER_CONFIG.load(args.config, parse_overrides(args.set))
    stop = stop_on_signals()
    broker = BrokerServer(config).start()
    print(f"broker {broker.broker_id} ready on {broker.host}:{broker.port}", flush=True)
    while not stop.wait(1.0):
        if broker.network is not None and not broker.network.alive():
            log.error("a network thread died; shutting down")
            broker.stop()
            return 1
    broker.stop()
    return 0

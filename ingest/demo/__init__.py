"""``ingest demo``: the whole pipeline on embedded defaults, in one command.

ZooKeeper (when the Debian package is installed), two brokers, the schema
registry, producers with monitoring events, two hourly-style loads via
``spark-submit jobs/load.py``, the audit, compaction; then a summary. Every
process it starts is stopped at the end, also on Ctrl-C. See
:mod:`ingest.demo.pipeline`.
"""
from __future__ import annotations

import argparse
import math

from ingest.cli_numbers import float_flag
from ingest.demo.pipeline import Demo, DemoOptions, run_demo
from ingest.errors import ConfigError

TOPOLOGIES = ("single", "datacenters")

EXAMPLES = """examples:
  ingest demo                                  # about 2-3 minutes, data in ./demo-work
  ingest demo --duration 20 --workdir /tmp/d   # a shorter run elsewhere
  ingest demo --no-zookeeper                   # static broker list even if ZooKeeper is installed
  ingest demo --topology datacenters           # dc1 + dc2 clusters -> 2 mirrors -> offline cluster -> load -> tiered audit
"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "demo", help="run the whole pipeline locally on embedded defaults",
        description=__doc__, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default="./demo-work",
                   help="fresh working directory (default ./demo-work; a previous demo's directory is replaced)")
    p.add_argument("--duration", type=float_flag("a number of seconds > 0"), default=60.0,
                   help="seconds the producers publish (default 60)")
    p.add_argument("--rate", type=float_flag("a number of events per second > 0"), default=100.0,
                   help="page-view events per second (default 100)")
    p.add_argument("--format", choices=("avro", "parquet"), default="parquet", help="output format (default parquet)")
    p.add_argument("--no-zookeeper", action="store_true", help="use a static broker list even if ZooKeeper is installed")
    p.add_argument("--topology", choices=TOPOLOGIES, default="single",
                   help="single: one cluster (default); datacenters: two datacenter clusters mirrored into an "
                        "offline cluster, loaded hourly, audited tier by tier, with the end-to-end latency")
    p.set_defaults(func=_run)


def _positive(flag: str, value: float, unit: str) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{flag} {value:g}: allowed is a number of {unit} > 0")


def _run(args) -> int:
    # refused before the work directory is replaced or anything is started
    _positive("--duration", args.duration, "seconds")
    _positive("--rate", args.rate, "events per second")
    if args.topology == "datacenters" and args.no_zookeeper:
        raise ConfigError("--topology datacenters with --no-zookeeper: the datacenters topology needs ZooKeeper "
                          "(a chroot per cluster, the mirrors' checkpoints); allowed: drop --no-zookeeper")
    demo_class = Demo
    if args.topology == "datacenters":
        from ingest.demo.datacenters import DatacentersDemo  # deferred: imports fastavro

        demo_class = DatacentersDemo
    return run_demo(DemoOptions(workdir=args.workdir, duration_s=args.duration, rate=args.rate,
                                fmt=args.format, use_zookeeper=not args.no_zookeeper), demo_class)

"""The ``ingest`` command line: one entry point, subcommands contributed by packages.

Each package that offers commands has a ``cli`` module with
``register(subparsers) -> None``; it adds its subparsers and sets
``func=callable(args) -> int`` on each. Errors from the product
(:class:`ingest.errors.IngestError`) print as one clear line and exit 2; with
``--verbose`` the traceback is shown too.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys
from typing import Sequence

from ingest import __version__
from ingest.errors import IngestError

log = logging.getLogger(__name__)

# Modules contributing subcommands, in the order they appear in --help.
COMMAND_MODULES = (
    "ingest.broker.cli",      # broker start
    "ingest.broker.dump",     # log dump
    "ingest.client.cli",      # console-producer, console-consumer, topics
    "ingest.events.cli",      # registry start, produce
    "ingest.loader.cli",      # loader status / reset
    "ingest.audit.cli",       # audit summary tools
    "ingest.compaction.cli",  # compaction tools
    "ingest.demo",            # demo
    "ingest.config_docs",     # config docs
)

EXIT_OK = 0
EXIT_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ingest",
        description="Batch ingestion of log data: brokers, hourly loads, audit.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ingest {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging and full tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        if importlib.util.find_spec(name) is None:
            continue  # that package has no commands yet
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_ERROR
    try:
        return int(func(args) or 0)
    except IngestError as exc:
        if args.verbose:
            log.exception("failed")
        print(f"ingest {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"ingest {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The ``ingest`` command line: one entry point, subcommands contributed by packages.

Each package that offers commands has a ``cli`` module with
``register(subparsers) -> None``; it adds its subparsers and sets
``func=callable(args) -> int`` on each. Errors from the product
(:class:`ingest.errors.IngestError`) print as one clear line and exit 2; with
``--verbose`` (before or after the subcommand) the traceback is shown too.
An unreadable file (:class:`OSError`) is reported the same way; any other
unexpected exception prints one line pointing at ``--verbose`` and exits 1.
Usage mistakes are argparse's: the usage line and one error line, exit 2.
Output into a pipe whose reader went away (``ingest loader status | head``)
ends the command quietly with 141 (128 + SIGPIPE), as a Unix tool killed by
SIGPIPE does; the signal itself stays ignored, since a broker or client killed
by a peer's closed socket would be a bug.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import select
import signal
import sys
from typing import Sequence

from ingest import __version__
from ingest.errors import IngestError
from ingest.zk_security import NO_AUTH_HINT, is_no_auth

log = logging.getLogger(__name__)

# Modules contributing subcommands, in the order they appear in --help.
COMMAND_MODULES = (
    "ingest.broker.cli",      # broker start
    "ingest.broker.dump",     # log dump
    "ingest.broker.zk_acls",  # zk-acls secure / unsecure / check
    "ingest.client.cli",      # console-producer, console-consumer, topics
    "ingest.client.groups_cli",  # groups list / describe / reset-offsets
    "ingest.client.users_cli",   # users add / remove / list (SASL credentials)
    "ingest.client.acls_cli",  # acls add / remove / list
    "ingest.events.cli",      # registry start, produce
    "ingest.loader.cli",      # loader status / reset
    "ingest.audit.cli",       # audit summary tools
    "ingest.compaction.cli",  # compaction tools
    "ingest.mirror.cli",      # mirror, mirror status
    "ingest.demo",            # demo
    "ingest.config_docs",     # config docs
    "ingest.package",         # package (the cluster artifact)
)

# Services whose logs are their record: third-party warnings stay visible there.
LONG_RUNNING = frozenset({"broker", "registry", "mirror"})

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE

EXAMPLES = """\
examples:
  ingest broker start --config conf/server.properties
  ingest topics --brokers 0:127.0.0.1:9092
  ingest loader status --config conf/loader.properties
  ingest mirror --config conf/mirror.properties
  ingest audit show --destination /data/events --problems
  ingest demo
  ingest <command> --help        # each command lists its own examples
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ingest",
        description="Batch ingestion of log data: brokers, hourly loads, audit.",
        epilog=EXAMPLES,
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


def _hoist_verbose(argv: Sequence[str]) -> list[str]:
    """Accept ``--verbose`` anywhere (``ingest loader status --config f --verbose``)."""
    argv = list(argv)
    if "--verbose" in argv[1:] and "--" not in argv[: argv.index("--verbose")]:
        argv.remove("--verbose")
        argv.insert(0, "--verbose")
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_hoist_verbose(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose and args.command not in LONG_RUNNING:
        # kazoo logs every reconnect attempt; a short command's error line says it once
        logging.getLogger("kazoo").setLevel(logging.ERROR)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_ERROR
    try:
        code = int(func(args) or 0)
        sys.stdout.flush()  # inside the try: a closed pipe must not surface at interpreter exit
        return code
    except BrokenPipeError as exc:
        if not _stdout_reader_gone():
            return _report_os_error(args, exc)  # a socket, not our stdout: an ordinary I/O error
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except IngestError as exc:
        if args.verbose:
            log.exception("failed")
        print(f"ingest {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        return _report_os_error(args, exc)
    except KeyboardInterrupt:
        print(f"ingest {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug: one line here, the traceback with --verbose
        if is_no_auth(exc):   # not a bug: secured ZooKeeper nodes and a command without the identity
            if args.verbose:
                log.exception("failed")
            print(f"ingest {args.command}: error: {NO_AUTH_HINT}", file=sys.stderr)
            return EXIT_ERROR
        if args.verbose:
            log.exception("failed")
        print(f"ingest {args.command}: internal error: {type(exc).__name__}: {exc} "
              f"(run with --verbose for the traceback)", file=sys.stderr)
        return EXIT_INTERNAL


def _report_os_error(args: argparse.Namespace, exc: OSError) -> int:
    if args.verbose:
        log.exception("failed")
    where = f": {exc.filename}" if exc.filename else ""
    print(f"ingest {args.command}: error: {exc.strerror or exc}{where}", file=sys.stderr)
    return EXIT_ERROR


def _stdout_reader_gone() -> bool:
    """True when stdout is a pipe or socket whose reading end is closed (poll reports an error)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError):  # no real file descriptor (captured in tests)
        return False


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush of unwritten output stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

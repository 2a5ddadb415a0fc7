"""``ingest users add|remove|list``: the SASL users of a cluster, in ZooKeeper ``/config/users`` (Kafka's
``kafka-configs --entity-type users --alter --add-config 'SCRAM-SHA-256=[...]'``).

The password is never taken from the command line (where ``ps`` and the shell's history show it):
``--password-file F`` (one trailing newline dropped; ``-`` is standard input) or ``--password-env VAR``.
What ``list`` prints is names and mechanisms, never a credential. Storage and checks:
:mod:`ingest.broker.kafka.scram_users`, :mod:`ingest.wire.scram`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager

from ingest.broker.server_config import SERVER_CONFIG
from ingest.cli_numbers import int_flag
from ingest.errors import ConfigError, CoordinationError
from ingest.wire import scram
from ingest.zk_security import ZkSecurity, refused_message

EXAMPLES = """\
examples:
  ingest users add alice --zookeeper 127.0.0.1:2181 --password-file alice.pw
  ingest users add broker --zookeeper 127.0.0.1:2181 --mechanism SCRAM-SHA-512 --password-env BROKER_PW
  ingest users list --zookeeper 127.0.0.1:2181
  ingest users remove alice --zookeeper 127.0.0.1:2181
"""
ZK_HELP = "ZooKeeper connect string of the brokers (default: zk.connect of --config)"
DEFAULT_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def register(subparsers) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser("users", help="SASL users (SCRAM credentials in ZooKeeper)",
                              description="Add, remove and list the users SASL listeners authenticate (PLAIN, "
                                          "SCRAM-SHA-256, SCRAM-SHA-512). Credentials are stored salted and hashed "
                                          "in ZooKeeper /config/users, as Kafka stores them; brokers see changes "
                                          "at once.", epilog=EXAMPLES, formatter_class=fmt)
    us = p.add_subparsers(dest="users_command", metavar="{add,remove,list}", required=True)
    a = us.add_parser("add", help="add a user, or set its password", epilog=EXAMPLES, formatter_class=fmt,
                      description="Store NAME's SCRAM credential for each --mechanism (default both SCRAM "
                                  "mechanisms; PLAIN logins are checked against them). Other mechanisms of an "
                                  "existing user are kept.")
    a.add_argument("name")
    _add_zk_args(a)
    a.add_argument("--mechanism", action="append", choices=sorted(scram.MECHANISMS),
                   help="SCRAM mechanism (repeatable; default: SCRAM-SHA-256 and SCRAM-SHA-512)")
    a.add_argument("--iterations", type=int_flag(f"an integer in [{scram.MIN_ITERATIONS}, {scram.MAX_ITERATIONS}]"),
                   default=scram.DEFAULT_ITERATIONS, help=f"PBKDF2 iterations (default {scram.DEFAULT_ITERATIONS})")
    src = a.add_mutually_exclusive_group(required=True)
    src.add_argument("--password-file", metavar="F", help="file holding the password (- for standard input)")
    src.add_argument("--password-env", metavar="VAR", help="environment variable holding the password")
    src.add_argument("--password", help=argparse.SUPPRESS)   # refused with the reason (see _add)
    a.set_defaults(func=_add)
    r = us.add_parser("remove", help="remove a user (or one of its mechanisms)", epilog=EXAMPLES, formatter_class=fmt,
                      description="Remove NAME's credentials: new connections can no longer log in as NAME "
                                  "(connections already authenticated stay, as in Kafka).")
    r.add_argument("name")
    _add_zk_args(r)
    r.add_argument("--mechanism", choices=sorted(scram.MECHANISMS), help="only this mechanism's credential")
    r.set_defaults(func=_remove)
    lst = us.add_parser("list", help="users and their mechanisms (never secrets)", epilog=EXAMPLES,
                        formatter_class=fmt, description="Every user and its SCRAM mechanisms.")
    _add_zk_args(lst)
    lst.add_argument("--json", action="store_true", help="one JSON object per user")
    lst.set_defaults(func=_list)


def _add_zk_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--zookeeper", "--zk", "--zk-connect", dest="zookeeper", metavar="HOST:PORT[/CHROOT]", help=ZK_HELP)
    p.add_argument("--config", metavar="SERVER_PROPERTIES", help="broker config whose zk.connect to use")


def _connect(args, server) -> str:
    if args.zookeeper:
        return args.zookeeper
    if server is not None and server["zk.connect"]:
        return server["zk.connect"]
    raise ConfigError("users live in ZooKeeper: give --zookeeper HOST:PORT[/chroot], or --config with zk.connect")


@contextmanager
def _zk(args):
    """A session with the ZooKeeper identity of ``--config`` (if given), as ``ingest topics`` opens one:
    on a cluster with ``zookeeper.set.acl`` only that identity may change ``/config/users``."""
    from kazoo.exceptions import NoAuthError  # deferred: kazoo

    from ingest.client.discovery import start_kazoo  # deferred: imports kazoo

    server = SERVER_CONFIG.load(args.config) if args.config else None
    connect = _connect(args, server)
    security = ZkSecurity() if server is None else ZkSecurity.from_config(server)
    client = start_kazoo(connect, security=security)
    try:
        yield client
    except NoAuthError as exc:
        raise CoordinationError(refused_message(connect, security) + " (give --config with them)") from exc
    finally:
        client.stop()
        client.close()


def read_password(password_file: str | None, password_env: str | None) -> str:
    """The password from a file (``-``: standard input; one trailing newline dropped) or a variable.

    Raises:
        ConfigError: an unreadable file, an unset variable, an empty password.
    """
    if password_env is not None:
        value = os.environ.get(password_env)
        if value is None:
            raise ConfigError(f"--password-env {password_env}: that environment variable is not set")
        where = f"environment variable {password_env}"
    else:
        try:
            value = sys.stdin.read() if password_file == "-" else open(password_file, encoding="utf-8").read()
        except OSError as exc:
            raise ConfigError(f"--password-file {password_file}: {exc.strerror or exc}") from exc
        value = value[:-1] if value.endswith("\n") else value
        value = value[:-1] if value.endswith("\r") else value
        where = f"--password-file {password_file}"
    if not value:
        raise ConfigError(f"the password from {where} is empty")
    return value


def _add(args) -> int:
    from ingest.broker.kafka.scram_users import add_user  # deferred: kazoo with it

    if not scram.MIN_ITERATIONS <= args.iterations <= scram.MAX_ITERATIONS:
        raise ConfigError(f"--iterations {args.iterations} is outside [{scram.MIN_ITERATIONS}, "
                          f"{scram.MAX_ITERATIONS}] (Kafka's bounds)")
    if args.password is not None:
        raise ConfigError("--password is refused: a password on the command line is visible to every user (ps) and "
                          "kept in the shell's history; give --password-file F (- for standard input) or "
                          "--password-env VAR")
    password = read_password(args.password_file, args.password_env)
    mechanisms = tuple(dict.fromkeys(args.mechanism or DEFAULT_MECHANISMS))
    with _zk(args) as client:
        for mechanism in mechanisms:
            add_user(client, args.name, mechanism, password, args.iterations)
    print(f"user {args.name}: {', '.join(mechanisms)} credentials stored ({args.iterations} iterations)")
    return 0


def _remove(args) -> int:
    from ingest.broker.kafka.scram_users import remove_user  # deferred: kazoo with it

    with _zk(args) as client:
        removed = remove_user(client, args.name, args.mechanism)
    what = f"{args.mechanism} credential" if args.mechanism else "credentials"
    if not removed:
        print(f"user {args.name}: no {what} to remove", file=sys.stderr)
        return 2
    print(f"user {args.name}: {what} removed")
    return 0


def _list(args) -> int:
    from ingest.broker.kafka.scram_users import list_users  # deferred: kazoo with it

    with _zk(args) as client:
        users = list_users(client)
    for name, mechanisms in users.items():
        print(json.dumps({"user": name, "mechanisms": mechanisms}) if args.json
              else f"{name}\t{','.join(mechanisms) or '-'}")
    return 0

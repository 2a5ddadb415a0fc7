"""``ingest zk-acls secure|unsecure|check``: set the znode ACLs of an existing cluster (Kafka's zookeeper-security-migration).

Walks ``/`` of the connect string (the chroot's node; ``/`` of the ensemble without one, as
Kafka's tool does) and every node under the product's top-level nodes
(:data:`~ingest.znodes.PRODUCT_ROOTS`; nothing else, so other tenants of a shared ensemble are
left alone) and sets on each the ACL that ``zookeeper.set.acl=true`` gives a new node
(``secure``) or ZooKeeper's open ACL (``unsecure``). ``check`` only reads and lists the nodes
whose ACL is not what ``secure`` would set (exit 1 if any). Idempotent: a rerun sets the same
ACLs again, so an interrupted run is finished by running it again. A node deleted while the
walk runs is skipped. Requests go out in batches of :data:`BATCH` (kazoo's asynchronous calls),
and a progress line is logged every :data:`PROGRESS_EVERY` nodes.

The identity comes from ``--config FILE``: ``zk.connect`` and the ``zookeeper.*`` keys of any of
the product's properties files (the broker's ``server.properties``); its other keys are
ignored. Both directions need the identity: a secured node can only be changed by it.

The rolling procedure around it is in docs/security.md ("ZooKeeper").
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Callable

from ingest import znodes
from ingest.config import ConfigDef, Int, Key, Str, parse_overrides, read_properties
from ingest.errors import ConfigError, CoordinationError
from ingest.zk_security import ZK_SECURITY_KEYS, ZkSecurity, new_kazoo, same_acls

log = logging.getLogger(__name__)

BATCH = 500
"""Requests in flight at once while walking the tree."""
PROGRESS_EVERY = 10_000
"""Nodes between two progress lines."""

ZK_ACLS_CONFIG = ConfigDef("zk-acls", (
    Key("zk.connect", Str(), "", "ZooKeeper connect string host:port[,host:port][/chroot] of the cluster"),
    Key("zk.connectiontimeout.ms", Int(100, 600_000), 30_000, "how long to wait for the connection"),
) + ZK_SECURITY_KEYS)

EXAMPLES = """\
examples:
  ingest zk-acls secure   --config conf/server.properties
  ingest zk-acls check    --config conf/server.properties --zk-connect zk1:2181/ingest
  ingest zk-acls unsecure --config conf/server.properties
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("zk-acls", help="set the ACLs of the cluster's znodes (secure / unsecure / check)",
                              description=__doc__.splitlines()[0], epilog=EXAMPLES,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="zk_acls_command", metavar="SUBCOMMAND")
    for name, text in (("secure", "give every node of the cluster the ACL zookeeper.set.acl=true gives new ones"),
                       ("unsecure", "open every node of the cluster to everyone again"),
                       ("check", "list the nodes whose ACL is not what 'secure' sets; exit 1 if any")):
        c = sub.add_parser(name, help=text, description=text, epilog=EXAMPLES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        c.add_argument("--config", metavar="FILE",
                       help="a properties file with zk.connect and zookeeper.digest.username/password "
                            "(other keys ignored), e.g. the broker's server.properties")
        c.add_argument("--zk-connect", metavar="HOST:PORT[/CHROOT]", help="instead of the file's zk.connect")
        c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key")
        c.set_defaults(func=run)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def load_config(path: str | None, overrides: dict[str, str]):
    """``zk.connect`` and the ZooKeeper security keys from ``path`` (its other keys ignored) plus overrides."""
    raw = {k: v for k, v in read_properties(path).items() if k in {key.name for key in ZK_ACLS_CONFIG.keys}} \
        if path else {}
    raw.update(overrides)
    return ZK_ACLS_CONFIG.parse(raw, source=path or "arguments")


def run(args: argparse.Namespace) -> int:
    overrides = parse_overrides(args.set)
    if args.zk_connect:
        overrides["zk.connect"] = args.zk_connect
    config = load_config(args.config, overrides)
    if not config["zk.connect"]:
        raise ConfigError("zk-acls needs the cluster's ZooKeeper: give --zk-connect HOST:PORT[/CHROOT] or a "
                          "--config file with zk.connect")
    identity = ZkSecurity.from_config(config)
    if not identity.authenticated:
        raise ConfigError("zk-acls needs the product's ZooKeeper identity (a secured node can only be changed by "
                          "it, and 'secure' names it in every ACL): set zookeeper.digest.username and "
                          "zookeeper.digest.password in the --config file or with --set")
    secure = ZkSecurity(identity.username, identity.password, set_acl=True)
    client = new_kazoo(config["zk.connect"], identity, timeout=10.0)
    try:
        client.start(timeout=config["zk.connectiontimeout.ms"] / 1000.0)
    except Exception as exc:
        client.close()
        raise CoordinationError(f"cannot connect to ZooKeeper at {config['zk.connect']!r}: {exc}") from exc
    try:
        if args.zk_acls_command == "check":
            wrong = check(client, secure.acl_for)
            for path in wrong:
                print(path)
            print(f"{len(wrong)} znode(s) of {config['zk.connect']} not secured", file=sys.stderr)
            return 1 if wrong else 0
        policy = secure.acl_for if args.zk_acls_command == "secure" else ZkSecurity().acl_for
        count = apply(client, policy)
        print(f"{args.zk_acls_command}d {count} znodes of {config['zk.connect']}")
        if count <= 1:   # only / (Kafka's tool warns the same way): most likely the wrong chroot
            print(f"no node of the product ({', '.join(znodes.PRODUCT_ROOTS[:3])}, ...) under "
                  f"{config['zk.connect']!r}: is the chroot right?", file=sys.stderr)
            return 1
        if args.zk_acls_command == "secure":
            # the 0.7 consumers must still be able to register once the root is read-only to them (open ACL)
            client.retry(client.ensure_path, znodes.CONSUMERS)
        return 0
    finally:
        client.stop()
        client.close()


def apply(client, policy: Callable[[str], list], *, progress: Callable[[int], None] | None = None) -> int:
    """Set ``policy(path)`` on ``/`` and on every node under the product's roots; returns how many were set."""
    return _walk(client, lambda p: client.set_acls_async(p, policy(p)),
                 lambda p: client.set_acls(p, policy(p)), lambda p, _r: None, progress)


def check(client, policy: Callable[[str], list]) -> list[str]:
    """The paths under the product's roots (and ``/``) whose ACL differs from ``policy(path)``."""
    wrong: list[str] = []

    def seen(path: str, result) -> None:
        if not same_acls(result[0], policy(path)):
            wrong.append(path)
    _walk(client, client.get_acls_async, client.get_acls, seen, None)
    return wrong


def _walk(client, start_async, call_sync, on_result, progress) -> int:
    """Run ``start_async(path)`` on ``/`` and every node under the product's roots, BATCH at a time (depth
    first, so memory grows with the depth times the width of one level, not the tree); ``on_result(path,
    result)`` for each that exists. A call lost to a connection loss is redone through ``client.retry``."""
    # deferred: kazoo, only where ZooKeeper is used
    from kazoo.exceptions import ConnectionLoss, NoAuthError, NoNodeError

    done = 0
    started = time.monotonic()
    progress = progress or (lambda n: log.info("%d znodes done (%.0f/s)", n, n / max(1e-3, time.monotonic() - started)))
    _one(client, "/", start_async, call_sync, on_result)   # the root only: it holds every other tenant's nodes
    done += 1
    stack = [r for r in reversed(znodes.PRODUCT_ROOTS) if client.retry(client.exists, r)]
    while stack:
        batch = [stack.pop() for _ in range(min(BATCH, len(stack)))]
        calls = [(p, start_async(p), client.get_children_async(p)) for p in batch]
        for path, call, children in calls:
            try:
                on_result(path, call.get())
            except NoNodeError:
                log.debug("%s is gone (deleted while the walk ran); skipped", path)
                continue
            except ConnectionLoss:
                if not _one(client, path, start_async, call_sync, on_result):
                    continue
            except NoAuthError as exc:
                raise _refused(path) from exc
            try:
                names = children.get()
            except NoNodeError:
                continue
            except ConnectionLoss:
                try:
                    names = client.retry(client.get_children, path)
                except NoNodeError:
                    continue
            stack.extend(f"{path}/{name}" for name in sorted(names, reverse=True))
            done += 1
            if done % PROGRESS_EVERY == 0:
                progress(done)
    return done


def _one(client, path, start_async, call_sync, on_result) -> bool:
    from kazoo.exceptions import NoAuthError, NoNodeError  # deferred: kazoo

    try:
        on_result(path, client.retry(call_sync, path))
        return True
    except NoNodeError:
        return False
    except NoAuthError as exc:
        raise _refused(path) from exc


def _refused(path: str) -> CoordinationError:
    return CoordinationError(f"ZooKeeper refused to change the ACL of {path}: it is secured for another identity "
                             f"than zookeeper.digest.username; run the tool with the identity that secured it")

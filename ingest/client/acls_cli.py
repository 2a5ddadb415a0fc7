"""``ingest acls add|remove|list``: the ACLs in ZooKeeper, in the style of Kafka's ``kafka-acls``.

The ACLs are written where every broker's authorizer reads and watches them
(:mod:`ingest.broker.authorizer.zk_store`), so a change takes effect on every broker without a restart.
"""
from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager

from ingest.broker.authorizer.acl import (CLUSTER_NAME, Acl, AclEntry, Operation, PatternType, Permission,
                                          ResourcePattern, ResourceType)
from ingest.broker.server_config import SERVER_CONFIG
from ingest.errors import ConfigError

EXAMPLES = """\
examples:
  ingest acls add --zookeeper 127.0.0.1:2181 --allow-principal User:alice --operation Write --topic page-views
  ingest acls add --zookeeper 127.0.0.1:2181 --allow-principal User:loader --consumer --topic page- \\
      --resource-pattern-type prefixed --group hourly-load
  ingest acls add --zookeeper 127.0.0.1:2181 --deny-principal User:mallory --operation All --topic '*'
  ingest acls list --zookeeper 127.0.0.1:2181 --topic page-views
  ingest acls remove --zookeeper 127.0.0.1:2181 --allow-principal User:alice --operation Write --topic page-views
"""


def register(subparsers) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser("acls", help="add, remove and list ACLs (Kafka's ACL model, kept in ZooKeeper)",
                              description="Kafka's ACLs for brokers with authorizer.class.name set: who "
                                          "(principal, host) may do what (operation) on which topics, groups, "
                                          "transactional ids or the cluster. Stored in ZooKeeper, in force on "
                                          "every broker at once.", epilog=EXAMPLES, formatter_class=fmt)
    sub = p.add_subparsers(dest="acls_command", metavar="SUBCOMMAND", required=True)
    for name, what in (("add", "add ACLs"), ("remove", "remove ACLs (without principals: every ACL of the "
                                                         "named resources)"), ("list", "list ACLs")):
        s = sub.add_parser(name, help=what, description=what, epilog=EXAMPLES, formatter_class=fmt)
        s.add_argument("--zookeeper", "--zk-connect", dest="zookeeper",
                       help="ZooKeeper host:port[/chroot] of the cluster (default: zk.connect of --config)")
        s.add_argument("--config", help="a broker's server.properties (its zk.connect)")
        s.add_argument("--topic", action="append", default=[], help="a topic name, a prefix, or '*' (repeatable)")
        s.add_argument("--group", action="append", default=[], help="a consumer group, a prefix, or '*' "
                                                                     "(repeatable)")
        s.add_argument("--transactional-id", action="append", default=[], help="a transactional id (repeatable)")
        s.add_argument("--cluster", action="store_true", help="the cluster resource")
        s.add_argument("--resource-pattern-type", default="literal",
                       help="literal (default: the name itself; '*' is every name) or prefixed (names starting "
                            "with it)" + ("; list: also any or match" if name == "list" else ""))
        if name == "list":
            s.add_argument("--principal", help="only the ACLs of this principal")
        else:
            s.add_argument("--allow-principal", action="append", default=[], help="e.g. User:alice (repeatable)")
            s.add_argument("--deny-principal", action="append", default=[], help="e.g. User:mallory (repeatable)")
            s.add_argument("--allow-host", action="append", default=[], help="host of the allow principals "
                                                                               "(default *)")
            s.add_argument("--deny-host", action="append", default=[], help="host of the deny principals "
                                                                             "(default *)")
            s.add_argument("--operation", action="append", default=[],
                           help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                                "AlterConfigs, IdempotentWrite or All (repeatable)")
            s.add_argument("--producer", action="store_true", help="Write, Describe, Create on the topics (Write, "
                                                                   "Describe on the transactional ids)")
            s.add_argument("--consumer", action="store_true", help="Read, Describe on the topics and Read on the "
                                                                   "groups")
            s.add_argument("--force", action="store_true", help="accepted for kafka-acls compatibility")
        s.set_defaults(func=_run)


@contextmanager
def _zk(args):
    from ingest.client.discovery import start_kazoo  # deferred: imports kazoo

    connect = args.zookeeper
    if not connect and args.config:
        server = SERVER_CONFIG.load(args.config)
        connect = server["zk.connect"] if server["enable.zookeeper"] else ""
    if not connect:
        raise ConfigError(f"acls {args.acls_command} reads and writes ZooKeeper: give --zookeeper "
                          "HOST:PORT[/chroot] (or --config with enable.zookeeper=true and zk.connect)")
    client = start_kazoo(connect)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _parse(kind, text: str, flag: str):
    try:
        return kind.parse(text)
    except ValueError as exc:
        raise ConfigError(f"{flag}: {exc}") from None


def _patterns(args, pattern_type) -> list:
    out = []
    for flag, rtype, names in (("--topic", ResourceType.TOPIC, args.topic), ("--group", ResourceType.GROUP, args.group),
                               ("--transactional-id", ResourceType.TRANSACTIONAL_ID, args.transactional_id),
                               ("--cluster", ResourceType.CLUSTER, [CLUSTER_NAME] if args.cluster else [])):
        for n in names:
            try:
                out.append(ResourcePattern(rtype, n, pattern_type))
            except ValueError as exc:
                raise ConfigError(f"{flag} {n!r}: {exc}") from None
    return out


def _bindings(args, patterns) -> list:
    """(pattern, entry) of every ACL the add/remove command names."""
    ops = {_parse(Operation, o, "--operation") for o in args.operation}
    by_type = {}
    if args.producer:   # Kafka's shortcut; idempotence needs no more since KIP-679 (Write on a topic)
        by_type[ResourceType.TOPIC] = {Operation.WRITE, Operation.DESCRIBE, Operation.CREATE}
        by_type[ResourceType.TRANSACTIONAL_ID] = {Operation.WRITE, Operation.DESCRIBE}
    if args.consumer:
        by_type.setdefault(ResourceType.TOPIC, set()).update({Operation.READ, Operation.DESCRIBE})
        by_type[ResourceType.GROUP] = {Operation.READ}
    principals = [(p, args.allow_host or ["*"], Permission.ALLOW) for p in args.allow_principal] + \
                 [(p, args.deny_host or ["*"], Permission.DENY) for p in args.deny_principal]
    out = []
    for pattern in patterns:
        wanted = set(ops) | by_type.get(pattern.type, set())
        for principal, hosts, permission in principals:
            for host in hosts:
                for op in sorted(wanted, key=lambda o: o.value):
                    try:
                        entry = AclEntry(principal, host, op, permission)
                        out.append(Acl(pattern, entry))
                    except ValueError as exc:
                        raise ConfigError(f"{pattern.type.value} {pattern.name!r}: {exc}") from None
    return out


def _run(args) -> int:
    from ingest.broker.authorizer import zk_store  # deferred: imports kazoo
    kind = args.resource_pattern_type.lower()
    listing = args.acls_command == "list"
    if kind not in ("literal", "prefixed") and not (listing and kind in ("any", "match")):
        raise ConfigError(f"--resource-pattern-type {args.resource_pattern_type!r}: use literal or prefixed"
                          + (" (list: also any or match)" if listing else ""))
    pattern_type = PatternType.PREFIXED if kind == "prefixed" else PatternType.LITERAL
    patterns = _patterns(args, pattern_type)
    out = sys.stdout
    with _zk(args) as zk:
        if listing:
            return _list(zk, patterns, kind, args.principal, out)
        if not patterns:
            raise ConfigError(f"acls {args.acls_command} needs a resource: --topic, --group, --transactional-id "
                              "or --cluster")
        if args.acls_command == "add":
            bindings = _bindings(args, patterns)
            if not bindings:
                raise ConfigError("acls add needs --allow-principal or --deny-principal, and --operation (or "
                                  "--producer / --consumer)")
            for p in patterns:
                entries = {a.entry for a in bindings if a.resource == p}
                if entries:
                    _show(p, zk_store.change(zk, p, add=entries), out, "Current ACLs for")
            return 0
        principals = args.allow_principal or args.deny_principal
        bindings = _bindings(args, patterns) if principals else []
        if principals and not bindings:
            raise ConfigError("acls remove with principals needs --operation (or --producer / --consumer)")
        for p in patterns:
            remove = {a.entry for a in bindings if a.resource == p}
            _show(p, zk_store.change(zk, p, remove=remove, remove_all=not principals), out, "Current ACLs for")
    return 0


def _list(zk, patterns, kind: str, principal: str | None, out) -> int:
    from ingest.broker.authorizer import zk_store  # deferred: imports kazoo
    stored = zk_store.read_all(zk)
    for p in sorted(stored, key=lambda q: (q.type.value, q.pattern.value, q.name)):
        if patterns:
            if kind == "match":
                if not any(q.type is p.type and p.matches(q.name) for q in patterns):
                    continue
            elif not any(q.type is p.type and q.name == p.name and (kind == "any" or q.pattern is p.pattern)
                         for q in patterns):
                continue
        elif kind == "prefixed" and p.pattern is not PatternType.PREFIXED:
            continue
        entries = stored[p] if principal is None else frozenset(e for e in stored[p] if e.principal == principal)
        if entries:
            _show(p, entries, out, "Current ACLs for")
    return 0


def _show(pattern, entries, out, title: str) -> None:
    print(f"{title} resource `ResourcePattern(resourceType={pattern.type.name}, name={pattern.name}, "
          f"patternType={pattern.pattern.name})`:", file=out)
    for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation.value, e.permission.value)):
        print(f" \t(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
              f"permissionType={e.permission.name})", file=out)
    print(file=out)

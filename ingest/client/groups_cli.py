"""`ingest groups list|describe|reset-offsets`: consumer groups over the Kafka protocol (kafka-consumer-groups)."""
from __future__ import annotations

import argparse

from ingest.cli_numbers import int_flag
from ingest.client.kafka.groups import GroupsAdmin

EXAMPLES = """\
examples:
  ingest groups list --bootstrap-server 127.0.0.1:29092
  ingest groups describe --bootstrap-server 127.0.0.1:29092 --group order-processors
  ingest groups reset-offsets --bootstrap-server 127.0.0.1:29092 --group order-processors --topic orders --to-earliest
  ingest groups reset-offsets ... --to-offset 1000 --execute     # without --execute: only shows the plan
"""


def register(subparsers) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    g = subparsers.add_parser("groups", help="consumer groups: list, describe (lag), reset offsets",
                              description="Consumer groups of the Kafka listeners (kafka-consumer-groups).",
                              epilog=EXAMPLES, formatter_class=fmt)
    gs = g.add_subparsers(dest="groups_command", metavar="SUBCOMMAND", required=True)
    lst = gs.add_parser("list", help="every group, its state and coordinator", epilog=EXAMPLES, formatter_class=fmt)
    _server(lst)
    lst.set_defaults(func=_list)
    d = gs.add_parser("describe", help="members, assignment, committed offset and lag per partition", epilog=EXAMPLES,
                      formatter_class=fmt)
    _server(d)
    d.add_argument("--group", required=True)
    d.set_defaults(func=_describe)
    r = gs.add_parser("reset-offsets", help="set a stopped group's committed offsets of a topic",
                      description="Plan new committed offsets for every partition of --topic; --execute writes "
                                  "them. The group must have no members (stop its consumers first).",
                      epilog=EXAMPLES, formatter_class=fmt)
    _server(r)
    r.add_argument("--group", required=True)
    r.add_argument("--topic", required=True)
    how = r.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true")
    how.add_argument("--to-latest", action="store_true")
    how.add_argument("--to-offset", type=int_flag("an integer >= 0"), metavar="N")
    how.add_argument("--shift-by", type=int_flag("an integer (negative moves back)"), metavar="N", help="move by N (negative: back)")
    r.add_argument("--execute", action="store_true", help="write the new offsets (default: show the plan)")
    r.set_defaults(func=_reset)


def _server(p) -> None:
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]",
                   help="a broker's Kafka listener (bootstrap.servers)")


def _table(rows: list[list[object]]) -> None:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip())


def _list(args) -> int:
    with GroupsAdmin(args.bootstrap_server) as admin:
        groups = admin.list()
    if groups:
        _table([["GROUP", "STATE", "COORDINATOR"], *[list(g) for g in groups]])
    return 0


def _describe(args) -> int:
    with GroupsAdmin(args.bootstrap_server) as admin:
        d = admin.describe(args.group)
    print(f"group {d.group}: {d.state}, protocol {d.protocol or '-'}, coordinator broker {d.coordinator}, "
          f"{len(d.members)} member(s)")
    hosts = {mid: (cid, host) for mid, cid, host, _a in d.members}
    rows = [["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]]
    for p in d.partitions:
        cid, host = hosts.get(p.member, ("-", "-"))
        rows.append([p.topic, p.partition, "-" if p.committed is None else p.committed, p.log_end,
                     "-" if p.lag is None else p.lag, p.member or "-", host, cid])
    _table(rows)
    return 0


def _reset(args) -> int:
    to = "earliest" if args.to_earliest else "latest" if args.to_latest else \
        "offset" if args.to_offset is not None else "shift"
    value = args.to_offset if to == "offset" else args.shift_by
    with GroupsAdmin(args.bootstrap_server) as admin:
        plan = admin.reset(args.group, args.topic, to=to, value=value, execute=args.execute)
    _table([["TOPIC", "PARTITION", "OLD-OFFSET", "NEW-OFFSET"],
            *[[args.topic, p, "-" if old is None else old, new] for p, old, new in plan]])
    print("offsets written" if args.execute else "not written: add --execute to write them")
    return 0

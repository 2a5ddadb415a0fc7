"""``ingest topics`` (list, create, alter, describe, preferred-leader, reassign, delete), console producer, consumer."""
from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager

from ingest.broker import partition_growth
from ingest.broker.server_config import SERVER_CONFIG
from ingest.broker.topics import validate_topic
from ingest.cli_numbers import int_flag
from ingest.config import non_ascii_note, parse_float, parse_int, parse_overrides
from ingest.errors import ConfigError, CoordinationError, IngestError, ReplicationConfigError
from ingest.zk_security import ZkSecurity, refused_message

PRODUCER_EXAMPLES = """examples:
  echo hello | ingest console-producer --bootstrap-server 127.0.0.1:29092 --topic test
  echo hello | ingest console-producer --brokers 0:127.0.0.1:9092 --topic test
  ingest console-producer --zk 127.0.0.1:2181 --topic clicks --set compression.codec=gzip < events.txt
"""
CONSUMER_EXAMPLES = """examples:
  ingest console-consumer --bootstrap-server 127.0.0.1:29092 --topic test --from-beginning --timeout-ms 2000
  ingest console-consumer --brokers 0:127.0.0.1:9092 --topic test --from-beginning --timeout-ms 2000
  ingest console-consumer --zk 127.0.0.1:2181 --topic clicks --group ops --max-messages 10
"""
TOPICS_EXAMPLES = """examples:
  ingest topics --brokers 0:127.0.0.1:9092,1:127.0.0.1:9093     # same as: ingest topics list ...
  ingest topics --zk 127.0.0.1:2181 --topic clicks --json
  ingest topics create --zookeeper 127.0.0.1:2181 --topic clicks --partitions 4 --replication-factor 3
  ingest topics alter --zookeeper 127.0.0.1:2181 --topic clicks --partitions 8
  ingest topics describe --zookeeper 127.0.0.1:2181
  ingest topics preferred-leader --zookeeper 127.0.0.1:2181 --wait 30
  ingest topics reassign --zookeeper 127.0.0.1:2181 --execute --plan plan.json --wait 600
"""
REASSIGN_EXAMPLES = """examples:
  ingest topics reassign --zookeeper 127.0.0.1:2181 --generate --topics-to-move-json-file move.json \\
      --broker-list 0,1,2,3 > proposal.txt      # the last line is the proposed plan: save it as plan.json
  ingest topics reassign --zookeeper 127.0.0.1:2181 --execute --plan plan.json > rollback.txt
  ingest topics reassign --zookeeper 127.0.0.1:2181 --verify --plan plan.json --wait 600
  ingest topics reassign --zookeeper 127.0.0.1:2181 --cancel --plan plan.json
"""
LIST_EXAMPLES = """examples:
  ingest topics list --brokers 0:127.0.0.1:9092,1:127.0.0.1:9093
  ingest topics list --zk 127.0.0.1:2181 --topic clicks --json
"""
CREATE_EXAMPLES = """examples:
  ingest topics create --zookeeper 127.0.0.1:2181 --topic clicks --partitions 4 --replication-factor 3
  ingest topics create --zookeeper 127.0.0.1:2181 --topic clicks --replica-assignment 1:2:3,2:3:1
  ingest topics create --config conf/server.properties --topic clicks --partitions 4
      # replication factor: default.replication.factor of that file; ZooKeeper: its zk.connect
"""
ALTER_EXAMPLES = """examples:
  ingest topics alter --zookeeper 127.0.0.1:2181 --topic clicks --partitions 8
  ingest topics alter --zookeeper 127.0.0.1:2181 --topic clicks --partitions 6 --replica-assignment 1:2,2:0
      # one group per new partition (here partitions 4 and 5 of a topic that has 4)
  ingest topics alter --config conf/server.properties --topic clicks --partitions 8 --dry-run
"""
DESCRIBE_EXAMPLES = """examples:
  ingest topics describe --zookeeper 127.0.0.1:2181
  ingest topics describe --zookeeper 127.0.0.1:2181/ingest --topic clicks --json
  ingest topics describe --zookeeper 127.0.0.1:2181 --under-replicated-partitions   # none listed: all in sync
"""
PREFERRED_EXAMPLES = """examples:
  ingest topics preferred-leader --zookeeper 127.0.0.1:2181                 # every replicated partition
  ingest topics preferred-leader --zookeeper 127.0.0.1:2181 --topic clicks --partition 2 --wait 30
"""
DELETE_EXAMPLES = """examples:
  ingest topics delete --zookeeper 127.0.0.1:2181 --topic clicks
  ingest topics delete --config conf/server.properties --topic clicks --wait 60
"""
ZK_HELP = "ZooKeeper connect string of the brokers (default: zk.connect of --config when it enables ZooKeeper)"


def _add_cluster_args(p: argparse.ArgumentParser, required: bool = True, kafka: bool = False) -> None:
    g = p.add_mutually_exclusive_group(required=required and not kafka)
    g.add_argument("--brokers", metavar="ID:HOST:PORT,...", help="static broker list")
    g.add_argument("--zk", metavar="HOST:PORT[/CHROOT]", help="find brokers in ZooKeeper")
    if kafka:
        p.add_argument("--bootstrap-server", metavar="HOST:PORT,...",
                       help="Kafka listeners, for Kafka-format topics (with --zk: default the listeners the "
                            "brokers registered); alone, only Kafka-format topics are reachable")


def register(subparsers) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser("console-producer", help="send stdin lines as messages",
                              description="Send each stdin line (without its newline) as one message.",
                              epilog=PRODUCER_EXAMPLES, formatter_class=fmt)
    _add_cluster_args(p, kafka=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--key", help="partition key for every line (default: random partition per batch)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="producer config override, e.g. compression.codec=gzip (repeatable)")
    p.set_defaults(func=_producer)

    c = subparsers.add_parser("console-consumer", help="print messages of a topic",
                              description="Print messages of a topic, one per line. With --zk it joins a "
                                          "consumer group (offsets in ZooKeeper).",
                              epilog=CONSUMER_EXAMPLES, formatter_class=fmt)
    _add_cluster_args(c, kafka=True)
    c.add_argument("--topic", required=True)
    c.add_argument("--group", help="consumer group (--zk only; default: a new random group)")
    c.add_argument("--from-beginning", action="store_true",
                   help="start at the earliest offset when the group has no committed offset")
    c.add_argument("--max-messages", type=int_flag("an integer >= 1 (omit it for no limit)"),
                   help="exit after this many messages")
    c.add_argument("--timeout-ms", type=int_flag("-1 (wait forever) or milliseconds >= 0"), default=-1,
                   help="exit after this long without a message")
    c.add_argument("--print-offsets", action="store_true", help="prefix lines with topic, broker-partition, offset")
    c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="consumer config override")
    c.set_defaults(func=_consumer)

    t = subparsers.add_parser("topics", help="list, create, alter and describe topics; move leaders and replicas",
                              description="Without a subcommand: `topics list` (every topic's partitions per "
                                          "broker with earliest and latest offsets). Replicated topics: "
                                          "`create`, `alter` (add partitions), `describe`, `preferred-leader`, "
                                          "`reassign` (they need ZooKeeper).",
                              epilog=TOPICS_EXAMPLES, formatter_class=fmt)
    _add_list_args(t, required=False)
    ts = t.add_subparsers(dest="topics_command", metavar="SUBCOMMAND")
    lst = ts.add_parser("list", help="partitions per broker with earliest and latest offsets",
                        description="List every topic's partitions per broker with earliest and latest offsets "
                                    "(METADATA request; no ZooKeeper needed). Replicated topics are shown by "
                                    "`ingest topics describe`.", epilog=LIST_EXAMPLES, formatter_class=fmt)
    _add_list_args(lst, required=True)

    cr = ts.add_parser("create", help="create a replicated topic (writes its replica assignment to ZooKeeper)",
                       description="Create a replicated topic: its replica assignment (partition i on brokers "
                                   "(i+j) mod n of the n registered brokers, or --replica-assignment) is written "
                                   "to ZooKeeper; the controller then elects the leaders. An existing topic is "
                                   "refused. The replication factor defaults to default.replication.factor of "
                                   "--config, else 1. Without ZooKeeper (static broker list) topics keep "
                                   "replication factor 1 and are created by their first message.",
                       epilog=CREATE_EXAMPLES, formatter_class=fmt)
    g = cr.add_mutually_exclusive_group()
    g.add_argument("--zookeeper", "--zk", dest="zookeeper", metavar="HOST:PORT[/CHROOT]", help=ZK_HELP)
    g.add_argument("--brokers", metavar="ID:HOST:PORT,...",
                   help="static broker list: refused, replication needs ZooKeeper (explains why)")
    cr.add_argument("--config", metavar="SERVER_PROPERTIES", help="broker config for default.replication.factor "
                                                                  "and zk.connect")
    cr.add_argument("--topic", required=True)
    cr.add_argument("--format", choices=("kafka", "0.7"), default="kafka",
                    help="kafka (default): a Kafka topic, served by the brokers' Kafka listeners (logical offsets); "
                         "0.7: a replicated 0.7 topic, served by the 0.7 port (byte offsets)")
    cr.add_argument("--partitions", metavar="P", help="number of partitions, 1..10000")
    cr.add_argument("--replication-factor", metavar="R", help="copies of each partition, 1..live brokers")
    cr.add_argument("--replica-assignment", metavar="B:B,B:B,...",
                    help="replicas per partition instead of --partitions/--replication-factor, e.g. 1:2:3,2:3:1 "
                         "(the first broker of a group is the partition's preferred leader)")
    cr.set_defaults(func=_create)

    al = ts.add_parser("alter", help="add partitions to a replicated topic (Kafka's kafka-topics --alter)",
                       description="Grow a replicated topic (Kafka-format or replicated 0.7) to --partitions N: "
                                   "partitions current..N-1 are appended to its assignment in ZooKeeper, placed "
                                   "like a new topic's (partition i on brokers (i+j) mod n of the n registered "
                                   "brokers, the topic's replication factor) or by --replica-assignment; the "
                                   "controller then elects their leaders. Only growing is allowed. Refused: N not "
                                   "above the current count, a topic marked for deletion or being reassigned, an "
                                   "unreplicated (0.7) topic, which each broker sizes by its "
                                   "topic.partition.count.map (docs/operations.md, \"Adding partitions\"). A keyed "
                                   "producer's key-to-partition mapping changes for new messages.",
                       epilog=ALTER_EXAMPLES, formatter_class=fmt)
    _add_zk_args(al)
    al.add_argument("--topic", required=True)
    al.add_argument("--partitions", metavar="N", required=True,
                    help="the new partition count, above the current one (up to 10000)")
    al.add_argument("--replica-assignment", metavar="B:B,B:B,...",
                    help="replicas of the NEW partitions only, one group per new partition, e.g. 1:2,2:0 "
                         "(default: Kafka's rule over the registered brokers)")
    al.add_argument("--dry-run", action="store_true", help="check and print the new partitions; write nothing")
    al.set_defaults(func=_alter)

    d = ts.add_parser("describe", help="leader, replicas, in-sync set, high watermark per partition",
                      description="Every topic in ZooKeeper: per partition of a replicated topic its leader, "
                                  "replicas, in-sync set, leader epoch, high watermark (asked of the leader; "
                                  "'-' if it cannot be reached) and whether the leader is the preferred "
                                  "replica; unreplicated topics with their partitions per broker.",
                      epilog=DESCRIBE_EXAMPLES, formatter_class=fmt)
    _add_zk_args(d)
    d.add_argument("--topic", help="only this topic")
    d.add_argument("--json", action="store_true", help="one JSON object per partition (and per unreplicated topic)")
    d.add_argument("--under-replicated-partitions", action="store_true",
                   help="only the replicated partitions whose in-sync set lacks a replica or that have no leader "
                        "(nothing listed: every replica is in sync)")
    d.set_defaults(func=_describe)

    pl = ts.add_parser("preferred-leader", help="move leadership back to the preferred replicas",
                       description="Ask the controller to make each partition's preferred replica (the first of "
                                   "its assignment) its leader again, where that replica is in sync "
                                   "(/admin/preferred_replica_election). Refused while a request is pending.",
                       epilog=PREFERRED_EXAMPLES, formatter_class=fmt)
    _add_zk_args(pl)
    pl.add_argument("--topic", help="only this topic (default: every replicated topic)")
    pl.add_argument("--partition", metavar="P", help="only this partition of --topic")
    pl.add_argument("--wait", metavar="SECONDS",
                    help="wait this long for the controller to finish; exit 1 if a partition is not led by its "
                         "preferred replica by then")
    pl.set_defaults(func=_preferred)

    ra = ts.add_parser("reassign", help="move replicas between brokers: generate, execute, verify, cancel a plan",
                       description="Kafka's kafka-reassign-partitions. --generate proposes a plan spreading the "
                                   "replicas and preferred leaders of the topics of --topics-to-move-json-file evenly "
                                   "over --broker-list (nothing is written); --execute writes --plan to "
                                   "/admin/reassign_partitions, and the controller adds the new replicas, waits "
                                   "until they are in sync, moves leadership if needed and removes the old ones "
                                   "(their brokers delete their copies); --verify says which partitions are done "
                                   "(exit 1 while one is not); --cancel puts the partitions of --plan still being "
                                   "moved back on their old replicas. See docs/operations.md.",
                       epilog=REASSIGN_EXAMPLES, formatter_class=fmt)
    _add_zk_args(ra)
    action = ra.add_mutually_exclusive_group(required=True)
    action.add_argument("--generate", action="store_true", help="print the current and a proposed assignment")
    action.add_argument("--execute", action="store_true", help="start the reassignment of --plan")
    action.add_argument("--verify", action="store_true", help="per partition of --plan: complete, in progress, failed")
    action.add_argument("--cancel", action="store_true",
                        help="the partitions of --plan still being moved go back to their old replicas")
    ra.add_argument("--plan", "--reassignment-json-file", dest="plan", metavar="PLAN_JSON",
                    help='{"version":1,"partitions":[{"topic":T,"partition":P,"replicas":[B,...]},...]} (Kafka\'s '
                         "reassignment JSON; --execute, --verify, --cancel)")
    ra.add_argument("--topics-to-move-json-file", metavar="TOPICS_JSON",
                    help='{"version":1,"topics":[{"topic":T},...]} (--generate)')
    ra.add_argument("--broker-list", metavar="ID,ID,...", help="the brokers to spread the replicas over (--generate)")
    ra.add_argument("--throttle", metavar="BYTES_PER_S",
                    help="--execute: limit the moves' replication traffic to this many bytes/s per broker (Kafka's "
                         "leader/follower.replication.throttled.rate and .replicas); --verify (or --wait) removes "
                         "it once every move is complete, and --cancel removes it")
    ra.add_argument("--wait", metavar="SECONDS",
                    help="--execute, --verify, --cancel: wait this long for the moves to finish; exit 1 if one has "
                         "not by then")
    ra.set_defaults(func=_reassign)

    de = ts.add_parser("delete", help="delete a replicated topic (Kafka-format or replicated 0.7) on every broker",
                       description="Kafka's kafka-topics --delete: mark the topic for deletion "
                                   "(/admin/delete_topics/TOPIC); every replica's broker stops its replica and "
                                   "deletes its directories, then the controller removes the topic from ZooKeeper. "
                                   "A broker that is down holds the deletion up until it returns. Refused: an "
                                   "unknown topic, an unreplicated 0.7 topic (per-broker logs, see "
                                   "docs/operations.md), __consumer_offsets, a topic being reassigned.",
                       epilog=DELETE_EXAMPLES, formatter_class=fmt)
    _add_zk_args(de)
    de.add_argument("--topic", required=True)
    de.add_argument("--wait", metavar="SECONDS",
                    help="wait this long until the topic is gone; exit 1 if it is not by then (naming the brokers "
                         "that hold it up)")
    de.set_defaults(func=_delete)


def _add_list_args(p: argparse.ArgumentParser, required: bool) -> None:
    _add_cluster_args(p, required=required)
    p.add_argument("--topic", action="append", default=[], help="only these topics (repeatable)")
    p.add_argument("--json", action="store_true", help="one JSON object per partition")
    p.set_defaults(func=_topics)


def _add_zk_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--zookeeper", "--zk", dest="zookeeper", metavar="HOST:PORT[/CHROOT]", help=ZK_HELP)
    p.add_argument("--config", metavar="SERVER_PROPERTIES", help="broker config whose zk.connect to use")


def _producer(args) -> int:
    from ingest.client.console import console_producer  # deferred: imports kazoo

    return console_producer(brokers=args.brokers, zk=args.zk, topic=args.topic, lines=sys.stdin.buffer,
                            key=args.key, overrides=parse_overrides(args.set), bootstrap=args.bootstrap_server)


def _consumer(args) -> int:
    from ingest.client.console import console_consumer  # deferred: imports kazoo

    return console_consumer(brokers=args.brokers, zk=args.zk, topic=args.topic, group=args.group,
                            from_beginning=args.from_beginning, max_messages=args.max_messages,
                            timeout_ms=args.timeout_ms, print_offsets=args.print_offsets,
                            overrides=parse_overrides(args.set), bootstrap=args.bootstrap_server)


def _topics(args) -> int:
    from ingest.client.console import list_topics  # deferred: imports kazoo

    return list_topics(brokers=args.brokers, zk=args.zk, topics=args.topic, as_json=args.json)


# --- topics create / describe / preferred-leader (logic: ingest.client.topics_admin) -------------

def _int(flag: str, text: str | None, allowed: str) -> int | None:
    if text is None:
        return None
    try:
        return parse_int(text)
    except ValueError:
        raise ConfigError(f"{flag} {text!r} is not an integer: allowed is {allowed}{non_ascii_note(text)}") from None


def _server_config(path: str | None):
    return SERVER_CONFIG.load(path) if path else None


def _zk_connect(zookeeper: str | None, server, command: str) -> str | None:
    """``--zookeeper``, else zk.connect of ``--config`` when that broker config enables ZooKeeper."""
    if zookeeper:
        return zookeeper
    if server is not None and server["enable.zookeeper"] and server["zk.connect"]:
        return server["zk.connect"]
    if command == "create":
        return None
    where = " (its --config has enable.zookeeper=false)" if server is not None else ""
    raise ConfigError(f"topics {command} reads ZooKeeper: give --zookeeper HOST:PORT[/chroot]{where}; in the "
                      "static broker-list mode every topic is unreplicated, see `ingest topics list --brokers ...`")


@contextmanager
def _zk_session(connect: str, server=None):
    """A session on ``connect`` with the ZooKeeper identity of the broker config ``server`` (if given)."""
    from kazoo.exceptions import NoAuthError  # deferred: kazoo

    from ingest.client.discovery import start_kazoo  # deferred: imports kazoo

    security = ZkSecurity() if server is None else ZkSecurity.from_config(server)
    client = start_kazoo(connect, security=security)
    try:
        yield client
    except NoAuthError as exc:
        raise CoordinationError(refused_message(connect, security) + " (give --config with them)") from exc
    finally:
        client.stop()
        client.close()


def _create(args) -> int:
    from ingest.client import topics_admin  # deferred: imports kazoo

    validate_topic(args.topic)
    server = _server_config(args.config)
    partitions = _int("--partitions", args.partitions, "an integer 1..10000")
    rf = _int("--replication-factor", args.replication_factor, "an integer from 1 to the number of live brokers")
    manual = args.replica_assignment
    if manual is not None:
        if partitions is not None or rf is not None:
            raise ConfigError("--replica-assignment names every partition's replicas itself: give it without "
                              "--partitions and --replication-factor")
        rf_default = None
    else:
        if partitions is None:
            raise ConfigError("topics create needs --partitions P (1..10000) or --replica-assignment "
                              "B:B,B:B,... (e.g. 1:2:3,2:3:1)")
        rf_default = server["default.replication.factor"] if server is not None else 1
        rf = rf if rf is not None else rf_default
        topics_admin.check_counts(partitions, rf)
    connect = None if args.brokers else _zk_connect(args.zookeeper, server, "create")
    if connect is None:
        if rf is not None and rf > 1:
            raise ReplicationConfigError(
                f"replication factor {rf} needs ZooKeeper (--zookeeper HOST:PORT[/chroot]): replicas, leaders and "
                "in-sync sets live there; the static broker-list mode keeps replication factor 1")
        raise ReplicationConfigError(
            "topics create writes the topic to ZooKeeper: give --zookeeper HOST:PORT[/chroot]; the static "
            "broker-list mode keeps replication factor 1 and a broker creates a topic on its first message "
            "(num.partitions partitions)")
    with _zk_session(connect, server) as client:
        plan = topics_admin.create_topic(client, args.topic, partitions=partitions, replication_factor=rf,
                                         manual=manual,
                                         min_insync_replicas=server["min.insync.replicas"] if server else None,
                                         topic_format="kafka" if args.format == "kafka" else None)
    print(f"created topic {args.topic!r}: {len(plan)} partition(s), replication factor {len(plan[0])}, "
          f"format {args.format}, "
          f"replicas {topics_admin.describe_assignment(plan)} (the controller elects the leaders)")
    return 0


def _alter(args) -> int:
    from ingest.client import topics_alter  # deferred: imports kazoo

    validate_topic(args.topic)
    count = _int("--partitions", args.partitions, "an integer above the topic's current partition count, up to "
                                                  "10000")
    try:
        partition_growth.check_count(count)
    except IngestError as exc:
        raise ConfigError(f"--partitions {count}: {exc}") from None
    manual = None if args.replica_assignment is None else topics_alter.parse_new_assignment(args.replica_assignment)
    server = _server_config(args.config)
    connect = _zk_connect(args.zookeeper, server, "alter")
    with _zk_session(connect, server) as client:
        growth = topics_alter.add_partitions(client, args.topic, count, manual, validate_only=args.dry_run)
    verb = "would add" if args.dry_run else "added"
    print(f"{verb} {len(growth.added)} partition(s) to topic {args.topic!r}: {growth.before} -> {growth.after}, "
          f"replicas {partition_growth.describe(growth.added)}"
          + ("" if args.dry_run else " (the controller elects the leaders)"))
    print("WARNING: a producer that partitions by key now maps keys to other partitions for new messages "
          "(hash(key) % partitions): per-key ordering across the change is not kept")
    return 0


def _describe(args) -> int:
    from ingest.client import topics_admin, topics_describe  # deferred: imports kazoo

    if args.topic is not None:
        validate_topic(args.topic)
    server = _server_config(args.config)
    connect = _zk_connect(args.zookeeper, server, "describe")
    with _zk_session(connect, server) as client:
        records = topics_describe.describe_records(client, args.topic)
        controller = topics_admin.read_controller(client)
    if args.under_replicated_partitions:
        records = topics_describe.under_replicated(records)
    if args.json:
        topics_describe.write_records_json(records, sys.stdout)
    else:
        topics_describe.format_records(records, controller, sys.stdout)
    return 0


def _wait_seconds(value: str | None, allowed_with: str = "", refused: bool = False) -> float | None:
    """``--wait``'s seconds (None when not given); ConfigError naming the value unless 0..86400 (or ``refused``)."""
    if value is None:
        return None
    try:
        seconds = parse_float(value)
    except ValueError:
        seconds = -1.0
    if refused or not 0 <= seconds <= 86_400:
        raise ConfigError(f"--wait {value!r}: allowed is seconds from 0 to 86400{allowed_with}{non_ascii_note(value)}")
    return seconds


def _preferred(args) -> int:
    from ingest.client import topics_admin  # deferred: imports kazoo

    if args.topic is not None:
        validate_topic(args.topic)
    partition = _int("--partition", args.partition, "a partition number >= 0 of --topic")
    wait_s = _wait_seconds(args.wait)
    server = _server_config(args.config)
    connect = _zk_connect(args.zookeeper, server, "preferred-leader")
    with _zk_session(connect, server) as client:
        topics = topics_admin.read_all_topics(client)
        partitions = topics_admin.election_partitions(topics.replicated, topics.legacy, args.topic, partition)
        topics_admin.request_election(client, partitions)
        print(f"preferred replica election requested for {len(partitions)} partition(s)")
        if topics_admin.read_controller(client)[0] is None:
            print("note: no controller is running now; the election happens when a broker becomes controller")
        if wait_s is None:
            return 0
        records = topics_admin.wait_for_election(client, partitions, topics.replicated, wait_s)
    topics_admin.format_election(records, sys.stdout)
    moved = sum(r["done"] for r in records)
    pending = records and records[0]["pending"]
    print(f"{moved} of {len(records)} partition(s) led by their preferred replica"
          + (f"; the request is still pending after {wait_s:g} s" if pending else ""))
    return 0 if moved == len(records) else 1


def _read_file(flag: str, path: str | None, action: str) -> str:
    if path is None:
        raise ConfigError(f"topics reassign --{action} needs {flag} FILE")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"{flag} {path!r}: cannot read it ({exc.strerror or exc})") from None


def _reassign(args) -> int:
    from ingest.broker import replication_throttle  # deferred: imports kazoo
    from ingest.client import topics_admin, topics_reassign as tr

    action = next(a for a in ("generate", "execute", "verify", "cancel") if getattr(args, a))
    wait_s = _wait_seconds(args.wait, " with --execute, --verify or --cancel", refused=action == "generate")
    throttle = None
    if args.throttle is not None:
        try:
            throttle = parse_int(args.throttle)
        except ValueError:
            throttle = 0
        if not 1 <= throttle < 1 << 63 or action != "execute":
            raise ConfigError(f"--throttle {args.throttle!r}: allowed is bytes per second from 1 to 2^63-1, with "
                              f"--execute{non_ascii_note(args.throttle)}")
    if action == "generate":
        names = tr.parse_topics_to_move(_read_file("--topics-to-move-json-file", args.topics_to_move_json_file,
                                                   action))
        if args.broker_list is None:
            raise ConfigError("topics reassign --generate needs --broker-list ID,ID,... (the brokers to use)")
        brokers = tr.parse_broker_list(args.broker_list)
        for name in names:
            validate_topic(name)
    else:
        plan = tr.parse_plan(_read_file("--plan", args.plan, action))
        for topic, _p in plan:
            validate_topic(topic)
    server = _server_config(args.config)
    connect = _zk_connect(args.zookeeper, server, "reassign")
    with _zk_session(connect, server) as client:
        if action == "generate":
            current = tr.topics_to_move(topics_admin.read_all_topics(client), names)
            print("Current partition replica assignment")
            print(tr.plan_json({(t, p): r for t, a in current.items() for p, r in a.items()}))
            print()
            print("Proposed partition reassignment configuration")
            print(tr.plan_json(tr.propose(current, brokers)))
            return 0
        if action == "execute":
            current = tr.check_plan(plan, topics_admin.read_all_topics(client), tr.registered_brokers(client))
            if throttle is not None:
                replication_throttle.apply(client, plan, throttle, current=current)
            tr.execute(client, plan)
            print("Current partition replica assignment")
            print()
            print(tr.plan_json(current))
            print()
            print("Save this to use as the --plan option of --execute for a rollback")
            print(f"Successfully started reassignment of {len(plan)} partition(s)"
                  + ("" if topics_admin.read_controller(client)[0] is not None else
                     "; note: no controller is running now: the moves start when a broker becomes controller"))
            if throttle is not None:
                print(f"The inter-broker throttle limit was set to {throttle} B/s; run --verify until the "
                      "reassignment completes, which removes it")
            if wait_s is None:
                return 0
        elif action == "cancel":
            originals = tr.cancel(client, plan)
            print(f"Successfully cancelled the reassignment of {len(originals)} partition(s): "
                  + ", ".join(f"{t}-{p} back to {list(r)}" for (t, p), r in sorted(originals.items())))
            replication_throttle.clear(client, sorted({t for t, _p in plan}))
            if wait_s is None:
                return 0
            plan = originals
        records = tr.wait(client, plan, wait_s or 0.0)
        done = all(r["status"] == tr.COMPLETE for r in records)
        if done and action != "cancel":
            replication_throttle.clear(client, sorted({t for t, _p in plan}))
    tr.format_progress(records, sys.stdout)
    if done and action != "cancel":
        print("Throttle was removed.")
    return 0 if done else 1


def _delete(args) -> int:
    from ingest.client import topics_delete  # deferred: imports kazoo

    validate_topic(args.topic)
    wait_s = _wait_seconds(args.wait)
    server = _server_config(args.config)
    connect = _zk_connect(args.zookeeper, server, "delete")
    with _zk_session(connect, server) as client:
        print(topics_delete.delete_topic(client, args.topic))
        if wait_s is None:
            return 0
        where = topics_delete.wait_deleted(client, args.topic, wait_s)
    print(where.message(args.topic, wait_s), file=sys.stdout if where.done else sys.stderr)
    return 0 if where.done else 1

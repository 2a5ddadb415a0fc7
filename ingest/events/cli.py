"""``ingest registry start`` and ``ingest produce`` (the load generator)."""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from ingest.cli_numbers import float_flag, int_flag
from ingest.client.simple_consumer import SimpleConsumer
from ingest.clock import SYSTEM_CLOCK
from ingest.config import non_ascii_note, parse_int, parse_overrides, read_properties
from ingest.errors import ConfigError, IngestError
from ingest.events import compatibility
from ingest.events.event_producer_config import split_config
from ingest.events.registry_config import REGISTRY_CONFIG
from ingest.events.registry_store import DirectoryStore, ZooKeeperStore
from ingest.zk_security import ZkSecurity
from ingest.events.registry_users import user_line

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 5.0

REGISTRY_EXAMPLES = """\
examples:
  ingest registry start --port 8081 --store /var/lib/ingest/registry
  ingest registry start --port 8081 --zk 127.0.0.1:2181     # state in ZooKeeper, several registries
  ingest registry start --port 8081 --set metrics.port=9102  # Prometheus metrics on 127.0.0.1:9102
  ingest registry start --config /etc/ingest/registry.properties  # listeners=https://..., authentication.method=BASIC
  echo "$PASSWORD" | ingest registry passwd --file /etc/ingest/registry-users --user alice --roles admin
"""

PRODUCE_EXAMPLES = """\
examples:
  ingest produce --brokers 127.0.0.1:9092 --registry http://127.0.0.1:8081 --topic page_views --count 10000
  ingest produce --zk 127.0.0.1:2181 --registry http://127.0.0.1:8081 --topic clicks --count 600 --rate 10 --json
  ingest produce --bootstrap-server 127.0.0.1:29092 --registry http://127.0.0.1:8081 --topic clicks --count 100
"""


def register(subparsers: Any) -> None:
    reg = subparsers.add_parser("registry", help="the Avro schema registry service", epilog=REGISTRY_EXAMPLES,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    reg_sub = reg.add_subparsers(dest="registry_command", metavar="SUBCOMMAND")
    start = reg_sub.add_parser("start", help="serve the schema registry REST API", epilog=REGISTRY_EXAMPLES,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    start.add_argument("--port", type=int_flag("a TCP port 0-65535 (0 picks a free one)"), default=None,
                       help="TCP port (0 picks a free one); required unless the config has listeners")
    start.add_argument("--host", default=None, help="address to bind (default 127.0.0.1)")
    where = start.add_mutually_exclusive_group()
    where.add_argument("--store", default="registry-data", help="directory store (default ./registry-data)")
    where.add_argument("--zk", help="ZooKeeper connect string: keep state in ZooKeeper (shared by registries)")
    start.add_argument("--compatibility", default="BACKWARD", help="default compatibility level")
    start.add_argument("--config", default=None, help="properties file with registry keys (metrics.port, "
                                                      "metrics.host; `ingest config docs` lists them)")
    start.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    start.set_defaults(func=_registry_start)
    pw = reg_sub.add_parser("passwd", help="add or replace a user of a registry users file (password from stdin)",
                            description="Reads the password from the first line of stdin and writes the user's line "
                                        "'user: PBKDF2-SHA256:<iterations>:<salt>:<hash>,role,...' into FILE "
                                        "(created with mode 600; an existing line of the user is replaced).",
                            epilog=REGISTRY_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    pw.add_argument("--file", required=True, help="the users file (authentication.users.file)")
    pw.add_argument("--user", required=True, help="user name")
    pw.add_argument("--roles", default="", help="comma-separated roles, e.g. admin (writes) or readonly")
    pw.add_argument("--remove", action="store_true", help="remove the user instead")
    pw.set_defaults(func=_registry_passwd)
    reg.set_defaults(func=lambda args: (reg.print_help(), 2)[1])

    p = subparsers.add_parser("produce", help="publish synthetic events with monitoring events (load generator)",
                              epilog=PRODUCE_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--brokers", help="static brokers: host:port or id:host:port, comma-separated")
    src.add_argument("--zk", help="ZooKeeper connect string (brokers found under /brokers)")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT,...",
                   help="Kafka listeners, for Kafka-format topics (with --zk: default the listeners the brokers "
                        "registered); alone, only Kafka-format topics are reachable")
    p.add_argument("--registry", required=True, help="schema registry URL, e.g. http://127.0.0.1:8081")
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int_flag("an integer >= 0"), required=True, help="events to publish")
    p.add_argument("--rate", type=float_flag("events per second >= 0"), default=0.0,
                   help="events per second (0 = as fast as possible)")
    p.add_argument("--audit-topic", default=None, help="monitoring events topic (default audit-monitoring)")
    p.add_argument("--window-ms", type=int_flag("milliseconds >= 1"), default=None,
                   help="monitoring window (default 600000)")
    p.add_argument("--key-field", default=None, help="partition by this record field (default random)")
    p.add_argument("--batch-size", type=int_flag("an integer >= 1"), default=50,
                   help="events per send call / producer batch")
    p.add_argument("--schema", default=None,
                   help="example schema: page_view, click, service_metric (default: by topic name)")
    p.add_argument("--service", default="loadgen", help="header.service of the events")
    p.add_argument("--seed", type=int_flag("an integer"), default=None, help="random seed (reproducible events)")
    p.add_argument("--config", default=None, help="properties file with producer and event keys")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--close-timeout", type=float_flag("seconds >= 0"), default=30.0,
                   help="seconds the end may take: sending what is queued, publishing monitoring events; what "
                        "is still unsent then is counted failed or unpublished (default 30)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_produce)


def _registry_start(args: argparse.Namespace) -> int:
    from ingest.events.registry import SchemaRegistry  # deferred: imports fastavro (and the server waitress)
    from ingest.events.registry_server import RegistryServer

    level = args.compatibility.upper()
    if level not in compatibility.LEVELS:
        raise ConfigError(f"--compatibility {args.compatibility!r} is not one of {', '.join(compatibility.LEVELS)}")
    config = REGISTRY_CONFIG.load(args.config, parse_overrides(args.set))
    tls, host, port = _listener(args, config["listeners"])
    if config["authentication.method"] == "BASIC" and not tls and host not in ("127.0.0.1", "::1", "localhost"):
        log.warning("authentication.method=BASIC on a plain http listener (%s): passwords cross the network in "
                    "clear; serve https (listeners=https://..., ssl.keystore.location)", host)
    store = ZooKeeperStore(args.zk, security=ZkSecurity.from_config(config)) if args.zk else DirectoryStore(args.store)
    try:
        server = RegistryServer(SchemaRegistry(store, level), host, port, config, tls=tls)
    except BaseException:
        store.close()
        raise

    def _stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    where = f"ZooKeeper {args.zk}" if args.zk else f"directory {args.store}"
    print(f"schema registry listening on {server.url} (store: {where})", flush=True)
    log.info("schema registry listening on %s (store: %s)", server.url, where)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def _listener(args: argparse.Namespace, listeners: str) -> tuple[bool, str, int]:
    """(TLS?, host, port) from Confluent's ``listeners`` key or from ``--host``/``--port``."""
    if listeners:
        if args.port is not None or args.host is not None:
            raise ConfigError(f"listeners={listeners} and --host/--port both name the address: give one of them")
        scheme, _, address = listeners.partition("://")
        host, _, port = address.rpartition(":")
        port_number = _port(port) if port != "0" else 0
        if port_number is None:
            raise ConfigError(f"listeners={listeners}: the port must be 0-65535")
        return scheme == "https", host.strip("[]") or "0.0.0.0", port_number
    if args.port is None:
        raise ConfigError("give --port PORT (0 picks a free one), or listeners=http(s)://HOST:PORT in --config/--set")
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port}: allowed is a TCP port 0-65535 (0 picks a free one)")
    return False, args.host or "127.0.0.1", args.port


def _registry_passwd(args: argparse.Namespace) -> int:
    path = Path(args.file)
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    kept = [line for line in lines if line.split(":", 1)[0].strip() != args.user]
    if not args.remove:
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise ConfigError("the password is read from the first line of stdin, and it is empty")
        roles = tuple(r.strip() for r in args.roles.split(",") if r.strip())
        kept.append(user_line(args.user, password, roles))
    # a new file renamed over the old one: a registry reading it again sees the old file or the new, never half
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in kept))
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    print(f"{'removed' if args.remove else 'wrote'} user {args.user} in {path}")
    return 0


def resolve_broker_list(text: str) -> str:
    """``host:port`` entries get their broker id from the broker's METADATA answer."""
    out = []
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        parts = entry.split(":")
        if len(parts) == 3:
            out.append(entry)
        elif len(parts) == 2 and _port(parts[1]) is not None:
            with SimpleConsumer(parts[0], _port(parts[1]), timeout_s=10.0) as c:
                broker_id = c.metadata().broker_id
            out.append(f"{broker_id}:{parts[0]}:{parts[1]}")
        else:
            raise ConfigError(f"--brokers entry {entry!r} is not host:port or id:host:port{non_ascii_note(entry)}")
    return ",".join(out)


def _port(text: str) -> int | None:
    """A TCP port 1-65535 written with ASCII digits, else None."""
    try:
        port = parse_int(text)
    except ValueError:
        return None
    return port if 0 < port < 65536 else None


def _produce(args: argparse.Namespace) -> int:
    # deferred: these import fastavro (and the producer kazoo)
    from ingest.events.event_producer import EventProducer
    from ingest.events.loadgen import EventGenerator
    from ingest.events.schemas import load_schema, schema_for_topic

    if args.count < 0:
        raise ConfigError(f"--count {args.count} must be >= 0")
    if args.batch_size < 1:
        raise ConfigError(f"--batch-size {args.batch_size} must be >= 1")
    if not args.rate >= 0:  # also refuses nan
        raise ConfigError(f"--rate {args.rate:g}: allowed is events per second >= 0 (0 = as fast as possible)")
    if args.key_field:
        # refuse before connecting or sending anything: a usage error, not a failed run
        default_audit = "audit-monitoring" if not args.audit_topic else args.audit_topic
        schema_name = args.schema or schema_for_topic(args.topic, default_audit)
        fields = [f["name"] for f in load_schema(schema_name)["fields"]]
        if args.key_field not in fields:
            raise ConfigError(f"--key-field {args.key_field!r} is not a field of schema {schema_name}; "
                              f"allowed: {', '.join(fields)}")
    raw: dict[str, Any] = dict(read_properties(args.config)) if args.config else {}
    raw.update(parse_overrides(args.set))
    event_keys, producer_keys = split_config(raw)
    if not (args.brokers or args.zk or args.bootstrap_server):
        raise ConfigError("give --brokers host:port,..., --zk host:port[/chroot] or --bootstrap-server host:port,... "
                          "(Kafka listeners, for Kafka-format topics)")
    if args.brokers:
        producer_keys["broker.list"] = resolve_broker_list(args.brokers)
    elif args.zk:
        producer_keys["zk.connect"] = args.zk
    if args.bootstrap_server:
        producer_keys["bootstrap.servers"] = args.bootstrap_server
    producer_keys.setdefault("producer.type", "async")
    producer_keys.setdefault("batch.size", args.batch_size)
    producer_keys.setdefault("queue.time", 100)
    if args.audit_topic:
        event_keys["audit.topic"] = args.audit_topic
    if args.window_ms:
        event_keys["monitoring.window.ms"] = args.window_ms
    event_keys.setdefault("service.name", args.service)

    schema_name = args.schema or schema_for_topic(args.topic, event_keys.get("audit.topic", "audit-monitoring"))
    try:
        gen = EventGenerator(schema_name, seed=args.seed)
    except ValueError as exc:  # names the schema and the ones that have a generator
        raise ConfigError(f"--schema: {exc}") from exc
    event_keys["schema.registry.url"] = args.registry  # with the config's basic.auth.* and schema.registry.ssl.*
    ep = EventProducer(producer_keys, None, config=event_keys, topics=[args.topic])
    ep.register_topic(args.topic, load_schema(schema_name))
    clock = SYSTEM_CLOCK
    started = clock.monotonic()
    last_progress = started
    sent = 0
    try:
        while sent < args.count:
            n = min(args.batch_size, args.count - sent)
            records = gen.batch(n)
            if args.key_field:
                for r in records:  # one send call per key keeps each key on its partition
                    if args.key_field not in r:
                        raise ConfigError(f"--key-field {args.key_field!r} is not a field of {schema_name}; "
                                          f"fields: {', '.join(r)}")
                    ep.send(args.topic, r, key=str(r[args.key_field]))
            else:
                ep.send(args.topic, records)
            sent += n
            if args.rate > 0:
                ahead = sent / args.rate - (clock.monotonic() - started)
                if ahead > 0:
                    clock.sleep(ahead)
            now = clock.monotonic()
            if now - last_progress >= PROGRESS_EVERY_S:
                last_progress = now
                st = ep.stats()
                print(f"progress: sent {sent}/{args.count} ({100.0 * sent / max(1, args.count):.0f}%), "
                      f"acked {st['acked']}, failed {st['failed']}, {sent / (now - started):.0f} events/s",
                      file=sys.stderr, flush=True)
    except IngestError as exc:
        log.error("stopped after %d events: %s", sent, exc)
    finally:
        stats = ep.close(timeout_s=args.close_timeout)
    elapsed = max(1e-9, clock.monotonic() - started)
    summary = {
        "topic": args.topic, "schema": schema_name, "session": ep.session,
        "sent": stats["attempted"], "acknowledged": stats["acked"], "failed": stats["failed"],
        "bytes_acknowledged": stats["bytes_acked"], "seconds": round(elapsed, 3),
        "rate_per_s": round(stats["attempted"] / elapsed, 1),
        "monitoring_published": stats["monitoring_published"],
        "monitoring_pending": stats["monitoring_pending"], "monitoring_dropped": stats["monitoring_dropped"],
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"sent {summary['sent']}, acknowledged {summary['acknowledged']}, failed {summary['failed']}, "
              f"{summary['rate_per_s']} events/s over {summary['seconds']} s; monitoring events published "
              f"{summary['monitoring_published']}, unpublished {summary['monitoring_pending']}, "
              f"dropped {summary['monitoring_dropped']} (session {ep.session})")
    ok = (stats["acked"] == args.count and stats["failed"] == 0
          and stats["monitoring_pending"] == 0 and stats["monitoring_dropped"] == 0)
    return 0 if ok else 1

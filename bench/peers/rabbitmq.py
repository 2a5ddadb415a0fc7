"""RabbitMQ for the peer benchmark: an unprivileged loopback node, and pika producer/consumer loops.

Server: Debian's ``rabbitmq-server`` run as the ``rabbitmq`` user (``runuser -u rabbitmq``) with
its node name, ports, Mnesia and log directories of its own under a temporary directory owned
by ``rabbitmq``. The node's Erlang port mapper (``epmd``) is started first, by the benchmark, on
a port of its own (``ERL_EPMD_PORT``), so that it is the benchmark's child and is stopped by its
PID like ``beam.smp`` (an ``epmd`` the node started itself would outlive it, daemonized).

Client: pika 1.x, the client of RabbitMQ's own Python tutorials. Messages are persistent
(``delivery_mode=2``) into a durable classic queue on the default exchange, as the paper's
RabbitMQ producer published. AMQP 0-9-1 has no producer batch; a "batch" here is the group of
publishes after which the producer waits for the broker's publisher confirms (RabbitMQ's
"publishing messages in batches" strategy), with pika's asynchronous ``SelectConnection``; or
the group is an AMQP transaction (``tx_select``, ``tx_commit`` per group).
The consumer is ``basic_consume`` with ``basic_qos(prefetch_count=1000)`` and one
``basic_ack(multiple=True)`` per 1,000 messages.
"""
from __future__ import annotations

import logging
import os
import pwd
import subprocess
import tempfile
import time
from pathlib import Path

from bench.peers.process import PeerStartError, ServerGroup, command_name, descendants, free_port, wait_listening

log = logging.getLogger(__name__)

PREFETCH = 1000
RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
EPMD = "/usr/bin/epmd"


class RabbitMQ:
    """One RabbitMQ node on 127.0.0.1; ``server.pids`` are ``beam.smp`` and ``epmd``."""

    name = "RabbitMQ"

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="bench-peers-rabbitmq-"))
        self.port = free_port()
        self.server = ServerGroup("rabbitmq")
        self.version = _version()

    def start(self, timeout: float = 60.0) -> "RabbitMQ":
        user = pwd.getpwnam("rabbitmq")
        for sub in ("", "mnesia", "log"):
            (self.dir / sub).mkdir(exist_ok=True)
            os.chown(self.dir / sub, user.pw_uid, user.pw_gid)
        epmd_port, dist_port = free_port(), free_port()
        env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(self.dir), "LANG": "C.UTF-8",
               "ERL_EPMD_PORT": str(epmd_port)}
        epmd = self.server.popen(["runuser", "-u", "rabbitmq", "--", EPMD, "-port", str(epmd_port),
                                  "-address", "127.0.0.1"], self.dir / "epmd.out", env=env, cwd="/")
        wait_listening(epmd_port, epmd, 10, self.dir / "epmd.out")
        env.update({
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1", "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(dist_port), "RABBITMQ_NODENAME": f"bench{self.port}@localhost",
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"), "RABBITMQ_LOG_BASE": str(self.dir / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq"),  # absent: defaults
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
        })
        node = self.server.popen(["runuser", "-u", "rabbitmq", "--", RABBITMQ_SERVER],
                                 self.dir / "server.out", env=env, cwd="/")
        try:
            wait_listening(self.port, node, timeout, self.dir / "server.out")
        finally:
            self._adopt(epmd.pid, node.pid)
        if not any(command_name(p) == "beam.smp" for p in self.server.pids):
            raise PeerStartError(f"no beam.smp under runuser pid {node.pid}")
        return self

    def _adopt(self, epmd_runuser: int, node_runuser: int) -> None:
        # The work is done by beam.smp; epmd, erl_child_setup and its helpers are owned too so
        # that stop() ends them by PID. beam.smp first: SIGTERM to it is the graceful node stop.
        tree = descendants(node_runuser)
        for pid in sorted(tree, key=lambda p: command_name(p) != "beam.smp"):
            self.server.adopt(pid)
        for pid in descendants(epmd_runuser):
            self.server.adopt(pid)

    def server_cpu(self) -> float:
        return self.server.cpu_seconds()

    def stop(self) -> list[int]:
        return self.server.stop()

    def parameters(self):
        import pika  # test extra: imported only when RabbitMQ is benchmarked, so --only ours runs without it
        return pika.ConnectionParameters("127.0.0.1", self.port, heartbeat=0, blocked_connection_timeout=300)

    def declare(self, queue: str) -> None:
        import pika  # see parameters
        with pika.BlockingConnection(self.parameters()) as conn:
            ch = conn.channel()
            ch.queue_declare(queue, durable=True)
            ch.queue_purge(queue)

    def queued(self, queue: str) -> int:
        """Messages ready in ``queue`` now (a passive declare's count)."""
        import pika  # see parameters
        with pika.BlockingConnection(self.parameters()) as conn:
            return conn.channel().queue_declare(queue, passive=True).method.message_count

    def produce(self, queue: str, msgs: list[bytes], batch: int, mode: str) -> float:
        """Publish ``msgs``. ``mode``: "none" (no confirms), "ack" (wait for the publisher confirms
        after every ``batch``), "tx" (``tx_select``; ``tx_commit`` after every ``batch``)."""
        self.declare(queue)
        if mode == "none":
            return self._publish_unconfirmed(queue, msgs)
        if mode == "ack":
            return self._publish_confirmed(queue, msgs, batch)
        if mode == "tx":
            return self._publish_transacted(queue, msgs, batch)
        raise ValueError(f"mode {mode!r}: allowed are none, ack, tx")

    def _publish_transacted(self, queue: str, msgs: list[bytes], batch: int) -> float:
        import pika  # see parameters
        props = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
        with pika.BlockingConnection(self.parameters()) as conn:
            ch = conn.channel()
            ch.tx_select()
            t0 = time.perf_counter()
            for i in range(0, len(msgs), batch):
                for m in msgs[i:i + batch]:
                    ch.basic_publish("", queue, m, props)
                ch.tx_commit()
            return time.perf_counter() - t0

    def _publish_unconfirmed(self, queue: str, msgs: list[bytes]) -> float:
        import pika  # see parameters
        props = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
        with pika.BlockingConnection(self.parameters()) as conn:
            ch = conn.channel()
            t0 = time.perf_counter()
            for m in msgs:
                ch.basic_publish("", queue, m, props)
            conn.process_data_events(0)
            return time.perf_counter() - t0

    def _publish_confirmed(self, queue: str, msgs: list[bytes], batch: int) -> float:
        import pika  # see parameters
        props = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
        state = {"next": 0, "tag": 0, "outstanding": set(), "error": None, "t0": 0.0, "t1": 0.0}

        def on_open(conn):
            conn.channel(on_open_callback=on_channel)

        def on_channel(ch):
            state["ch"] = ch
            ch.confirm_delivery(on_confirm, callback=lambda _frame: start())

        def start():
            state["t0"] = time.perf_counter()
            publish_batch()

        def publish_batch():
            i = state["next"]
            if i >= len(msgs):
                state["t1"] = time.perf_counter()
                conn.close()
                return
            ch = state["ch"]
            for m in msgs[i:i + batch]:
                ch.basic_publish("", queue, m, props)
                state["tag"] += 1
                state["outstanding"].add(state["tag"])
            state["next"] = i + batch

        def on_confirm(frame):
            method = frame.method
            if method.NAME != "Basic.Ack":
                state["error"] = f"broker answered {method.NAME} for delivery tag {method.delivery_tag}"
                conn.close()
                return
            out = state["outstanding"]
            if method.multiple:
                out.difference_update([t for t in out if t <= method.delivery_tag])
            else:
                out.discard(method.delivery_tag)
            if not out:
                publish_batch()

        def on_close(c, reason):
            c.ioloop.stop()

        def on_open_error(c, err):
            state["error"] = f"connection failed: {err}"
            c.ioloop.stop()

        conn = pika.SelectConnection(self.parameters(), on_open_callback=on_open,
                                     on_open_error_callback=on_open_error, on_close_callback=on_close)
        conn.ioloop.start()
        if state["error"] or state["t1"] == 0.0:
            raise RuntimeError(f"RabbitMQ confirmed publish failed: {state['error'] or 'stopped early'}")
        return state["t1"] - state["t0"]

    def consume(self, queue: str, count: int, keep: bool = False) -> tuple[float, int, int, list[bytes]]:
        """Read ``count`` messages: (seconds, messages, payload bytes, payloads if ``keep``)."""
        import pika  # see parameters
        got = {"n": 0, "bytes": 0}
        kept: list[bytes] = []
        with pika.BlockingConnection(self.parameters()) as conn:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=PREFETCH)

            def on_message(ch, method, _props, body):
                got["n"] += 1
                got["bytes"] += len(body)
                if keep:
                    kept.append(body)
                if got["n"] % PREFETCH == 0 or got["n"] == count:
                    ch.basic_ack(method.delivery_tag, multiple=True)
                if got["n"] == count:
                    ch.stop_consuming()

            t0 = time.perf_counter()
            ch.basic_consume(queue, on_message, auto_ack=False)
            ch.start_consuming()
            elapsed = time.perf_counter() - t0
        return elapsed, got["n"], got["bytes"], kept


def _version() -> str:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"], capture_output=True,
                             text=True, timeout=10).stdout
        return out.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"

"""ActiveMQ for the peer benchmark: a loopback STOMP-only broker, and stomp.py producer/consumer loops.

Server: Debian's ``activemq`` (5.17), started as ``java -jar /usr/share/activemq/bin/activemq.jar
start xbean:file:DIR/conf/activemq.xml`` with a configuration written here: one STOMP connector on
127.0.0.1 with TCP_NODELAY (no OpenWire, no web console, no JMX), persistent KahaDB store under the
temporary directory, journal synced to disk periodically (``journalDiskSyncStrategy="periodic"``,
every second) -- the paper configured every broker to flush to its store asynchronously, as this
product's broker does (every 10,000 messages or 1 s) --, and at most 128 MB of messages cached in
memory, the rest only in the store, without producer flow control (with the default, 70% of
Debian's 512 MB heap, the broker ran out of heap after 250,000 queued messages; with the 128 MB
limit and flow control on, it held the producer -- no receipt within 60 s -- once 200,000
unconsumed messages were queued). The ``java`` process is the benchmark's child and is stopped by its PID.

Client: stomp.py, the most used Python client that speaks a protocol Debian's ActiveMQ serves
(its package ships the STOMP transport but not the AMQP one; OpenWire has no maintained Python
client). Messages are sent with ``persistent:true``. STOMP has no producer batch; an acknowledged
"batch" of 50 is 50 SENDs of which the last carries a receipt the producer waits for (the broker
handles a connection's frames in order), and a transacted one is BEGIN, 50 SENDs, COMMIT with a
receipt; batch 1 acknowledged is a SEND with a receipt. The consumer subscribes with ``ack:client`` (cumulative) and
``activemq.prefetchSize:1000`` and acknowledges every 100th message (see ``ACK_EVERY``).
"""
from __future__ import annotations

import logging
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from bench.peers.process import ServerGroup, free_port, wait_listening

log = logging.getLogger(__name__)

PREFETCH = 1000
# Measured with ack:client and prefetch 1000 (5,000 queued messages): a cumulative ACK every 100
# messages reads them all in ~1.2 s; every 1,000 or 500 the broker stops dispatching after 1,400 or
# 4,359 messages and resumes only ~1 s later or never. So this consumer acknowledges every 100th
# message (still one ACK frame per 100 messages, cumulative).
ACK_EVERY = 100
# TCP_NODELAY on both ends: Nagle's algorithm on a STOMP connection holds the last frame of a burst
# (the 50th SEND, the COMMIT) until the other end's delayed ACK (~40 ms). Measured: 932 msg/s for
# receipted batches of 50 without it (one batch per ~50 ms). ActiveMQ's transport.tcpNoDelay is off
# by default and stomp.py never sets it; pika sets it itself, as this product's client does for
# request/response connections.
ACTIVEMQ_HOME = "/usr/share/activemq"

CONFIG = """<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <bean class="org.springframework.beans.factory.config.PropertyPlaceholderConfigurer"/>
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="bench" useJmx="false"
          persistent="true" advisorySupport="false" dataDirectory="${activemq.data}">
    <destinationPolicy><policyMap><policyEntries>
      <policyEntry queue=">" producerFlowControl="false"/>
    </policyEntries></policyMap></destinationPolicy>
    <systemUsage><systemUsage>
      <memoryUsage><memoryUsage limit="128 mb"/></memoryUsage>
    </systemUsage></systemUsage>
    <persistenceAdapter>
      <kahaDB directory="${activemq.data}/kahadb" journalDiskSyncStrategy="periodic"
              journalDiskSyncInterval="1000"/>
    </persistenceAdapter>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:${bench.stomp.port}?transport.tcpNoDelay=${bench.nodelay}"/>
    </transportConnectors>
  </broker>
</beans>
"""


class ActiveMQ:
    """One ActiveMQ broker with a STOMP connector on 127.0.0.1; ``server.pids`` is its ``java``."""

    name = "ActiveMQ"

    def __init__(self, nodelay: bool = True) -> None:
        #: TCP_NODELAY on both ends (see the note above ``CONFIG``)
        self.nodelay = nodelay
        self.dir = Path(tempfile.mkdtemp(prefix="bench-peers-activemq-"))
        self.port = free_port()
        self.server = ServerGroup("activemq")
        self.version = _version()

    def start(self, timeout: float = 90.0) -> "ActiveMQ":
        conf, data = self.dir / "conf", self.dir / "data"
        conf.mkdir(exist_ok=True)
        data.mkdir(exist_ok=True)
        (conf / "activemq.xml").write_text(CONFIG)
        argv = ["java", "-Xms512M", "-Xmx512M",
                f"-Dactivemq.home={ACTIVEMQ_HOME}", f"-Dactivemq.base={self.dir}",
                f"-Dactivemq.conf={conf}", f"-Dactivemq.data={data}", f"-Dbench.stomp.port={self.port}",
                f"-Dbench.nodelay={'true' if self.nodelay else 'false'}",
                "-jar", f"{ACTIVEMQ_HOME}/bin/activemq.jar", "start", f"xbean:file:{conf}/activemq.xml"]
        proc = self.server.popen(argv, self.dir / "server.out", cwd=str(self.dir))
        self.server.adopt(proc.pid)
        wait_listening(self.port, proc, timeout, self.dir / "server.out")
        return self

    def server_cpu(self) -> float:
        return self.server.cpu_seconds()

    def stop(self) -> list[int]:
        return self.server.stop()

    def connect(self, listener):
        import stomp  # test extra: imported only when ActiveMQ is benchmarked, so --only ours runs without it
        conn = stomp.Connection11([("127.0.0.1", self.port)], auto_decode=False, heartbeats=(0, 0))
        conn.set_listener("bench", listener)
        conn.connect(wait=True)
        if self.nodelay:
            conn.transport.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def produce(self, queue: str, msgs: list[bytes], batch: int, mode: str) -> float:
        """Send ``msgs`` persistently. ``mode``: "none" (no receipt), "ack" (the last SEND of every
        ``batch`` carries a receipt the producer waits for), "tx" (a transaction per ``batch``,
        COMMIT with a receipt)."""
        listener = _Receipts()
        conn = self.connect(listener)
        dest = f"/queue/{queue}"
        persistent = {"persistent": "true"}
        try:
            t0 = time.perf_counter()
            if mode == "none":
                for m in msgs:
                    conn.send(dest, m, headers=persistent)
                # the broker handles a connection's frames in order: once this receipt is back,
                # every SEND before it has been processed (an empty transaction, aborted)
                listener.wait(lambda r: conn.begin("bench-end", headers={"receipt": r}))
                conn.abort("bench-end")
            elif mode == "ack":
                for i in range(0, len(msgs), batch):
                    group = msgs[i:i + batch]
                    for m in group[:-1]:
                        conn.send(dest, m, headers=persistent)
                    listener.wait(lambda r, m=group[-1]: conn.send(dest, m, headers={**persistent, "receipt": r}))
            elif mode == "tx":
                for i in range(0, len(msgs), batch):
                    tx = conn.begin()
                    for m in msgs[i:i + batch]:
                        conn.send(dest, m, headers={**persistent, "transaction": tx})
                    listener.wait(lambda r, tx=tx: conn.commit(tx, headers={"receipt": r}))
            else:
                raise ValueError(f"mode {mode!r}: allowed are none, ack, tx")
            return time.perf_counter() - t0
        finally:
            conn.disconnect()

    def consume(self, queue: str, count: int, keep: bool = False) -> tuple[float, int, int, list[bytes]]:
        """Read ``count`` messages: (seconds, messages, payload bytes, payloads if ``keep``)."""
        listener = _Consumer(count, keep)
        conn = self.connect(listener)
        listener.conn = conn
        try:
            t0 = time.perf_counter()
            conn.subscribe(f"/queue/{queue}", id="1", ack="client",
                           headers={"activemq.prefetchSize": str(PREFETCH)})
            if not listener.done.wait(timeout=max(60.0, count / 500)):
                raise RuntimeError(f"ActiveMQ consumer got {listener.n} of {count} messages")
            elapsed = time.perf_counter() - t0
            if listener.error:
                raise RuntimeError(listener.error)
            conn.unsubscribe(id="1")
        finally:
            conn.disconnect()
        return elapsed, listener.n, listener.bytes, listener.kept


class _Receipts:
    """stomp.py listener that lets the producer wait for one RECEIPT frame at a time."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.got: set[str] = set()
        self.error: str | None = None
        self.seq = 0

    def wait(self, send, timeout: float = 60.0) -> None:
        """Call ``send(receipt_id)`` and wait for that receipt (or an ERROR frame)."""
        self.seq += 1
        rid = f"r{self.seq}"
        send(rid)
        with self.cond:
            if not self.cond.wait_for(lambda: rid in self.got or self.error, timeout):
                raise RuntimeError(f"ActiveMQ: no receipt {rid} in {timeout:.0f} s")
            if self.error:
                raise RuntimeError(f"ActiveMQ error frame: {self.error}")
            self.got.discard(rid)

    def on_receipt(self, frame) -> None:
        with self.cond:
            self.got.add(frame.headers.get("receipt-id"))
            self.cond.notify_all()

    def on_error(self, frame) -> None:
        with self.cond:
            self.error = f"{frame.headers.get('message')}: {frame.body!r}"
            self.cond.notify_all()


class _Consumer:
    """stomp.py listener that counts deliveries and acknowledges every ``ACK_EVERY``-th (cumulative)."""

    def __init__(self, count: int, keep: bool) -> None:
        self.count, self.keep = count, keep
        self.n = self.bytes = 0
        self.kept: list[bytes] = []
        self.done = threading.Event()
        self.conn = None
        self.error: str | None = None

    def on_message(self, frame) -> None:
        self.n += 1
        self.bytes += len(frame.body)
        if self.keep:
            self.kept.append(frame.body)
        if self.n % ACK_EVERY == 0 or self.n == self.count:
            self.conn.ack(frame.headers["message-id"], "1")  # STOMP 1.1: cumulative in ack:client mode
        if self.n == self.count:
            self.done.set()

    def on_error(self, frame) -> None:
        self.error = f"ActiveMQ error frame: {frame.headers.get('message')}"
        self.done.set()


def _version() -> str:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "activemq"], capture_output=True,
                             text=True, timeout=10).stdout
        return out.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"

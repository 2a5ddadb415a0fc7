"""Refused PRODUCE and MULTIPRODUCE requests: logged once per connection, counted, summarized.

Kafka 0.7's PRODUCE and MULTIPRODUCE have no response, so a client is never
told that its messages were refused (a bad CRC, an unknown magic, a message
too large). Kafka 0.7 itself logs the error and closes the socket; a closed
socket loses the client's next request silently too. This broker instead:

- keeps the connection and serves the next request on it when the refusal is
  about the request's own content (bad message, bad topic or partition: the
  frame boundary is intact), and closes it when the refusal is about where the
  partition is served (not the leader, the log offline, disk full): the next
  request would be dropped the same way, and a closed connection is the one
  signal that makes a fire-and-forget client re-discover, as Kafka does for
  acks=0 (the decision is the handlers', ``handlers.KEEP_CONNECTION_AFTER``);
- logs the FIRST refusal on each connection at WARNING, naming the client's
  address, the request and the reason (the error code and its message);
- counts every refusal, per connection and broker-wide, by reason (``"<REQUEST>
  <ERROR_CODE>"``, e.g. ``"PRODUCE INVALID_MESSAGE"``);
- when a connection that had refusals closes, logs one summary line at WARNING
  with its counts by reason and the broker-wide totals since start.

So a client that sends thousands of bad requests on one connection costs two
log lines. Both lines go through a :class:`~ingest.ratelimited_log.RateLimitedLog`
keyed by client host and reason: a flood of connections from one host that
each repeat the same refusal within 30 s (a fuzzer, a hostile client) gets
one line per 30 s with the count of the others, so refusals cannot fill the
disk; the counts themselves are exact. The broker-wide totals are
:meth:`ProduceRefusals.totals`.

Thread-safety: every method may be called from any network thread (one lock).
"""
from __future__ import annotations

import logging
import threading
from collections import Counter

from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

LOG_INTERVAL_S = 30.0
"""Across connections of one host: at most one line per reason per interval (module doc)."""


def _fmt(counts: Counter) -> str:
    return ", ".join(f"{reason}: {n}" for reason, n in sorted(counts.items())) or "none"


class ProduceRefusals:
    """Per-connection and broker-wide counts of refused responseless requests (module doc)."""

    def __init__(self) -> None:
        self._log = RateLimitedLog(log, interval_s=LOG_INTERVAL_S)
        self._lock = threading.Lock()
        self._by_connection: dict[str, Counter] = {}
        self._totals: Counter = Counter()

    def refused(self, client: str, request: str, code: str, message: str, *, closing: bool = False) -> None:
        """Count one refusal of ``request`` (``PRODUCE``/``MULTIPRODUCE``) on the connection from
        ``client`` (``host:port``); the first on a connection is logged at WARNING. ``closing``:
        the connection is closed after this refusal (said in the line)."""
        reason = f"{request} {code}"
        with self._lock:
            counts = self._by_connection.setdefault(client, Counter())
            first = not counts
            counts[reason] += 1
            self._totals[reason] += 1
        if first:
            then = ("the connection is closed, so that the client re-discovers the partition" if closing else
                    "the connection stays open, further refusals on it are counted and summarized when it closes")
            self._log.warning(client, reason, "client %s: %s refused (%s): %s -- the protocol has no response for "
                              "it, so the client is not told; %s", client, request, code, message, then)

    def closed(self, client: str) -> None:
        """The connection from ``client`` closed: log its summary if it had refusals."""
        with self._lock:
            counts = self._by_connection.pop(client, None)
            totals = Counter(self._totals) if counts else None
        if counts:
            self._log.warning(client, "produce refusals summary", "client %s: connection closed after %d refused "
                              "produce request(s) (%s); broker-wide since start: %s",
                              client, sum(counts.values()), _fmt(counts), _fmt(totals))

    def on_connection(self, client: str) -> dict[str, int]:
        """Refusals by reason on the open connection from ``client``."""
        with self._lock:
            return dict(self._by_connection.get(client, {}))

    def totals(self) -> dict[str, int]:
        """Refusals by reason since the broker started (every connection)."""
        with self._lock:
            return dict(self._totals)

"""SASL authentication on a Kafka listener (KIP-43, KIP-152): the exchange of one connection, as Kafka's
``SaslServerAuthenticator`` runs it.

On a SASL listener (SASL_PLAINTEXT, SASL_SSL) a new connection's :class:`~ingest.broker.kafka.session.Session`
carries a :class:`SaslExchange`. Until it completes, the dispatcher serves only:

- ApiVersions (answered as usual, listing every API as Kafka does);
- SaslHandshake (17): the mechanism must be enabled (``sasl.enabled.mechanisms``), else
  UNSUPPORTED_SASL_MECHANISM (33) with the enabled ones, and the connection is closed. After a v1
  handshake each token comes in a SaslAuthenticate request; after v0, as a bare size-prefixed frame
  answered the same way (Kafka's pre-KIP-152 form);
- SaslAuthenticate (36): the mechanism's next token. A failure is answered SASL_AUTHENTICATION_FAILED
  (58) with Kafka's message, counted (``ingest_broker_sasl_authentications{result="failure"}``), logged
  rate-limited, and the connection is closed. As in Kafka, that answer (and an unsupported mechanism's)
  is sent ``connection.failed.authentication.delay.ms`` (100) after the failure, the connection held
  meanwhile: a client cannot try passwords in a tight loop.

A frame larger than ``sasl.server.max.receive.size`` (512 KiB) before authentication is refused by the
network layer and the connection closed, as Kafka does. Any other request before authentication closes
the connection unanswered (Kafka: "Unexpected Kafka
request of type ... during SASL handshake"); after the handshake it is answered ILLEGAL_SASL_STATE (34)
and then closed. Once authenticated the principal is ``User:<username>``; SaslHandshake and
SaslAuthenticate are then answered ILLEGAL_SASL_STATE (Kafka's ``KafkaApis``), as on any non-SASL
listener.

Mechanisms: SCRAM-SHA-256 and SCRAM-SHA-512 (:mod:`ingest.wire.scram`) against the users' stored
credentials (:mod:`ingest.broker.kafka.scram_users`), and PLAIN, whose password is checked against the
same stored SCRAM credentials (no cleartext password is stored anywhere). A token larger than
``MAX_TOKEN_BYTES`` is refused before it is parsed.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ingest.broker.delayed import DelayedOp
from ingest.broker.reply import Reply

from ingest.errors import SaslAuthenticationError
from ingest.ratelimited_log import RateLimitedLog
from ingest.wire import scram

log = logging.getLogger(__name__)

PLAIN = "PLAIN"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
"""The mechanisms this broker implements (Kafka's GSSAPI and OAUTHBEARER are not)."""
MAX_TOKEN_BYTES = scram.MAX_TOKEN_BYTES
FAILURE_LOG_INTERVAL_S = 30.0

HANDSHAKE, AUTHENTICATE, DONE, FAILED = "handshake", "authenticate", "done", "failed"


def parse_mechanisms(text: str) -> tuple[str, ...]:
    """``sasl.enabled.mechanisms`` as a tuple; ValueError naming an unknown mechanism."""
    out = tuple(m.strip().upper() for m in str(text).split(",") if m.strip())
    unknown = [m for m in out if m not in MECHANISMS]
    if unknown:
        raise ValueError(f"mechanism(s) {unknown} are not implemented: allowed are {list(MECHANISMS)}")
    if not out:
        raise ValueError(f"no mechanism enabled: name at least one of {list(MECHANISMS)}")
    return out


class PlainServer:
    """SASL/PLAIN (RFC 4616) checked against the user's stored SCRAM credentials."""

    def __init__(self, users) -> None:
        self.users = users
        self.username: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise scram.refuse("PLAIN: the token is not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise scram.refuse(f"PLAIN: invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, username, password = parts
        if not username:
            raise scram.refuse("PLAIN: authentication failed: username not specified")
        if not password:
            raise scram.refuse("PLAIN: authentication failed: password not specified")
        self.username = username
        credentials = self.users.credentials(username)
        if not any(scram.password_matches(m, c, password) for m, c in sorted(credentials.items())):
            why = "unknown user" if not credentials else "wrong password"
            raise scram.refuse(f"PLAIN: user {username!r}: {why}", "Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise scram.refuse(f"PLAIN: user {username!r} asked for authorization id {authzid!r}",
                               "Authentication failed: Client requested an authorization id that is different from "
                               "username")
        self.complete = True
        return b""


@dataclass(slots=True)
class SaslExchange:
    """One connection's SASL state: the step it is at, the mechanism chosen, its server, the handshake version."""

    state: str = HANDSHAKE
    mechanism: str | None = None
    server: object | None = None
    handshake_version: int = 1
    max_receive_bytes: int = 524_288

    @property
    def complete(self) -> bool:
        return self.state == DONE

    @property
    def raw_tokens(self) -> bool:
        """After a v0 handshake the tokens come as bare frames, not SaslAuthenticate requests."""
        return self.state == AUTHENTICATE and self.handshake_version == 0


class NoUsers:
    """The users before ZooKeeper answered: nobody can log in yet."""

    def credential(self, name: str, mechanism: str):
        return None

    def credentials(self, name: str) -> dict:
        return {}


class SaslAuthenticator:
    """A listener's SASL mechanisms and the users they check (one per broker, shared by its SASL listeners).

    Args:
        mechanisms: ``sasl.enabled.mechanisms``.
        users: the :class:`~ingest.broker.kafka.scram_users.UserCache` (``credential``/``credentials``).
        metrics: the broker's metrics (``authenticated``).
    """

    def __init__(self, mechanisms: tuple[str, ...], metrics, users=None, *, purgatory=None,
                 failure_delay_ms: int = 100, max_receive_bytes: int = 524_288) -> None:
        self.mechanisms = mechanisms
        self.max_receive_bytes = max_receive_bytes
        self.purgatory = purgatory
        self.failure_delay_s = failure_delay_ms / 1000.0
        self.users = users if users is not None else NoUsers()
        """Replaced by the watched :class:`~ingest.broker.kafka.scram_users.UserCache` once ZooKeeper is up."""
        self.metrics = metrics
        self.failures = RateLimitedLog(log, interval_s=FAILURE_LOG_INTERVAL_S)

    def new_exchange(self) -> SaslExchange:
        return SaslExchange(max_receive_bytes=self.max_receive_bytes)

    def handshake(self, exchange: SaslExchange, mechanism: str, version: int) -> bool:
        """Start ``mechanism``; False (the exchange failed) when it is not enabled."""
        if mechanism not in self.mechanisms:
            exchange.state = FAILED
            return False
        exchange.mechanism = mechanism
        exchange.handshake_version = version
        users = self.users
        exchange.server = (PlainServer(users) if mechanism == PLAIN else
                           scram.ScramServer(mechanism, lambda name: users.credential(name, mechanism)))
        exchange.state = AUTHENTICATE
        return True

    def evaluate(self, session, token: bytes) -> bytes:
        """The answer to the client's next token; on completion the session's principal is set.

        Raises:
            SaslAuthenticationError: the exchange failed (the state is then FAILED); ``client_message``
                on it is Kafka's message for the client, if it has one of its own.
        """
        exchange: SaslExchange = session.sasl
        if exchange.state != AUTHENTICATE:
            raise scram.refuse(f"SaslAuthenticate in state {exchange.state}")
        try:
            if len(token) > MAX_TOKEN_BYTES:
                raise scram.refuse(f"{exchange.mechanism}: token of {len(token)} bytes is larger than "
                                   f"{MAX_TOKEN_BYTES}")
            answer = exchange.server.evaluate(token)
        except SaslAuthenticationError as exc:
            exchange.state = FAILED
            self.metrics.authenticated(session.listener, exchange.mechanism or "", False)
            self.failures.warning(session.client_host, f"{exchange.mechanism} failed",
                                  "client %s on listener %s: SASL authentication failed: %s; closing the connection",
                                  session.client, session.listener, exc)
            raise
        if exchange.server.complete:
            exchange.state = DONE
            session.principal = f"User:{exchange.server.username}"
            session.authenticated = True
            self.metrics.authenticated(session.listener, exchange.mechanism, True)
            log.debug("client %s on listener %s authenticated as %s with %s", session.client, session.listener,
                      session.principal, exchange.mechanism)
        return answer

    def refuse(self, parts: list) -> Reply:
        """The refusal ``parts``, sent after the failure delay, then the connection closed (Kafka's
        delayed close on a failed authentication); at once without a purgatory or a delay."""
        if self.purgatory is None or self.failure_delay_s <= 0:
            return Reply(parts, close_after=True)
        reply = Reply.deferred(hold=True)
        self.purgatory.add(("sasl-refused",), DelayedOp(time.monotonic() + self.failure_delay_s, lambda: False,
                                                        lambda: reply.complete(parts, close_after=True)))
        return reply

    @staticmethod
    def client_message(exc: SaslAuthenticationError, mechanism: str | None) -> str:
        """What the client is told: the mechanism's own message, or Kafka's generic one (never the reason:
        it could say whether the user exists)."""
        own = getattr(exc, "client_message", None)
        return own or ("Authentication failed during authentication due to invalid credentials with SASL "
                       f"mechanism {mechanism}")

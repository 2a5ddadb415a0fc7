"""The Kafka listener's dispatcher: request header, version check, one handler per API, response frames.

What the network layer (:mod:`ingest.broker.processor`) calls for every frame of a Kafka listener
connection. It behaves as Kafka's socket server and ``KafkaApis`` do:

- the request header (v0/v1/v2: KIP-482's tagged fields for flexible versions) is decoded, the
  correlation id echoed in a response header v0, or v1 for a flexible version (ApiVersions: always v0);
- an unknown api key, a version outside the advertised range, a header or body that does not decode:
  the connection is closed without a response (Kafka cannot parse the request either), except an
  ApiVersions request of a newer version than served, which is answered UNSUPPORTED_VERSION (35) in
  the v0 layout with ApiVersions' own range (KIP-511); a frame the network layer refuses (a bad size)
  is closed without a response too (:meth:`KafkaDispatcher.refusal`);
- a handler answers per partition (a Produce's bad batch, a Fetch's offset out of range), returns
  None for a response-less request (Produce acks=0), or a deferred reply (a Fetch waiting for data,
  an acks=-1 Produce waiting for the in-sync replicas) that keeps its place in the connection's
  response order; an error that escapes a handler (an :class:`~ingest.errors.IngestError`) is
  answered with the API's error response (every partition, or the whole answer, with its Kafka code);
  a bug is logged with its traceback and closes the connection;
- a connection of a SASL listener is served only ApiVersions and the SASL APIs until it authenticated
  (:mod:`ingest.broker.kafka.sasl`: anything else closes it, as Kafka's ``SaslServerAuthenticator``);
  every request's context carries the connection's :class:`~ingest.broker.kafka.session.Session`
  and so its principal;
- a request that needs ZooKeeper (auto-creating a cluster topic) raises
  :class:`~ingest.errors.NeedsZooKeeperError` before doing anything and is served again on the
  broker's coordination thread (:mod:`ingest.broker.coordinated`), holding its connection meanwhile.

Refusals are logged through a :class:`~ingest.ratelimited_log.RateLimitedLog` (the first per client
host and reason, then a count every 30 s). Thread-safety: no mutable state of its own; handlers run
concurrently on the network threads and the coordination thread.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from ingest.broker.kafka import versions
from ingest.broker.kafka.sasl import AUTHENTICATE, HANDSHAKE
from ingest.broker.kafka.session import SASL_PROTOCOLS, Session
from ingest.broker.reply import Reply
from ingest.errors import IngestError, MalformedRequestError, NeedsZooKeeperError, SaslAuthenticationError
from ingest.ratelimited_log import RateLimitedLog, client_host
from ingest.wire.errors import KafkaErrorCode, kafka_code
from ingest.wire.frames import SIZE
from ingest.wire.kafka.api_versions import ApiVersion, ApiVersionsResponse
from ingest.wire.kafka.apis import APIS, api_name
from ingest.wire.kafka.message import KafkaResponse, RequestHeader, decode_request_header, response_parts
from ingest.wire.tls import ANONYMOUS, principal_of

log = logging.getLogger(__name__)

REFUSAL_LOG_INTERVAL_S = 30.0
SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = 17, 36
BEFORE_AUTHENTICATION = {HANDSHAKE: frozenset({versions.API_VERSIONS_KEY, SASL_HANDSHAKE_KEY}),
                         AUTHENTICATE: frozenset({SASL_AUTHENTICATE_KEY})}
"""What a SASL listener's connection may ask in each step before it authenticated (Kafka's states)."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who asked what: the listener the request came in on, the client's address, its header, its session
    (whose principal is User:ANONYMOUS until the connection authenticates)."""

    listener: str
    client: str
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    session: Session | None = None

    @property
    def principal(self) -> str:
        """The connection's principal (``User:ANONYMOUS`` without a session)."""
        return ANONYMOUS if self.session is None else self.session.principal

    @property
    def host(self) -> str:
        """The client's address without its port (what an ACL's host is compared with)."""
        return client_host(self.client).strip("[]")

    def reply(self, response: KafkaResponse) -> Reply:
        """The reply frame of ``response`` at this request's version (file regions kept as regions)."""
        return Reply(response_parts(response, self.version, self.correlation_id))


Handler = Callable[[object, RequestContext], "KafkaResponse | Reply | None"]
ErrorAnswer = Callable[[object, int, RequestContext], "KafkaResponse | Reply | None"]


class KafkaDispatcher:
    """The Kafka listener's :class:`~ingest.broker.processor.Dispatcher` for one listener name.

    Args:
        listener: the listener's name (what Metadata answers with: each listener advertises its own).
        security_protocol: the listener's protocol (``listener.security.protocol.map``), kept in sessions.
        handlers: api key -> (handler, error answer): ``handler(request, ctx)``, and
            ``error(request, code, ctx)`` the response that answers every part of the request with ``code``.
        coordinated: the coordination thread's queue (ZooKeeper on), or None.
        security_protocol: the listener's protocol (``listener.security.protocol.map``), kept in sessions.
        sasl: the broker's :class:`~ingest.broker.kafka.sasl.SaslAuthenticator` (a SASL listener's).
    """

    frame_from_type = True

    def __init__(self, listener: str, handlers: dict[int, tuple[Handler, ErrorAnswer]], coordinated=None,
                 security_protocol: str = "PLAINTEXT", sasl=None) -> None:
        self.listener = listener
        self.security_protocol = security_protocol
        self.sasl = sasl if security_protocol in SASL_PROTOCOLS else None
        self.handlers = handlers
        self.coordinated = coordinated
        self.refusals = RateLimitedLog(log, interval_s=REFUSAL_LOG_INTERVAL_S)

    # --- the network layer's calls -----------------------------------------------------------

    def refusal(self, code) -> Reply:
        """A frame the network layer refused: Kafka's socket server closes such a connection, unanswered."""
        return Reply([], close_after=True)

    def new_session(self, client: str, peer_cert: dict | None) -> Session:
        """The session of a new connection from ``client`` (for TLS: after the handshake, with the verified
        client certificate as ``getpeercert()`` gives it, or None); a SASL listener's starts its SASL exchange."""
        principal = principal_of(peer_cert)
        session = Session(self.listener, self.security_protocol, client, principal, principal != ANONYMOUS)
        if self.sasl is not None:
            session.sasl = self.sasl.new_exchange()
        return session

    def dispatch(self, api_key: int, frame: memoryview, client: str, session: Session | None = None) -> Reply | None:
        if session is not None and session.authenticating and session.sasl.raw_tokens:
            return self._raw_token(frame, session)
        try:
            head = RequestHeader.decode_from(frame, 0, len(frame), 0)[0]   # key, version, correlation id
        except MalformedRequestError as exc:
            return self._close(client, "request header cut off", "client %s: %s; closing the connection", exc)
        version, corr = head.request_api_version, head.correlation_id
        api = APIS.get(api_key)
        if api is None or api_key not in self.handlers:
            return self._close(client, f"unknown api key {api_key}",
                               "client %s: unknown Kafka api key %d (served: %s); closing the connection, as Kafka"
                               " does", api_key, sorted(self.handlers))
        if not versions.supports(api_key, version):
            lo, hi = versions.SERVED[api_key]
            if api_key == versions.API_VERSIONS_KEY:
                # KIP-511: the broker's own range, error 35, in the v0 layout, header v0; the client retries
                self.refusals.log(logging.INFO, client, f"ApiVersions v{version}",
                                   "client %s: ApiVersions v%d is newer than served (%d-%d); answered "
                                   "UNSUPPORTED_VERSION with the served range", client, version, lo, hi)
                answer = ApiVersionsResponse(KafkaErrorCode.UNSUPPORTED_VERSION, (ApiVersion(api_key, lo, hi),))
                return Reply(response_parts(answer, 0, corr))
            return self._close(client, f"{api.name} v{version}",
                               "client %s: %s v%d is not served (versions %d-%d); closing the connection, as "
                               "Kafka does", api.name, version, lo, hi)
        try:
            header, pos = decode_request_header(api.request, frame)
            request = api.request.codec(version).decode_from(frame, pos, len(frame))[0]
        except MalformedRequestError as exc:
            return self._close(client, f"malformed {api.name}",
                               "client %s: malformed %s v%d request: %s; closing the connection, as Kafka does",
                               api.name, version, exc)
        ctx = RequestContext(self.listener, client, api_key, version, corr, header.client_id, session)
        handler, error = self.handlers[api_key]
        if session is not None and session.authenticating and \
                api_key not in BEFORE_AUTHENTICATION.get(session.sasl.state, ()):
            return self._unauthenticated(session, api.name, request, error, ctx)
        try:
            return self._answer(handler(request, ctx), ctx)
        except NeedsZooKeeperError:
            # raised before anything was done: the coordination thread serves the request again
            try:
                return self.coordinated.submit(lambda: self._serve(handler, error, request, ctx),
                                               lambda exc: self._refused(error, request, ctx, exc), len(frame))
            except IngestError as exc:
                return self._refused(error, request, ctx, exc)
        except IngestError as exc:
            return self._refused(error, request, ctx, exc)
        except Exception:  # noqa: BLE001 - a bug must not take the listener down
            return self._failed(ctx)

    # --- SASL before authentication ----------------------------------------------------------

    def _unauthenticated(self, session: Session, name: str, request, error: ErrorAnswer, ctx) -> Reply:
        """A request a SASL connection may not send yet: closed unanswered before the handshake, answered
        ILLEGAL_SASL_STATE and closed after it (Kafka's ``SaslServerAuthenticator``)."""
        self.refusals.warning(session.client_host, f"{name} before SASL authentication",
                              "client %s on SASL listener %s: %s v%d before authenticating (SASL state %s); closing "
                              "the connection, as Kafka does", ctx.client, self.listener, name, ctx.version,
                              session.sasl.state)
        if session.sasl.state == AUTHENTICATE:
            answer = self._answer(error(request, int(KafkaErrorCode.ILLEGAL_SASL_STATE), ctx), ctx)
            if answer is not None:
                return Reply(answer.parts, close_after=True)
        return Reply([], close_after=True)

    def _raw_token(self, frame: memoryview, session: Session) -> Reply:
        """A SASL token as a bare frame (after a v0 handshake); answered as a bare frame. A failure closes
        the connection unanswered, as Kafka does in this form."""
        try:
            answer = self.sasl.evaluate(session, bytes(frame))
        except SaslAuthenticationError:
            return Reply([], close_after=True)
        return Reply([SIZE.pack(len(answer)) + answer])

    # --- answers -----------------------------------------------------------------------------

    @staticmethod
    def _answer(result, ctx: RequestContext) -> Reply | None:
        if result is None or isinstance(result, Reply):
            return result
        return ctx.reply(result)

    def _serve(self, handler: Handler, error: ErrorAnswer, request, ctx: RequestContext) -> Reply | None:
        """``handler`` with every failure answered (on the coordination thread)."""
        try:
            return self._answer(handler(request, ctx), ctx)
        except IngestError as exc:
            return self._refused(error, request, ctx, exc)
        except Exception:  # noqa: BLE001 - a bug must not take the broker down
            return self._failed(ctx)

    def _refused(self, error: ErrorAnswer, request, ctx: RequestContext, exc: IngestError) -> Reply | None:
        code = kafka_code(exc)
        name = api_name(ctx.api_key)
        self.refusals.warning(ctx.client, f"{name} {code.name}", "client %s: %s v%d refused (%s): %s", ctx.client,
                              name, ctx.version, code.name, exc)
        return self._answer(error(request, int(code), ctx), ctx)

    def _failed(self, ctx: RequestContext) -> Reply:
        name = api_name(ctx.api_key)
        self.refusals.log(logging.ERROR, ctx.client, f"{name} failed unexpectedly",
                          "client %s: %s v%d failed unexpectedly; closing the connection", ctx.client, name,
                          ctx.version, exc_info=True)
        return Reply([], close_after=True)

    def _close(self, client: str, reason: str, message: str, *args) -> Reply:
        self.refusals.warning(client, reason, message, client, *args)
        return Reply([], close_after=True)

"""SaslHandshake (17): the mechanism a connection of a SASL listener authenticates with (:mod:`ingest.broker.kafka.sasl`).

Before authentication: the mechanism is started, or UNSUPPORTED_SASL_MECHANISM (33) answers with the
enabled ones and the connection is closed. On an authenticated connection, or on a listener without
SASL, Kafka answers ILLEGAL_SASL_STATE (34), and so does this broker.
"""
from __future__ import annotations

from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse


def handle(apis, req: SaslHandshakeRequest, ctx):
    session = ctx.session
    if session is None or not session.authenticating or apis.sasl is None:
        return SaslHandshakeResponse(KafkaErrorCode.ILLEGAL_SASL_STATE, ())
    enabled = apis.sasl.mechanisms
    if apis.sasl.handshake(session.sasl, req.mechanism, ctx.version):
        return SaslHandshakeResponse(KafkaErrorCode.NONE, enabled)
    apis.sasl.failures.warning(session.client_host, "unsupported mechanism",
                               "client %s on listener %s: SASL mechanism %r is not enabled (sasl.enabled.mechanisms="
                               "%s); closing the connection", ctx.client, ctx.listener, req.mechanism[:40],
                               ",".join(enabled))
    return apis.sasl.refuse(ctx.reply(SaslHandshakeResponse(KafkaErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                                            enabled)).parts)


def error(req: SaslHandshakeRequest, code: int, ctx) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(code, ())

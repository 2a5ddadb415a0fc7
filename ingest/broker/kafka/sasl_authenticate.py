"""SaslAuthenticate (36): one SASL token of the connection's exchange (:mod:`ingest.broker.kafka.sasl`).

A failed authentication is answered SASL_AUTHENTICATION_FAILED (58) with Kafka's message, and the
connection is closed. On an authenticated connection, or on a listener without SASL, Kafka answers
ILLEGAL_SASL_STATE (34), and so does this broker. The refusal is sent after
``connection.failed.authentication.delay.ms``, as Kafka does.
"""
from __future__ import annotations

from ingest.errors import SaslAuthenticationError
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse

AFTER_AUTHENTICATION = "SaslAuthenticate request received after successful authentication"


def handle(apis, req: SaslAuthenticateRequest, ctx):
    session = ctx.session
    if session is None or not session.authenticating or apis.sasl is None:
        return SaslAuthenticateResponse(KafkaErrorCode.ILLEGAL_SASL_STATE, AFTER_AUTHENTICATION, b"")
    try:
        answer = apis.sasl.evaluate(session, req.auth_bytes)
    except SaslAuthenticationError as exc:
        message = apis.sasl.client_message(exc, session.sasl.mechanism)
        return apis.sasl.refuse(ctx.reply(SaslAuthenticateResponse(KafkaErrorCode.SASL_AUTHENTICATION_FAILED,
                                                                   message, b"")).parts)
    return SaslAuthenticateResponse(KafkaErrorCode.NONE, None, answer, 0)


def error(req: SaslAuthenticateRequest, code: int, ctx) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(code, None, b"")

"""The 0.7 port's broker-only requests on a Kafka listener (private keys 10001-10004, :mod:`ingest.wire.kafka.port07`).

A replica's fetch of a 0.7 replicated topic (one partition, or many: REPLICA_FETCHES), a leader's repair read, a follower's DELETED_SEGMENTS, the
mirror's APPEND_AT to a 0.7 topic: the 0.7 port's own handlers serve them
(:meth:`~ingest.broker.handlers.BrokerHandlers.serve_broker_only`), after the checks the Kafka path
makes for the same acts. With an authorizer every one needs ClusterAction on the cluster
(CLUSTER_AUTHORIZATION_FAILED otherwise, answered in the 0.7 layout inside the response: the 0.7 code
32); a fetch as replica ``n`` >= 0 also needs the connection's principal to be the one broker ``n``
registered (:func:`ingest.broker.kafka.authorization.replica`), so nothing a refused fetch claims counts
toward the high watermark. The 0.7 response frame is sent as it is (its file regions with sendfile),
behind the Kafka response header; a deferred one (a follower's fetch waiting for data, an acks=-1
APPEND_AT) keeps its place and is sent when the 0.7 handler completes it.
"""
from __future__ import annotations

from ingest.broker.handlers import BrokerHandlers
from ingest.broker.kafka import authorization
from ingest.broker.reply import Reply
from ingest.errors import ClusterAuthorizationFailedError
from ingest.wire import protocol as p
from ingest.wire.errors import KAFKA, PORT07, ErrorCode
from ingest.wire.frames import SIZE
from ingest.wire.kafka.message import ResponseHeader
from ingest.wire.kafka.port07 import TYPE_OF_KEY


def handle(apis, req, ctx):
    kind = TYPE_OF_KEY[ctx.api_key]
    handlers = apis.port07
    body = memoryview(req.body)
    if kind in (p.RequestType.REPLICA_FETCH, p.RequestType.REPLICA_FETCHES):
        replica_id = p.REQUEST_CLASSES[kind].decode(body).replica_id
        ok = authorization.replica(apis, ctx, replica_id) if replica_id >= 0 else \
            authorization.cluster(apis, ctx, authorization.CLUSTER_ACTION)
    else:
        ok = authorization.cluster(apis, ctx, authorization.CLUSTER_ACTION)
    if not ok:
        raise ClusterAuthorizationFailedError(f"{kind.name} from {ctx.principal} refused: it needs ClusterAction "
                                              "on the cluster (and, as a replica, that broker's own principal)")
    if handlers is None:
        return _error_reply(kind, ErrorCode.UNKNOWN, ctx)
    return _carried(handlers.serve_broker_only(kind, body, ctx.client), ctx)


def error(req, code: int, ctx) -> Reply:
    return _error_reply(TYPE_OF_KEY[ctx.api_key], PORT07.code(KAFKA.error_class(code)), ctx)


def _error_reply(kind, code: int, ctx) -> Reply:
    # the 0.7 port's own error answer of this type (APPEND_AT: a ProduceAck layout)
    return _carried(BrokerHandlers.error_reply(kind, code), ctx)


def _carried(inner: Reply | None, ctx) -> Reply | None:
    """``inner`` (a 0.7 response frame) behind this request's Kafka response header; a deferred one
    completes the returned reply when it completes."""
    if inner is None:
        return None
    if not inner.pending:
        return Reply(_framed(inner.parts, ctx.correlation_id), close_after=inner.close_after)
    outer = Reply.deferred(hold=inner.hold)

    def done() -> None:
        outer.complete(_framed(inner.parts, ctx.correlation_id), inner.close_after)

    inner.on_complete = done
    if not inner.pending:   # completed before the callback was installed
        done()
    return outer


def _framed(parts: list, correlation_id: int) -> list:
    head = ResponseHeader(correlation_id).encode(0)
    total = len(head) + sum(len(part) for part in parts)
    return [SIZE.pack(total) + head, *parts]

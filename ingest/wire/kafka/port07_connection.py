"""A connection that carries the 0.7 port's broker-only requests to a Kafka listener (:mod:`ingest.wire.kafka.port07`).

A drop-in :class:`~ingest.wire.connection.BrokerConnection` for the callers that send REPLICA_FETCH,
REPLICA_FETCHES, APPEND_AT or DELETED_SEGMENTS (a follower of a 0.7 replicated topic, a leader's repair read, the mirror):
``request(frame, response_cls)`` takes the same 0.7 request frame and returns the same decoded 0.7
response, but the frame's body travels as the private Kafka api key of its type on the peer's Kafka
listener (with its TLS, its SASL login and the authorizer behind it), and the answer is the 0.7 response
frame behind a Kafka response header. It is a :class:`~ingest.wire.kafka.connection.KafkaConnection`: every
new socket asks ApiVersions first and, on a SASL listener, logs in. A frame of any other 0.7 type is a
programming error (ValueError).

Concurrency: as BrokerConnection (one request at a time on the wire).
"""
from __future__ import annotations

import itertools
from typing import TypeVar

from ingest.errors import MalformedResponseError
from ingest.wire.kafka.connection import KafkaConnection, SaslLogin
from ingest.wire.frames import INT16, SIZE
from ingest.wire.kafka.message import encode_request
from ingest.wire.kafka.port07 import (KEY_OF_TYPE, VERSION, AppendAt07Request, DeletedSegments07Request,
                                      ReplicaFetch07Request, ReplicaFetches07Request)

T = TypeVar("T")

_REQUESTS = {cls.API_KEY: cls for cls in (ReplicaFetch07Request, AppendAt07Request, DeletedSegments07Request,
                                           ReplicaFetches07Request)}
_HEAD = SIZE.size + INT16.size      # a 0.7 request frame: size:int32 type:int16 body
_ANSWER_HEAD = 2 * SIZE.size        # correlation id, then the RECORDS length (the 0.7 frame's size)
_correlation_ids = itertools.count(1)


class Port07OverKafka(KafkaConnection):
    """The 0.7 broker-only requests to the Kafka listener at ``host:port`` (``broker_id``, ``timeout_s``,
    ``ssl_context`` as BrokerConnection's; ``client_id`` names this client in the peer's request header;
    ``sasl`` the login on a SASL listener)."""

    def __init__(self, host: str, port: int, *, client_id: str | None = None, broker_id: int | None = None,
                 timeout_s: float = 30.0, ssl_context=None, sasl: SaslLogin | None = None) -> None:
        super().__init__(host, port, client_id=client_id, timeout_s=timeout_s, node_id=broker_id,
                         ssl_context=ssl_context, sasl=sasl)

    def request(self, frame: bytes, response_cls: type[T], **kwargs) -> T:
        (kind,) = INT16.unpack_from(frame, SIZE.size)
        key = KEY_OF_TYPE.get(kind)
        if key is None:
            raise ValueError(f"0.7 request type {kind} has no Kafka api key; carried are {sorted(KEY_OF_TYPE)}")
        correlation_id = next(_correlation_ids) & 0x7FFFFFFF
        kafka_frame = encode_request(_REQUESTS[key](memoryview(frame)[_HEAD:].tobytes()), VERSION, correlation_id,
                                     self.client_id)
        data = self.request_buffer(kafka_frame, **kwargs)
        if len(data) < _ANSWER_HEAD or SIZE.unpack_from(data, 0)[0] != correlation_id \
                or SIZE.unpack_from(data, SIZE.size)[0] != len(data) - _ANSWER_HEAD:
            self.close()
            raise MalformedResponseError(f"bad response from {self!r} to api key {key}: not correlation id "
                                         f"{correlation_id} with one 0.7 response frame")
        try:
            return response_cls.decode(memoryview(data)[_ANSWER_HEAD:])  # type: ignore[attr-defined]
        except MalformedResponseError:
            self.close()
            raise

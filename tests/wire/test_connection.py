"""BrokerConnection against a socket that answers what the test says: a malformed answer closes the
connection, the next request reconnects."""
from __future__ import annotations

import socket
import threading

import pytest

from ingest import errors
from ingest.wire import protocol as p
from ingest.wire.connection import BrokerConnection


def test_a_malformed_response_closes_the_connection_and_raises_malformed_response_error():
    listener = socket.create_server(("127.0.0.1", 0))
    answers = [p.response_frame(0, b""),                        # OFFSETS body without its count
               p.OffsetsResponse(0, (42,)).encode()]            # then a good answer, on a new connection

    def serve():
        for answer in answers:
            conn, _ = listener.accept()
            with conn:
                p.recv_response(conn)   # request frames share the response framing: size + int16
                conn.sendall(answer)
                conn.recv(1)            # until the client closes

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    conn = BrokerConnection("127.0.0.1", listener.getsockname()[1], timeout_s=10)
    request = p.OffsetsRequest("t", 0, p.LATEST_TIME, 1).encode()
    with pytest.raises(errors.MalformedResponseError, match=r"bad response from .*OffsetsResponse\.offsets\.count"):
        conn.request(request, p.OffsetsResponse)
    assert conn._sock is None                                    # closed: the stream is out of sync
    assert conn.request(request, p.OffsetsResponse).offsets == (42,)
    conn.close()
    server.join(10)
    listener.close()

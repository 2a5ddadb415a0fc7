"""The network layer serving TLS (an SSL listener), in process with a dispatcher that answers each frame
with what the test asks: handshakes, the session's principal from a client certificate, replies of byte
parts and of file regions (read and encrypted, never sendfile'd raw), and clients that break the
handshake: each refused alone while the others are served."""
from __future__ import annotations

import hashlib
import os
import socket
import ssl
import struct
import time

import pytest

from ingest.broker.kafka.session import Session
from ingest.broker.reply import FileRegion, Reply
from ingest.broker.server import SocketServer
from ingest.errors import BrokerUnavailableError
from ingest.wire.connection import BrokerConnection
from ingest.wire.tls import ANONYMOUS, client_context, server_context
from tests.harness.tls import make_pki

pytestmark = pytest.mark.processes   # openssl makes the certificates

WHO, FILE, DIGEST = 1, 2, 3      # request kinds of the test dispatcher


class Answering:
    """Kind WHO: the session's principal; kind FILE: ``length:int32`` bytes of ``path`` as a file region;
    kind DIGEST: the SHA-256 of the request's body."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.sessions: list[Session] = []

    def new_session(self, client: str, peer_cert: dict | None) -> Session:
        from ingest.wire.tls import principal_of
        s = Session("SSL", "SSL", client, principal_of(peer_cert), peer_cert is not None)
        self.sessions.append(s)
        return s

    def dispatch(self, kind: int, body: memoryview, client: str, session: Session) -> Reply:
        if kind == WHO:
            data = session.principal.encode()
            return Reply([struct.pack(">ih", len(data) + 2, 0) + data])
        if kind == DIGEST:
            data = hashlib.sha256(body).digest()
            return Reply([struct.pack(">ih", len(data) + 2, 0) + data])
        (length,) = struct.unpack(">i", body[:4])
        fd = os.open(self.path, os.O_RDONLY)
        return Reply([struct.pack(">ih", length + 2, 0), FileRegion(fd, 0, length, lambda: os.close(fd))])


def frame(kind: int, body: bytes = b"") -> bytes:
    return struct.pack(">ih", len(body) + 2, kind) + body


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def server(pki, tmp_path):
    path = tmp_path / "segment"
    path.write_bytes(os.urandom(8 << 20))
    ctx = server_context(str(pki.server), truststore=str(pki.ca), client_auth="requested")
    srv = SocketServer("127.0.0.1", 0, Answering(str(path)), max_request_bytes=1 << 20, ssl_context=ctx,
                       partial_timeout_s=1.0, name="tls-test").start()
    srv.data = path.read_bytes()
    yield srv
    srv.stop()


def connection(server, pki, cert=None) -> BrokerConnection:
    ctx = client_context(ca_location=str(pki.ca), certificate_location=cert and str(cert[0]),
                         key_location=cert and str(cert[1]))
    return BrokerConnection("127.0.0.1", server.port, timeout_s=20, ssl_context=ctx)


def test_principal_is_anonymous_without_a_client_certificate_and_the_subject_dn_with_one(server, pki):
    with_cert = connection(server, pki, pki.client("alice"))
    without = connection(server, pki)
    try:
        assert bytes(with_cert.request_buffer(frame(WHO)))[2:].decode() == "User:CN=alice,O=ingest-test"
        assert bytes(without.request_buffer(frame(WHO)))[2:].decode() == ANONYMOUS
    finally:
        with_cert.close()
        without.close()


def test_file_region_replies_are_encrypted_whole(server, pki):
    """8 MB regions: the socket fills, TLS writes are retried with the same bytes, the client reads them
    decrypted and identical to the file (sendfile would have put the file's clear bytes on the wire)."""
    c = connection(server, pki)
    try:
        for length in (1, 300_000, 8 << 20):
            got = c.request_buffer(frame(FILE, struct.pack(">i", length)), max_response_bytes=16 << 20)
            assert bytes(got[2:]) == server.data[:length]
    finally:
        c.close()


def test_large_and_pipelined_request_frames_arrive_whole(server, pki):
    """Frames of every size up to 900 KB, many TLS records each, several sent before any answer is read:
    a record cut at a read's limit is decrypted whole and nothing waits in the TLS buffer unseen."""
    c = connection(server, pki)
    try:
        bodies = [os.urandom(n) for n in (1, 16_383, 16_385, 65_530, 65_536, 300_001, 900_000)]
        c.send(b"".join(frame(DIGEST, b) for b in bodies))
        from ingest.wire.frames import recv_response_buffer
        for b in bodies:
            assert bytes(recv_response_buffer(c._sock)[2:]) == hashlib.sha256(b).digest()
    finally:
        c.close()


def test_a_tls_record_cut_at_the_read_limit_is_not_left_unread(server, pki):
    """A small frame in its own TLS record, then a frame of exactly four full records: the network
    layer's 64 KB read ends inside the last record; the rest of it, already decrypted, must be read too
    (the selector never reports it: nothing more arrives) or the frame waits until it is timed out."""
    for _ in range(10):
        c = connection(server, pki)
        try:
            body = os.urandom(4 * 16_384 - 6)
            c.send(frame(WHO))
            c.send(frame(DIGEST, body))
            from ingest.wire.frames import recv_response_buffer
            assert bytes(recv_response_buffer(c._sock)[2:]) == ANONYMOUS.encode()
            assert bytes(recv_response_buffer(c._sock)[2:]) == hashlib.sha256(body).digest()
        finally:
            c.close()


def test_untrusted_broker_certificate_fails_naming_the_verification(server, pki):
    ctx = client_context(ca_location=str(pki.untrusted_ca))
    c = BrokerConnection("127.0.0.1", server.port, timeout_s=10, ssl_context=ctx)
    with pytest.raises(BrokerUnavailableError, match="certificate verify failed"):
        c.request_buffer(frame(WHO))
    ok = connection(server, pki)
    assert bytes(ok.request_buffer(frame(WHO)))[2:].decode() == ANONYMOUS
    ok.close()


def test_bad_handshakes_are_closed_and_others_are_served(server, pki):
    """Plaintext frames, garbage, and a client that stops half-way through its ClientHello: each closed by
    the broker (the stalled one after request.partial.timeout.ms), the others served meanwhile."""
    plain = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    plain.sendall(frame(WHO))
    garbage = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    garbage.sendall(os.urandom(4096))
    hello = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = client_context(ca_location=str(pki.ca)).wrap_bio(hello[0], hello[1], server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    client_hello = hello[1].read()
    stalled = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    stalled.sendall(client_hello[: len(client_hello) // 2])
    try:
        ok = connection(server, pki, pki.client("bob"))
        for _ in range(20):
            assert bytes(ok.request_buffer(frame(WHO)))[2:].decode() == "User:CN=bob,O=ingest-test"
        ok.close()
        for sock in (plain, garbage, stalled):
            sock.settimeout(30)
            try:
                while sock.recv(65536):
                    pass          # a TLS alert, then end of stream
            except ConnectionResetError:
                pass
        assert server.connection_count() == 0
    finally:
        for sock in (plain, garbage, stalled):
            sock.close()


def test_a_listener_without_a_usable_keystore_is_refused_naming_the_key(tmp_path, pki):
    from ingest.errors import ConfigError

    with pytest.raises(ConfigError, match="ssl.keystore.location"):
        server_context(str(tmp_path / "missing.pem"))
    with pytest.raises(ConfigError, match="ssl.keystore.location.*PEM"):
        server_context(str(pki.ca))          # a certificate without its key
    with pytest.raises(ConfigError, match="ssl.client.auth='sometimes'"):
        server_context(str(pki.server), client_auth="sometimes")


def test_a_broker_refuses_to_start_an_ssl_listener_without_a_keystore_and_any_sasl_listener(tmp_path, pki):
    from ingest.broker.broker import BrokerServer
    from ingest.broker.server_config import SERVER_CONFIG
    from ingest.errors import ConfigError

    def config(**extra):
        return SERVER_CONFIG.parse({"brokerid": 1, "port": 0, "log.dir": str(tmp_path / "logs"), **extra})

    with pytest.raises(ConfigError, match="listener SSL .*ssl.keystore.location"):
        BrokerServer(config(**{"listeners": "SSL://127.0.0.1:0", "listener.security.protocol.map": "SSL:SSL"})).start()
    with pytest.raises(ConfigError, match=r"listeners \['S'\] use SASL, whose users live in ZooKeeper"):
        BrokerServer(config(**{"listeners": "S://127.0.0.1:0", "listener.security.protocol.map": "S:SASL_SSL",
                               "ssl.keystore.location": str(pki.server)})).start()
    b = BrokerServer(config(**{"listeners": "SSL://127.0.0.1:0", "listener.security.protocol.map": "SSL:SSL",
                               "ssl.keystore.location": str(pki.server)})).start()
    try:
        ctx = client_context(ca_location=str(pki.ca))
        with socket.create_connection(("127.0.0.1", b.kafka.port()), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.version() in ("TLSv1.2", "TLSv1.3")
    finally:
        b.stop()


def test_failed_handshakes_are_logged_once_per_client_host_then_counted(server, pki):
    import logging

    class Lines(logging.Handler):
        def __init__(self):
            super().__init__(logging.INFO)
            self.records: list[logging.LogRecord] = []

        def emit(self, record):
            self.records.append(record)

    lines_seen = Lines()
    logger = logging.getLogger("ingest.broker.server")
    logger.addHandler(lines_seen)
    level, logger.level = logger.level, logging.INFO
    try:
        hammer(server)
    finally:
        logger.removeHandler(lines_seen)
        logger.setLevel(level)
    lines = [r.getMessage() for r in lines_seen.records if "TLS handshake failed" in r.getMessage()]
    assert len(lines) == 1 and "client 127.0.0.1:" in lines[0], lines
    ok = connection(server, pki)
    assert bytes(ok.request_buffer(frame(WHO)))[2:].decode() == ANONYMOUS
    ok.close()


def hammer(server) -> None:
    """30 connections that send an HTTP request to the TLS port, each read until the broker closes it."""
    for _ in range(30):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n" * 20)
            s.settimeout(10)
            try:
                while s.recv(4096):
                    pass
            except ConnectionResetError:
                pass

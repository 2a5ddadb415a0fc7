"""SASL_PLAINTEXT on the Kafka listener, with real clients, three real brokers and a real ZooKeeper.

The brokers' only Kafka listener speaks SASL_PLAINTEXT and is also the inter-broker listener: their
followers log in as the user ``broker`` (made with ``ingest users add`` before the brokers start), so a
topic of replication factor 3 whose three replicas are in sync proves that replica fetches authenticate.
confluent-kafka, kafka-python and aiokafka then produce (acks=all) and consume with SCRAM-SHA-256,
SCRAM-SHA-512 and PLAIN; wrong passwords, users added and removed while the brokers run, requests before
authentication and hostile tokens are refused as Kafka refuses them, and the brokers keep serving.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
import subprocess
import sys
import time
import uuid

import pytest

from ingest.client.kafka.fetcher import KafkaFetcher
from ingest.client.kafka.producer import KafkaProducer
from ingest.errors import SaslAuthenticationError
from ingest.records.builder import SimpleRecord
from ingest.wire import scram
from ingest.wire.kafka.message import decode_response, encode_request
from ingest.wire.kafka.metadata import MetadataRequest, MetadataResponse
from ingest.wire.kafka.produce import ProduceRequest
from ingest.wire.kafka.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from ingest.wire.kafka.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from tests.harness import sasl as s
from tests.harness.brokers import REPO_ROOT, broker_cluster, stop_all
from tests.harness.metrics import metrics_url, scrape_until, value

pytestmark = pytest.mark.processes

ALICE, ALICE_PW = s.ALICE, s.ALICE_PW
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka")
GENERIC = "Authentication failed during authentication due to invalid credentials with SASL mechanism"


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with s.sasl_cluster(zookeeper, tmp_path_factory, "/sasl", **{"metrics.port": 0}) as c:
        yield c


# --- the three clients, each with its own SASL settings ---------------------------------------------

def _confluent_roundtrip(bootstrap, topic, values, mechanism, user, password, tls=None):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    login = {**s.confluent_settings(mechanism, user, password), **(tls or {})}
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", **login})
    for v in values:
        p.produce(topic, v, partition=0, on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(60) == 0 and not errors, errors
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, **login})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got, deadline = [], time.monotonic() + 60
        while len(got) < len(values) and time.monotonic() < deadline:
            for m in c.consume(100, timeout=1.0):
                assert m.error() is None, m.error()
                got.append(m.value())
        return got
    finally:
        c.close()


def _kafka_python_roundtrip(bootstrap, topic, values, mechanism, user, password, tls=None):
    from kafka import KafkaConsumer, KafkaProducer as KP, TopicPartition

    login = {**s.kafka_python_settings(mechanism, user, password), **(tls or {})}
    p = KP(bootstrap_servers=bootstrap, acks="all", **login)
    try:
        for f in [p.send(topic, v, partition=0) for v in values]:
            f.get(60)
    finally:
        p.close(10)
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=20_000, **login)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = []
        for m in c:
            got.append(m.value)
            if len(got) == len(values):
                break
        return got
    finally:
        c.close()


def _aiokafka_roundtrip(bootstrap, topic, values, mechanism, user, password, tls=None):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    login = {**s.aiokafka_settings(mechanism, user, password), **(tls or {})}

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **login)
        await p.start()
        try:
            for v in values:
                await p.send_and_wait(topic, v, partition=0)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **login)
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            got, deadline = [], time.monotonic() + 60
            while len(got) < len(values) and time.monotonic() < deadline:
                for msgs in (await c.getmany(timeout_ms=1000)).values():
                    got.extend(m.value for m in msgs)
            return got
        finally:
            await c.stop()

    return asyncio.run(run())


ROUNDTRIP = {"confluent-kafka": _confluent_roundtrip, "kafka-python": _kafka_python_roundtrip,
             "aiokafka": _aiokafka_roundtrip}


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", CLIENTS)
def test_each_client_produces_acks_all_and_consumes_with_each_mechanism(cluster, client, mechanism):
    topic = cluster.topic(f"sasl-{client}-{mechanism.lower()}")
    values = [f"{client}-{mechanism}-{i}".encode() for i in range(5)]
    assert ROUNDTRIP[client](cluster.bootstrap, topic, values, mechanism, ALICE, ALICE_PW) == values


# --- refusals each client reports --------------------------------------------------------------------

def _confluent_login_error(bootstrap, mechanism, user, password) -> str:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    errors = []
    admin = AdminClient({"bootstrap.servers": bootstrap, **s.confluent_settings(mechanism, user, password),
                         "error_cb": errors.append})
    deadline = time.monotonic() + 30
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        admin.poll(0.5)
    found = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert found, f"confluent-kafka reported no authentication error: {errors}"
    return found[0].str()


class _Logged(logging.Handler):
    """What a client library logs at WARNING and above while it runs (its authentication errors)."""

    def __init__(self, logger: str) -> None:
        super().__init__(logging.WARNING)
        self.logger, self.messages = logging.getLogger(logger), []

    def emit(self, record) -> None:
        self.messages.append(record.getMessage())

    def __enter__(self) -> "_Logged":
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self)

    def first(self, word: str) -> str:
        found = [m for m in self.messages if word in m]
        assert found, f"{self.logger.name} logged no {word}: {self.messages[:5]}"
        return found[0]


def _kafka_python_login_error(bootstrap, mechanism, user, password) -> str:
    """kafka-python 3 retries the bootstrap until its timeout, then raises KafkaTimeoutError. It logs each
    SaslAuthenticationFailedError with the broker's message when it reads the answer before the close;
    its transport drops an answer read together with the close (kafka/net/transport.py ``_sock_recv``
    returns the data with the error, and the caller aborts without handing the data on), and then it
    logs only "socket disconnected"."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaTimeoutError

    with _Logged("kafka") as logged, pytest.raises(KafkaTimeoutError):
        KafkaAdminClient(bootstrap_servers=bootstrap, bootstrap_timeout_ms=3000,
                         **s.kafka_python_settings(mechanism, user, password))
    refused = [m for m in logged.messages if "SaslAuthenticationFailedError" in m]
    if refused:
        return refused[0]
    logged.first("socket disconnected")
    return "Authentication failed (kafka-python dropped the answer that came with the close)"


def _aiokafka_login_error(bootstrap, mechanism, user, password) -> str:
    """aiokafka logs SaslAuthenticationFailed (with the broker's message) for each bootstrap server, then
    raises KafkaConnectionError("Unable to bootstrap ...")."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, **s.aiokafka_settings(mechanism, user, password))
        try:
            await p.start()
        finally:
            await p.stop()

    with _Logged("aiokafka") as logged, pytest.raises(KafkaConnectionError):
        asyncio.run(run())
    return logged.first("SaslAuthenticationFailed")


LOGIN_ERROR = {"confluent-kafka": _confluent_login_error, "kafka-python": _kafka_python_login_error,
               "aiokafka": _aiokafka_login_error}


@pytest.mark.parametrize("mechanism", ("SCRAM-SHA-256", "PLAIN"))
@pytest.mark.parametrize("client", CLIENTS)
def test_a_wrong_password_is_refused_with_the_error_each_client_reports(cluster, client, mechanism):
    message = LOGIN_ERROR[client](cluster.bootstrap, mechanism, ALICE, "not-the-password")
    assert "Authentication failed" in message, message
    # the brokers keep serving everyone else
    assert _own_client_roundtrip(cluster, mechanism, ALICE, ALICE_PW, f"after-{client}")


def _own_client_roundtrip(cluster, mechanism, user, password, tag, tls=None) -> bool:
    topic = cluster.topic(f"own-{tag}-{mechanism.lower()}")
    login = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": user,
             "sasl.password": password, **(tls or {})}
    with KafkaProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **login}) as p:
        p.produce(topic, 0, [SimpleRecord(b"v1"), SimpleRecord(b"v2")])
    with KafkaFetcher({"bootstrap.servers": cluster.bootstrap, **login}) as f:
        got = [bytes(rec.value) for batch in [f.fetch(topic, 0, 0)] for rec in batch.records()]
    return got == [b"v1", b"v2"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_products_own_client_logs_in_with_each_mechanism(cluster, mechanism):
    assert _own_client_roundtrip(cluster, mechanism, ALICE, ALICE_PW, "own")


def test_the_products_own_client_reports_a_wrong_password_with_the_brokers_message(cluster):
    login = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": ALICE,
             "sasl.password": "wrong"}
    with pytest.raises(SaslAuthenticationError) as info:
        with KafkaFetcher({"bootstrap.servers": cluster.bootstrap, **login}) as f:
            f.partitions_for("anything")
    assert f"{GENERIC} SCRAM-SHA-512" in str(info.value)
    assert "'alice'" in str(info.value)


def test_a_user_added_while_the_brokers_run_logs_in_at_once_and_a_removed_one_cannot(cluster):
    bob = f"bob-{uuid.uuid4().hex[:6]}"
    s.add_user(cluster.zk_connect, bob, "bob-secret", "SCRAM-SHA-256")
    listed = s.ingest_users("list", "--zookeeper", cluster.zk_connect)
    assert f"{bob}\tSCRAM-SHA-256" in listed.stdout.splitlines() and "secret" not in listed.stdout
    # the watch may take a moment to reach each broker: a login is retried only while bob is unknown there
    deadline = time.monotonic() + 30
    while True:
        try:
            assert _own_client_roundtrip(cluster, "SCRAM-SHA-256", bob, "bob-secret", f"{bob}-in")
            break
        except SaslAuthenticationError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert s.ingest_users("remove", bob, "--zookeeper", cluster.zk_connect).returncode == 0
    deadline = time.monotonic() + 30
    while True:   # new connections are refused once every broker saw the removal
        try:
            _own_client_roundtrip(cluster, "PLAIN", bob, "bob-secret", f"{bob}-out-{time.monotonic_ns()}")
        except SaslAuthenticationError as exc:
            assert "Invalid username or password" in str(exc)
            break
        assert time.monotonic() < deadline, f"{bob} still logs in 30 s after `ingest users remove`"
        time.sleep(0.2)
    assert bob not in s.ingest_users("list", "--zookeeper", cluster.zk_connect).stdout


# --- the wire: requests before authentication, hostile tokens ----------------------------------------

class Raw:
    """A raw socket to a broker's SASL listener, speaking Kafka frames."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.corr = 0

    def send(self, request, version: int) -> int:
        self.corr += 1
        self.sock.sendall(encode_request(request, version, self.corr, "raw"))
        return self.corr

    def call(self, request, version: int, response_cls):
        corr = self.send(request, version)
        answered, response = decode_response(response_cls, self.frame(), version)
        assert answered == corr
        return response

    def frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._exact(4))
        return self._exact(size)

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the broker")
            out += chunk
        return out

    def closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def _produce_request() -> ProduceRequest:
    return ProduceRequest(None, -1, 30_000, ())


@pytest.mark.parametrize("first", ("produce", "metadata", "produce-after-handshake"))
def test_a_request_before_authentication_closes_the_connection(cluster, first):
    raw = Raw(cluster.brokers[0].kafka_port)
    try:
        if first == "produce-after-handshake":
            assert raw.call(SaslHandshakeRequest("PLAIN"), 1, SaslHandshakeResponse).error_code == 0
            raw.send(_produce_request(), 8)
            raw.frame()   # Kafka answers ILLEGAL_SASL_STATE (34) in the request's own layout, then closes
        elif first == "produce":
            raw.send(_produce_request(), 8)
        else:
            raw.send(MetadataRequest(None), 1)
        assert raw.closed_by_peer()
    finally:
        raw.close()
    assert _own_client_roundtrip(cluster, "SCRAM-SHA-256", ALICE, ALICE_PW, f"before-{first}")


def _authenticate(raw: Raw, mechanism: str, tokens: list[bytes]) -> SaslAuthenticateResponse:
    assert raw.call(SaslHandshakeRequest(mechanism), 1, SaslHandshakeResponse).error_code == 0
    answer = None
    for token in tokens:
        answer = raw.call(SaslAuthenticateRequest(token), 2, SaslAuthenticateResponse)
        if answer.error_code:
            break
    return answer


@pytest.mark.parametrize("case", ("huge", "garbage-scram", "garbage-plain", "wrong-nonce", "unknown-user"))
def test_hostile_tokens_are_refused_clearly_and_the_broker_keeps_serving(cluster, case):
    raw = Raw(cluster.brokers[1].kafka_port)
    try:
        if case == "huge":
            answer = _authenticate(raw, "SCRAM-SHA-256", [b"\xff" * (100 << 10)])
        elif case == "garbage-scram":
            answer = _authenticate(raw, "SCRAM-SHA-512", [b"\x00\x01garbage,,=,\xc3"])
        elif case == "garbage-plain":
            answer = _authenticate(raw, "PLAIN", [b"\xff\xfe"])
        elif case == "unknown-user":
            answer = _authenticate(raw, "SCRAM-SHA-256", [scram.ScramClient("SCRAM-SHA-256", "nobody", "x").first()])
        else:
            client = scram.ScramClient("SCRAM-SHA-256", ALICE, ALICE_PW)
            assert raw.call(SaslHandshakeRequest("SCRAM-SHA-256"), 1, SaslHandshakeResponse).error_code == 0
            server_first = raw.call(SaslAuthenticateRequest(client.first()), 2, SaslAuthenticateResponse).auth_bytes
            final = client.final(server_first).replace(b",r=", b",r=forged", 1)
            answer = raw.call(SaslAuthenticateRequest(final), 2, SaslAuthenticateResponse)
        assert answer.error_code == 58, answer   # SASL_AUTHENTICATION_FAILED
        assert answer.error_message.startswith(GENERIC) or "Invalid username" in answer.error_message
        assert "nobody" not in answer.error_message   # never tells whether a user exists
        assert raw.closed_by_peer()
    finally:
        raw.close()
    assert _own_client_roundtrip(cluster, "PLAIN", ALICE, ALICE_PW, f"hostile-{case}")


def test_an_unsupported_mechanism_is_answered_with_the_enabled_ones_and_closed(cluster):
    raw = Raw(cluster.brokers[2].kafka_port)
    try:
        answer = raw.call(SaslHandshakeRequest("GSSAPI"), 1, SaslHandshakeResponse)
        assert answer.error_code == 33 and set(answer.mechanisms) == set(MECHANISMS)
        assert raw.closed_by_peer()
    finally:
        raw.close()


def test_a_v0_handshake_exchanges_bare_tokens_as_kafka_before_kip_152(cluster):
    raw = Raw(cluster.brokers[0].kafka_port)
    try:
        assert raw.call(SaslHandshakeRequest("SCRAM-SHA-512"), 0, SaslHandshakeResponse).error_code == 0
        client = scram.ScramClient("SCRAM-SHA-512", ALICE, ALICE_PW)
        raw.sock.sendall(struct.pack(">i", len(client.first())) + client.first())
        final = client.final(raw.frame())
        raw.sock.sendall(struct.pack(">i", len(final)) + final)
        client.verify(raw.frame())
        # authenticated: Kafka requests are served now
        answer = raw.call(MetadataRequest(None), 1, MetadataResponse)
        assert {b.node_id for b in answer.brokers} == {0, 1, 2}
    finally:
        raw.close()


def test_logins_are_counted_by_mechanism_and_result(cluster):
    broker = cluster.brokers[2]
    url = metrics_url(broker.output)
    raw = Raw(broker.kafka_port)
    try:
        assert _authenticate(raw, "PLAIN", [b"\0alice\0wrong"]).error_code == 58
    finally:
        raw.close()
    raw = Raw(broker.kafka_port)
    try:
        client = scram.ScramClient("SCRAM-SHA-512", ALICE, ALICE_PW)
        first = _authenticate(raw, "SCRAM-SHA-512", [client.first()])
        final = raw.call(SaslAuthenticateRequest(client.final(first.auth_bytes)), 2, SaslAuthenticateResponse)
        assert final.error_code == 0
        client.verify(final.auth_bytes)
    finally:
        raw.close()
    name = "ingest_broker_sasl_authentications_total"
    scrape_until(url, lambda m: (value(m, name, listener="PLAINTEXT", mechanism="PLAIN", result="failure") or 0) >= 1
                 and (value(m, name, listener="PLAINTEXT", mechanism="SCRAM-SHA-512", result="success") or 0) >= 1,
                 "a PLAIN failure and a SCRAM-SHA-512 success counted")


def test_a_sasl_listener_without_zookeeper_is_refused_at_start_up(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "ingest.cli", "broker", "start", "--config",
                           str(REPO_ROOT / "conf/server.properties"), "--set", f"log.dir={tmp_path / 'logs'}",
                           "--set", "port=0", "--set", "listeners=SECURE://127.0.0.1:0",
                           "--set", "listener.security.protocol.map=SECURE:SASL_PLAINTEXT",
                           "--set", "enable.zookeeper=false"],
                          capture_output=True, text=True, env=env, cwd=str(REPO_ROOT), timeout=60)
    assert done.returncode == 2, done.stderr
    assert "listeners ['SECURE'] use SASL, whose users live in ZooKeeper (/config/users)" in done.stderr


def test_a_plaintext_listener_answers_the_sasl_apis_illegal_sasl_state_as_kafka(tmp_path_factory):
    (broker,) = broker_cluster(tmp_path_factory, 1)
    try:
        raw = Raw(broker.kafka_port)
        try:
            assert raw.call(SaslHandshakeRequest("PLAIN"), 1, SaslHandshakeResponse).error_code == 34
            answer = raw.call(SaslAuthenticateRequest(b"\0a\0b"), 2, SaslAuthenticateResponse)
            assert answer.error_code == 34
            assert raw.call(MetadataRequest(None), 1, MetadataResponse).brokers   # served: no SASL here
        finally:
            raw.close()
        login = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": ALICE,
                 "sasl.password": ALICE_PW}
        with pytest.raises(SaslAuthenticationError) as info:
            with KafkaFetcher({"bootstrap.servers": f"127.0.0.1:{broker.kafka_port}", **login}) as f:
                f.partitions_for("anything")
        assert "is not a SASL listener" in str(info.value)
    finally:
        stop_all([broker])


def test_a_frame_over_the_sasl_receive_limit_before_authentication_is_closed_unanswered(cluster):
    raw = Raw(cluster.brokers[0].kafka_port)
    try:
        assert raw.call(SaslHandshakeRequest("PLAIN"), 1, SaslHandshakeResponse).error_code == 0
        raw.send(SaslAuthenticateRequest(b"\0" * 600_000), 2)   # sasl.server.max.receive.size is 512 KiB
        assert raw.closed_by_peer()
    finally:
        raw.close()
    # once authenticated, a request of that size is served (the listener's own limit applies)
    topic = cluster.topic("big-after-login")
    login = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": ALICE,
             "sasl.password": ALICE_PW}
    with KafkaProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **login}) as p:
        p.produce(topic, 0, [SimpleRecord(os.urandom(600_000))])

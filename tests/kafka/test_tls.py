"""TLS on the Kafka listener of real broker processes, with real clients: confluent-kafka, kafka-python,
aiokafka and the product's own Kafka client produce and consume over SSL with the settings their users
know (librdkafka's ``ssl.ca.location``..., kafka-python's and aiokafka's ``ssl_cafile``/SSL context);
mutual TLS (``ssl.client.auth=required``) admits a client with a certificate signed by the trusted CA
and refuses one without, or with an untrusted one; a client that does not trust the broker's CA, and a
plaintext client on the SSL port, each get their library's error, while the broker keeps serving others.
"""
from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.harness.brokers import BrokerProcess, stop_all
from tests.harness.net import free_port
from tests.harness.tls import make_pki

pytestmark = pytest.mark.processes

N = 200


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_broker(tmp_path_factory, pki, client_auth: str) -> BrokerProcess:
    """One broker: PLAINTEXT on ``kafka_port``, SSL on ``ssl_port``."""
    b = BrokerProcess(0, tmp_path_factory.mktemp(f"tls-{client_auth}"))
    b.ssl_port = free_port()
    b.overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{b.kafka_port},SSL://127.0.0.1:{b.ssl_port}",
                   "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
                   "ssl.keystore.location": str(pki.server), "ssl.truststore.location": str(pki.ca),
                   "ssl.client.auth": client_auth}
    return b.start()


@pytest.fixture(scope="module")
def broker(tmp_path_factory, pki):
    b = tls_broker(tmp_path_factory, pki, "requested")
    yield b
    stop_all([b])


@pytest.fixture(scope="module")
def mtls_broker(tmp_path_factory, pki):
    b = tls_broker(tmp_path_factory, pki, "required")
    yield b
    stop_all([b])


def librdkafka_settings(pki, cert=None, ca=None) -> dict:
    out = {"security.protocol": "SSL", "ssl.ca.location": str(ca or pki.ca)}
    if cert:
        out.update({"ssl.certificate.location": str(cert[0]), "ssl.key.location": str(cert[1])})
    return out


# --- the three libraries, each with its own TLS settings ---------------------------------------------

def confluent_roundtrip(bootstrap: str, topic: str, sec: dict) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", **sec})
    for i in range(N):
        p.produce(topic, f"confluent-{i}".encode(), on_delivery=lambda e, _m: e and errors.append(e))
    assert p.flush(60) == 0 and not errors, errors[:3]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "tls", "enable.auto.commit": False, **sec})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        idle = 0
        while len(got) < N and idle < 30:
            batch = c.consume(1000, timeout=1.0)
            idle = 0 if batch else idle + 1
            got += [m.value() for m in batch if m.error() is None]
        return got
    finally:
        c.close()


def confluent_errors(bootstrap: str, sec: dict, seconds: float = 3.0) -> list[str]:
    """What librdkafka reports (error_cb) while a producer tries to reach ``bootstrap``; nothing acknowledged."""
    from confluent_kafka import Producer

    errors: list[str] = []
    delivered: list = []
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": int(seconds * 1000),
                  "error_cb": lambda e: errors.append(e.str()), **sec})
    p.produce("refused", b"x", on_delivery=lambda e, _m: delivered.append(e))
    p.flush(seconds + 10)
    assert delivered and delivered[0] is not None, "a message was acknowledged over a refused connection"
    return errors


def kafka_python_kwargs(pki, cert=None, ca=None) -> dict:
    out = {"security_protocol": "SSL", "ssl_cafile": str(ca or pki.ca)}
    if cert:
        out.update({"ssl_certfile": str(cert[0]), "ssl_keyfile": str(cert[1])})
    return out


def kafka_python_refused(bootstrap: str, kw: dict) -> None:
    """kafka-python (3.x) cannot bootstrap: KafkaTimeoutError, as it reports every failed connection."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaProducer(bootstrap_servers=bootstrap, bootstrap_timeout_ms=3000, **kw).close(1)


def aiokafka_refused(bootstrap: str, **kw) -> None:
    """aiokafka cannot start a producer: KafkaConnectionError."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    async def start():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=5000, **kw)
        try:
            await p.start()
        finally:
            await p.stop()

    with pytest.raises(KafkaConnectionError):
        asyncio.run(start())


def aiokafka_ssl(pki, cert=None, ca=None) -> dict:
    from aiokafka.helpers import create_ssl_context

    return {"security_protocol": "SSL", "ssl_context": create_ssl_context(
        cafile=str(ca or pki.ca), certfile=cert and str(cert[0]), keyfile=cert and str(cert[1]))}


def product_refused(bootstrap: str, sec: dict, match: str = "") -> None:
    """The product's Kafka client cannot ask Metadata: BrokerUnavailableError (naming why, ``match``)."""
    from ingest.client.kafka.producer import KafkaProducer
    from ingest.errors import BrokerUnavailableError

    p = KafkaProducer({**sec, "bootstrap.servers": bootstrap, "max.block.ms": 3000})
    try:
        with pytest.raises(BrokerUnavailableError, match=match):
            p.partitions_for("refused")
    finally:
        p.close()


def kafka_python_roundtrip(bootstrap: str, topic: str, kw: dict) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **kw)
    try:
        for f in [p.send(topic, f"kafka-python-{i}".encode()) for i in range(N)]:
            f.get(30)
    finally:
        p.close(10)
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=20_000, **kw)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = []
        for r in c:
            got.append(r.value)
            if len(got) >= N:
                break
        return got
    finally:
        c.close()


def aiokafka_roundtrip(bootstrap: str, topic: str, pki, cert=None) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.helpers import create_ssl_context

    def ctx():
        return create_ssl_context(cafile=str(pki.ca), certfile=cert and str(cert[0]), keyfile=cert and str(cert[1]))

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", security_protocol="SSL", ssl_context=ctx())
        await p.start()
        try:
            for i in range(N):
                await p.send_and_wait(topic, f"aiokafka-{i}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, security_protocol="SSL",
                             ssl_context=ctx())
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            got, idle = [], 0
            while len(got) < N and idle < 30:
                batch = await c.getmany(timeout_ms=1000)
                idle = 0 if batch else idle + 1
                got += [r.value for rs in batch.values() for r in rs]
            return got
        finally:
            await c.stop()

    return asyncio.run(run())


def expected(prefix: str) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(N)]


def topic() -> str:
    return f"tls-{uuid.uuid4().hex[:8]}"


# --- the proof -------------------------------------------------------------------------------------

def test_confluent_kafka_produces_and_consumes_over_ssl(broker, pki):
    assert confluent_roundtrip(f"127.0.0.1:{broker.ssl_port}", topic(), librdkafka_settings(pki)) \
        == expected("confluent")


def test_kafka_python_produces_and_consumes_over_ssl(broker, pki):
    assert kafka_python_roundtrip(f"127.0.0.1:{broker.ssl_port}", topic(), kafka_python_kwargs(pki)) \
        == expected("kafka-python")


def test_aiokafka_produces_and_consumes_over_ssl(broker, pki):
    assert aiokafka_roundtrip(f"127.0.0.1:{broker.ssl_port}", topic(), pki) == expected("aiokafka")


def test_the_products_kafka_client_produces_and_fetches_over_ssl(mtls_broker, pki):
    from ingest.client.kafka.fetcher import KafkaFetcher
    from ingest.client.kafka.producer import KafkaProducer

    cert = pki.client("loader")
    sec = {**librdkafka_settings(pki, cert), "bootstrap.servers": f"127.0.0.1:{mtls_broker.ssl_port}"}
    t = topic()
    p = KafkaProducer(sec, acks="all")
    try:
        for i in range(N):
            p.send(t, f"ingest-{i}".encode(), partition=0)
        assert sum(d.records for d in p.flush()) == N
    finally:
        p.close()
    f = KafkaFetcher(sec)
    try:
        got, offset = [], 0
        while len(got) < N:
            batches = f.fetch(t, 0, offset, max_wait_ms=100)
            got += [bytes(r.value) for r in batches.records()]
            offset = batches.next_offset
        assert got == expected("ingest")
    finally:
        f.close()


def test_mutual_tls_admits_a_trusted_client_certificate_and_refuses_none_or_an_untrusted_one(mtls_broker, pki):
    bootstrap = f"127.0.0.1:{mtls_broker.ssl_port}"
    assert confluent_roundtrip(bootstrap, topic(), librdkafka_settings(pki, pki.client("alice"))) \
        == expected("confluent")
    assert aiokafka_roundtrip(bootstrap, topic(), pki, pki.client("carol")) == expected("aiokafka")
    # no certificate: the broker's TLS 1.3 alert, as librdkafka words it
    errors = confluent_errors(bootstrap, librdkafka_settings(pki))
    assert any("certificate required" in e for e in errors), errors
    aiokafka_refused(bootstrap, **aiokafka_ssl(pki))
    product_refused(bootstrap, librdkafka_settings(pki))
    # a certificate from a CA the broker does not trust
    mallory = pki.untrusted_client("mallory")
    errors = confluent_errors(bootstrap, librdkafka_settings(pki, mallory))
    assert any("unknown ca" in e for e in errors), errors
    aiokafka_refused(bootstrap, **aiokafka_ssl(pki, mallory))
    product_refused(bootstrap, librdkafka_settings(pki, mallory))
    kafka_python_refused(bootstrap, kafka_python_kwargs(pki))


def test_a_client_that_does_not_trust_the_brokers_ca_is_refused(broker, pki):
    bootstrap = f"127.0.0.1:{broker.ssl_port}"
    errors = confluent_errors(bootstrap, librdkafka_settings(pki, ca=pki.untrusted_ca))
    assert any("certificate verify failed" in e for e in errors), errors
    kafka_python_refused(bootstrap, kafka_python_kwargs(pki, ca=pki.untrusted_ca))
    aiokafka_refused(bootstrap, **aiokafka_ssl(pki, ca=pki.untrusted_ca))
    # the product's client names the verification failure
    product_refused(bootstrap, librdkafka_settings(pki, ca=pki.untrusted_ca), "certificate verify failed")


def test_a_plaintext_client_on_the_ssl_port_gets_an_error_and_the_broker_serves_others(broker, pki):
    bootstrap = f"127.0.0.1:{broker.ssl_port}"
    # librdkafka logs "might be caused by incorrect security.protocol"; its error callback says the broker is down
    assert confluent_errors(bootstrap, {"security.protocol": "PLAINTEXT"})
    kafka_python_refused(bootstrap, {})
    aiokafka_refused(bootstrap)
    product_refused(bootstrap, {})
    assert confluent_roundtrip(bootstrap, topic(), librdkafka_settings(pki)) == expected("confluent")
    # and the plaintext listener of the same broker is unchanged
    assert confluent_roundtrip(f"127.0.0.1:{broker.kafka_port}", topic(), {}) == expected("confluent")
    assert "TLS handshake failed" in broker.output()

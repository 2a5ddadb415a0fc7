"""SaslHandshake (17) and SaslAuthenticate (36), declared once for every version: each request and response,
with every field set to something other than its default, reads back as written, and kafka-python 3 (whose
classes are generated from Kafka's JSON specs) reads our bytes and writes the very same bytes back."""
from __future__ import annotations

import pytest

from ingest.wire.kafka import sasl_authenticate as sa
from ingest.wire.kafka import sasl_handshake as sh

pytest.importorskip("kafka.protocol.sasl")   # kafka-python >= 3.0 (the test extra)
from kafka.protocol import sasl as ksasl  # noqa: E402

CASES = [
    (sh.SaslHandshakeRequest, lambda v: sh.SaslHandshakeRequest("SCRAM-SHA-512"), range(0, 2),
     ksasl.SaslHandshakeRequest),
    (sh.SaslHandshakeResponse, lambda v: sh.SaslHandshakeResponse(33, ("PLAIN", "SCRAM-SHA-256")), range(0, 2),
     ksasl.SaslHandshakeResponse),
    (sa.SaslAuthenticateRequest, lambda v: sa.SaslAuthenticateRequest(b"n,,n=alice,r=abc\x00\xff"), range(0, 3),
     ksasl.SaslAuthenticateRequest),
    (sa.SaslAuthenticateResponse, lambda v: sa.SaslAuthenticateResponse(
        58, "Authentication failed: Invalid username or password", b"v=sig", 3600000 if v >= 1 else 0), range(0, 3),
     ksasl.SaslAuthenticateResponse),
    (sa.SaslAuthenticateResponse, lambda v: sa.SaslAuthenticateResponse(0, None, b"", 0), range(0, 3),
     ksasl.SaslAuthenticateResponse),
]


def _each():
    for i, (ours, build, versions, theirs) in enumerate(CASES):
        for v in versions:
            yield pytest.param(ours, build, v, theirs, id=f"{ours.__name__}-{i}-v{v}")


@pytest.mark.parametrize(("cls", "build", "version", "theirs"), list(_each()))
def test_every_version_reads_back_and_matches_kafka_pythons_bytes(cls, build, version, theirs):
    value = build(version)
    body = value.encode(version)
    assert cls.decode(body, version) == value
    assert theirs.min_version <= version <= theirs.max_version
    assert theirs.decode(body, version=version).encode() == body


@pytest.mark.parametrize(("cls", "build", "version", "theirs"), list(_each()))
def test_a_cut_off_body_is_malformed_naming_the_message(cls, build, version, theirs):
    body = build(version).encode(version)
    for cut in (1, len(body) // 2, len(body) - 1):
        with pytest.raises(Exception) as info:
            cls.decode(body[:cut], version)
        assert type(info.value).__name__ in ("MalformedRequestError", "MalformedResponseError")
        assert cls.__name__ in str(info.value)


def test_every_version_kafka_python_has_is_declared():
    for ours, _build, versions, theirs in CASES:
        assert set(range(theirs.min_version, theirs.max_version + 1)) <= set(versions), ours.__name__

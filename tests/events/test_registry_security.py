"""The schema registry over HTTPS with HTTP basic auth and read/write roles, through real clients.

One real registry process (``ingest registry start`` with ``listeners=https://...``,
``authentication.method=BASIC``) and confluent-kafka's ``SchemaRegistryClient``; certificates made
by the test (tests/harness/tls.py).
"""
from __future__ import annotations

import json
import os
import logging
import pickle
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from confluent_kafka.schema_registry import ConfigCompatibilityLevel, Schema, SchemaRegistryClient, ServerConfig
from confluent_kafka.schema_registry.error import SchemaRegistryError

from ingest.errors import IngestError, RegistryUnavailableError, SchemaError
from ingest.events.event_producer import EventProducer
from ingest.events.envelope import HEADER_FIELD
from ingest.events.loadgen import EventGenerator
from ingest.events.registry_client import RegistryClient
from ingest.events.registry_users import user_line
from ingest.events.schemas import PAGE_VIEW, load_schema
from ingest.events.serde import EventSerializer
from ingest.loader.config import LOADER_CONFIG
from ingest.loader.job import task_settings
from ingest.loader.task import new_decoder
from ingest.registry_client_config import RegistryAuth
from tests.harness.registry import REPO, RegistryProcess, secured_registry
from tests.harness.tls import CertificateAuthority

pytestmark = pytest.mark.processes

RECORD = json.dumps({"type": "record", "name": "Sec", "fields": [{"name": "a", "type": "int"}]})


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    d = tmp_path_factory.mktemp("registry-sec")
    reg, ca = secured_registry(d, {"alice": ("alice-pw", ("admin",)), "bob": ("bob-pw", ("readonly",))},
                               key_password="keypw")
    keypw = d / "key.password"
    keypw.write_text("keypw\n")
    reg.overrides["ssl.key.password"] = f"${{file:{keypw}}}"  # the key's password from a file
    reg.start()
    try:
        yield reg, ca, d
    finally:
        reg.stop()


def _client(reg, ca, user_info: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": reg.url, "ssl.ca.location": str(ca.cert), "basic.auth.user.info": user_info,
                                 "max.retries": 0})


def test_confluent_client_registers_and_fetches_over_https_with_basic_auth(secured):
    reg, ca, _ = secured
    assert reg.url.startswith("https://")
    sr = _client(reg, ca, "alice:alice-pw")
    schema_id = sr.register_schema("sec-a-value", Schema(RECORD, "AVRO"))
    fresh = _client(reg, ca, "alice:alice-pw")  # no cache: asks the server
    assert json.loads(fresh.get_schema(schema_id).schema_str) == json.loads(RECORD)
    assert fresh.get_latest_version("sec-a-value").schema_id == schema_id


def test_a_wrong_password_is_401_through_the_client_error(secured):
    reg, ca, _ = secured
    for user_info in ("alice:wrong", "nobody:alice-pw"):
        with pytest.raises(SchemaRegistryError) as err:
            _client(reg, ca, user_info).get_subjects()
        assert (err.value.http_status_code, err.value.error_code, err.value.error_message) == (401, 401, "Unauthorized")


def test_no_credentials_is_401_with_confluents_body_and_a_basic_challenge(secured):
    reg, ca, _ = secured
    ctx = ssl.create_default_context(cafile=str(ca.cert))
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(reg.url + "/subjects", timeout=10, context=ctx)
    assert err.value.code == 401
    assert err.value.headers["WWW-Authenticate"] == 'Basic realm="SchemaRegistry-Props"'
    assert json.loads(err.value.read()) == {"error_code": 401, "message": "Unauthorized"}


def test_a_read_only_user_reads_but_cannot_write(secured):
    reg, ca, _ = secured
    schema_id = _client(reg, ca, "alice:alice-pw").register_schema("sec-ro-value", Schema(RECORD, "AVRO"))
    bob = _client(reg, ca, "bob:bob-pw")
    assert json.loads(bob.get_schema(schema_id).schema_str) == json.loads(RECORD)
    assert "sec-ro-value" in bob.get_subjects()
    assert bob.lookup_schema("sec-ro-value", Schema(RECORD, "AVRO")).schema_id == schema_id  # a POST that reads
    for write in (lambda: bob.register_schema("sec-ro2-value", Schema(RECORD, "AVRO")),
                  lambda: bob.delete_subject("sec-ro-value"),
                  lambda: bob.set_config("sec-ro-value", ServerConfig(compatibility=ConfigCompatibilityLevel.NONE))):
        with pytest.raises(SchemaRegistryError) as err:
            write()
        assert (err.value.http_status_code, err.value.error_code) == (403, 40301)
        assert "User bob is denied operation Write" in err.value.error_message
    assert bob.get_subjects().count("sec-ro-value") == 1  # nothing was deleted


def test_plain_http_and_an_untrusted_certificate_are_refused(secured):
    reg, ca, d = secured
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(reg.url.replace("https://", "http://") + "/subjects", timeout=10).read()
    other = CertificateAuthority(d / "other-ca", name="another CA")
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):  # the client's httpx ConnectError
        SchemaRegistryClient({"url": reg.url, "ssl.ca.location": str(other.cert),
                              "basic.auth.user.info": "alice:alice-pw", "max.retries": 0}).get_subjects()
    with pytest.raises(urllib.error.URLError) as err:
        urllib.request.urlopen(reg.url + "/subjects", timeout=10, context=ssl.create_default_context())
    assert isinstance(err.value.reason, ssl.SSLCertVerificationError)


def test_bad_authorization_headers_and_garbage_bytes_do_not_stop_the_registry(secured):
    reg, ca, _ = secured
    ctx = ssl.create_default_context(cafile=str(ca.cert))
    for header in ("Basic !!!notbase64", "Basic " + "QQ==" * 2000, "Basic YWxpY2U=", "Bearer abc", "Basic",
                   "Basic w4h6w6k=", "Digest username=alice"):
        req = urllib.request.Request(reg.url + "/subjects", headers={"Authorization": header})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10, context=ctx)
        assert err.value.code in (400, 401, 431), header
    for junk in (b"\x16\x03\x01\x00\x05hello", b"\x00" * 5000, b"GET / HTTP/1.1\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", reg.port), timeout=10) as s:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            try:
                while s.recv(4096):
                    pass
            except OSError:
                pass
    assert reg.proc.poll() is None
    assert isinstance(_client(reg, ca, "alice:alice-pw").get_subjects(), list)


def test_a_cleartext_password_in_the_users_file_stops_the_start_naming_the_line_not_the_password(tmp_path):
    users = tmp_path / "users"
    users.write_text(user_line("alice", "pw", ("admin",), iterations=1000) + "\nmallory: hunter2,admin\n")
    proc = subprocess.run([sys.executable, "-m", "ingest.cli", "registry", "start", "--port", "0", "--store",
                           str(tmp_path / "store"), "--set", "authentication.method=BASIC",
                           "--set", f"authentication.users.file={users}"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"registry users file {users}, line 2" in proc.stderr
    assert "hunter2" not in proc.stderr + proc.stdout


# --- the product's clients: credentials and the CA from their configs ---------------------------------------------


def _client_keys(reg, ca, user_info_ref: str) -> dict:
    return {"basic.auth.credentials.source": "USER_INFO", "basic.auth.user.info": user_info_ref,
            "schema.registry.ssl.ca.location": str(ca.cert)}


def test_the_event_producer_and_the_loaders_decoder_use_the_credentials_of_their_configs(secured, tmp_path,
                                                                                        monkeypatch, caplog):
    reg, ca, d = secured
    secret = tmp_path / "registry.properties"
    secret.write_text("user.info=alice:alice-pw\n")
    monkeypatch.setenv("REGISTRY_READER", "bob:bob-pw")
    # the event producer registers with the write user's credentials, read from a properties file
    ep = EventProducer({"broker.list": "0:127.0.0.1:9"}, None, monitoring_enable=False,
                       config={"schema.registry.url": reg.url, **_client_keys(reg, ca, f"${{file:{secret}:user.info}}")})
    try:
        schema = load_schema(PAGE_VIEW)
        schema_id = ep.register_topic("sec-pv", schema)
        record = {**EventGenerator(PAGE_VIEW, seed=1).batch(1)[0], HEADER_FIELD: ep.headers.next()}
        payload = EventSerializer(ep.registry, "sec-pv-value", schema).serialize(record)
    finally:
        ep.close(timeout_s=0)
    assert "alice-pw" not in repr(ep.config) and "[hidden]" in repr(ep.config)

    # the loader's tasks decode with the read-only user's credentials, from the environment
    config = LOADER_CONFIG.parse({"destination": str(tmp_path / "dest"), "registry.url": reg.url,
                                  **_client_keys(reg, ca, "${env:REGISTRY_READER}")})
    settings = task_settings(config, "r1")
    assert "bob-pw" not in repr(settings) and "bob-pw" not in repr(config)
    with caplog.at_level(logging.DEBUG):
        schema_used, decoded = new_decoder(pickle.loads(pickle.dumps(settings))).decode(payload, topic="sec-pv", offset=0)
    assert schema_used == schema_id and decoded["header"] == record[HEADER_FIELD]
    assert "bob-pw" not in caplog.text and "alice-pw" not in caplog.text

    # without credentials the same path is refused, and says why without retrying
    anonymous = task_settings(LOADER_CONFIG.parse({"destination": str(tmp_path / "dest"), "registry.url": reg.url,
                                                   "schema.registry.ssl.ca.location": str(ca.cert)}), "r2")
    with pytest.raises(IngestError, match="HTTP 401"):
        new_decoder(anonymous).decode(payload, topic="sec-pv", offset=0)


def test_the_product_client_refuses_an_untrusted_registry_at_once_and_pickles_with_its_tls(secured, tmp_path):
    reg, ca, d = secured
    other = CertificateAuthority(tmp_path / "other", name="another CA")
    client = RegistryClient(reg.url, retries=6, backoff_s=5.0, max_backoff_s=5.0,
                            auth=RegistryAuth("alice:alice-pw", str(other.cert)))
    with pytest.raises(SchemaError, match="certificate is not trusted"):  # final: no 30 s of retries
        client.subjects()
    assert "alice-pw" not in repr(client)
    trusted = RegistryClient(reg.url, auth=RegistryAuth("alice:alice-pw", str(ca.cert)))
    trusted.register("sec-pickled-value", json.loads(RECORD))
    assert "sec-pickled-value" in pickle.loads(pickle.dumps(trusted)).subjects()


def test_a_registry_that_requires_client_certificates_serves_only_clients_that_show_one(tmp_path):
    ca = CertificateAuthority(tmp_path / "ca")
    server, loader = ca.issue("registry"), ca.issue("loader", client=True)
    stranger = CertificateAuthority(tmp_path / "stranger", name="stranger CA").issue("loader", client=True)
    reg = RegistryProcess(tmp_path / "store", https=True, overrides={
        "ssl.keystore.location": server.pem, "ssl.truststore.location": ca.cert,
        "ssl.client.authentication": "REQUIRED"}).start()
    try:
        shown = RegistryAuth(ca_location=str(ca.cert), certificate_location=str(loader.cert),
                             key_location=str(loader.key))
        assert RegistryClient(reg.url, auth=shown).subjects() == []
        for auth in (RegistryAuth(ca_location=str(ca.cert)),
                     RegistryAuth(ca_location=str(ca.cert), certificate_location=str(stranger.cert),
                                  key_location=str(stranger.key))):
            # the registry closes the connection once the handshake fails (asyncio sends no alert)
            with pytest.raises(RegistryUnavailableError, match="unreachable"):
                RegistryClient(reg.url, retries=0, auth=auth).subjects()
        assert reg.proc.poll() is None
        assert SchemaRegistryClient({"url": reg.url, "ssl.ca.location": str(ca.cert),
                                     "ssl.certificate.location": str(loader.cert),
                                     "ssl.key.location": str(loader.key)}).get_subjects() == []
    finally:
        reg.stop()


def test_users_and_passwords_change_without_a_restart_and_a_bad_file_keeps_the_old_users(secured, tmp_path):
    reg, ca, d = secured
    users = d / "users"
    before = users.read_text()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    passwd = [sys.executable, "-m", "ingest.cli", "registry", "passwd", "--file", str(users)]
    try:
        subprocess.run(passwd + ["--user", "carol", "--roles", "admin"], input="carol-pw\n", text=True, env=env,
                       cwd=REPO, check=True, capture_output=True, timeout=60)
        subprocess.run(passwd + ["--user", "bob", "--roles", "readonly"], input="bob-new\n", text=True, env=env,
                       cwd=REPO, check=True, capture_output=True, timeout=60)
        assert (users.stat().st_mode & 0o777) == 0o600
        _client(reg, ca, "carol:carol-pw").register_schema("sec-carol-value", Schema(RECORD, "AVRO"))
        assert "sec-carol-value" in _client(reg, ca, "bob:bob-new").get_subjects()
        with pytest.raises(SchemaRegistryError) as err:
            _client(reg, ca, "bob:bob-pw").get_subjects()  # the old password, remembered before: forgotten
        assert err.value.http_status_code == 401
        broken = users.with_name("users.new")
        broken.write_text(users.read_text() + "mallory: hunter2,admin\n")
        broken.replace(users)
        assert "sec-carol-value" in _client(reg, ca, "carol:carol-pw").get_subjects()  # the users before stay
        assert "hunter2" not in reg.log_path.read_text() and "carol-pw" not in reg.log_path.read_text()
    finally:
        fixed = users.with_name("users.fixed")
        fixed.write_text(before)
        fixed.replace(users)

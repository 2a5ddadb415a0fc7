"""A client's security settings and the listener it picks from ``/brokers/endpoints`` (a real ZooKeeper).

A broker registers every listener with its security protocol; the mirror, the loader and the product's
producer take, of each broker, the listener whose protocol is their ``security.protocol`` (the first
listener is the inter-broker one here, which a client must not be sent to)."""
from __future__ import annotations

import pickle

import pytest

from ingest import znodes
from ingest.client.discovery import read_kafka_servers
from ingest.client.fetch_settings import FetchSettings
from ingest.client.kafka.security import ClientSecurity, matching_listener
from ingest.errors import BrokerUnavailableError, MirrorConfigError
from ingest.loader.task import TaskSettings
from ingest.mirror.config import parse_mirror_config, source_specs, target_security
from ingest.mirror.kafka_io import kafka_bootstrap

pytestmark = pytest.mark.processes   # a real ZooKeeper


def _register(zk, broker_id: int, listeners: list[tuple[str, str, int]], protocols: dict[str, str]) -> None:
    zk.create(znodes.broker_path(broker_id), znodes.broker_value("127.0.0.1", 9000 + broker_id), makepath=True)
    zk.create(znodes.broker_endpoints_path(broker_id), znodes.broker_endpoints_value(listeners, protocols),
              makepath=True)


def test_each_client_takes_the_listener_of_its_protocol(zk):
    protocols = {"REPLICATION": "SSL", "CLIENTS": "SASL_SSL", "LOCAL": "PLAINTEXT"}
    for bid in (1, 2):
        _register(zk, bid, [("REPLICATION", "127.0.0.1", 100 + bid), ("CLIENTS", "127.0.0.1", 200 + bid),
                            ("LOCAL", "127.0.0.1", 300 + bid)], protocols)
    assert kafka_bootstrap(zk, "SASL_SSL") == "127.0.0.1:201,127.0.0.1:202"
    assert kafka_bootstrap(zk) == "127.0.0.1:301,127.0.0.1:302"   # PLAINTEXT by default
    assert read_kafka_servers(zk, "SASL_SSL") == (("127.0.0.1", 201), ("127.0.0.1", 202))
    assert read_kafka_servers(zk) == (("127.0.0.1", 101), ("127.0.0.1", 102))   # no protocol: the first, as before
    with pytest.raises(BrokerUnavailableError, match="SASL_PLAINTEXT.*PLAINTEXT, SASL_SSL, SSL"):
        kafka_bootstrap(zk, "SASL_PLAINTEXT")


def test_a_listener_without_a_mapped_protocol_has_its_names_protocol():
    data = znodes.broker_endpoints_value([("SSL", "h", 1), ("PLAINTEXT", "h", 2)], {})
    assert matching_listener(data, "PLAINTEXT") == ("h", 2) and matching_listener(data, "SSL") == ("h", 1)
    assert matching_listener(data, "SASL_SSL") is None


def test_the_mirror_takes_security_per_cluster_and_hides_the_passwords():
    config = parse_mirror_config({
        "sources": "dc1,dc2", "source.dc1.zk.connect": "z1", "source.dc2.zk.connect": "z2",
        "source.dc1.security.protocol": "SASL_SSL", "source.dc1.sasl.mechanism": "SCRAM-SHA-512",
        "source.dc1.sasl.username": "mirror", "source.dc1.sasl.password": "s3cret",
        "target.zk.connect": "zt", "target.security.protocol": "SSL", "target.ssl.ca.location": "/ca.pem"})
    dc1, dc2 = source_specs(config)
    assert (dc1.security.protocol, dc1.security.sasl_username, dc1.security.sasl_password) == \
        ("SASL_SSL", "mirror", "s3cret")
    assert dc2.security == ClientSecurity()
    assert (target_security(config).protocol, target_security(config).ssl_ca_location) == ("SSL", "/ca.pem")
    assert "s3cret" not in repr(dc1) and config.redacted()["source.dc1.sasl.password"] == "[hidden]"
    with pytest.raises(MirrorConfigError, match="source.dc2.security.protocol: 'TLS' is not allowed.*SASL_SSL"):
        parse_mirror_config({"sources": "dc2", "source.dc2.zk.connect": "z2", "source.dc2.security.protocol": "TLS",
                             "target.zk.connect": "zt"})


def test_the_loader_tasks_carry_the_security_settings():
    settings = FetchSettings.from_config({"security.protocol": "SASL_SSL", "sasl.username": "loader",
                                          "sasl.password": "pw"})
    assert pickle.loads(pickle.dumps(settings)) == settings
    task = TaskSettings("/d", "r", "avro", "http://r", fetch=settings)
    from dataclasses import asdict

    assert TaskSettings.from_json(asdict(task)) == task   # as the ingest_load data source ships it
    assert settings.to_json()["security"]["sasl.password"] == "[hidden]" and "pw" not in repr(settings)

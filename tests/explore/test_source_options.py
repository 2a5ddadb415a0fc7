"""Bad options of ``format("ingest")`` fail with a message naming the value and what is allowed; a read
writes nothing anywhere (ZooKeeper, broker logs, the registry's store)."""
from __future__ import annotations

import hashlib
import json
import os

import pytest

from ingest.events.registry_client import RegistryClient
from tests.explore.conftest import VIEWS
from tests.explore.helpers import page_view_schema


def _offsets(cluster, name):
    return [s.offset for s in cluster.sent[VIEWS] if s.partition == name]


def _all(value_of):
    return json.dumps({VIEWS: {n: value_of(n) for n in ("0-0", "0-1", "1-0", "1-1")}})


def test_bad_options_fail_the_query_with_the_message_at_load_planning_and_read(read, cluster):
    """One bad option per stage where Spark runs the source's code (every check's message: test_offsets.py)."""
    first = _offsets(cluster, "0-0")
    cases = [  # (options, text the error must contain)
        # load(): schema(); Spark hands option names over lower-cased
        ({"startingOffset": "earliest"}, "unknown spark source config key 'startingoffset'; did you mean "
                                         "startingOffsets"),
        # collect(): planning the partitions on the driver
        ({"startingOffsets": "latest"}, "startingOffsets: 'latest' is not allowed for a batch read (as in Spark's "
                                        "Kafka source); allowed is earliest or JSON per partition"),
        # collect(): reading on an executor, from an offset inside a message
        ({"startingOffsets": _all(lambda n: first[1] + 1 if n == "0-0" else -2)},
         f"sx-views partition 0-0: reading from offset {first[1] + 1}: broker answered OFFSET_OUT_OF_RANGE (1) to "
         f"FETCH sx-views/0 at offset {first[1] + 1}"),
    ]
    for options, text in cases:
        with pytest.raises(Exception) as err:
            read(VIEWS, **options)
        assert text in str(err.value), (options, str(err.value)[:3000])


def test_a_topic_without_schema_or_without_broker_is_named(cluster):
    """The registry and discovery errors, as the driver raises them (no Spark needed to see the text)."""
    from ingest.errors import SchemaNotFoundError, UnknownTopicError
    from ingest.explore.partitions import topic_partitions
    from ingest.explore.source import reader_schema
    from ingest.explore.source_config import parse_options

    def cfg(topic):
        return parse_options({"topic": topic, "brokers": cluster.broker_csv, "registry.url": cluster.registry_url})

    with pytest.raises(SchemaNotFoundError) as err:
        reader_schema(cfg("sx-none"))
    assert f"topic 'sx-none' has no schema: subject 'sx-none-value' is not in the registry {cluster.registry_url}" \
        in str(err.value)
    RegistryClient(cluster.registry_url).register("sx-ghost-value", page_view_schema())
    assert reader_schema(cfg("sx-ghost"))[1]["name"] == "PageViewEvent"  # the subject exists, the topic does not
    with pytest.raises(UnknownTopicError) as err:
        topic_partitions(cfg("sx-ghost"))
    assert str(err.value) == (f"topic 'sx-ghost' is on no broker of {cluster.broker_csv}; "
                              f"topics: sx-gzip, sx-kafka07, sx-repl, sx-views")


def _znodes(zk, path="/"):
    data, stat = zk.retry(zk.get, path)
    out = {path: (data, stat.version, stat.cversion)}
    for child in zk.retry(zk.get_children, path):
        out.update(_znodes(zk, path.rstrip("/") + "/" + child))
    return out


def _files(*roots):
    """path -> sha256 of every file (contents, not mtimes: a broker rewrites its high-watermark checkpoint
    on a timer with the same bytes)."""
    out = {}
    for root in roots:
        for d, _, names in os.walk(root):
            for n in names:
                with open(os.path.join(d, n), "rb") as f:
                    out[os.path.join(d, n)] = hashlib.sha256(f.read()).hexdigest()
    return out


def test_a_read_writes_no_znode_and_no_file(read, cluster):
    from kazoo.client import KazooClient  # deferred: kazoo

    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(timeout=15)
    try:
        roots = [b.workdir for b in cluster.brokers] + [cluster.registry_dir]
        read(VIEWS)  # once before, so the brokers' own first-time work is not counted
        before_zk, before_files = _znodes(zk), _files(*roots)
        rows = read(VIEWS, **{"zk.connect": cluster.zk_connect})
        after_zk, after_files = _znodes(zk), _files(*roots)
    finally:
        zk.stop()
        zk.close()
    assert len(rows) == 32
    assert after_zk == before_zk
    assert after_files == before_files
    assert any(p.endswith(".kafka") for p in before_files)  # the snapshot saw the broker logs


def test_a_secured_registry_is_read_with_the_credentials_and_ca_of_the_options(read, cluster, tmp_path):
    """HTTPS and basic auth: the options name the CA and the user info (from a file: Spark shows options)."""
    from ingest.events.envelope import HeaderFactory, ProducerIdentity
    from ingest.events.loadgen import EventGenerator
    from ingest.events.serde import EventSerializer
    from ingest.registry_client_config import RegistryAuth
    from tests.explore.helpers import T0, send
    from tests.harness.registry import secured_registry
    from tests.harness.wire import WireClient

    reg, ca = secured_registry(tmp_path / "registry", {"writer": ("w-pw", ("admin",)), "reader": ("r-pw", ())})
    reg.start()
    try:
        ser = EventSerializer(RegistryClient(reg.url, auth=RegistryAuth("writer:w-pw", str(ca.cert))),
                              "sx-secure-value", page_view_schema())
        headers = HeaderFactory(ProducerIdentity("h1", "explore-test", "session-secure"))
        batch = [(ser.serialize({**rec, "header": headers.next(time_ms=T0 + i)}), rec, T0 + i)
                 for i, rec in enumerate(EventGenerator(seed=7).batch(3))]
        b = cluster.brokers[0]
        with WireClient(b.host, b.port) as w:
            send(w, "sx-secure", 0, "0-0", batch)
        user_info = tmp_path / "reader.properties"
        user_info.write_text("user.info=reader:r-pw\n")
        rows = read("sx-secure", **{"registry.url": reg.url, "basic.auth.credentials.source": "USER_INFO",
                                    "basic.auth.user.info": f"${{file:{user_info}:user.info}}",
                                    "schema.registry.ssl.ca.location": str(ca.cert)})
        assert [r["url"] for r in rows] == [rec["url"] for _, rec, _ in batch]
        with pytest.raises(Exception, match="HTTP 401"):
            read("sx-secure", **{"registry.url": reg.url, "schema.registry.ssl.ca.location": str(ca.cert)})
    finally:
        reg.stop()

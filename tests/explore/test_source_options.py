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


def test_bad_options_name_the_value_and_what_is_allowed(read, cluster):
    RegistryClient(cluster.registry_url).register("sx-ghost-value", page_view_schema())
    first = _offsets(cluster, "0-0")
    cases = [  # (topic, options, text the error must contain)
        # Spark hands option names over lower-cased
        (VIEWS, {"startingOffset": "earliest"}, "unknown spark source config key 'startingoffset'; "
                                                "did you mean startingOffsets"),
        (VIEWS, {"startingOffsets": "latest"}, "startingOffsets: 'latest' is not allowed for a batch read (as in "
                                               "Spark's Kafka source); allowed is earliest or JSON per partition"),
        (VIEWS, {"endingOffsets": "earliest"}, "endingOffsets: 'earliest' is not allowed for a batch read"),
        (VIEWS, {"startingOffsets": "first"}, "startingOffsets: 'first'; allowed is earliest or JSON per partition"),
        (VIEWS, {"startingOffsets": "{\"sx-views\":"}, "startingOffsets: '{\"sx-views\":' is not JSON"),
        (VIEWS, {"startingOffsets": json.dumps({"other": {"0": 1}})},
         "must be a JSON object with the one key 'sx-views' (the topic read)"),
        (VIEWS, {"startingOffsets": _all(lambda n: -1)},
         "startingOffsets: -1 for partition 0-0 of 'sx-views'; allowed is an offset >= 0 or -2 (earliest)"),
        (VIEWS, {"endingOffsets": _all(lambda n: 10**9)},
         "endingOffsets: offset 1000000000 of partition 0-0 of 'sx-views' is outside the log's [0, "),
        (VIEWS, {"startingOffsets": _all(lambda n: first[2] if n == "0-0" else -2),
                 "endingOffsets": _all(lambda n: first[1] if n == "0-0" else -1)},
         f"partition 0-0 of 'sx-views': starting offset {first[2]} is after the ending offset {first[1]}"),
        (VIEWS, {"startingOffsets": _all(lambda n: "x")}, "startingOffsets: partition '0-0' has 'x'; allowed is an "
                                                          "integer"),
        (VIEWS, {"startingTimestamp": "yesterday"},
         "invalid value 'yesterday' for 'startingTimestamp': allowed is an integer in [0, +inf]"),
        (VIEWS, {"startingOffsetsByTimestampStrategy": "skip"},
         "invalid value 'skip' for 'startingOffsetsByTimestampStrategy': allowed is one of error, latest"),
        (VIEWS, {"brokers": "", "zk.connect": ""}, "needs the option brokers (host:port,...) or zk.connect"),
        (VIEWS, {"brokers": "localhost"}, "brokers: 'localhost' is not host:port"),
        ("sx-none", {}, "topic 'sx-none' has no schema: subject 'sx-none-value' is not in the registry"),
        ("sx-ghost", {}, "topic 'sx-ghost' is on no broker of"),
    ]
    for topic, options, text in cases:
        with pytest.raises(Exception) as err:
            read(topic, **options)
        assert text in str(err.value), (options, str(err.value)[:2000])


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

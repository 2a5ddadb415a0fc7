"""The datacenters harness itself: three clusters, each in its own ZooKeeper chroot, all stopped at the end."""
from __future__ import annotations

import os

from kazoo.client import KazooClient

from ingest import znodes
from tests.harness.datacenters import DATACENTERS, OFFLINE, build


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_three_clusters_in_their_own_chroots_and_teardown_stops_every_process(zk_connect, tmp_path):
    started: list = []
    try:
        dc = build(zk_connect, tmp_path, brokers_per_dc=2, offline_brokers=1, topology=started)
        assert sorted(dc.clusters) == sorted([*DATACENTERS, OFFLINE])
        hosts, _, root = zk_connect.partition("/")
        client = KazooClient(hosts=hosts)
        client.start(timeout=15)
        try:
            for name, cluster in dc.clusters.items():
                assert cluster.zk_connect == f"{zk_connect}/{name}"
                ids = client.retry(client.get_children, f"/{root}/{name}" + znodes.BROKER_IDS)
                assert sorted(ids) == [str(b.broker_id) for b in cluster.brokers]
                assert len(ids) == (1 if name == OFFLINE else 2)
        finally:
            client.stop()
            client.close()
        mirror_props = dc.mirror_properties("m1", whitelist="page-views")
        assert mirror_props["sources"] == "dc1,dc2"
        assert mirror_props["source.dc1.zk.connect"] == f"{zk_connect}/dc1"
        assert mirror_props["source.dc2.zk.connect"] == f"{zk_connect}/dc2"
        assert mirror_props["target.zk.connect"] == f"{zk_connect}/offline"
        assert mirror_props["registry.url"] == dc.registry.url and mirror_props["whitelist"] == "page-views"
        pids = [b.pid for c in dc.clusters.values() for b in c.brokers] + [dc.registry.proc.pid]
        assert len(pids) == 6 and all(_alive(p) for p in pids)
    finally:
        for d in started:
            d.stop()
    assert not [p for p in pids if _alive(p)]

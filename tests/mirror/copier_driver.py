"""Runs one PartitionCopier in its own process, for the SIGKILL tests (tests/mirror/test_copier_kills.py).

    python -m tests.mirror.copier_driver SOURCE_ZK TARGET_ZK GROUP TOPIC BROKER_ID PARTITION TARGET_PARTITION FETCH_SIZE

Copies until SIGTERM (then writes its final checkpoint and exits 0) or until it is SIGKILLed.
Prints ``ready`` once the copier thread runs. Counts with the real PartitionCounter (tests.mirror.copier_support.counter_factory).
"""
from __future__ import annotations

import logging
import signal
import sys
import threading
from dataclasses import replace

from ingest.client.discovery import ZkDiscovery, start_kazoo
from ingest.mirror.config import MIRROR_FETCH
from ingest.mirror.copier_factory import make_copier
from ingest.mirror.mapping import MirrorUnit
from ingest.mirror.source_reader import cluster_metadata
from tests.mirror.copier_support import counter_factory


def main(argv: list[str]) -> int:
    source_zk, target_zk, group, topic, broker_id, partition, target_partition, fetch_size = argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    zk = start_kazoo(target_zk)
    source = ZkDiscovery(start_kazoo(source_zk), own_client=True)
    target = ZkDiscovery(start_kazoo(target_zk), own_client=True)
    unit = MirrorUnit("dc1", topic, int(broker_id), int(partition), int(target_partition))
    copier = make_copier(unit, group=group, zk=zk, source_discovery=source, target_metadata=cluster_metadata(target),
                         counter_factory=counter_factory(unit), fetch=replace(MIRROR_FETCH, fetch_size=int(fetch_size)),
                         checkpoint_interval_ms=200)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    t = threading.Thread(target=copier.run, args=(stop,), daemon=True)
    t.start()
    print("ready", flush=True)
    while t.is_alive():
        t.join(0.2)
    copier.close()
    print(f"stopped {copier.state} {copier.stats}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A group consumer run as a subprocess by the tests (so it can be SIGKILLed mid-stream).

Usage: python -m tests.client.group_consumer_proc ZK GROUP TOPIC [HANDLE_MS]
Prints each payload on its own line (flushed) after "handling" it for HANDLE_MS; commits automatically.
"""
from __future__ import annotations

import sys
import time

from ingest.client.consumer_group import ConsumerConnector


def main() -> None:
    zk, group, topic = sys.argv[1:4]
    handle_s = float(sys.argv[4]) / 1000.0 if len(sys.argv) > 4 else 0.0
    connector = ConsumerConnector({"zk.connect": zk, "groupid": group, "zk.sessiontimeout.ms": 2000,
                                   "autocommit.interval.ms": 50, "fetch.size": 2048})
    print("ready", flush=True)
    for m in connector.create_streams({topic: 1})[topic][0]:
        sys.stdout.write(m.payload.decode() + "\n")
        sys.stdout.flush()
        time.sleep(handle_s)


if __name__ == "__main__":
    main()

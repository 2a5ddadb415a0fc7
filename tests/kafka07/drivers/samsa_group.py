"""One member of a samsa 0.3.11 balanced consumer group, under Python 2.7, driven line by line.

``samsa_group.py ZK_CONNECT TOPIC GROUP``: joins GROUP on TOPIC through samsa's own ZooKeeper
consumer (``Topic.subscribe``: registration under ``/consumers/GROUP/ids``, partition ownership
under ``/consumers/GROUP/owners``, rebalancing by ZooKeeper watches). It prints one JSON line
``{"owned": [[broker_id, partition], ...]}`` each time the set of partitions it owns changes.
On the stdin line ``{"consume": N}`` it takes N messages with ``next_message``, commits its
offsets, asks once more (``{"extra": ...}`` is the payload of a message beyond N, or null when
none comes within 1 s), and prints ``{"payloads": [...base64...], "extra": ..., "offsets":
{"broker-partition": committed offset}}``. It exits on ``{"stop": true}`` or end of input.

Kept valid Python 3 syntax (so the project's tools can parse every file), run only on 2.7.
"""
import base64
import json
import sys
import threading
import time

from kazoo.client import KazooClient
from samsa.cluster import Cluster

out_lock = threading.Lock()


def emit(obj):
    with out_lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def owned(consumer):
    return sorted([p.broker.id, p.number] for p in list(consumer.partitions))


def watch_ownership(consumer, stop):
    last = None
    while not stop.is_set():
        now = owned(consumer)
        if now != last:
            emit({"owned": now})
            last = now
        time.sleep(0.05)


def consume(consumer, count):
    payloads = []
    while len(payloads) < count:
        payload = consumer.next_message(block=True, timeout=30)
        if payload is None:
            break               # the test sees the short count and fails on it
        payloads.append(base64.b64encode(bytes(payload)).decode("ascii"))
    consumer.commit_offsets()
    extra = consumer.next_message(block=True, timeout=1)
    offsets = dict(("%d-%d" % (p.broker.id, p.number), p.offset) for p in list(consumer.partitions))
    return {"payloads": payloads, "offsets": offsets,
            "extra": None if extra is None else base64.b64encode(bytes(extra)).decode("ascii")}


def main():
    zk_connect, topic_name, group = sys.argv[1:4]
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=10)
    cluster = Cluster(zk)
    consumer = cluster.topics[topic_name].subscribe(group)
    stop = threading.Event()
    watcher = threading.Thread(target=watch_ownership, args=(consumer, stop))
    watcher.daemon = True
    watcher.start()
    for line in iter(sys.stdin.readline, ""):
        command = json.loads(line)
        if command.get("stop"):
            break
        if "consume" in command:
            stop.set()
            watcher.join()
            emit(consume(consumer, command["consume"]))
    stop.set()
    zk.stop()
    zk.close()


if __name__ == "__main__":
    main()

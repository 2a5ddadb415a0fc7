"""Run Kafka 0.7 requests with the real brod 0.4.3 client under Python 2.7; JSON in, JSON out.

``brod.Kafka`` (the plain socket client) serves produce/fetch/offsets; ``brod.zk`` (its ZooKeeper
producer and consumer, over zc.zk and ZooKeeper's C client) the ``zk_*`` operations.

Same contract as samsa_ops.py: a JSON list of operations on stdin, one JSON list of results
on stdout, ``{"error": ...}`` for an operation that raised. brod 0.4.3 writes magic-0
messages only (Kafka 0.6's format, which 0.7 brokers still accept) and reads magic 0 only.

Kept valid Python 3 syntax (so the project's tools can parse every file), run only on 2.7.
"""
import base64
import json
import signal
import sys

from brod import Kafka

OP_TIMEOUT_S = 10


class OperationTimeout(Exception):
    pass


def _alarm(signum, frame):
    # brod's reader loops forever on a connection the broker closed (recv keeps returning "")
    raise OperationTimeout("no answer within %ds (brod loops on a closed connection)" % OP_TIMEOUT_S)

_clients = {}


def kafka(op):
    key = (op["host"], op["port"])
    if key not in _clients:
        _clients[key] = Kafka(op["host"], op["port"])
    return _clients[key]


def op_produce(op):
    # PRODUCE has no response in 0.7: brod writes the request and returns
    kafka(op).produce(op["topic"], [base64.b64decode(p) for p in op["payloads"]], partition=op["partition"])
    return {"sent": len(op["payloads"])}


def op_fetch(op):
    messages = kafka(op).fetch(op["topic"], op["offset"], partition=op["partition"],
                               max_size=op.get("size", 1 << 20))
    return [[offset, base64.b64encode(payload).decode("ascii")] for offset, payload in messages]


def op_offsets(op):
    return [int(o) for o in kafka(op).offsets(op["topic"].encode("ascii"), op["time"], op.get("max", 1), partition=op["partition"])]


def op_zk_partitions(op):
    """The broker-partitions brod's ZooKeeper layer finds for a topic, as its ZKConsumer reads them
    (``ZKUtil.broker_partitions_for``: the children of /brokers/topics/<topic>, then each count)."""
    from brod.zk import ZKUtil

    util = ZKUtil(op["zk"])
    try:
        return sorted([bp.broker_id, bp.partition] for bp in util.broker_partitions_for(op["topic"]))
    finally:
        util.close()


def op_zk_produce(op):
    """brod's ZKProducer: discovers the brokers and the topic's partitions in ZooKeeper, sends one set
    to a random one of them; returns ``[broker id, partition]`` it chose."""
    from brod.zk import ZKProducer

    producer = ZKProducer(op["zk"], op["topic"])
    try:
        bp = producer.send([base64.b64decode(p) for p in op["payloads"]])
        return [bp.broker_id, bp.partition]
    finally:
        producer.close()


def op_zk_consumer(op):
    """brod's ZKConsumer joins a group on a topic (registers, rebalances over the partitions it finds
    in ZooKeeper); returns the broker-partitions it owns."""
    from brod.zk import ZKConsumer

    consumer = ZKConsumer(op["zk"], op["group"], op["topic"])
    try:
        return sorted([bp.broker_id, bp.partition] for bp in consumer.broker_partitions)
    finally:
        consumer.close()


OPS = dict((name[3:], fn) for name, fn in globals().items() if name.startswith("op_"))


def main():
    signal.signal(signal.SIGALRM, _alarm)
    results = []
    for op in json.load(sys.stdin):
        signal.alarm(OP_TIMEOUT_S)
        try:
            results.append(OPS[op["op"]](op))
        except Exception as exc:  # reported to the test, which asserts on it
            results.append({"error": "%s: %s" % (type(exc).__name__, exc)})
        finally:
            signal.alarm(0)
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()

"""Run Kafka 0.7 requests with the real samsa 0.3.11 client under Python 2.7; JSON in, JSON out.

Run by tests/harness/py27.py as ``.venv-py27/bin/python samsa_ops.py`` with a JSON list of
operations on stdin; prints one JSON list of results (one per operation, in order) on stdout.
An operation that raises gives ``{"error": "<ExceptionClass>: <message>"}`` and the next one
still runs. Payloads travel base64-encoded (``"payloads"``/``"payload"``).

Every request is made by samsa's own code (``samsa.client.Client``, ``samsa.cluster.Cluster``):
this file only calls it and reports what it returned. Two gaps of samsa 0.3.11 are filled here
with the standard library, and said so: samsa cannot write a compressed message (its
``Message.pack_into`` raises NotImplementedError for a codec) and returns a compressed wrapper
as one message without inflating it. ``produce_gzip`` builds the inner message set and the
wrapper with samsa's ``Message.encode`` (magic 1) and gzips with ``gzip`` as Kafka 0.7's
``CompressionUtils`` does; ``fetch`` inflates a gzip wrapper with ``gzip`` and decodes the inner
set with samsa's ``decode_messages``.

Kept valid Python 3 syntax (so the project's tools can parse every file), run only on 2.7.
"""
import base64
import gzip
import io
import json
import sys

from samsa.client import (COMPRESSION_TYPE_GZIP, Client, Message, decode_messages,
                          write_request_header, REQUEST_TYPE_PRODUCE)
from samsa.handlers import ThreadingHandler
from samsa.utils.structuredio import StructuredBytesIO

_clients = {}


def client(op):
    key = (op["host"], op["port"])
    if key not in _clients:
        _clients[key] = Client(op["host"], ThreadingHandler(), port=op["port"], timeout=10)
    return _clients[key]


def payloads(op):
    return [base64.b64decode(p) for p in op["payloads"]]


def b64(data):
    return base64.b64encode(bytes(data)).decode("ascii")


def gunzip(data):
    return gzip.GzipFile(fileobj=io.BytesIO(bytes(data)), mode="rb").read()


def gzip_bytes(data):
    out = io.BytesIO()
    f = gzip.GzipFile(fileobj=out, mode="wb")
    f.write(data)
    f.close()
    return out.getvalue()


def describe(message):
    """One fetched message as samsa saw it (a gzip wrapper also lists its inflated inner messages)."""
    out = {"offset": message.offset, "next_offset": message.next_offset, "magic": message["magic"],
           "compression": message.get("compression", 0), "valid": bool(message.valid),
           "payload": b64(message.payload)}
    if out["compression"] == COMPRESSION_TYPE_GZIP:
        inner = gunzip(message.payload)
        out["inner"] = [describe(m) for m in decode_messages(inner, from_offset=0)]
    return out


def op_produce(op):
    # fire-and-forget, as in 0.7: PRODUCE has no response; the handler thread sends it
    client(op).produce(op["topic"], op["partition"], payloads(op), version=op.get("magic", 0))
    return {"sent": len(op["payloads"])}


def op_multiproduce(op):
    data = [(r["topic"], r["partition"], payloads(r)) for r in op["requests"]]
    client(op).multiproduce(data, version=op.get("magic", 0))
    return {"sent": sum(len(r["payloads"]) for r in op["requests"])}


def _produce_with_attributes(op, messages, attributes):
    """PRODUCE of one magic-1 message per payload, each with this attributes byte (samsa's encoder)."""
    raw = bytearray(Message.encode(messages, version=1, compression=0).getvalue())
    pos = 4                                     # after the 4-byte set size
    while pos < len(raw):                       # message: length, magic, attributes, crc, payload
        raw[pos + 4 + 1] = attributes
        pos += 4 + (raw[pos] << 24 | raw[pos + 1] << 16 | raw[pos + 2] << 8 | raw[pos + 3])
    request = StructuredBytesIO()
    request.pack(2, REQUEST_TYPE_PRODUCE)
    write_request_header(request, op["topic"], op["partition"])
    request.write(bytes(raw))
    client(op).handler.request(request, has_response=False)


def op_produce_gzip(op):
    # the inner set: magic-1 messages with no codec; Message.encode puts a 4-byte set size first
    inner = bytes(Message.encode(payloads(op), version=1).getvalue()[4:])
    _produce_with_attributes(op, [gzip_bytes(inner)], COMPRESSION_TYPE_GZIP)
    return {"sent": len(op["payloads"])}


def op_produce_attributes(op):
    """Magic-1 messages with an arbitrary attributes byte (e.g. an unknown codec the broker refuses)."""
    _produce_with_attributes(op, payloads(op), op["attributes"])
    return {"sent": len(op["payloads"])}


def op_sockname(op):
    """The client's own address on its connection to the broker (as the broker sees it)."""
    return list(client(op).connection._socket.getsockname())


def op_fetch(op):
    messages = client(op).fetch(op["topic"], op["partition"], op["offset"], op.get("size", 1 << 20))
    return [describe(m) for m in messages]


def op_multifetch(op):
    data = [(r["topic"], r["partition"], r["offset"], r.get("size", 1 << 20)) for r in op["requests"]]
    return [[describe(m) for m in message_set] for message_set in client(op).multifetch(data)]


def op_offsets(op):
    return client(op).offsets(op["topic"], op["partition"], op["time"], op.get("max", 1))


def op_discover(op):
    """Brokers and a topic's partitions as samsa's ZooKeeper discovery sees them; optionally publish."""
    from kazoo.client import KazooClient
    from samsa.cluster import Cluster

    zk = KazooClient(hosts=op["zk"])
    zk.start(timeout=10)
    try:
        cluster = Cluster(zk)
        brokers = dict((str(b.id), [b.host, b.port]) for b in cluster.brokers.values())
        topic = cluster.topics[op["topic"]]
        partitions = sorted([p.broker.id, p.number] for p in topic.partitions)
        for p in topic.partitions:
            if op.get("publish"):      # each partition gets "<tag>-<broker>-<partition>"
                p.publish([("%s-%d-%d" % (op["publish"], p.broker.id, p.number)).encode("ascii")])
        for b in cluster.brokers.values():
            if "_Broker__client" in b.__dict__:
                b.client.disconnect()   # waits until the queued produce requests were written
        return {"brokers": brokers, "partitions": partitions}
    finally:
        zk.stop()
        zk.close()


OPS = dict((name[3:], fn) for name, fn in globals().items() if name.startswith("op_"))


def main():
    results = []
    for op in json.load(sys.stdin):
        try:
            results.append(OPS[op["op"]](op))
        except Exception as exc:  # reported to the test, which asserts on it
            results.append({"error": "%s: %s" % (type(exc).__name__, exc)})
    for c in _clients.values():
        c.handler.stop()        # joins the request queue: every queued produce was written
        if c.connection.connected:
            c.connection.disconnect()
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()

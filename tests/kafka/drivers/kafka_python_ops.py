"""Run kafka-python operations given as JSON on stdin; print their results as JSON on stdout.

Run by tests/kafka/other_clients.py under .venv-kafka23 (kafka-python 2.3), so it imports nothing of
the project. Input: a list of operations; bytes travel as base64.

- ``{"op": "produce", "bootstrap", "topic", "api_version": [0, 8, 2] | null, "acks", "codec",
  "messages": [[partition, key, value, [[hkey, hvalue], ...], timestamp], ...]}`` -> ``{"sent": n}``
- ``{"op": "consume", "bootstrap", "topic", "partitions", "n", "api_version", "from_ts": ms | null}``
  -> ``{"records": [[partition, offset, key, value, [[hkey, hvalue], ...], timestamp], ...]}``
- ``{"op": "group_consume", "bootstrap", "topic", "partitions", "group", "n", "timeout_ms", "api_version"}``
  -> ``{"records": [...], "assigned": [partition, ...], "committed": [[partition, offset | null], ...]}``
- ``{"op": "version", "bootstrap"}`` -> ``{"version": [..]}``: the broker version kafka-python infers

An operation that raises gives ``{"error": "Type: message"}``.
"""
import base64
import json
import sys
import time
import traceback

from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def b64(data):
    return None if data is None else base64.b64encode(data).decode("ascii")


def unb64(text):
    return None if text is None else base64.b64decode(text)


def version_kw(op):
    return {"api_version": tuple(op["api_version"])} if op.get("api_version") else {}


def produce(op):
    p = KafkaProducer(bootstrap_servers=op["bootstrap"], acks=op["acks"], compression_type=op["codec"],
                      linger_ms=5, **version_kw(op))
    try:
        futures = []
        for part, key, value, headers, ts in op["messages"]:
            kw = {"headers": [(h, unb64(v)) for h, v in headers]} if headers else {}
            futures.append(p.send(op["topic"], value=unb64(value), key=unb64(key), partition=part,
                                  timestamp_ms=ts, **kw))
        p.flush(60)
        for f in futures:
            f.get(60)
        return {"sent": len(futures)}
    finally:
        p.close(10)


def consume(op):
    c = KafkaConsumer(bootstrap_servers=op["bootstrap"], enable_auto_commit=False, consumer_timeout_ms=20000,
                      **version_kw(op))
    try:
        tps = [TopicPartition(op["topic"], p) for p in range(op["partitions"])]
        c.assign(tps)
        if op.get("from_ts") is None:
            c.seek_to_beginning(*tps)
        else:
            for tp, found in c.offsets_for_times({tp: op["from_ts"] for tp in tps}).items():
                c.seek(tp, found.offset) if found is not None else c.seek_to_end(tp)
        out = []
        for r in c:
            out.append([r.partition, r.offset, b64(r.key), b64(r.value),
                        [[h, b64(v)] for h, v in (r.headers or [])], r.timestamp])
            if len(out) >= op["n"]:
                break
        return {"records": out}
    finally:
        c.close()


def group_consume(op):
    """A group member (``subscribe``, ``auto_offset_reset`` earliest, no auto-commit): reads ``n`` records,
    commits them (``commit()``), then asks what the group has committed and where it stands."""
    c = KafkaConsumer(op["topic"], bootstrap_servers=op["bootstrap"], group_id=op["group"],
                      auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=op["timeout_ms"],
                      **version_kw(op))
    try:
        out = []
        if op["n"]:
            for r in c:
                out.append([r.partition, r.offset, b64(r.key), b64(r.value),
                            [[h, b64(v)] for h, v in (r.headers or [])], r.timestamp])
                if len(out) >= op["n"]:
                    break
        else:
            # until the group has assigned it partitions, then once more: what is past the commits
            deadline = time.time() + op["timeout_ms"] / 1000.0
            polled = []
            while not c.assignment() and time.time() < deadline:
                polled += [r for batch in c.poll(timeout_ms=500).values() for r in batch]
            polled += [r for batch in c.poll(timeout_ms=2000).values() for r in batch]
            out = [[r.partition, r.offset, None, None, [], r.timestamp] for r in polled]
        c.commit()
        tps = [TopicPartition(op["topic"], p) for p in range(op["partitions"])]
        return {"records": out, "assigned": sorted(tp.partition for tp in c.assignment()),
                "committed": [[tp.partition, c.committed(tp)] for tp in tps]}
    finally:
        c.close()


def version(op):
    from kafka import KafkaClient

    client = KafkaClient(bootstrap_servers=op["bootstrap"])
    try:
        return {"version": list(client.check_version(timeout=10))}
    finally:
        client.close()


OPS = {"produce": produce, "consume": consume, "group_consume": group_consume, "version": version}


def main():
    results = []
    for op in json.load(sys.stdin):
        try:
            results.append(OPS[op["op"]](op))
        except Exception as exc:                              # reported to the test, which asserts on it
            traceback.print_exc(file=sys.stderr)
            results.append({"error": "%s: %s" % (type(exc).__name__, exc)})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()

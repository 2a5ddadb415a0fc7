"""Run Kafka 0.7 requests with the real brod 0.4.3 client (``brod.Kafka``) under Python 2.7; JSON in, JSON out.

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

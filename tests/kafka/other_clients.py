"""Kafka clients beyond the three of tests/kafka/clients.py, run as the tests' subprocesses.

- kafka-python 2.3 in ``.venv-kafka23`` (built by ``scripts/kafka23_env.sh``, which
  ``scripts/bootstrap.sh`` runs; :func:`kafka23_python` builds it when missing or stale): the driver
  tests/kafka/drivers/kafka_python_ops.py takes a JSON list of operations on stdin.
- kafkajs (Node.js) from tests/kafka/node/ (``npm ci`` there; :func:`kafkajs_dir` runs it when the
  pinned packages are not installed): the driver kafkajs_ops.js, the same way.
- kcat (Debian's package, on librdkafka), run with its command-line options.

Every process is registered with the reaper, so none outlives an interrupted pytest. Messages are
``tests.kafka.clients.Msg``; a read-back is, per partition, ``(offset, key, value, headers, timestamp)``.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Sequence

from tests.harness import reaper
from tests.harness.wait import wait_until
from tests.kafka.clients import Msg

REPO_ROOT = Path(__file__).resolve().parents[2]
KAFKA23_VENV = REPO_ROOT / ".venv-kafka23"
KAFKA23_SCRIPT = REPO_ROOT / "scripts" / "kafka23_env.sh"
DRIVERS = Path(__file__).resolve().parent / "drivers"
NODE_DIR = Path(__file__).resolve().parent / "node"


class ClientUnavailable(RuntimeError):
    """A client's runtime is missing on this machine (node, kcat): the tests that need it skip."""


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def encode_messages(msgs: Sequence[Msg], headers: bool = True) -> list[list[Any]]:
    """Messages as the drivers take them: ``[partition, key, value, [[hkey, hvalue], ...], timestamp]``."""
    return [[m.partition, b64(m.key), b64(m.value), [[h, b64(v)] for h, v in m.headers] if headers else [],
             m.timestamp] for m in msgs]


def decode_records(records: list[list[Any]], partitions: int) -> dict[int, list[tuple]]:
    """A driver's ``[partition, offset, key, value, headers, timestamp]`` rows, per partition."""
    out: dict[int, list[tuple]] = {p: [] for p in range(partitions)}
    for part, offset, key, value, headers, ts in records:
        out[part].append((offset, unb64(key), unb64(value), tuple((h, unb64(v)) for h, v in headers), ts))
    return out


def run_json(cmd: list[str], ops: list[dict[str, Any]], *, cwd: Path, timeout: float = 300.0) -> list[Any]:
    """Run a driver: ``ops`` as JSON on stdin, its JSON results from stdout (AssertionError if it fails)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=str(cwd), env=env)
    reaper.watch(proc)
    try:
        out, err = proc.communicate(json.dumps(ops).encode(), timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reaper.forget(proc)
    if proc.returncode != 0:
        raise AssertionError(f"{cmd[-1]} exited {proc.returncode}:\n{err.decode(errors='replace')[-3000:]}")
    return json.loads(out)


def ok(result: Any) -> Any:
    """A driver result that must not be an error."""
    assert not (isinstance(result, dict) and "error" in result), result
    return result


# --- kafka-python 2.3 --------------------------------------------------------------------------------

def kafka23_python() -> Path:
    """The python of .venv-kafka23, built or refreshed by scripts/kafka23_env.sh when needed."""
    proc = subprocess.run(["bash", str(KAFKA23_SCRIPT)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/kafka23_env.sh failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return KAFKA23_VENV / "bin" / "python"


def kafka23(python: Path, *ops: dict[str, Any]) -> list[Any]:
    """Run operations through drivers/kafka_python_ops.py under kafka-python 2.3."""
    return run_json([str(python), str(DRIVERS / "kafka_python_ops.py")], list(ops), cwd=DRIVERS)


# --- kafkajs ----------------------------------------------------------------------------------------

def installed_as_locked(node_dir: Path) -> bool:
    """Whether ``node_dir/node_modules`` holds exactly the packages of its ``package-lock.json``.

    Compares npm's record of what it installed (``node_modules/.package-lock.json``) with the lock by
    content, not by file times: a fresh checkout (a git worktree) has a newer lock file than an install
    made from the same lock elsewhere."""
    installed = node_dir / "node_modules" / ".package-lock.json"
    if not installed.exists():
        return False
    want = {k: v for k, v in json.loads((node_dir / "package-lock.json").read_text())["packages"].items() if k}
    return json.loads(installed.read_text()).get("packages") == want


def kafkajs_dir() -> Path:
    """tests/kafka/node with its pinned packages installed (``npm ci`` when they are not).

    A ``node_modules`` that is a symlink (to another checkout's install) is never reinstalled: ``npm ci``
    empties it through the link first, under the other checkout's feet."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise ClientUnavailable("node/npm not installed: kafkajs cannot run here")
    if not installed_as_locked(NODE_DIR):
        if (NODE_DIR / "node_modules").is_symlink():
            raise RuntimeError(f"{NODE_DIR / 'node_modules'} is a symlink to packages that are not those of "
                               f"package-lock.json; remove the link (the test then runs npm ci here)")
        proc = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, capture_output=True,
                              text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"npm ci in {NODE_DIR} failed:\n{proc.stderr[-3000:]}")
    return NODE_DIR


def kafkajs(node_dir: Path, *ops: dict[str, Any]) -> list[Any]:
    """Run operations through node/kafkajs_ops.js."""
    return run_json(["node", str(node_dir / "kafkajs_ops.js")], list(ops), cwd=node_dir)


# --- kcat -------------------------------------------------------------------------------------------

def kcat_binary() -> str:
    path = shutil.which("kcat")
    if path is None:
        raise ClientUnavailable("kcat not installed (scripts/bootstrap.sh installs Debian's package kcat)")
    return path


def kcat(*args: str, stdin: bytes = b"", timeout: float = 120.0) -> bytes:
    """Run kcat with ``args``; its stdout (AssertionError with its stderr if it fails)."""
    proc = subprocess.Popen([kcat_binary(), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    reaper.watch(proc)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reaper.forget(proc)
    if proc.returncode != 0:
        raise AssertionError(f"kcat {' '.join(args)} exited {proc.returncode}:\n{err.decode(errors='replace')[-3000:]}")
    return out


# --- checks -----------------------------------------------------------------------------------------

def by_partition(msgs: Sequence[Msg], partitions: int, *, headers: bool = True,
                 timestamps: bool = True) -> dict[int, list[tuple]]:
    """What a reader must see, per partition: ``(key, value, headers, timestamp)`` in produce order;
    headers ``()`` and timestamp ``None`` where the format read has none."""
    out: dict[int, list[tuple]] = {p: [] for p in range(partitions)}
    for m in msgs:
        out[m.partition].append((m.key, m.value, tuple(m.headers) if headers else (),
                                 m.timestamp if timestamps else None))
    return out


def check_read(got: dict[int, list[tuple]], expected: dict[int, list[tuple]], *, timestamps: bool = True,
               first_offset: dict[int, int] | None = None) -> None:
    """Every expected message read back byte-exact, in order, none twice, offsets consecutive.

    ``timestamps=False``: the reader's timestamps are not compared (a format without them)."""
    for part, want in expected.items():
        rows = got[part]
        offsets = [r[0] for r in rows]
        start = (first_offset or {}).get(part, 0)
        assert offsets == list(range(start, start + len(rows))), \
            f"partition {part}: offsets {offsets[:5]}... are not {start}, {start + 1}, ... (out of order or twice)"
        seen = [(k, v, tuple((h, bytes(x)) for h, x in hs), ts if timestamps else None)
                for _o, k, v, hs, ts in rows]
        want = [(k, v, hs, ts if timestamps else None) for k, v, hs, ts in want]
        assert len(seen) == len(want), f"partition {part}: {len(seen)} read, {len(want)} produced"
        for i, (s, w) in enumerate(zip(seen, want)):
            assert s == w, f"partition {part}, offset {start + i}: read {s!r}, produced {w!r}"


def high_watermarks(bootstrap: str, topic: str, partitions, timeout: float = 60.0,
                    client: dict | None = None) -> dict[int, int]:
    """Each partition's high watermark, through confluent-kafka (ListOffsets to each leader); ``client``:
    more of its settings (a login).

    A retriable error (a leader that moved or is still taking over: NOT_LEADER_OR_FOLLOWER,
    LEADER_NOT_AVAILABLE; a topic still being created; a broker just killed) is asked again until
    ``timeout``, as a Kafka client does."""
    import time

    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    # the error librdkafka raises here is built from a bare code: its retriable() is always False;
    # _UNKNOWN_PARTITION / _UNKNOWN_TOPIC: its metadata cache does not hold the partition yet (a
    # metadata answer taken while a leader was moving), which the next metadata refresh fills
    retriable = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                 KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
                 KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC}
    deadline = time.monotonic() + timeout
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "high-watermarks", "enable.auto.commit": False,
                  **(client or {})})
    try:
        while True:
            try:
                return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
            except KafkaException as exc:
                err = exc.args[0]
                if not (err.retriable() or err.code() in retriable) or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        c.close()


def wait_for_ends(bootstrap: str, topic: str, ends: dict[int, int], timeout: float = 60.0) -> None:
    """Wait until each partition's high watermark is at least ``ends[partition]``.

    After an acks=0 produce: nothing tells the producer when the broker has appended, and the next
    producer's connection may overtake it, so a test that orders rounds waits here before the next one.
    Also after a topic is created: every partition's leader answers (its leadership reached the brokers)."""
    def reached() -> bool:
        got = high_watermarks(bootstrap, topic, ends, timeout)
        return all(got[p] >= n for p, n in ends.items())
    wait_until(reached, timeout, f"{topic} to reach {ends}", interval=0.1)

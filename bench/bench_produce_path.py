"""The produce path's CPU cost per message, in process: this code beside the previous code.

Two parts, each for 50 payloads of 200 bytes ("fixed") and of 150-248 bytes
("mixed"):

* ``encode``: ``encode_message_set`` of one batch (the client's per-message work);
* ``dispatch``: ``BrokerHandlers.dispatch`` of one PRODUCE frame with that
  batch into a real ``LogManager`` in a temporary directory (the broker's
  request path without the network: decode, validation, log append, periodic
  flush).

Each (code, part, shape) runs in its own subprocess with that code's tree
first on ``PYTHONPATH``; the previous code is ``--reference COMMIT`` extracted
with ``git archive``. Two measures:

* CPU µs per message (``time.process_time``, best of ``--repeat`` runs,
  code order alternating): meaningful only against the reference of the same
  run on a shared machine;
* with ``--instructions``: user-space instructions per message counted by
  valgrind (``cachegrind --cache-sim=no``; run with N batches and with none,
  the difference divided by the messages). Deterministic: it does not move with
  the load of other processes. Needs the Debian package ``valgrind`` (without
  it the counts are skipped, with a note).

Usage::

    .venv/bin/python bench/bench_produce_path.py [--batches 4000] [--repeat 3] [--reference 77fcce0] [--instructions]
"""
from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from bench_producer import REPO, extract, machine  # noqa: E402

BATCH = 50
PARTS = ("encode", "dispatch")
SHAPES = ("fixed", "mixed")


def _payloads(shape: str) -> list[bytes]:
    rng = random.Random(16)
    sizes = [200] * BATCH if shape == "fixed" else [150 + 2 * i for i in range(BATCH)]
    return [rng.randbytes(s) for s in sizes]


def worker(part: str, shape: str, batches: int) -> float:
    """CPU seconds of ``batches`` iterations of ``part`` (set-up excluded)."""
    try:
        from ingest.records.message_set import encode_message_set
    except ImportError:   # a reference tree from before the 0.7 formats moved to ingest/records
        from ingest.broker.message_set import encode_message_set

    payloads = _payloads(shape)
    if part == "encode":
        encode_message_set(payloads)
        t0 = time.process_time()
        for _ in range(batches):
            encode_message_set(payloads)
        return time.process_time() - t0
    try:
        from ingest.wire import protocol as p
    except ImportError:                          # a reference tree from before the wire layer
        from ingest.broker import protocol as p  # type: ignore[no-redef]
    from ingest.broker.handlers import BrokerHandlers
    from ingest.broker.log_manager import LogManager
    from ingest.broker.server_config import SERVER_CONFIG

    frame = p.ProduceRequest("bench", 0, encode_message_set(payloads)).encode()
    body = memoryview(frame)[6:]
    with tempfile.TemporaryDirectory(prefix="bench-produce-path-") as d:
        config = SERVER_CONFIG.parse({"brokerid": 0, "port": 0, "listeners": "PLAINTEXT://127.0.0.1:0", "log.dir": d, "log.flush.interval": 10_000,
                                      "log.file.size": 1 << 30})
        logs = LogManager(config)
        logs.startup()
        handlers = BrokerHandlers(logs, config, broker_id=0, host="127.0.0.1", port=0)
        handlers.dispatch(p.RequestType.PRODUCE, body, "bench")   # creates the log
        t0 = time.process_time()
        for _ in range(batches):
            handlers.dispatch(p.RequestType.PRODUCE, body, "bench")
        spent = time.process_time() - t0
        logs.shutdown()
    return spent


def _command(tree: Path, part: str, shape: str, batches: int) -> tuple[list[str], dict]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    return [sys.executable, str(HERE), "--worker", part, shape, str(batches)], env


def cpu_us(tree: Path, part: str, shape: str, batches: int) -> float:
    cmd, env = _command(tree, part, shape, batches)
    out = subprocess.run(cmd, env=env, cwd=str(tree), check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1]) / (batches * BATCH) * 1e6


def instructions(tree: Path, part: str, shape: str, batches: int) -> float:
    def count(n: int) -> int:
        cmd, env = _command(tree, part, shape, n)
        proc = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                               *cmd], env=env, cwd=str(tree), capture_output=True, text=True, check=True)
        m = re.search(r"I\s+refs:\s+([\d,]+)", proc.stderr)
        if m is None:
            raise RuntimeError(f"no instruction count in valgrind's output:\n{proc.stderr[-2000:]}")
        return int(m.group(1).replace(",", ""))
    return (count(batches) - count(0)) / (batches * BATCH)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=4000, help="batches of 50 per measurement")
    ap.add_argument("--repeat", type=int, default=3, help="CPU-time runs per code (best kept)")
    ap.add_argument("--reference", default="77fcce0", help="git commit of the previous code, or 'none'")
    ap.add_argument("--instructions", action="store_true", help="also count instructions with valgrind")
    ap.add_argument("--worker", nargs=3, metavar=("PART", "SHAPE", "BATCHES"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        part, shape, batches = args.worker
        print(worker(part, shape, int(batches)))
        return 0
    if args.instructions and shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian package valgrind): instruction counts skipped")
        args.instructions = False
    load0 = os.getloadavg()
    print(f"machine: {machine()}")
    print(f"load average at start: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}; {args.batches:,} batches of "
          f"{BATCH} per measurement", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-produce-path-ref-") as tmp:
        trees = {"current": REPO}
        if args.reference != "none":
            trees = {"reference": extract(args.reference, Path(tmp)), **trees}
        rows = []
        for part in PARTS:
            for shape in SHAPES:
                cpu: dict[str, float] = {}
                for r in range(args.repeat):
                    for which in (trees if r % 2 == 0 else list(reversed(list(trees)))):
                        us = cpu_us(trees[which], part, shape, args.batches)
                        cpu[which] = min(cpu.get(which, us), us)
                ins = {w: instructions(t, part, shape, max(1, args.batches // 20)) for w, t in trees.items()} \
                    if args.instructions else {}
                rows.append((part, shape, cpu, ins))
                print(f"  {part} {shape}: " + ", ".join(f"{w} {v:.3f} µs" for w, v in cpu.items()), flush=True)
    load1 = os.getloadavg()
    print(f"\nload average at end: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}\n")
    print("| part | payloads | reference CPU µs/msg | current CPU µs/msg | ratio | reference instr/msg "
          "| current instr/msg | ratio |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for part, shape, cpu, ins in rows:
        ref, cur = cpu.get("reference"), cpu["current"]
        iref, icur = ins.get("reference"), ins.get("current")
        def num(v: float | None, fmt: str) -> str:
            return "-" if v is None else format(v, fmt)
        print(f"| {part} | {shape} | {num(ref, '.3f')} | {cur:.3f} | {num(cur / ref if ref else None, '.2f')} "
              f"| {num(iref, ',.0f')} | {num(icur, ',.0f')} | {num(icur / iref if iref and icur else None, '.2f')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

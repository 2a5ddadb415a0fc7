"""Soak: a real broker under mixed valid and hostile traffic stays alive, fast, small and quiet.

One ``ingest broker start`` process (100 topics of one partition, a data
topic of 2, a real descriptor limit of 1024 set with ``prlimit``) serves, for ``INGEST_SOAK_SECONDS``
(default 180 outside pytest; an hour is ``INGEST_SOAK_SECONDS=3600``; the suite's test runs
:data:`SUITE_SECONDS`, see there):

- valid traffic: a producer sending PRODUCE_ACK batches of numbered messages,
  a consumer fetching them back, and a control client timing OFFSETS round
  trips on connections spread over every network thread;
- hostile traffic, from ``INGEST_SOAK_HOSTILE_THREADS`` threads (default 2),
  each rotating through the attacks of :mod:`tests.harness.hostile`, one
  bounded episode (``INGEST_SOAK_EPISODE_SECONDS``, default 8) at a time:
  ``burst`` (256 KB of pipelined METADATA(all topics), never read),
  ``half`` (16 connections announcing 32 MB frames and sending 31 MB, idle),
  ``fuzz`` (random and mutated frames, one connection each),
  ``bomb`` (PRODUCE_ACK of an ~200 KB gzip wrapper inflating to one 200 MB
  message), ``flood`` (1000 idle connections, which reach the descriptor limit).

Every second it samples the broker's RSS, descriptors and log size. At the end
it asserts (these are correctness bounds on a protected broker, not
performance timings; each is one to two orders of magnitude away from a
healthy broker's figure and at least as far below what was measured on
an unprotected one):

- the process is alive and answers METADATA within 10 s of the attacks stopping;
- every acknowledged message is readable exactly once, its batch at the
  acknowledged offset (count + SHA-256 over the payloads' CRCs); when the
  consumer cannot catch up on the attacked broker, that is a failure of its
  own, and exactly-once is then judged after a restart;
- the control client's p99 round trip < 1 s (healthy: a few ms; unprotected: a
  76 s stall behind one pipelined burst);
- the broker's peak RSS (VmHWM, which also catches spikes between samples)
  < 300 MB (healthy: ~40 MB; unprotected: 113 MB after one burst, ~300 MB per
  gzip bomb, 1.66 GB under half frames). This assumes the broker's global
  bound on buffered request bytes is at most ~128 MB by default;
- no gzip bomb is accepted (``max.message.size`` applies inside wrappers);
- the broker's output stays under 256 KB + 2 KB per soak second, i.e. its
  refusals are rate-limited (unprotected: 150,000 fuzzed frames wrote 23.6 MB),
  and holds no traceback;
- SIGTERM with a non-reading client still connected stops the broker with
  exit code 0 within ``shutdown.timeout.ms`` + 2 s (unprotected: still running
  30 s after SIGTERM; today each stalled network thread is joined for
  shutdown.timeout.ms + 5 s, one after the other, then abandoned).

The JSON summary (latency p50/p99/max, peak RSS, log bytes, messages acked,
attacks run, per-attack figures, every failed bound) is printed and, when
``INGEST_SOAK_REPORT`` names a path, written there (with the per-second
timeline). Outside pytest, for the hour-long run::

    INGEST_SOAK_SECONDS=3600 INGEST_SOAK_REPORT=/tmp/soak.json python -m tests.broker.test_soak
    python -m tests.broker.test_soak --seconds 20 --attacks burst --hostile-threads 1   # one attack alone
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import resource
import socket
import sys
import tempfile
import threading
import time
import traceback
import zlib
from array import array
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pytest

from ingest.wire import protocol as p
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set
from ingest.wire.errors import error_name
from tests.harness import hostile as h
from tests.harness.brokers import BrokerProcess, BrokerStartError
from tests.harness.wait import wait_until

MB = 1024 * 1024
ATTACKS = ("burst", "half", "fuzz", "bomb", "flood")
DATA_TOPIC = "soak-data"
CONTROL_TOPIC = "soak-control"
BOMB_TOPIC = "soak-bombs"


@dataclass(frozen=True)
class SoakSettings:
    """What the soak runs and the bounds it asserts (env: ``INGEST_SOAK_*``)."""

    seconds: float = 180.0
    report: str | None = None
    attacks: tuple[str, ...] = ATTACKS
    hostile_threads: int = 2
    episode_s: float = 8.0
    seed: int = 20261122
    topics: int = 100
    data_partitions: int = 2
    batch: int = 20
    produce_interval_s: float = 0.01
    shutdown_timeout_s: float = 5.0
    # attack sizes
    burst_bytes: int = 256 * 1024
    half_conns: int = 16
    half_announced: int = 32 * MB
    half_sent: int = 31 * MB
    bomb_inflated: int = 200 * MB
    flood_conns: int = 1000
    broker_nofile: int = 1024
    """RLIMIT_NOFILE set on the broker process (0 = inherit): the flood reaches it."""
    # bounds
    p99_bound_s: float = 1.0
    rss_bound: int = 300 * MB
    log_bytes_base: int = 256 * 1024
    log_bytes_per_s: int = 2048
    stop_margin_s: float = 2.0
    answer_within_s: float = 10.0

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, seconds: float | None = None) -> "SoakSettings":
        """The settings, ``INGEST_SOAK_*`` over the defaults (``seconds``, when given, over 180)."""
        env = os.environ if env is None else env
        s = cls() if seconds is None else cls(seconds=seconds)
        if "INGEST_SOAK_SECONDS" in env:
            s = replace(s, seconds=float(env["INGEST_SOAK_SECONDS"]))
        if env.get("INGEST_SOAK_REPORT"):
            s = replace(s, report=env["INGEST_SOAK_REPORT"])
        if env.get("INGEST_SOAK_ATTACKS"):
            s = replace(s, attacks=parse_attacks(env["INGEST_SOAK_ATTACKS"]))
        if "INGEST_SOAK_HOSTILE_THREADS" in env:
            s = replace(s, hostile_threads=int(env["INGEST_SOAK_HOSTILE_THREADS"]))
        if "INGEST_SOAK_EPISODE_SECONDS" in env:
            s = replace(s, episode_s=float(env["INGEST_SOAK_EPISODE_SECONDS"]))
        return s

    @property
    def log_bound(self) -> int:
        return int(self.log_bytes_base + self.log_bytes_per_s * self.seconds)


def parse_attacks(text: str) -> tuple[str, ...]:
    """``"burst,fuzz"`` -> ``("burst", "fuzz")``; ``"none"`` -> ``()`` (valid traffic only)."""
    names = tuple(a.strip() for a in text.split(",") if a.strip() and a.strip() != "none")
    bad = [a for a in names if a not in ATTACKS]
    if bad:
        raise ValueError(f"unknown soak attack(s) {bad}; allowed: {', '.join(ATTACKS)} or 'none'")
    return names


def payload(i: int) -> bytes:
    """Message ``i`` of the producer: its number, then filler derived from it (so a checksum sees damage)."""
    head = b"soak %010d " % i
    return head + bytes((i + k) & 0xFF for k in range(100 - len(head)))


def message_id(data: bytes) -> int | None:
    if data[:5] != b"soak ":
        return None
    return int(data[5:15])


# --- the soak's actors ------------------------------------------------------------------


@dataclass
class Ledger:
    """What the producer was told: acknowledged batches and batches whose outcome is unknown.

    A batch is a range of consecutive message ids (compact for an hour-long run).
    Thread-safety: only the producer thread writes; others read after it stopped.
    """

    acked: list[tuple[int, int, int, int]] = field(default_factory=list)  # (partition, first offset, first id, n)
    unacked_ids: int = 0
    refused: int = 0
    timeouts: int = 0

    def acked_count(self) -> int:
        return sum(n for *_x, n in self.acked)


def run_producer(addr: h.Addr, s: SoakSettings, stop: threading.Event, ledger: Ledger) -> None:
    next_id = itertools.count()
    parts = itertools.cycle(range(s.data_partitions))
    sock: socket.socket | None = None
    while not stop.is_set():
        part = next(parts)
        ids = [next(next_id) for _ in range(s.batch)]     # consecutive
        frame = p.ProduceAckRequest(DATA_TOPIC, part, encode_message_set([payload(i) for i in ids])).encode()
        try:
            if sock is None:
                sock = h.connect(addr, timeout=10.0)
            sock.sendall(frame)
            resp = p.ProduceAckResponse.decode(p.recv_response(sock))
        except Exception:  # noqa: BLE001 - timeout/reset/garbage: outcome unknown, maybe appended
            ledger.unacked_ids += len(ids)
            ledger.timeouts += 1
            if sock is not None:
                sock.close()
                sock = None
            stop.wait(0.5)
            continue
        if resp.error == 0:
            ledger.acked.append((part, resp.offset, ids[0], len(ids)))
        else:
            ledger.refused += 1
            ledger.unacked_ids += len(ids)
        stop.wait(s.produce_interval_s)
    if sock is not None:
        sock.close()


class Consumed:
    """What the consumer read, per message id: times read, where first read, CRC-32 of the payload.

    Compact arrays indexed by id, so an hour-long soak stays small in the test
    process. Thread-safety: one consumer thread writes; read after it stopped.
    """

    def __init__(self) -> None:
        self.counts = bytearray()          # times read (saturates at 255)
        self.parts = bytearray()
        self.offsets = array("q")
        self.crcs = array("I")
        self.foreign = 0                   # messages that are not the producer's
        self.positions: dict[int, int] = {}
        self.errors: list[str] = []

    def record(self, part: int, offset: int, data: bytes) -> None:
        mid = message_id(data)
        if mid is None:
            self.foreign += 1
            return
        if mid >= len(self.counts):
            grow = mid + 1 - len(self.counts) + 65536
            self.counts.extend(bytes(grow))
            self.parts.extend(bytes(grow))
            self.offsets.extend(itertools.repeat(-1, grow))
            self.crcs.extend(itertools.repeat(0, grow))
        if self.counts[mid] == 0:
            self.parts[mid], self.offsets[mid], self.crcs[mid] = part, offset, zlib.crc32(data)
        self.counts[mid] = min(255, self.counts[mid] + 1)


def fetch_once(sock: socket.socket, part: int, c: Consumed, max_size: int = 1 << 20) -> int:
    """One FETCH at the consumer's position; returns messages read."""
    pos = c.positions.get(part, 0)
    sock.sendall(p.FetchRequest(DATA_TOPIC, part, pos, max_size).encode())
    resp = p.FetchResponse.decode(p.recv_response(sock))
    if resp.error:
        raise RuntimeError(f"fetch {DATA_TOPIC}-{part}@{pos}: {error_name(resp.error)}")
    n = 0
    for m in iter_messages(resp.message_set, pos):
        c.record(part, m.offset, m.payload)
        c.positions[part] = m.next_offset
        n += 1
    return n


def run_consumer(addr: h.Addr, s: SoakSettings, stop: threading.Event, c: Consumed) -> None:
    sock: socket.socket | None = None
    while not stop.is_set():
        try:
            if sock is None:
                sock = h.connect(addr, timeout=10.0)
            got = sum(fetch_once(sock, part, c) for part in range(s.data_partitions))
        except Exception as exc:  # noqa: BLE001 - keep consuming; the final check judges
            c.errors.append(f"{type(exc).__name__}: {exc}"[:300])
            if sock is not None:
                sock.close()
                sock = None
            got = 0
            stop.wait(0.5)
        if not got:
            stop.wait(0.05)
    if sock is not None:
        sock.close()


def catch_up(addr: h.Addr, s: SoakSettings, c: Consumed, timeout_s: float = 60.0) -> bool:
    """Read until the consumer reaches every data partition's latest offset; False on timeout."""
    deadline = time.monotonic() + timeout_s
    with h.connect(addr, timeout=10.0) as sock:
        for part in range(s.data_partitions):
            sock.sendall(h.offsets_latest(DATA_TOPIC, part))
            latest = p.OffsetsResponse.decode(p.recv_response(sock)).offsets[0]
            while c.positions.get(part, 0) < latest:
                if time.monotonic() > deadline:
                    return False
                fetch_once(sock, part, c)
    return True


def safe_catch_up(addr: h.Addr, s: SoakSettings, c: Consumed) -> bool:
    try:
        return catch_up(addr, s, c)
    except Exception as exc:  # noqa: BLE001 - reported as a failure by the caller
        c.errors.append(f"catch-up: {type(exc).__name__}: {exc}"[:300])
        return False


def answers_within(b: BrokerProcess, seconds: float) -> bool:
    """True once the broker answers METADATA, polling for up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while not b.ping(timeout=min(2.0, max(0.1, deadline - time.monotonic()))):
        if time.monotonic() > deadline or not b.running:
            return False
    return True


def verify_exactly_once(ledger: Ledger, c: Consumed) -> dict:
    """Every acknowledged message read exactly once, the batch at its acknowledged offset; count and checksum.

    The checksum is SHA-256 over the CRC-32s of the acknowledged payloads in id
    order, as sent vs as read.
    """
    missing, dupes, misplaced = [], [], []
    want, got = hashlib.sha256(), hashlib.sha256()
    n = len(c.counts)
    for part, off, first, count in sorted(ledger.acked, key=lambda a: a[2]):
        if first < n and c.counts[first] and (c.parts[first], c.offsets[first]) != (part, off):
            misplaced.append((part, off, first))
        for i in range(first, first + count):
            times = c.counts[i] if i < n else 0
            if times == 0:
                missing.append(i)
            elif times > 1:
                dupes.append(i)
            want.update(zlib.crc32(payload(i)).to_bytes(4, "big"))
            got.update((c.crcs[i] if times else 0).to_bytes(4, "big"))
    acked = ledger.acked_count()
    return {"acked": acked, "read": sum(c.counts) + c.foreign,
            "acked_read_once": acked - len(missing) - len(dupes),
            "missing": len(missing), "duplicated": len(dupes), "misplaced": len(misplaced),
            "checksum_ok": want.digest() == got.digest(), "examples": (missing[:5], dupes[:5], misplaced[:3])}


@dataclass
class Episode:
    kind: str
    thread: int
    start: float
    end: float = 0.0
    result: dict = field(default_factory=dict)
    log_growth: int = 0


def run_episode(kind: str, addr: h.Addr, s: SoakSettings, seed: int, stop: threading.Event) -> dict:
    """One bounded attack of ``kind``; returns what it did."""
    ep = s.episode_s
    if kind == "burst":
        r = h.pipelined_burst(addr, h.metadata_all_topics(), s.burst_bytes, hold_s=ep, send_timeout_s=ep)
        return asdict(r)
    if kind == "half":
        with h.half_frames(addr, s.half_conns, s.half_announced, s.half_sent, send_timeout_s=ep) as held:
            stop.wait(max(0.0, ep - held.seconds))
            return {"conns": len(held.socks), "bytes_sent": held.bytes_sent, "still_open": held.alive(),
                    "failed": held.failed}
    if kind == "fuzz":
        return asdict(h.fuzz_frames(addr, h.MAX_FUZZ_FRAMES, seed, max_seconds=ep))
    if kind == "bomb":
        bomb = h.gzip_bomb_message_set(s.bomb_inflated)
        codes = []
        end = time.monotonic() + ep
        while time.monotonic() < end and len(codes) < 3 and not stop.is_set():
            codes.append(h.send_produce_ack(addr, BOMB_TOPIC, 0, bomb, timeout=max(1.0, end - time.monotonic())))
        return {"sent": len(codes), "accepted": codes.count(0), "codes": codes, "wrapper_bytes": len(bomb)}
    if kind == "flood":
        with h.connection_flood(addr, s.flood_conns, max_seconds=ep) as held:
            stop.wait(max(0.0, ep - held.seconds))
            return {"conns": len(held.socks), "failed": held.failed, "still_open": held.alive()}
    raise ValueError(f"unknown attack {kind!r}; allowed: {ATTACKS}")


SUITE_SECONDS = 45.0
"""The soak's length in the test suite when ``INGEST_SOAK_SECONDS`` is not set. 45 s with the default
2 hostile threads and 8 s episodes runs five to six episodes per thread, so every attack runs at least
twice (the test asserts each ran), against the same broker and with the same bounds as the longer
soaks; the log bound scales with the length (256 KB + 2 KB per second). What the 180 s soak added is
repetition (about nine episodes of each attack): the hour-long soak, run outside the suite, is the
test for slow growth. The suite's soak used to run 180 s (197 s with its set-up) of a 28-minute suite."""

MIN_EPISODE_S = 1.0
"""No episode starts with less than this left of the soak (a shorter one would be a token attack)."""


def run_hostile(index: int, addr: h.Addr, s: SoakSettings, stop: threading.Event, b: BrokerProcess,
                episodes: list[Episode], lock: threading.Lock, deadline: float = float("inf")) -> None:
    """Episodes one after the other until ``stop`` or ``deadline``: the last one is cut to end at the
    deadline, so the attacks fill the soak's ``seconds`` and do not run on past it (bursts and fuzz do
    not watch ``stop``; an episode begun near the end used to add up to ``episode_s`` to every run)."""
    kinds = list(s.attacks)
    for n in itertools.count():
        left = deadline - time.monotonic()
        if stop.is_set() or not kinds or left < MIN_EPISODE_S:
            return
        kind = kinds[(n + index) % len(kinds)]
        e = Episode(kind, index, time.monotonic())
        before = log_size(b)
        try:
            es = s if left >= s.episode_s else replace(s, episode_s=left)
            e.result = run_episode(kind, addr, es, s.seed + 1000 * index + n, stop)
        except Exception as exc:  # noqa: BLE001 - an attack's own failure is data, not a soak crash
            e.result = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        e.end = time.monotonic()
        e.log_growth = log_size(b) - before
        with lock:
            episodes.append(e)


def log_size(b: BrokerProcess) -> int:
    try:
        return b.output_path.stat().st_size
    except FileNotFoundError:
        return 0


def sample(b: BrokerProcess, t0: float) -> dict | None:
    try:
        return {"t": round(time.monotonic() - t0, 1), "rss": h.rss_bytes(b.pid), "hwm": h.peak_rss_bytes(b.pid),
                "fds": h.open_fds(b.pid), "log_bytes": log_size(b)}
    except (OSError, ValueError):
        return None      # the process is gone


def run_sampler(b: BrokerProcess, t0: float, stop: threading.Event, timeline: list[dict]) -> None:
    while not stop.wait(1.0):
        row = sample(b, t0)
        if row is None:
            return
        timeline.append(row)


def attack_figures(kind: str, episodes: list[Episode], ctl: list[tuple[float, float]],
                   timeline: list[dict], t0: float) -> dict:
    """Figures seen while episodes of ``kind`` ran (other attacks may overlap)."""
    eps = [e for e in episodes if e.kind == kind]
    windows = [(e.start, e.end) for e in eps]

    def during(t: float) -> bool:
        return any(a <= t <= b for a, b in windows)

    lats = [lat for t, lat in ctl if during(t)]
    rss = [row["rss"] for row in timeline if during(t0 + row["t"])]
    return {"episodes": len(eps), "control_p50_s": h.percentile(lats, 50), "control_p99_s": h.percentile(lats, 99),
            "control_max_s": max(lats, default=0.0), "max_rss_mb": round(max(rss, default=0) / MB, 1),
            "log_growth_bytes": sum(e.log_growth for e in eps),
            "results": [e.result for e in eps[:3]]}


def stop_with_stuck_client(b: BrokerProcess, s: SoakSettings) -> dict:
    """SIGTERM while a client that pipelined requests and never reads is connected; how long to exit."""
    try:
        stuck = h.connect((b.host, b.port))
    except OSError as exc:      # e.g. the broker no longer accepts: stop it anyway
        stuck, note = None, f"stuck client could not connect: {exc}"
    else:
        note = "stuck client connected"
        h.send_until(stuck, h.pipeline(h.metadata_all_topics(), s.burst_bytes), time.monotonic() + 5.0)
        # SIGTERM only once the broker has taken the burst in (or stopped taking it: back-pressure)
        try:
            wait_until(lambda: h.unread_by_peer(stuck) == 0, timeout=5.0, what="the broker to read the burst")
        except (AssertionError, ValueError):
            pass
    try:
        t = time.monotonic()
        try:
            code = b.stop(timeout=s.shutdown_timeout_s + 15.0)     # measure past the bound
        except BrokerStartError:
            code = None   # ignored SIGTERM: the harness SIGKILLed it
        return {"exit_code": code, "seconds": round(time.monotonic() - t, 2), "note": note}
    finally:
        if stuck is not None:
            stuck.close()


# --- the soak ---------------------------------------------------------------------------


def run_soak(workdir: str | Path, s: SoakSettings) -> dict:
    """Run the soak against a fresh broker in ``workdir``; returns the summary with its ``failures``."""
    b = BrokerProcess(0, Path(workdir) / "broker", overrides={
        "num.partitions": 1,
        "topic.partition.count.map": f"{DATA_TOPIC}:{s.data_partitions}",
        "shutdown.timeout.ms": int(s.shutdown_timeout_s * 1000),
    })
    b.start()
    if s.broker_nofile:     # a real descriptor limit, as a production broker has one
        resource.prlimit(b.pid, resource.RLIMIT_NOFILE, (s.broker_nofile, s.broker_nofile))
    addr = (b.host, b.port)
    stop_hostile, stop_valid = threading.Event(), threading.Event()
    ledger, consumed = Ledger(), Consumed()
    episodes: list[Episode] = []
    timeline: list[dict] = []
    lock = threading.Lock()
    thread_errors: list[str] = []
    try:
        one = encode_message_set([b"x"])
        for i in range(s.topics):                    # METADATA(all topics) answers grow with topics
            assert h.send_produce_ack(addr, f"t{i:03d}", 0, one) == 0
        for topic in (CONTROL_TOPIC, BOMB_TOPIC):
            assert h.send_produce_ack(addr, topic, 0, one) == 0
        h.gzip_bomb_message_set(s.bomb_inflated)     # build once (cached) before the clock starts
        ctl = h.ControlClient(addr, CONTROL_TOPIC, n_conns=4, timeout=5.0)
        t0 = time.monotonic()

        def guarded(fn, *args):
            def body():
                try:
                    fn(*args)
                except Exception:  # noqa: BLE001 - reported in the summary
                    thread_errors.append(traceback.format_exc()[-1000:])
            return threading.Thread(target=body, name=f"soak-{fn.__name__}", daemon=True)

        valid = [guarded(run_producer, addr, s, stop_valid, ledger),
                 guarded(run_consumer, addr, s, stop_valid, consumed),
                 guarded(ctl.probe_for, s.seconds + 3600, 0.05, stop_valid),
                 guarded(run_sampler, b, t0, stop_valid, timeline)]
        hostile = [guarded(run_hostile, i, addr, s, stop_hostile, b, episodes, lock, t0 + s.seconds)
                   for i in range(s.hostile_threads)]
        for t in valid + hostile:
            t.start()
        stop_hostile.wait(s.seconds)
        stop_hostile.set()
        for t in hostile:
            t.join(s.episode_s + 60)
        stop_valid.set()
        for t in valid:
            t.join(30)
        ctl.close()
        elapsed = time.monotonic() - t0

        process_alive = b.running
        answers = process_alive and answers_within(b, s.answer_within_s)
        caught_up = answers and safe_catch_up(addr, s, consumed)
        final = sample(b, t0) or {}
        stop = stop_with_stuck_client(b, s) if b.running else {"exit_code": b.proc.returncode, "seconds": 0}
        out = b.output()
        caught_up_after_restart = None
        if not caught_up:      # judge exactly-once on a restarted, unattacked broker instead
            try:
                b.start()
                caught_up_after_restart = safe_catch_up(addr, s, consumed)
                b.stop(timeout=30)
            except BrokerStartError as exc:
                consumed.errors.append(f"restart: {exc}"[:300])
                caught_up_after_restart = False
        check = verify_exactly_once(ledger, consumed)
    finally:
        stop_hostile.set()
        stop_valid.set()
        b.kill()

    lat = ctl.latencies()
    hwm = max([final.get("hwm", 0)] + [row["hwm"] for row in timeline])
    log_bytes = log_size(b)
    bombs_accepted = sum(e.result.get("accepted", 0) for e in episodes if e.kind == "bomb")
    alive = process_alive and answers
    summary = {
        "seconds": round(elapsed, 1),
        "settings": {k: v for k, v in asdict(s).items() if k != "report"},
        "broker_process_alive": process_alive,
        "broker_answers": answers,
        "control": {"probes": len(lat), "errors": ctl.errors, "p50_s": round(h.percentile(lat, 50), 4),
                    "p99_s": round(h.percentile(lat, 99), 4), "max_s": round(max(lat, default=0.0), 3)},
        "rss_mb": {"max_sampled": round(max((r["rss"] for r in timeline), default=0) / MB, 1),
                   "peak_hwm": round(hwm / MB, 1)},
        "max_fds": max((r["fds"] for r in timeline), default=0),
        "log": {"bytes": log_bytes, "lines": h.count_log_lines(b.output_path),
                "warning_lines": h.count_log_lines(b.output_path, ["WARNING"]),
                "tracebacks": out.count("Traceback"), "bound": s.log_bound},
        "messages": {"acked": check["acked"], "unacked": ledger.unacked_ids, "refused_batches": ledger.refused,
                     "producer_timeouts": ledger.timeouts, "consumer_errors": len(consumed.errors),
                     "caught_up": caught_up, "caught_up_after_restart": caught_up_after_restart, **{k: v for k, v in check.items() if k != "acked"}},
        "attacks_run": {k: sum(e.kind == k for e in episodes) for k in s.attacks},
        "attacks": {k: attack_figures(k, episodes, ctl.samples(), timeline, t0) for k in s.attacks},
        "bombs_accepted": bombs_accepted,
        "sigterm_with_stuck_client": stop,
        "thread_errors": thread_errors,
    }
    f = []
    if not process_alive:
        f.append(f"broker process died during the soak (exit code {b.proc.returncode})")
    elif not answers:
        f.append(f"broker did not answer METADATA within {s.answer_within_s} s after the attacks stopped")
    if not caught_up:
        f.append("consumer could not read up to the latest offsets after the soak "
                 f"(after a restart: {'yes' if caught_up_after_restart else 'no'})")
    if check["missing"] or check["duplicated"] or check["misplaced"] or not check["checksum_ok"]:
        f.append(f"acknowledged messages not read exactly once: {check['missing']} missing, "
                 f"{check['duplicated']} duplicated, {check['misplaced']} at another offset, "
                 f"checksum ok={check['checksum_ok']} (examples {check['examples']})")
    if summary["control"]["p99_s"] >= s.p99_bound_s:
        f.append(f"control p99 latency {summary['control']['p99_s']} s >= bound {s.p99_bound_s} s")
    if hwm >= s.rss_bound:
        f.append(f"broker peak RSS {hwm / MB:.0f} MB >= bound {s.rss_bound / MB:.0f} MB")
    if bombs_accepted:
        f.append(f"{bombs_accepted} gzip bomb(s) inflating to {s.bomb_inflated} bytes were accepted "
                 "(max.message.size must apply inside compressed wrappers)")
    if log_bytes >= s.log_bound:
        f.append(f"broker log {log_bytes} bytes >= bound {s.log_bound} (refusals must be rate-limited)")
    if summary["log"]["tracebacks"]:
        f.append(f"broker output holds {summary['log']['tracebacks']} traceback(s)")
    if stop["exit_code"] != 0 or stop["seconds"] > s.shutdown_timeout_s + s.stop_margin_s:
        f.append(f"SIGTERM with a stuck client: exit code {stop['exit_code']} after {stop['seconds']} s "
                 f"(want 0 within shutdown.timeout.ms {s.shutdown_timeout_s} s + {s.stop_margin_s} s)")
    if thread_errors:
        f.append(f"{len(thread_errors)} soak thread(s) failed: {thread_errors[0][-300:]}")
    summary["failures"] = f
    if s.report:
        Path(s.report).write_text(json.dumps({**summary, "timeline": timeline}, indent=1, default=str))
    return summary


def test_the_exactly_once_check_catches_loss_duplication_misplacement_and_damage():
    ledger = Ledger(acked=[(0, 0, 0, 3), (1, 0, 3, 2)])      # ids 0-2 at p0 offset 0, ids 3-4 at p1 offset 0
    good = [(0, 0, 0), (0, 110, 1), (0, 220, 2), (1, 0, 3), (1, 110, 4)]

    def check(rows, damage: int | None = None) -> dict:
        c = Consumed()
        for part, off, i in rows:
            data = payload(i)
            c.record(part, off, data[:-1] + b"!" if i == damage else data)
        c.record(0, 330, b"not ours")
        return verify_exactly_once(ledger, c)

    r = check(good)
    assert (r["acked"], r["acked_read_once"], r["missing"], r["duplicated"], r["misplaced"], r["checksum_ok"]) \
        == (5, 5, 0, 0, 0, True)
    assert check(good[:-1])["missing"] == 1
    assert check(good + [(0, 440, 1)])["duplicated"] == 1
    assert check(good[:3] + [(1, 50, 3), (1, 160, 4)])["misplaced"] == 1
    r = check(good, damage=4)
    assert (r["missing"], r["duplicated"], r["checksum_ok"]) == (0, 0, False)


def test_soak_settings_from_env():
    s = SoakSettings.from_env({"INGEST_SOAK_SECONDS": "3600", "INGEST_SOAK_REPORT": "/tmp/r.json",
                               "INGEST_SOAK_ATTACKS": "burst, fuzz", "INGEST_SOAK_HOSTILE_THREADS": "3"})
    assert (s.seconds, s.report, s.attacks, s.hostile_threads) == (3600.0, "/tmp/r.json", ("burst", "fuzz"), 3)
    assert s.log_bound == 256 * 1024 + 2048 * 3600
    assert SoakSettings.from_env({}).seconds == 180.0
    assert SoakSettings.from_env({}, seconds=SUITE_SECONDS).seconds == 45.0
    assert SoakSettings.from_env({"INGEST_SOAK_SECONDS": "3600"}, seconds=SUITE_SECONDS).seconds == 3600.0
    assert parse_attacks("none") == ()
    with pytest.raises(ValueError, match="unknown soak attack"):
        parse_attacks("burst,nuke")


@pytest.mark.processes
@pytest.mark.slow
def test_broker_survives_mixed_valid_and_hostile_traffic(tmp_path):
    s = SoakSettings.from_env(seconds=SUITE_SECONDS)
    summary = run_soak(tmp_path, s)
    print(json.dumps(summary, indent=1, default=str))
    assert not summary["failures"], "soak bounds broken:\n- " + "\n- ".join(summary["failures"])
    not_run = [k for k in s.attacks if not summary["attacks_run"][k]]
    assert not not_run, f"attacks that never ran in {s.seconds} s: {not_run} (ran: {summary['attacks_run']})"


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.broker.test_soak``: the same soak outside pytest (exit 1 if a bound broke)."""
    base = SoakSettings.from_env()
    ap = argparse.ArgumentParser(prog="python -m tests.broker.test_soak", description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=base.seconds)
    ap.add_argument("--report", default=base.report, help="write the JSON summary (with timeline) here")
    ap.add_argument("--attacks", default=",".join(base.attacks), help=f"comma list of {', '.join(ATTACKS)}")
    ap.add_argument("--hostile-threads", type=int, default=base.hostile_threads)
    ap.add_argument("--episode-seconds", type=float, default=base.episode_s)
    ap.add_argument("--workdir", default=None, help="keep the broker's files here (default: a temp dir)")
    a = ap.parse_args(argv)
    attacks = () if a.attacks in ("", "none") else parse_attacks(a.attacks)
    s = replace(base, seconds=a.seconds, report=a.report, attacks=attacks,
                hostile_threads=a.hostile_threads, episode_s=a.episode_seconds)
    if a.workdir:
        summary = run_soak(a.workdir, s)
    else:
        with tempfile.TemporaryDirectory(prefix="ingest-soak-") as d:
            summary = run_soak(d, s)
    print(json.dumps(summary, indent=1, default=str))
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())

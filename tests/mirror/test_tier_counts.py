"""The mirror's per-partition counts and monitoring events (FakeClock, real registry process).

Exact counts per event-time window for plain and gzip message sets (inner messages count one by
one), the monitoring events' fields, and crash/restore through state(): the restored counter
republishes pending events with the same event_id and content and ends with the same counts as
an uninterrupted one; report_seq and revisions keep increasing across the restore.
"""
from __future__ import annotations

import json

import pytest

from ingest.clock import FakeClock
from ingest.errors import MirrorConfigError
from ingest.events.envelope import frame
from ingest.events.header_reader import HeaderReader
from ingest.events.loadgen import EventGenerator
from ingest.events.registry_client import RegistryClient
from ingest.events.schemas import PAGE_VIEW, load_schema
from ingest.events.serde import EventSerializer
from ingest.mirror.tier_counts import PartitionCounter, event_id, unit_session
from ingest.records.message import CODEC_GZIP
from ingest.records.message_set import encode_message_set

W = 60_000
G = 60_000          # the counter's default grace
I = 30_000          # interim interval
T0 = 1_700_000_000_000 - 1_700_000_000_000 % W   # a window start
SESSION = unit_session("mirror", "dc1", "pv", 3, 1)


@pytest.fixture(scope="module")
def ser(registry_url):
    return EventSerializer(RegistryClient(registry_url), "pv-value", load_schema(PAGE_VIEW))


class Payloads:
    """Framed page views with chosen event times (one producer session, seq 0, 1, ...)."""

    def __init__(self, ser):
        self.ser, self.gen, self.seq = ser, EventGenerator(PAGE_VIEW, seed=3), 0

    def at(self, *times: int) -> list[bytes]:
        out = []
        for t in times:
            h = {"time": t, "server": "web-1", "service": "frontend", "session": "s-1", "seq": self.seq}
            self.seq += 1
            out.append(self.ser.serialize({**self.gen.make(), "header": h}))
        return out


def new_counter(registry_url, clock, state=None, window_ms=W):
    return PartitionCounter(session=SESSION, topic="pv", source="dc1", mirror_server="mirror-host-1",
                            window_ms=window_ms, interval_ms=I, header_reader=HeaderReader(RegistryClient(registry_url)),
                            clock=clock, state=state)


def counts(events):
    """window start -> (attempted, acked, failed, bytes) of the latest revision in ``events``."""
    latest = {}
    for e in events:
        if e["window_start_ms"] not in latest or e["revision"] > latest[e["window_start_ms"]]["revision"]:
            latest[e["window_start_ms"]] = e
    return {w: (e["count_attempted"], e["count_acked"], e["count_failed"], e["bytes_acked"])
            for w, e in sorted(latest.items())}


@pytest.mark.parametrize("codec", [0, CODEC_GZIP])
def test_exact_counts_per_window_of_plain_and_gzip_sets(registry_url, ser, codec):
    clock = FakeClock(T0 + 10)
    c = new_counter(registry_url, clock)
    p = Payloads(ser)
    a = p.at(T0 + 1, T0 + 2, T0 + W - 1)            # window T0
    b = p.at(T0 + W, T0 + W + 5)                     # window T0 + W
    old = p.at(T0 - 3 * W + 7)                       # a late event: window T0 - 3W
    no_header = [b"not framed at all", frame(999_001, b"\x02abc")]  # window 0 (out of range)
    n = c.count(encode_message_set(a[:2] + no_header[:1] + b[:1], codec))
    n += c.count(encode_message_set(a[2:] + b[1:] + old + no_header[1:], codec))
    assert n == 8
    assert c.totals() == {"attempted": 8, "acked": 8, "failed": 0, "too_late": 0,
                          "bytes_acked": sum(map(len, a + b + old + no_header))}
    size = lambda ps: sum(map(len, ps))  # noqa: E731
    first = c.due_events()                           # closed by time: window 0 and the late window
    assert counts(first) == {0: (2, 2, 0, size(no_header)), T0 - 3 * W: (1, 1, 0, size(old))}
    c.published(e["event_id"] for e in first)
    clock.set(T0 + 2 * W + G)
    events = c.due_events()
    assert counts(events) == {T0: (3, 3, 0, size(a)), T0 + W: (2, 2, 0, size(b))}
    assert [e["report_seq"] for e in first + events] == [1, 2, 3, 4]
    assert all(e["is_final"] for e in first + events)
    assert [e["heartbeat"] for e in first + events] == [False] * 4


def test_event_fields(registry_url, ser):
    clock = FakeClock(T0)
    c = new_counter(registry_url, clock)
    p = Payloads(ser)
    msgs = p.at(T0 + 5, T0 + 6)
    c.count(encode_message_set(msgs))
    clock.set(T0 + W + G)                 # T0 closed; T0 + W idle but still open
    (e,) = c.due_events()
    assert e == {
        "event_id": event_id(SESSION, 1), "producer_session_id": "mirror:mirror:dc1:pv:3-1",
        "producer_server": "mirror-host-1", "service": "mirror:dc1", "report_seq": 1, "topic": "pv",
        "window_start_ms": T0, "window_end_ms": T0 + W, "window_size_ms": W, "revision": 1,
        "count_attempted": 2, "count_acked": 2, "count_failed": 0, "bytes_acked": sum(map(len, msgs)),
        "seq_min": None, "seq_max": None, "is_final": True, "heartbeat": False, "emitted_at_ms": T0 + W + G,
        "header": {"time": T0 + W + G, "server": "mirror-host-1", "service": "mirror:dc1", "session": SESSION,
                   "seq": 0},
    }
    assert c.due_events() == [e]          # pending until published
    c.published([e["event_id"]])
    assert c.due_events() == []
    clock.set(T0 + 2 * W + G)             # T0 + W closed without traffic: one heartbeat
    (hb,) = c.due_events()
    assert (hb["window_start_ms"], hb["heartbeat"], hb["is_final"], hb["count_attempted"], hb["report_seq"],
            hb["revision"], hb["header"]["seq"]) == (T0 + W, True, True, 0, 2, 1, 1)
    c.published([hb["event_id"]])
    c.count_payloads(p.at(T0 + 9), acked=False)       # fallback mode: read, given up
    c.count_payloads(p.at(T0 + 10), acked=True)
    (late,) = c.due_events()
    assert (late["window_start_ms"], late["revision"], late["report_seq"], late["count_attempted"],
            late["count_acked"], late["count_failed"], late["is_final"]) == (T0, 2, 3, 4, 3, 1, True)


def test_a_window_with_a_pending_event_gets_no_new_event_until_published(registry_url, ser):
    clock = FakeClock(T0)
    c = new_counter(registry_url, clock)
    p = Payloads(ser)
    c.count(encode_message_set(p.at(T0 + 1)))
    clock.advance(I)
    (first,) = c.due_events()                 # interim
    assert (first["count_acked"], first["is_final"]) == (1, False)
    c.count(encode_message_set(p.at(T0 + 2)))
    clock.advance(I)
    assert c.due_events() == [first]          # publish failed: the same frozen event, nothing new
    c.published([first["event_id"]])
    (second,) = c.due_events()
    assert (second["count_acked"], second["revision"], second["report_seq"]) == (2, 2, 2)


def run_cycle(c, clock, t, sets):
    clock.set(t)
    for s in sets:
        c.count(s)
    return c.due_events()


def test_crash_and_restore_gives_the_same_events(registry_url, ser):
    p = Payloads(ser)
    # 12 cycles of 20 s; every cycle copies two sets (one gzip) with events in the current and the
    # previous window; cycle 5's publish fails, cycle 6's succeeds on the broker but the ack is lost
    cycles = []
    for i in range(12):
        t = T0 + i * 20_000
        cycles.append((t, [encode_message_set(p.at(t, t + 1, t - W)), encode_message_set(p.at(t + 2), CODEC_GZIP)]))
    failed, ack_lost, crash_after = {5}, {6}, 6

    def run(restart: bool):
        clock = FakeClock(T0)
        c = new_counter(registry_url, clock)
        broker: dict[str, dict] = {}          # event_id -> content, as the audit sees it after dedup
        republished = []
        for i, (t, sets) in enumerate(cycles):
            events = run_cycle(c, clock, t, sets)
            checkpoint = json.loads(json.dumps(c.state()))
            if i not in failed:
                for e in events:
                    assert broker.setdefault(e["event_id"], e) == e   # same id, same content
                if i not in ack_lost:
                    c.published(e["event_id"] for e in events)
            if i == crash_after:
                if restart:
                    run_cycle(c, clock, t + 10_000, [cycles[i + 1][1][0]])  # copied after the checkpoint, killed
                    c = new_counter(registry_url, clock, state=checkpoint)
                republished = c.pending()  # the restarted copier publishes these first (the other one retries)
                for e in republished:
                    assert broker[e["event_id"]] == e
                c.published(e["event_id"] for e in republished)
        clock.set(cycles[-1][0] + 3 * W)
        final = c.due_events(closing=True)
        for e in final:
            assert broker.setdefault(e["event_id"], e) == e
        return broker, republished, c

    once, _, c1 = run(restart=False)
    twice, republished, c2 = run(restart=True)
    assert len(republished) >= 1 and {e["report_seq"] for e in republished} <= {e["report_seq"] for e in once.values()}
    for k in once:
        assert twice[k] == once[k], (k, {f: (twice[k][f], once[k][f]) for f in once[k] if twice[k][f] != once[k][f]})
    assert twice == once                          # the same events: ids, contents, revisions, report_seqs
    assert c1.totals() == c2.totals() == {"attempted": 48, "acked": 48, "failed": 0, "too_late": 0,
                                          "bytes_acked": c1.totals()["bytes_acked"]}
    seqs = sorted(e["report_seq"] for e in once.values())
    assert seqs == list(range(1, len(seqs) + 1))  # no report_seq gap the audit would flag
    assert sum(v[1] for v in counts(once.values()).values()) == 48


def test_restore_continues_report_seq_and_revisions(registry_url, ser):
    clock = FakeClock(T0)
    c = new_counter(registry_url, clock)
    p = Payloads(ser)
    c.count(encode_message_set(p.at(T0 + 1, T0 + 2)))
    clock.set(T0 + W + G)
    (e1,) = c.due_events()
    c.published([e1["event_id"]])
    state = json.loads(json.dumps(c.state()))
    r = new_counter(registry_url, clock, state=state)
    assert r.state() == state
    r.count(encode_message_set(p.at(T0 + 3), CODEC_GZIP))   # a late message after the restart
    (e2,) = r.due_events()
    assert (e2["report_seq"], e2["revision"], e2["count_acked"], e2["event_id"]) == (2, 2, 3, event_id(SESSION, 2))
    assert e2["header"]["seq"] == 1


def test_state_forgets_finished_windows_after_seven_days_but_keeps_window_zero(registry_url, ser):
    day = 86_400_000
    clock = FakeClock(T0 - T0 % day)
    start = clock.time_ms()
    c = new_counter(registry_url, clock, window_ms=day)
    p = Payloads(ser)
    c.count(encode_message_set(p.at(start + 5) + [b"unframed"]))
    for d in range(1, 10):
        clock.set(start + d * day + G)
        c.published(e["event_id"] for e in c.due_events())
    state = c.state()
    n0 = start // day
    assert (state["closed"], state["idle"], state["open"]) == ([[0, 1, 1, len(b"unframed")]], [[n0 + 2, n0 + 8]], [])
    assert state["revisions"] == [] and state["pending"] == []   # days 0 and 1 ended > 7 days ago: forgotten
    assert len(json.dumps(state)) < 300
    c.count(encode_message_set(p.at(start + 7)))                     # too old to count now
    assert c.totals()["too_late"] == 1
    c.count(encode_message_set([b"unframed again"]))
    (e,) = c.due_events()
    assert (e["window_start_ms"], e["count_acked"], e["revision"]) == (0, 2, 2)


def test_state_of_another_window_size_is_refused(registry_url):
    clock = FakeClock(T0)
    state = new_counter(registry_url, clock).state()
    with pytest.raises(MirrorConfigError, match="window 60000 ms"):
        new_counter(registry_url, clock, state=state, window_ms=2 * W)


def test_bulk_count_of_a_mixed_set_matches_the_event_times(registry_url, ser):
    """One set with every kind of message the bulk path treats differently: plain and compressed
    messages side by side, a schema with the header not first, payloads shorter than the time prefix,
    a time beyond 2039 (a 7-byte varint), many windows and many messages per millisecond."""
    import copy
    registry = RegistryClient(registry_url)
    late_schema = copy.deepcopy(load_schema(PAGE_VIEW))
    late_schema["name"] = "LateHeaderPageView"
    late_schema["fields"] = [{"name": "first", "type": "long"}] + late_schema["fields"]
    late_ser = EventSerializer(registry, "pv-late-value", late_schema)
    p = Payloads(ser)
    gen = EventGenerator(PAGE_VIEW, seed=9)
    future = 2_300_000_000_000  # year 2042
    expected: dict[int, list[int]] = {}
    plain, zipped = [], []
    for i in range(600):
        t = T0 + (i // 50) * 40_000 + (i % 3)    # 50 per 40 s step, a few per millisecond
        if i % 97 == 0:
            t = future + i
        if i % 5 == 0:
            payload = late_ser.serialize({**gen.make(), "first": i, "header": {
                "time": t, "server": "w", "service": "s", "session": "late", "seq": i}})
        else:
            (payload,) = p.at(t)
        if i % 41 == 0:
            payload, t = payload[:7 + i % 4], None       # cut inside the time varint: no readable header
        (plain if i % 2 else zipped).append(payload)
        start = 0 if t is None else t - t % W
        c = expected.setdefault(start, [0, 0])
        c[0] += 1
        c[1] += len(payload)
    extra = [b"", b"\x00", b"\x00\x00\x00\x00"]           # shorter than any prefix: window 0
    plain += extra
    for e in extra:
        expected[0][0] += 1
        expected[0][1] += len(e)
    message_set = (encode_message_set(plain[:100]) + encode_message_set(zipped[:150], CODEC_GZIP)
                   + encode_message_set(plain[100:]) + encode_message_set(zipped[150:], CODEC_GZIP))
    clock = FakeClock(T0)
    c = new_counter(registry_url, clock)
    assert c.count(message_set) == 603
    clock.set(T0 + 20 * W)                              # the future windows are open: interim reports
    got = {e["window_start_ms"]: [e["count_acked"], e["bytes_acked"]] for e in c.due_events()
           if not e["heartbeat"]}
    assert got == expected
    assert len(expected) >= 8 and expected[0][0] == 15 + 3


def test_restored_pending_events_come_first_from_due_events(registry_url, ser):
    """A copier that does not publish the restored events separately gets them from due_events():
    oldest first, unchanged, before anything new."""
    clock = FakeClock(T0)
    c = new_counter(registry_url, clock)
    p = Payloads(ser)
    c.count(encode_message_set(p.at(T0 + 1, T0 + W + 1)))
    clock.set(T0 + W + G)
    pending = c.due_events()                         # checkpointed, then the process was killed
    assert [(e["window_start_ms"], e["report_seq"], e["is_final"]) for e in pending] == [(T0, 1, True), (T0 + W, 2, False)]
    r = new_counter(registry_url, clock, state=json.loads(json.dumps(c.state())))
    r.count(encode_message_set(p.at(T0 + 2, T0 + 3 * W)))  # re-counted and new messages after the checkpoint
    clock.set(T0 + 3 * W + G)
    events = r.due_events()
    assert events[:2] == pending                      # same ids, same content, first
    # then a heartbeat and an interim report; the windows with a pending event wait for it to be published
    assert [(e["window_start_ms"], e["report_seq"], e["heartbeat"]) for e in events[2:]] == [
        (T0 + 2 * W, 3, True), (T0 + 3 * W, 4, False)]
    r.published(e["event_id"] for e in events)
    after = r.due_events()
    assert [(e["window_start_ms"], e["revision"], e["count_acked"], e["report_seq"]) for e in after] == [
        (T0, 2, 2, 5), (T0 + W, 2, 1, 6)]


def test_compact_state_round_trips_every_kind_of_window(registry_url, ser):
    clock = FakeClock(T0)
    c = new_counter(registry_url, clock)
    p = Payloads(ser)
    c.count(encode_message_set(p.at(T0 + 1) + [b"x"]))                 # window T0 and window 0
    c.count_payloads(p.at(T0 + 2), acked=False)                         # a failed message in T0
    clock.set(T0 + 4 * W + G)                                           # T0 closed, T0+W..T0+3W idle
    c.published(e["event_id"] for e in c.due_events())
    c.count(encode_message_set(p.at(T0 + 3, T0 + 4 * W + 1)))          # late (revision 2, pending) + open window
    clock.advance(I)
    c.due_events()                                                      # pending: T0 rev 2, interim of T0+4W
    c.count(encode_message_set(p.at(T0 + 4 * W + 2)))                  # open window changed since its report
    state = json.loads(json.dumps(c.state()))
    assert [e[:5] for e in state["closed"]] == [[0, 1, 1, 1], [T0 // W, 2, 3, 2, 1]]  # T0: revision 2 pending
    assert state["idle"] == [[T0 // W + 1, T0 // W + 3]]
    assert [o[:5] + o[-1:] for o in state["open"]] == [[T0 + 4 * W, 2, 2, 0, o[4], 1] for o in state["open"]]
    assert [e["window_start_ms"] for e in state["pending"]] == [T0, T0 + 4 * W]
    r = new_counter(registry_url, clock, state=state)
    assert r.state() == state
    more = encode_message_set(p.at(T0 + 5, T0 + 5 * W))
    for counter in (c, r):
        counter.count(more)
    clock.set(T0 + 6 * W + G)
    got, want = r.due_events(), c.due_events()
    assert [(e["window_start_ms"], e["report_seq"], e["revision"]) for e in got] == \
        [(e["window_start_ms"], e["report_seq"], e["revision"]) for e in want]
    assert got == want
    assert r.totals() == c.totals()
    assert r.state() == c.state()

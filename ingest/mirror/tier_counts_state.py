"""The compact JSON form of a :class:`ingest.mirror.tier_counts.PartitionCounter`'s state.

The state goes into the unit's checkpoint znode, written every ``checkpoint.interval.ms``,
and holds up to 7 days of windows (1008 windows of 10 minutes), so its size matters: a
window that closed and was reported with the counts it still has is one short list, and a
run of closed heartbeat windows is one ``[first, last]`` pair. Window starts are stored as
window numbers (``start // window_ms``) where they are multiples of the window::

    {"v": 2, "window_ms": W, "report_seq": n, "too_late": n, "hb_next": start | null,
     "closed": [[number, revision, count, bytes]                        # read = acked, none failed
                | [number, revision, attempted, acked, failed, bytes], ...],
     "idle": [[first number, last number], ...],                        # heartbeats: zero counts, revision 1
     "open": [[start, attempted, acked, failed, bytes, reported | null, last_report_ms (0 once closed), revision], ...],
     "revisions": [[start, revision], ...],                             # windows the counter forgot already
     "pending": [event, ...]}                                           # built, not yet published

A busy unit's week of 10-minute windows is about 30 KB; an idle one's under 1 KB.
"""
from __future__ import annotations

from typing import Any

STATE_VERSION = 2


def encode(*, window_ms: int, topic: str, counter_state: dict, revisions: dict[int, int], report_seq: int,
           pending: list[dict], closed_before_ms: int) -> dict[str, Any]:
    """The compact state (module docstring) of a counter's ``MonitoringCounter.state()`` and its event bookkeeping.

    ``closed_before_ms``: windows that end (plus grace) by then are closed for good; the time of
    their last report no longer matters (it only spaces interim reports of open windows) and is
    written as 0, so a restored counter's state equals the original's.
    """
    closed: list[list[int]] = []
    idle: list[list[int]] = []
    open_: list[list[Any]] = []
    known = set()
    for _topic, start, att, acked, failed, nbytes, smin, smax, reported, last in counter_state["windows"]:
        known.add(start)
        rev = revisions.get(start, 0)
        number, rem = divmod(start, window_ms)
        if not rem and smin is None and smax is None and reported == [att, acked, failed, nbytes, None, None, True]:
            if att == acked == failed == nbytes == 0 and rev == 1:
                if idle and idle[-1][1] == number - 1:
                    idle[-1][1] = number
                else:
                    idle.append([number, number])
            elif failed == 0 and att == acked:
                closed.append([number, rev, att, nbytes])
            else:
                closed.append([number, rev, att, acked, failed, nbytes])
        else:
            closed_for_good = start + window_ms <= closed_before_ms
            open_.append([start, att, acked, failed, nbytes, reported, 0 if closed_for_good else last, rev])
    return {"v": STATE_VERSION, "window_ms": window_ms, "report_seq": report_seq,
            "too_late": counter_state.get("too_late", 0), "hb_next": counter_state["hb_next"].get(topic),
            "closed": closed, "idle": idle, "open": open_,
            "revisions": sorted([s, r] for s, r in revisions.items() if s not in known),
            "pending": [dict(e) for e in pending]}


def decode(state: dict, topic: str) -> tuple[dict, dict[int, int], int, list[dict]]:
    """(``MonitoringCounter.state()`` form, revisions, report_seq, pending) of a compact state."""
    w = int(state["window_ms"])
    windows: list[list[Any]] = []
    revisions: dict[int, int] = {int(s): int(r) for s, r in state["revisions"]}
    for entry in state["closed"]:
        if len(entry) == 4:
            number, rev, att, nbytes = entry
            acked, failed = att, 0
        else:
            number, rev, att, acked, failed, nbytes = entry
        start = number * w
        windows.append([topic, start, att, acked, failed, nbytes, None, None,
                        [att, acked, failed, nbytes, None, None, True], 0])
        if rev:
            revisions[start] = rev
    for first, last in state["idle"]:
        for number in range(first, last + 1):
            windows.append([topic, number * w, 0, 0, 0, 0, None, None, [0, 0, 0, 0, None, None, True], 0])
            revisions[number * w] = 1
    for start, att, acked, failed, nbytes, reported, last, rev in state["open"]:
        windows.append([topic, start, att, acked, failed, nbytes, None, None, reported, last])
        if rev:
            revisions[start] = rev
    hb = state["hb_next"]
    counter_state = {"windows": windows, "hb_next": {} if hb is None else {topic: hb},
                     "too_late": int(state.get("too_late", 0))}
    return counter_state, revisions, int(state["report_seq"]), [dict(e) for e in state["pending"]]

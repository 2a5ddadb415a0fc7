"""Exact attribution of missing messages to lost ranges: a small max-flow per topic and tier.

The question: of the messages a window lost at one tier, how many can lie in
the recorded lost ranges (gaps) of that tier, and in which? Facts used:

* a gap explains at most its capacity (its exact message count, or its
  estimate: never more) — :attr:`~ingest.lost_ranges.LostRange.capacity`;
* a gap can hold messages of a window only if the window overlaps the gap's
  event-time span;
* a *bounded* gap (``session_bounds``) can hold a session's message only if its
  seq lies strictly between the gap's bounds for that session (sessions not
  listed: any seq). The candidates are the window's missing seqs (seqs in the
  producers' ``[seq_min, seq_max]`` loaded in no topic), grouped into *atoms*:
  the count of candidate seqs of one (window, session) that lie in exactly the
  same set of gaps. Each candidate seq is one message: it is explained once;
* per (window, session) no more messages are missing than acknowledged minus
  loaded (when known).

The network, per tier::

    S -> window (its loss at this tier) -> (window, session) -> atom -> bounded gap -> T (capacity)
         window -------------------------------------------------> unbounded gap (time overlap only)

Strong evidence first: the network is first built only with the edges from
atoms to gaps that *close* the atom's session (the session was loaded on both
sides of the gap, so its missing seqs between the bounds are its messages in
the gap, or lost elsewhere). Then the weak edges are added: atoms of sessions
open on a side of the gap (a session that ended, or began, next to it: its
missing seqs may as well be an acknowledged tail a crash lost), and windows to
gaps without bounds. So a gap with an exact count is filled by what it surely
held before an open session's unrelated loss can take its capacity.

In each phase windows are added earliest first, each augmented to its maximum
before the next (so earlier windows are served first, and the result is still
a maximum flow); breadth-first search visits gaps in offset order, so the
result is deterministic. Whatever no gap can hold stays unexplained (DATA_LOSS). Tiers
are allocated upstream first; candidate seqs a source gap took are no longer
available to the target tier.
"""
from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from ingest.lost_ranges import LostRange


log = logging.getLogger(__name__)

INF = float("inf")

Atoms = dict[tuple[int, str], list[tuple[frozenset[str], int]]]
"""(window_start, session) -> [(ids of the gaps holding these candidate seqs, how many seqs)]."""


@dataclass
class Candidates:
    """What bounds the missing messages of one topic's windows, per session (from Spark)."""

    atoms: Atoms = field(default_factory=dict)
    session_missing: dict[tuple[int, str], int] = field(default_factory=dict)
    """(window_start, session) -> acked - loaded distinct (absent: unknown, not a bound)."""


class _Flow:
    """Edmonds-Karp on a dict graph; nodes are hashable, edges kept in insertion order."""

    def __init__(self) -> None:
        self.cap: dict[tuple, float] = {}
        self.adj: dict[object, list] = {}

    def edge(self, u, v, c: float) -> None:
        if (u, v) not in self.cap:
            self.adj.setdefault(u, []).append(v)
            self.adj.setdefault(v, []).append(u)
            self.cap.setdefault((v, u), 0)
            self.cap[(u, v)] = 0
        self.cap[(u, v)] += c

    def flow(self, u, v) -> int:
        """Net flow pushed along u -> v (the reverse residual of the edge)."""
        return int(self.cap.get((v, u), 0)) if (v, u) in self.cap else 0

    def augment(self, s, t) -> int:
        total = 0
        while True:
            parent = {s: None}
            queue = deque([s])
            while queue and t not in parent:
                u = queue.popleft()
                for v in self.adj.get(u, ()):
                    if v not in parent and self.cap[(u, v)] > 0:
                        parent[v] = u
                        queue.append(v)
            if t not in parent:
                return total
            path, v = [], t
            while parent[v] is not None:
                path.append((parent[v], v))
                v = parent[v]
            push = min(self.cap[e] for e in path)
            for u, v in path:
                self.cap[(u, v)] -= push
                self.cap[(v, u)] += push
            total += int(push)


def allocate(
    demand: dict[int, int],
    gaps: Sequence[LostRange],
    window_ms: int,
    *,
    candidates: Candidates | None = None,
    capacity: dict[str, int] | None = None,
) -> dict[int, dict[str, int]]:
    """Missing messages per window explained by each gap: ``{window_start: {gap ident: n}}``.

    Args:
        demand: messages lost at this tier per window start (only positive entries matter).
        gaps: the topic's gaps of this tier.
        candidates: atoms and per-session bounds; consumed in place (what this
            tier explains is no longer available to the next tier).
        capacity: remaining capacity per gap ident (default: :attr:`~ingest.lost_ranges.LostRange.capacity`); updated in place.
    """
    cand = candidates or Candidates()
    gaps = sorted(gaps, key=lambda g: (g.order, g.ident))
    caps = capacity if capacity is not None else {}
    for g in gaps:
        caps.setdefault(g.ident, g.capacity)
    f = _Flow()
    S, T = ("S",), ("T",)
    for g in gaps:
        if caps[g.ident] > 0:
            f.edge(("G", g.ident), T, caps[g.ident])
    windows = sorted(ws for ws, n in demand.items() if n > 0)
    atom_edges: list[tuple] = []
    session_edges: list[tuple] = []
    weak: dict[int, list[tuple]] = {}
    for ws in windows:  # strong evidence first: sessions the gap closes on both sides
        we = ws + window_ms
        near = [g for g in gaps if caps[g.ident] > 0 and g.overlaps(ws, we)]
        if not near:
            continue
        W = ("W", ws)
        later = weak.setdefault(ws, [])
        for g in near:
            if not g.bounded:
                later.append((W, ("G", g.ident)))
        by_id = {g.ident: g for g in near if g.bounded}
        for (aws, session), atoms in sorted(cand.atoms.items()):
            if aws != ws:
                continue
            WS = ("WS", ws, session)
            limit = cand.session_missing.get((ws, session))
            for i, (ids, n) in enumerate(atoms):
                held = [gid for gid in sorted(by_id, key=lambda x: (by_id[x].order, x)) if gid in ids]
                if n <= 0 or not held:
                    continue
                A = ("A", ws, session, i)
                f.edge(WS, A, n)
                atom_edges.append((WS, A, ws, session, i))
                for gid in held:
                    if by_id[gid].closes(session):
                        f.edge(A, ("G", gid), INF)
                    else:
                        later.append((A, ("G", gid)))
            if WS in f.adj:
                f.edge(W, WS, INF if limit is None else max(0, limit))
                session_edges.append((W, WS, ws, session))
        if W in f.adj or later:
            f.edge(S, W, demand[ws])
            f.augment(S, T)
    for ws in windows:  # then what the gaps may hold: sessions open on a side, gaps without bounds
        for u, v in weak.get(ws, ()):
            f.edge(u, v, INF)
        if weak.get(ws):
            f.augment(S, T)
    out: dict[int, dict[str, int]] = {}
    for g in gaps:
        G = ("G", g.ident)
        for u in f.adj.get(G, ()):
            if u == T:
                continue
            n = f.flow(u, G)
            if n > 0:
                ws = u[1]
                out.setdefault(ws, {})
                out[ws][g.ident] = out[ws].get(g.ident, 0) + n
        caps[g.ident] -= f.flow(G, T)
    for WS, A, ws, session, i in atom_edges:  # consume what this tier explained
        used = f.flow(WS, A)
        if used:
            ids, n = cand.atoms[(ws, session)][i]
            cand.atoms[(ws, session)][i] = (ids, n - used)
    for W, WS, ws, session in session_edges:
        used = f.flow(W, WS)
        if used and (ws, session) in cand.session_missing:
            cand.session_missing[(ws, session)] -= used
    return out


def explained_by_cause(assigned: dict[str, int], gaps: Iterable[LostRange]) -> dict[str, int]:
    """Sum a window's per-gap explanation by the gaps' causes."""
    cause = {g.ident: g.cause for g in gaps}
    out: dict[str, int] = {}
    for gid, n in assigned.items():
        out[cause[gid]] = out.get(cause[gid], 0) + n
    return out


def gaps_holding(session: str, seq: int, gaps: Iterable[LostRange]) -> frozenset[str]:
    """Idents of the bounded gaps that can hold ``session``'s ``seq`` (strictly between its bounds, or unlisted)."""
    out = []
    for g in gaps:
        if not g.bounded:
            continue
        bound = next((b for b in g.session_bounds if b[0] == session), None)
        if bound is None or ((bound[1] is None or seq > bound[1]) and (bound[2] is None or seq < bound[2])):
            out.append(g.ident)
    return frozenset(out)


def atoms_of(missing: dict[tuple[int, str], Iterable[int]], gaps: Sequence[LostRange]) -> Atoms:
    """The atoms of candidate seqs ``{(window_start, session): seqs}`` (what ``counts.gap_atoms`` computes in Spark)."""
    out: Atoms = {}
    for key, seqs in sorted(missing.items()):
        groups: dict[frozenset[str], int] = {}
        for seq in seqs:
            held = gaps_holding(key[1], seq, gaps)
            if held:
                groups[held] = groups.get(held, 0) + 1
        if groups:
            out[key] = sorted(groups.items(), key=lambda kv: sorted(kv[0]))
    return out

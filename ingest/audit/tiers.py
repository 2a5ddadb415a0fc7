"""The tiers a message passes, their counts per topic window, and where (and why) the counts drop.

Tiers, in pipeline order:

=============  ==============================================================
``producers``  acknowledged to the producers (their monitoring, ``audit.topic``)
``broker``     appended by the leaders that first received them, from producers (the brokers'
               counts, ``broker.monitoring.topic``; docs/audit.md, "Broker-tier counts")
``source``     read from the source cluster by the mirror (``count_attempted``
               of the mirror's monitoring events, ``mirror.monitoring.topic``)
``target``     acknowledged by the target (offline) cluster (``count_acked``)
``warehouse``  distinct ids committed by the loader
=============  ==============================================================

Without producer monitoring for a window, the broker tier is where the count starts: the later
tiers are compared with what the brokers appended. A topic without broker counts has no broker
tier (null). A topic with no mirror monitoring event at all is single-cluster: two tiers
(producers, warehouse) and the cause names of the single-cluster audit
(``retention``, ``missing_segments``, ``corruption``, ``unexplained_loss``,
``duplicates``).

Messages held by a gap of cause ``missing_segments`` (gone from the broker
without a retention record) are counted under that cause, and the tier's status
is DATA_LOSS: only retention and corruption are expected losses.

The drop at each tier is measured against the level before it, clamped so
that intermediate levels lie between the warehouse count and the previous
level: the drops then add up to ``missing`` exactly, and a tier that
under-reports (a mirror restarted before publishing its counts) can never
invent a loss the warehouse contradicts.
"""
from __future__ import annotations

import logging

from ingest.audit.status import Status
from ingest.lost_ranges import CAUSES, CORRUPTION, MISSING_SEGMENTS, RETENTION, TIER_SOURCE, TIER_TARGET

log = logging.getLogger(__name__)

PRODUCERS = "producers"
BROKER = "broker"
SOURCE = "source"
TARGET = "target"
WAREHOUSE = "warehouse"
TIERS = (PRODUCERS, BROKER, SOURCE, TARGET, WAREHOUSE)
DROP_TIERS = (BROKER, SOURCE, TARGET, WAREHOUSE)
"""Tiers whose count can drop (``loss_tier`` names one of them)."""

GAP_TIER = {TIER_SOURCE: SOURCE, TIER_TARGET: WAREHOUSE}
"""Lost ranges of the source cluster (mirror) explain drops at ``source``; the loader's at ``warehouse``."""

# cause names: (tier, kind) -> name; kind is a gap cause or "unexplained"
TIERED_CAUSES = {
    (BROKER, "unexplained"): "lost_before_broker",
    (SOURCE, RETENTION): "source_retention", (SOURCE, MISSING_SEGMENTS): "source_missing_segments",
    (SOURCE, "unexplained"): "lost_before_source",
    (TARGET, "unexplained"): "lost_in_mirroring",
    (WAREHOUSE, RETENTION): "target_retention", (WAREHOUSE, MISSING_SEGMENTS): "target_missing_segments",
    (WAREHOUSE, CORRUPTION): "corruption", (WAREHOUSE, "unexplained"): "lost_at_loader",
}
SINGLE_CAUSES = {
    (BROKER, "unexplained"): "lost_before_broker",
    (WAREHOUSE, RETENTION): "retention", (WAREHOUSE, MISSING_SEGMENTS): "missing_segments",
    (WAREHOUSE, CORRUPTION): "corruption", (WAREHOUSE, "unexplained"): "unexplained_loss",
}
EXPECTED_CAUSES = (RETENTION, CORRUPTION)
"""Gap causes whose losses are expected (RETENTION_LOSS, CORRUPTION_LOSS); any other makes DATA_LOSS."""
DUPLICATES_CAUSE = {True: "duplicated", False: "duplicates"}


def tier_counts(producers: int | None, warehouse: int, source: int | None = None, target: int | None = None,
                broker: int | None = None) -> dict:
    """The row's ``tiers`` field (source/target None for a single-cluster topic, broker None without broker
    counts, producers None without producer monitoring)."""
    return {PRODUCERS: producers, BROKER: broker, SOURCE: source, TARGET: target, WAREHOUSE: warehouse}


def baseline(tiers: dict) -> int | None:
    """Where the count starts: the producers' acknowledged count, else the brokers' (None: neither counted)."""
    return tiers[PRODUCERS] if tiers.get(PRODUCERS) is not None else tiers.get(BROKER)


def drops(tiers: dict) -> dict[str, int]:
    """Messages lost at each tier (see the module docstring); they sum to max(0, baseline - warehouse)."""
    warehouse = tiers[WAREHOUSE]
    level = baseline(tiers) or 0
    out = {}
    for name in DROP_TIERS:
        count = tiers.get(name)
        if count is None or (name == BROKER and tiers.get(PRODUCERS) is None):
            out[name] = 0
            continue
        nxt = warehouse if name == WAREHOUSE else max(min(level, count), warehouse)
        out[name] = max(0, level - nxt)
        level = min(level, nxt) if name != WAREHOUSE else level
    return out


def loss_tier(d: dict[str, int]) -> str | None:
    """The first tier where the count drops, or None."""
    return next((t for t in DROP_TIERS if d.get(t, 0) > 0), None)


def loss_causes(d: dict[str, int], explained: dict[str, dict[str, int]], *, tiered: bool) -> dict[str, int]:
    """Per-cause counts of the lost messages: explained by gaps per tier, the rest unexplained at that tier."""
    names = TIERED_CAUSES if tiered else SINGLE_CAUSES
    out: dict[str, int] = {}
    for tier in DROP_TIERS:
        lost = d.get(tier, 0)
        by_cause = explained.get(tier, {})
        for cause in CAUSES:
            n = min(by_cause.get(cause, 0), lost)
            if n and (tier, cause) in names:
                out[names[(tier, cause)]] = out.get(names[(tier, cause)], 0) + n
                lost -= n
        if lost > 0:
            out[names[(tier, "unexplained")]] = out.get(names[(tier, "unexplained")], 0) + lost
    return out


def tier_status(d: dict[str, int], explained: dict[str, dict[str, int]]) -> dict[str, Status]:
    """Per dropping tier: DATA_LOSS (something no gap holds, or held by missing segments), CORRUPTION_LOSS or
    RETENTION_LOSS."""
    out = {}
    for tier in DROP_TIERS:
        lost = d.get(tier, 0)
        if lost <= 0:
            continue
        by_cause = explained.get(tier, {})
        held = sum(by_cause.get(c, 0) for c in EXPECTED_CAUSES)
        if held < lost:
            out[tier] = Status.DATA_LOSS
        elif by_cause.get(CORRUPTION, 0):
            out[tier] = Status.CORRUPTION_LOSS
        else:
            out[tier] = Status.RETENTION_LOSS
    return out


def loss_status(d: dict[str, int], explained: dict[str, dict[str, int]]) -> Status | None:
    """The row's loss status: DATA_LOSS when any tier lost messages no gap holds (never masked by an
    earlier tier's retention), else the status of the first tier where the count drops."""
    per = tier_status(d, explained)
    if not per:
        return None
    if Status.DATA_LOSS in per.values():
        return Status.DATA_LOSS
    return per[loss_tier(d)]

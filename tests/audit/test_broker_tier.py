"""The broker tier with exact numbers (pure: build_rows, no Spark): windows judged from the brokers' counts
when no producer reports, and the disagreement between producers and brokers when both do."""
from __future__ import annotations

from ingest.audit.counts import LoadedCount
from ingest.audit.monitoring_events import Snapshot, aggregate
from ingest.audit.reconcile import build_rows
from ingest.lost_ranges import TIER_TARGET, LostRange
from tests.audit.test_attribution import A, B, W, params, snap


def broker_snap(ws, n, *, session="broker:0:pv:0:0", topic="pv"):
    return Snapshot(session, "broker-0", topic, ws, ws + W, 7, n, n, 0, 0, None, None, False, False, ws + W + 1, 1,
                    origin="broker")


def rows_of(loaded, *, producers=(), brokers=(), lost=()):
    rows = build_rows(params(), aggregate(list(producers)),
                      [LoadedCount("pv", ws, None, n, n) for ws, n in loaded.items()],
                      lost_ranges=list(lost), broker=aggregate(list(brokers)))
    return {r["window_start_ms"]: r for r in rows}


def test_only_broker_counts_judge_the_warehouse():
    rows = rows_of({A: 100, B: 93}, brokers=[broker_snap(A, 60), broker_snap(A, 40, session="broker:0:pv:0:60"),
                                             broker_snap(B, 100)])
    a, b = rows[A], rows[B]
    assert (a["status"], a["missing"], a["completeness"], a["produced_acked"]) == ("COMPLETE", 0, 1.0, 0)
    assert a["tiers"] == {"producers": None, "broker": 100, "source": None, "target": None, "warehouse": 100}
    assert (b["status"], b["missing"], b["causes"], b["loss_tier"]) == ("DATA_LOSS", 7, {"unexplained_loss": 7},
                                                                        "warehouse")


def test_broker_counts_with_a_retention_gap_are_a_retention_loss():
    gap = LostRange("pv", 0, 0, 100, 130, 0, 30, A + W - 1, None, cause="retention", messages_exact=True,
                    tier=TIER_TARGET, ident="g")
    rows = rows_of({B: 70}, brokers=[broker_snap(B, 100)], lost=[gap])
    assert (rows[B]["status"], rows[B]["missing"], rows[B]["causes"]) == ("RETENTION_LOSS", 30, {"retention": 30})


def test_producers_and_brokers_disagree_the_loss_is_located_before_the_broker():
    rows = rows_of({A: 100}, producers=[snap("s1", A, 105, 0, 104)], brokers=[broker_snap(A, 100)])
    a = rows[A]
    assert a["tiers"] == {"producers": 105, "broker": 100, "source": None, "target": None, "warehouse": 100}
    assert (a["status"], a["missing"], a["causes"], a["loss_tier"]) == ("DATA_LOSS", 5, {"lost_before_broker": 5},
                                                                        "broker")


def test_producers_agree_with_brokers_complete_and_no_counts_at_all_is_no_monitoring():
    rows = rows_of({A: 50, B: 20}, producers=[snap("s1", A, 50, 0, 49)], brokers=[broker_snap(A, 50)])
    assert (rows[A]["status"], rows[A]["tiers"]["broker"]) == ("COMPLETE", 50)
    assert (rows[B]["status"], rows[B]["tiers"]["broker"]) == ("NO_MONITORING", None)

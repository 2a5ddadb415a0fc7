"""Lost ranges: one type for the loader, the mirror and the audit, in each of their stored forms.

Pure: no process is started.
"""
from __future__ import annotations

import json

from ingest.lost_ranges import CORRUPTION, MISSING_SEGMENTS, RETENTION, TIER_SOURCE, TIER_TARGET, LostRange
from ingest.mirror.tier_events import lost_range_record

MANIFEST_KEYS = ["after_time_ms", "before_time_ms", "broker_id", "bytes", "cause", "detected_at_ms", "end_offset",
                 "estimated_messages", "messages_exact", "partition", "run_id", "session_bounds", "start_offset", "topic"]


def test_the_loaders_manifest_form_is_unchanged_and_reads_back():
    r = LostRange("pv", 1, 2, 100, 400, 300, 12, 5, 9, "run-1", 77, MISSING_SEGMENTS, True, (("s1", 3, None),))
    d = r.to_json()
    assert sorted(d) == MANIFEST_KEYS   # the audit-only fields never reach a manifest
    assert d["session_bounds"] == [["s1", 3, None]]
    assert LostRange.from_json(json.loads(json.dumps(d))) == r
    old = {k: v for k, v in d.items() if k not in ("cause", "messages_exact", "session_bounds")}
    assert LostRange.from_json(old) == LostRange("pv", 1, 2, 100, 400, 300, 12, 5, 9, "run-1", 77)   # defaults
    assert (LostRange.from_json(old).cause, LostRange.from_json(old).messages_exact) == (RETENTION, False)


def test_the_mirrors_record_reads_back_as_the_same_range_for_the_audit():
    lost = LostRange("pv", 4, 0, 1000, 5000, 4000, 37, 10, None, detected_at_ms=99, messages_exact=True,
                     session_bounds=(("s1", 4, None), ("s2", None, 9)), tier=TIER_SOURCE, source_cluster="dc2")
    record = lost_range_record(lost, group="g", mirror_server="m", target_partition=2, target_offset=7)
    back = LostRange.from_record(record, tier=TIER_SOURCE, index=3)
    assert back == lost.named("source#3:dc2:b4p0:1000-5000:retention")
    assert (back.order, back.capacity, back.bounded, back.closes("s1")) == (("dc2", 4, 0, 1000), 37, True, False)


def test_the_audit_names_each_range_of_its_input_and_reads_old_records_tolerantly():
    loader = LostRange("pv", 0, 0, 0, 300, 300, 3, None, None, "r", 0, CORRUPTION)
    as_object = LostRange.from_record(loader, index=0)
    as_dict = LostRange.from_record(loader.to_json(), index=0)
    assert as_object == as_dict and as_object.ident == "target#0:b0p0:0-300:corruption"
    assert (as_object.tier, as_object.source_cluster, as_object.order) == (TIER_TARGET, "", ("", 0, 0, 0))
    sparse = LostRange.from_record({"topic": "pv", "end_offset": 9, "cause": None, "session_bounds": None}, index=1)
    assert (sparse.cause, sparse.estimated_messages, sparse.session_bounds, sparse.bytes) == (RETENTION, 0, (), 9)
    assert sparse.overlaps(0, 1) and not LostRange("pv", 0, 0, 0, 1, 1, 1, 100, None).overlaps(0, 100)

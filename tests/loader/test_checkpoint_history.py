"""Audit history and compaction records stay bounded per run: checkpoints and archives, like the loader's.

Audit: every revision the writer (``write_revision``) adds past KEEP + INTERVAL triggers a checkpoint of the
latest rows and moves covered revisions to ``_audit/archive/``; ``latest_rows`` must equal the fold of
every revision ever written, ``run_revision`` must find archived runs, a corrupt checkpoint is skipped.
Compaction: ``reconcile`` (a writer step) archives settled records beyond the newest KEEP and settles a
crashed run whose commit a loader checkpoint already covers.
"""
from __future__ import annotations

import json
import os

import pytest

from ingest.audit import history
from ingest.clock import FakeClock
from ingest.compaction import records
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.loader.checkpoint_helpers import history as loader_history

T0 = 1_790_000_000_000


def _rows(i: int) -> list[dict]:
    """Revision i: windows i..i+2 of topic t, each with a status that depends on i (later ones win)."""
    return [{"topic": "t", "row_type": "window", "producer": None, "window_start_ms": (i + k) * 60_000,
             "window_end_ms": (i + k + 1) * 60_000, "status": f"S{i}", "judged": True, "loaded_rows": i * 10 + k,
             "produced_acked": 5, "loaded_distinct": 5, "duplicates": 0, "missing": 0, "completeness": 1.0,
             "causes": {"late": i}} for k in range(3)]


def test_audit_history_checkpoints_archive_and_still_fold_every_revision(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(history, "KEEP", 4)
    monkeypatch.setattr(history, "INTERVAL", 5)
    dest = str(tmp_path / "dest")
    expected: dict[tuple, dict] = {}
    for i in range(23):
        history.write_revision(dest, _rows(i), run_id=f"audit-{i}", audited_at_ms=T0 + i * 1000,
                               range_start_ms=0, range_end_ms=10**9)
        for r in _rows(i):
            expected[("t", "window", None, r["window_start_ms"])] = (r["status"], r["loaded_rows"], {"late": i})
    root = tmp_path / "dest" / "_audit"
    # Checkpoints when revisions/ reached 9: after revisions 8 (covers 0..4) , 13 (5..9), 18 (10..14).
    assert sorted(os.listdir(root / "revisions")) == [history.revision_name(T0 + i * 1000, f"audit-{i}") for i in range(15, 23)]
    [shard] = os.listdir(root / "archive")
    assert len(os.listdir(root / "archive" / shard)) == 15
    assert sorted(os.listdir(root / "checkpoints")) == [
        history.revision_name(T0 + i * 1000, f"audit-{i}").replace(".revision", ".latest") for i in (9, 14)]

    def got():
        return {(r["topic"], r["row_type"], r["producer"], r["window_start_ms"]): (r["status"], r["loaded_rows"], r["causes"])
                for r in history.latest_rows(dest)}

    assert got() == expected and len(expected) == 25
    assert history.read_history(dest).num_rows == 23 * 3  # every row of every revision, archived ones too
    assert history.run_revision(dest, "audit-3").endswith(f"/archive/{shard}/" + history.revision_name(T0 + 3000, "audit-3"))
    assert history.run_revision(dest, "audit-20").endswith("/revisions/" + history.revision_name(T0 + 20_000, "audit-20"))
    assert [r["status"] for r in history.read_revision(history.run_revision(dest, "audit-3"))] == ["S3"] * 3

    # A bit flipped in the newest checkpoint: the older one plus the archived revisions after it.
    newest = root / "checkpoints" / sorted(os.listdir(root / "checkpoints"))[-1]
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 1
    newest.write_bytes(bytes(data))
    assert got() == expected
    for p in (root / "checkpoints").iterdir():  # every checkpoint damaged: every revision
        p.write_bytes(p.read_bytes()[:40])
    assert got() == expected

    # The CLI an operator runs reads the same.
    from ingest.cli import main
    assert main(["audit", "show", "--destination", dest]) == 1  # statuses S0..S22 are not COMPLETE
    out = capsys.readouterr().out
    assert out.count("S22") == 3 and "S0" in out


def test_compaction_records_are_archived_and_a_crashed_run_is_settled_from_a_loader_checkpoint(tmp_path, capsys):
    dest = tmp_path / "dest"
    loader_history(dest, 9, 4)  # commit 7 is compaction "run-006", covered by loader checkpoint 8 and archived
    st = open_storage(str(dest))
    state = LoaderState.load(st)
    assert state.checkpoint_seq == 8 and not (dest / "_ingest/commits/000000000007.json").exists()
    ids = [f"c{T0 + i:013d}-{i:08x}" for i in range(records.KEEP + 5)]
    for cid in ids:
        records.write_record(st, {"id": cid, "state": "committed", "old": ["a"], "new": ["b"]})
    for cid in ("run-006", "run-lost"):  # crashed after / before their commit point
        records.write_record(st, {"id": cid, "state": "started", "old": [], "new": []})
    everything = list(records.read_records(st))
    assert len(everything) == records.KEEP + 7

    assert records.reconcile(st, state, FakeClock(T0)) == 2
    settled = {r["id"]: r for r in records.read_records(st, archived=True)}
    assert (settled["run-006"]["state"], settled["run-006"]["manifest_seq"]) == ("committed", 7)
    assert settled["run-lost"]["state"] == "abandoned"
    # The oldest settled records beyond KEEP moved; runs/ holds the newest 100 (the two crashed ones sort last).
    recent = [r["id"] for r in records.read_records(st)]
    assert len(recent) == records.KEEP and recent[-2:] == ["run-006", "run-lost"]
    assert recent[:-2] == ids[7:]
    assert sorted(os.listdir(dest / records.ARCHIVE_DIR)) == [ids[0][1:5]]
    assert [r["id"] for r in records.read_records(st, archived=True)] == ids + ["run-006", "run-lost"]
    assert records.archived_count(st) == 7
    assert json.loads((dest / records.ARCHIVE_DIR / ids[0][1:5] / f"{ids[0]}.json").read_text())["new"] == ["b"]

    from ingest.cli import main
    assert main(["compaction", "status", "--set", f"destination={dest}"]) == 0
    assert "7 older run record(s) in" in capsys.readouterr().out

"""Checkpoints of the loader state: the same state as folding every manifest, a short commits directory,
corrupt checkpoints ignored with real bytes damaged, and old destinations (no checkpoint) still read.

Every destination here is built by the real commit protocol (:func:`ingest.loader.commit.commit_files`
and ``replace_files``): loads of two topics, a replay, a compaction, a reset-offsets, lost ranges and
quarantine files; the committer checkpoints every ``interval`` commits.
"""
from __future__ import annotations

import os
import shutil

import pytest

from ingest.loader import checkpoint, layout, manifests
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.loader.checkpoint_helpers import full_fold, history, relative, snapshot, view

STEPS = 23
INTERVAL = 4


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One destination with checkpoints every 4 commits and its twin without any, same commits."""
    base = tmp_path_factory.mktemp("cp")
    with_cp, without = base / "with", base / "without"
    seqs = history(with_cp, STEPS, INTERVAL)
    assert history(without, STEPS, 0) == seqs
    return base, with_cp, without, seqs


def _files(d):
    return sorted(os.listdir(d)) if d.exists() else []


def test_checkpointed_state_equals_the_fold_of_every_manifest_and_old_manifests_are_archived(built):
    base, with_cp, without, seqs = built
    assert seqs == list(range(1, STEPS + 1))  # one commit per step
    a = LoaderState.load(open_storage(str(with_cp)))
    b = LoaderState.load(open_storage(str(without)))
    assert (a.seq, a.checkpoint_seq, b.checkpoint_seq) == (23, 20, 0)
    va, vb = relative(view(a), with_cp), relative(view(b), without)
    assert va == vb
    # The history really exercised every kind of change.
    kinds = {manifests.read_manifest(a.storage, s).kind for s in range(1, 24)}
    assert kinds == {"load", "reset", "compaction"}
    assert len(va["lost"]) == 3 and len(va["quarantine"]) == 4 and any(f.sources for f in va["files"])
    assert a.commit_of_run("run-006") == 7 and a.commit_of_run("run-020") == 21 and a.commit_of_run("nope") is None

    # commits/ holds the checkpoint's own manifest and the ones after it; the rest moved to the archive.
    hot = _files(with_cp / layout.COMMITS_DIR)
    assert hot == [f"{s:012d}{suffix}" for s in range(20, 24) for suffix in (".json", ".published")]
    archived = _files(with_cp / layout.archive_shard(1))
    assert archived == [f"{s:012d}{suffix}" for s in range(1, 20) for suffix in (".json", ".published")]
    # Three checkpoints kept (12 pruned, 4 and 8 long gone), the pointer names the newest.
    cps = _files(with_cp / layout.CHECKPOINTS_DIR)
    assert [n for n in cps if n.endswith(layout.CHECKPOINT_SUFFIX)] == [layout.checkpoint_name(s) for s in (12, 16, 20)]
    assert "_last_checkpoint" in cps and checkpoint.pointer_seq(a.storage) == 20
    # The twin without checkpoints has nothing of that.
    assert not (without / layout.CHECKPOINTS_DIR).exists() and not (without / layout.ARCHIVE_DIR).exists()


def test_every_intermediate_state_matches(tmp_path):
    """After each of the first 13 commits (crossing three checkpoints), the checkpointed state equals the full fold."""
    for steps in (3, 4, 5, 8, 9, 13):
        a, b = tmp_path / f"a{steps}", tmp_path / f"b{steps}"
        history(a, steps, 4)
        history(b, steps, 0)
        sa = LoaderState.load(open_storage(str(a)))
        assert sa.checkpoint_seq == steps - steps % 4
        assert relative(view(sa), a) == relative(view(LoaderState.load(open_storage(str(b)))), b), steps


def _flip(path, at=None):
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if at is None else at
    data[i] ^= 0x01
    path.write_bytes(bytes(data))


def test_corrupt_or_partial_checkpoints_are_ignored_in_favour_of_an_older_one_or_the_manifests(built, tmp_path):
    base, with_cp, without, _ = built
    dest = tmp_path / "dest"
    shutil.copytree(with_cp, dest)
    cps = dest / layout.CHECKPOINTS_DIR
    expected = relative(view(LoaderState.load(open_storage(str(without)))), without)

    def read():
        before = snapshot(dest)
        state = LoaderState.load(open_storage(str(dest)))
        v = relative(view(state), dest)
        assert snapshot(dest) == before  # readers never repair, rewrite or delete anything
        return state, v

    # One bit flipped in the newest top level: checkpoint 16 is used instead, with manifests 17..23
    # (17..19 read from the archive).
    top = cps / layout.checkpoint_name(20)
    good = top.read_bytes()
    _flip(top)
    state, v = read()
    assert state.checkpoint_seq == 16 and v == expected
    top.write_bytes(good[: len(good) // 2])  # a partial write (truncated)
    state, v = read()
    assert state.checkpoint_seq == 16 and v == expected
    top.write_bytes(good)

    # A damaged part (one topic's files): offsets come from checkpoint 20, the files of that topic from a
    # fold that does not use it (checkpoint 16 + manifests 17..23).
    [part] = [p for p in cps.iterdir() if p.name.startswith(f"{20:012d}.files.")][:1]
    part_good = part.read_bytes()
    _flip(part)
    state, v = read()
    assert state.checkpoint_seq == 20 and v == expected
    part.write_bytes(part_good)
    runs = cps / layout.checkpoint_part_name(20, "runs")
    runs_good = runs.read_bytes()
    runs.write_bytes(b"")
    state, v = read()
    assert v == expected and state.commit_of_run("run-003") == 4
    runs.write_bytes(runs_good)
    lost = cps / layout.checkpoint_part_name(20, "lost")
    lost_good = lost.read_bytes()
    _flip(lost)
    state, v = read()
    assert v == expected and len(state.lost_ranges()) == 3
    lost.write_bytes(lost_good)

    # A garbage pointer: the newest checkpoint is found by listing.
    pointer = cps / layout.LAST_CHECKPOINT
    pointer_good = pointer.read_bytes()
    pointer.write_bytes(b"sha256:0000\n{}")
    state, v = read()
    assert state.checkpoint_seq == 20 and v == expected
    pointer.write_bytes(pointer_good)

    # Every checkpoint damaged: the full fold of archive + commits.
    for p in cps.iterdir():
        if p.name.endswith(layout.CHECKPOINT_SUFFIX):
            _flip(p, at=3)
    state, v = read()
    assert state.checkpoint_seq == 0 and v == expected
    assert full_fold(dest, tmp_path / "oracle") == expected


def test_a_destination_written_before_checkpoints_reads_as_before_and_gets_one_at_its_next_commit(built, tmp_path):
    base, _, without, _ = built
    old = tmp_path / "old"
    shutil.copytree(without, old)  # 23 manifests, no checkpoint: what every destination before this change holds
    st = open_storage(str(old))
    expected = relative(view(LoaderState.load(st)), old)
    assert LoaderState.load(st).checkpoint_seq == 0
    # The next commit (interval 100, and 24 >= 100 is false) writes none; interval 10 writes one at 24.
    from ingest.loader import commit
    state = LoaderState.load(st)
    commit.commit_files(st, kind="load", run_id="run-next", offsets=list(state.offsets.values()), checkpoint_interval=100)
    assert checkpoint.pointer_seq(st) == 0
    commit.commit_files(st, kind="load", run_id="run-next2", offsets=list(state.offsets.values()), checkpoint_interval=10)
    after = LoaderState.load(st)
    assert (after.seq, after.checkpoint_seq) == (25, 25)
    v = relative(view(after), old)
    assert {k: v[k] for k in ("offsets", "files", "lost", "topics")} == {k: expected[k] for k in ("offsets", "files", "lost", "topics")}
    assert _files(old / layout.COMMITS_DIR) == [f"{25:012d}.json", f"{25:012d}.published"]
    assert len(_files(old / layout.archive_shard(1))) == 48

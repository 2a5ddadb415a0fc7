"""A SIGKILL at every step of checkpointing leaves a readable state, readers never change a checkpointed
destination (even one holding an unfinished roll-forward), and the next writer finishes the job.

The writer is a real subprocess committing through :func:`ingest.loader.commit.commit_files`; it
SIGKILLs itself at the named crash point (``INGEST_FAULTS``, see :mod:`ingest.loader.faults`).
The oracle is the fold of every manifest of a copy of the destination without its checkpoints.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.loader import checkpoint, commit, layout, manifests
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.loader.checkpoint_helpers import full_fold, history, relative, snapshot, staged, view

REPO = Path(__file__).resolve().parents[2]

# One more load of views p0 and p1 (offsets +100 each), committed with interval 4; the child may SIGKILL itself.
_WRITER = """
import sys
from ingest.loader import commit
from ingest.loader.records import OffsetRecord
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.loader.checkpoint_helpers import staged
root, run_id = sys.argv[1], sys.argv[2]
st = open_storage(root)
state = LoaderState.load(st)
offsets, added = dict(state.offsets), []
for p in (0, 1):
    o = offsets[("views", 0, p)].offset
    offsets[("views", 0, p)] = OffsetRecord("views", 0, p, o + 100)
    added.append(staged(st, run_id, "views", p, o, o + 100))
commit.commit_files(st, kind="load", run_id=run_id, offsets=list(offsets.values()), added=added, checkpoint_interval=4)
"""


def _write(root: Path, run_id: str, crash: str | None):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("INGEST_FAULTS", None)
    if crash:
        env["INGEST_FAULTS"] = crash
    return subprocess.run([sys.executable, "-c", _WRITER, str(root), run_id], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def _hot(root: Path) -> list[str]:
    return sorted(os.listdir(root / layout.COMMITS_DIR))


def _names(seqs, suffixes=(".json", ".published")):
    return sorted(f"{s:012d}{x}" for s in seqs for x in suffixes)


def _read_without_change(root: Path, scratch: Path):
    """The state as a reader sees it, which must equal the full fold, and must not touch the tree."""
    before = snapshot(root)
    state = LoaderState.load(open_storage(str(root)))
    v = relative(view(state), root)
    assert snapshot(root) == before
    assert v == full_fold(root, scratch)
    return state


@pytest.mark.processes
def test_sigkill_while_checkpointing_leaves_a_readable_state_and_the_next_commit_finishes(tmp_path):
    dest, scratch = tmp_path / "dest", tmp_path / "oracle"
    history(dest, 7, 4)  # seq 7, checkpoint 4
    st = open_storage(str(dest))
    assert checkpoint.pointer_seq(st) == 4
    views = len(LoaderState.load(st).files("views"))

    # Commit 8 is due for a checkpoint; killed after writing it, before moving the pointer.
    r = _write(dest, "crash-1", "checkpoint-written")
    assert r.returncode == -9 and "SIGKILL at checkpoint-written" in r.stderr, r.stderr[-2000:]
    assert (dest / layout.CHECKPOINTS_DIR / layout.checkpoint_name(8)).exists()
    assert checkpoint.pointer_seq(st) == 4 and _hot(dest) == _names(range(4, 9))
    state = _read_without_change(dest, scratch)
    assert (state.seq, state.checkpoint_seq, state.unpublished) == (8, 4, ())  # committed, published

    # The next commit (9) finds a checkpoint due (9 - 4 >= 4), writes it and archives 4..8.
    assert _write(dest, "next-1", None).returncode == 0
    assert checkpoint.pointer_seq(st) == 9 and _hot(dest) == _names([9])
    state = _read_without_change(dest, scratch)
    assert (state.seq, state.checkpoint_seq) == (9, 9)

    # Commits 10..12 (no checkpoint due), then 13 is killed after archiving the first manifest (9).
    for i in range(3):
        assert _write(dest, f"load-{i}", None).returncode == 0
    r = _write(dest, "crash-2", "mid-archive")
    assert r.returncode == -9 and "SIGKILL at mid-archive" in r.stderr, r.stderr[-2000:]
    assert checkpoint.pointer_seq(st) == 13
    assert _hot(dest) == sorted(_names(range(10, 14)) + [f"{9:012d}.published"])  # 9's manifest moved, not its marker
    state = _read_without_change(dest, scratch)
    assert (state.seq, state.checkpoint_seq) == (13, 13)
    assert [manifests.read_manifest(st, s).run_id for s in (9, 13)] == ["next-1", "crash-2"]

    # The next commit (14, no checkpoint due) finishes the interrupted archive.
    assert _write(dest, "next-2", None).returncode == 0
    assert _hot(dest) == _names([13, 14])
    assert sorted(os.listdir(dest / layout.archive_shard(1))) == _names(range(1, 13))
    state = _read_without_change(dest, scratch)
    assert (state.seq, state.checkpoint_seq, len(state.files("views"))) == (14, 13, views + 2 * 7)  # commits 8..14 added two each


@pytest.mark.processes
def test_readers_leave_a_checkpointed_destination_with_an_unfinished_roll_forward_untouched(tmp_path, capsys):
    from ingest.audit.inputs import load_state
    from ingest.cli import main
    from ingest.compaction.config import COMPACTION_CONFIG
    from ingest.compaction.plan import Settings, plan_hours
    from ingest.demo.summary import loaded_rows
    from tests.compaction.helpers import HOUR_START_MS

    dest, scratch = tmp_path / "dest", tmp_path / "oracle"
    history(dest, 9, 4)  # seq 9, checkpoint 8, manifests 1..7 archived
    r = _write(dest, "half", "mid-publish")
    assert r.returncode == -9 and "SIGKILL at mid-publish" in r.stderr, r.stderr[-2000:]
    before = snapshot(dest)

    state = _read_without_change(dest, scratch)
    assert (state.seq, state.checkpoint_seq, state.unpublished) == (10, 8, (10,))
    new = [f for f in state.files("views") if f.run_id == "half"]
    # One file renamed into place before the kill, the other read where its bytes are: still staged.
    assert [state.full_path(f) == state.storage.join(f.staging) for f in new] == [False, True]
    audit = load_state(str(dest))
    assert audit.commit_seq == 10 and len(audit.files) == len(state.files())
    assert sorted(f.path for f in audit.files) == sorted(state.full_path(f) for f in state.files())
    cfg = COMPACTION_CONFIG.parse({"destination": str(dest), "compaction.require.audit": "false"})
    now = HOUR_START_MS + 200 * 3_600_000

    def planned(root):
        plans, others = plan_hours(LoaderState.load(open_storage(str(root))), Settings.from_config(cfg), now)
        return [sorted(f.path for f in p.files) for p in plans], [(o.hour, o.action, o.files_in) for o in others]

    assert planned(dest) == planned(scratch)  # the same plan as from the full fold
    assert sum(len(p) for p in planned(dest)[0]) == 26  # 27 data files; one hour holds a single file
    assert main(["compaction", "status", "--set", f"destination={dest}"]) == 0
    capsys.readouterr()
    assert loaded_rows(dest) == {"views": 3 * len(state.files("views")), "clicks": 3 * len(state.files("clicks"))}
    assert snapshot(dest) == before  # no path, byte or mtime changed by any reader

    # The next writer rolls the commit forward; the state is the same, now published.
    assert commit.roll_forward(open_storage(str(dest))) == [10]
    after = LoaderState.load(open_storage(str(dest)))
    assert after.unpublished == () and all(after.full_path(f) == after.storage.join(f.path) for f in new)
    assert [f.path for f in after.files(kind=None)] == [f.path for f in state.files(kind=None)]


def test_checkpointed_state_through_the_hdfs_client(tmp_path):
    from tests.harness.webhdfs import WebHdfsServer

    with WebHdfsServer(tmp_path / "hdfs") as server:
        local = server.root / "data" / "events"
        history(local, 7, 4)  # built on the served directory (fast), then one commit through the client:
        uri = server.uri("/data/events")
        st = open_storage(uri)
        prev = LoaderState.load(st)
        assert (prev.seq, prev.checkpoint_seq) == (7, 4)
        added = [staged(st, "over-hdfs", "clicks", 0, 5000, 5100)]
        commit.commit_files(st, kind="load", run_id="over-hdfs", offsets=list(prev.offsets.values()), added=added,
                            checkpoint_interval=4)  # 8 - 4 >= 4: checkpoint 8 written and 4..7 archived over WebHDFS
        before = snapshot(local)
        state = LoaderState.load(st)
        got = view(state)  # every file, lost range and run read through the client...
        assert snapshot(local) == before  # ...without changing anything on the "HDFS" side
        assert (state.seq, state.checkpoint_seq) == (8, 8)
        assert sorted(os.listdir(local / layout.COMMITS_DIR)) == _names([8])
        assert sorted(os.listdir(local / layout.archive_shard(1))) == _names(range(1, 8))
        expected = full_fold(local, tmp_path / "oracle")
        for key in ("seq", "offsets", "files", "lost", "runs", "topics", "partition"):
            assert got[key] == expected[key], key
        # A bit flipped in the newest checkpoint: checkpoint 4 and manifests 5..8 (5..7 from the archive).
        top = local / layout.CHECKPOINTS_DIR / layout.checkpoint_name(8)
        data = bytearray(top.read_bytes())
        data[len(data) // 2] ^= 1
        top.write_bytes(bytes(data))
        again = LoaderState.load(open_storage(uri))
        assert again.checkpoint_seq == 4 and view(again)["files"] == expected["files"]

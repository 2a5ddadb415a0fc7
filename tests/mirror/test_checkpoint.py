"""The mirror checkpoint znode: JSON round trip, garbage refused clearly, version-conditional writes."""
from __future__ import annotations

import pytest

from ingest import znodes
from ingest.errors import MirrorError, MirrorOwnershipLostError
from ingest.mirror.checkpoint import ABSENT, Checkpoint, CheckpointStore
from ingest.mirror.mapping import MirrorUnit

UNIT = MirrorUnit("dc1", "clicks", 2, 1, 5)


def test_round_trip_keeps_every_field():
    cp = Checkpoint(4096, 1024, 5, (2048, 17), {"windows": {"0": 3}}, 1_700_000_000_000, 512,
                    ({"event_id": "e"},))
    back = Checkpoint.parse(cp.to_json())
    assert back == cp and back.counts == {"windows": {"0": 3}} and back.pending_lost == ({"event_id": "e"},)
    assert Checkpoint.parse(b'{"source_offset": 7}') == Checkpoint(7, None, None)


@pytest.mark.parametrize("data, named", [
    (b"not json", "Expecting value"),
    (b"[1, 2]", "a JSON list"),
    (b'{"target_offset": 1}', "source_offset"),
    (b'{"source_offset": -4}', "source_offset -4"),
    (b'{"source_offset": 1, "target_offset": "x"}', "target_offset 'x'"),
    (b'{"source_offset": 1, "tally": [1]}', "tally [1]"),
])
def test_garbage_is_a_mirror_error_naming_the_bad_value(data, named):
    with pytest.raises(MirrorError, match="unreadable") as info:
        Checkpoint.parse(data, "the checkpoint /x")
    assert named in str(info.value) and "/x" in str(info.value)


def test_writes_are_conditional_on_the_version_read_last(zk):
    a, b = CheckpointStore(zk, "g", UNIT), CheckpointStore(zk, "g", UNIT)
    assert a.path == znodes.mirror_checkpoint_path("g", "dc1", "clicks", 2, 1)
    assert a.read() is None and a.version == ABSENT
    assert b.read() is None
    a.write(Checkpoint(100, 100, 5))
    with pytest.raises(MirrorOwnershipLostError, match="another owner"):
        b.write(Checkpoint(50, 50, 5))                           # b read "absent", a created it since
    a.write(Checkpoint(200, 200, 5))
    assert b.read() == Checkpoint(200, 200, 5) and b.version == a.version == 1
    b.write(Checkpoint(300, 300, 5))
    with pytest.raises(MirrorOwnershipLostError):
        a.write(Checkpoint(250, 250, 5))                         # a is stale now
    assert CheckpointStore(zk, "g", UNIT).read() == Checkpoint(300, 300, 5)


def test_garbage_in_the_znode_is_a_clear_error(zk):
    store = CheckpointStore(zk, "g", UNIT)
    zk.retry(zk.create, store.path, b"\xff\x00", makepath=True)
    with pytest.raises(MirrorError, match=r"checkpoint /mirrors/g/checkpoints/dc1/clicks/2-1 is unreadable"):
        store.read()

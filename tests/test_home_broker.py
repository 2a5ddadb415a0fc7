"""A former home's record listed from ZooKeeper (``broker_id-partition`` znodes), on a real ZooKeeper."""
from __future__ import annotations

from ingest.home_broker import furthest_former_node


def _read(zk, directory: str, partition: int):
    def read(home: int) -> int | None:
        value = int(zk.get(f"{directory}/{home}-{partition}")[0])
        return None if value < 0 else value   # a caller's own refusal: not a record of this target
    return read


def test_the_furthest_record_under_another_home_of_the_same_partition_is_found(zk):
    d = "/offsets/t"
    for name, value in {"0-3": b"400", "2-3": b"700", "1-3": b"900", "2-4": b"5000", "3-3": b"not a number",
                        "x-3": b"1", "4-3": b"-1"}.items():
        zk.create(f"{d}/{name}", value, makepath=True)
    # home 1 now: its own 900, partition 4's 5000, a value that is not a number, a name that is not
    # broker-partition, and a record the reader refuses are all left out
    assert furthest_former_node(zk, d, 1, 3, _read(zk, d, 3), offset=lambda o: o) == (2, 700)
    # home 5: its former homes are 0, 1 and 2
    assert furthest_former_node(zk, d, 5, 3, _read(zk, d, 3), offset=lambda o: o) == (1, 900)
    assert furthest_former_node(zk, d, 1, 7, _read(zk, d, 7), offset=lambda o: o) is None


def test_no_directory_is_no_record(zk):
    assert furthest_former_node(zk, "/offsets/absent", 1, 0, lambda home: 1, offset=lambda o: o) is None

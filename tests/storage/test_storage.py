"""The storage interface on local disk and on WebHDFS (real `hdfs` client, test WebHDFS server)."""
from __future__ import annotations

import pytest

from ingest.errors import StorageError
from ingest.storage import open_storage
from tests.harness.webhdfs import WebHdfsServer


@pytest.fixture
def webhdfs(tmp_path):
    with WebHdfsServer(tmp_path / "hdfs") as server:
        yield server


@pytest.fixture(params=["local", "webhdfs"])
def storage(request, tmp_path):
    if request.param == "local":
        yield open_storage(str(tmp_path / "local"))
    else:
        with WebHdfsServer(tmp_path / "hdfs") as server:
            yield open_storage(server.uri("/data"))


def test_storage_contract(storage):
    p = storage.join("a", "b.bin")
    assert not storage.exists(p) and storage.status(p) is None and storage.list(storage.join("a")) == []
    storage.write_bytes(p, b"hello")
    assert storage.read_bytes(p) == b"hello" and storage.status(p).size == 5
    with pytest.raises(StorageError, match="exists"):
        storage.write_bytes(p, b"again")
    storage.write_bytes(p, b"HELLO", overwrite=True)
    storage.write_atomic(p, b"atomic")
    assert storage.read_bytes(p) == b"atomic"
    with storage.open_write(storage.join("a", "c.bin")) as f:
        f.write(b"streamed" * 1000)
    assert storage.status(storage.join("a", "c.bin")).size == 8000
    assert [i.name for i in storage.list(storage.join("a"))] == ["b.bin", "c.bin"]
    with pytest.raises(StorageError, match="destination exists"):
        storage.rename(p, storage.join("a", "c.bin"))  # never replaces: the commit point relies on it
    storage.rename(p, storage.join("x", "y", "moved.bin"))
    assert storage.read_bytes(storage.join("x", "y", "moved.bin")) == b"atomic" and not storage.exists(p)
    assert sorted(i.name for i in storage.walk_files(storage.root)) == ["c.bin", "moved.bin"]
    storage.delete(storage.join("x"), recursive=True)
    storage.delete(storage.join("nothing-here"))
    assert not storage.exists(storage.join("x"))


def test_open_read_streams_a_seekable_file_and_names_a_missing_one(storage):
    p = storage.join("r", "big.bin")
    data = bytes(range(256)) * 12_289  # over 3 MB: several WebHDFS download chunks
    storage.write_bytes(p, data)
    with storage.open_read(p) as f:
        assert f.read(5) == data[:5]
        f.seek(-7, 2)
        assert f.read() == data[-7:]
        f.seek(0)
        assert f.read() == data
    with pytest.raises(StorageError, match="missing.bin"):
        storage.open_read(storage.join("r", "missing.bin"))


def test_unknown_scheme_is_refused_with_the_allowed_ones():
    with pytest.raises(StorageError, match="allowed are file, hdfs, webhdfs"):
        open_storage("s3://bucket/x")


def test_webhdfs_spark_path_and_hdfs_uri_mapping(webhdfs):
    st = open_storage(webhdfs.uri("/data"))
    assert st.spark_path(st.join("t", "f.avro")) == f"webhdfs://127.0.0.1:{webhdfs.port}/data/t/f.avro"
    hd = open_storage("hdfs://127.0.0.1:8020/warehouse", webhdfs_url=webhdfs.url)
    assert hd.spark_path(hd.join("x")) == "hdfs://127.0.0.1:8020/warehouse/x"
    hd.write_bytes(hd.join("x"), b"1")
    assert (webhdfs.root / "warehouse" / "x").read_bytes() == b"1"


# --- write verification by HDFS file checksum (MD5-of-MD5-of-CRC32C) ----------------------------------

def test_crc32c_check_values_in_both_implementations():
    from ingest.storage.checksum import crc32c
    from tests.harness.webhdfs import crc32c as harness_crc32c

    assert crc32c(b"123456789") == harness_crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert crc32c(b"") == 0 and crc32c(b"\x00" * 32) == 0x8A9136AA  # RFC 3720 B.4 test vector


@pytest.mark.parametrize("size", [0, 1, 511, 512, 513, 4096, 4097, 8192, 8193, 20000])
def test_local_checksum_matches_the_harness_at_block_and_chunk_boundaries(size):
    from ingest.storage.checksum import Md5Md5Crc32, file_checksum
    from tests.harness.webhdfs import hdfs_file_checksum

    data = bytes((i * 7 + 3) % 251 for i in range(size))
    want = hdfs_file_checksum(data, block_size=4096)
    got = file_checksum(data, block_size=4096)
    assert (got.algorithm, got.bytes_hex, got.length) == (want["algorithm"], want["bytes"], 28)
    assert got.algorithm == ("MD5-of-8MD5-of-512CRC32C" if size > 4096 else "MD5-of-0MD5-of-512CRC32C")
    streamed = Md5Md5Crc32(block_size=4096)  # fed in odd pieces that straddle chunks and blocks
    for i in range(0, size, 777):
        streamed.update(data[i: i + 777])
    assert streamed.result() == got


def test_unsupported_checksum_algorithm_is_refused_by_name():
    from ingest.storage.checksum import parse_algorithm

    assert parse_algorithm("MD5-of-0MD5-of-512CRC32C") == (512, "CRC32C")
    with pytest.raises(StorageError, match="COMPOSITE-CRC32C"):
        parse_algorithm("COMPOSITE-CRC32C")


def test_webhdfs_writes_are_verified_across_blocks(webhdfs):
    webhdfs.block_size = 4096  # several blocks per file, as a 128 MiB block size would give in production
    st = open_storage(webhdfs.uri("/data"))
    data = bytes(range(256)) * 50  # 12800 bytes: 3 full blocks and a partial one
    st.write_bytes(st.join("a.bin"), data)
    st.write_atomic(st.join("b.bin"), data)
    with st.open_write(st.join("c.bin")) as f:
        for i in range(0, len(data), 1000):
            f.write(data[i: i + 1000])
    st.write_bytes(st.join("empty.bin"), b"")
    for name in ("a.bin", "b.bin", "c.bin"):
        assert (webhdfs.root / "data" / name).read_bytes() == data


def test_corrupted_landed_file_raises_and_leaves_committed_state_untouched(webhdfs):
    st = open_storage(webhdfs.uri("/data"))
    state = st.join("state.json")
    st.write_atomic(state, b'{"offset": 1}')
    webhdfs.corrupt_creates("*/state.json.*.tmp")  # only the temporary of the next atomic write lands bad
    with pytest.raises(StorageError, match=r"checksum mismatch after writing /data/state\.json\.\w+\.tmp.*"
                                           r"MD5-of-0MD5-of-512CRC32C:\w+, HDFS has .*MD5-of-0MD5-of-512CRC32C:\w+"):
        st.write_atomic(state, b'{"offset": 2}')
    assert st.read_bytes(state) == b'{"offset": 1}'
    assert [i.name for i in st.list(st.root)] == ["state.json"]  # the bad temporary is gone too

    webhdfs.corrupt_creates("*/part-*")
    with pytest.raises(StorageError, match="checksum mismatch after writing /data/part-0.avro"):
        with st.open_write(st.join("part-0.avro")) as f:
            f.write(b"x" * 3000)
    with pytest.raises(StorageError, match="checksum mismatch after writing /data/part-1.avro"):
        st.write_bytes(st.join("part-1.avro"), b"y" * 10)
    assert [i.name for i in st.list(st.root)] == ["state.json"]

    unchecked = open_storage(webhdfs.uri("/data"), verify_checksums=False)
    unchecked.write_bytes(unchecked.join("part-2.avro"), b"z" * 10)  # the switch really turns the check off
    assert (webhdfs.root / "data" / "part-2.avro").read_bytes() != b"z" * 10
    webhdfs.corrupt_creates(None)
    st.write_atomic(state, b'{"offset": 2}')
    assert st.read_bytes(state) == b'{"offset": 2}'


def test_webhdfs_storage_pickles_with_its_settings(webhdfs):
    import pickle

    st = open_storage("hdfs://127.0.0.1:8020/w", webhdfs_url=webhdfs.url, verify_checksums=False)
    again = pickle.loads(pickle.dumps(st))
    assert (again.uri, again.webhdfs_url, again.verify_checksums) == (st.uri, webhdfs.url, False)

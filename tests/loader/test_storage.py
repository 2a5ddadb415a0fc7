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

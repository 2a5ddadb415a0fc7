"""Confluent's own clients against the registry process: compatibility checks, deletes, prefixes, id look-ups.

``confluent-kafka``'s ``SchemaRegistryClient``, ``AvroSerializer`` and
``AvroDeserializer`` (and ``python-schema-registry-client``) run unchanged against
``ingest registry start``; every module test runs once per store (directory and ZooKeeper).
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.common.schema_registry_client import SchemaVersion
from confluent_kafka.serialization import MessageField, SerializationContext
from schema_registry.client import SchemaRegistryClient as PyClient

from tests.harness.registry import RegistryProcess
from tests.harness.zookeeper import fresh_chroot

pytestmark = pytest.mark.processes  # registry processes


@pytest.fixture(scope="module", params=["directory", "zookeeper"])
def reg(request, tmp_path_factory):
    if request.param == "directory":
        proc = RegistryProcess(tmp_path_factory.mktemp("registry"))
    else:
        zookeeper = request.getfixturevalue("zookeeper")
        proc = RegistryProcess(zk=fresh_chroot(zookeeper))
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def sr(reg) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": reg.url, "max.retries": 0})


def avro(name: str, *fields: tuple) -> Schema:
    """A record schema; a field is (name, type) or (name, type, default)."""
    fs = [{"name": f[0], "type": f[1], **({"default": f[2]} if len(f) > 2 else {})} for f in fields]
    return Schema(json.dumps({"type": "record", "name": name, "fields": fs}), "AVRO")


def call(url: str, method: str, path: str, body: bytes | None = None) -> tuple[int, object]:
    req = urllib.request.Request(url + path, data=body, method=method,
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def sr_error(fn) -> tuple[int, int]:
    with pytest.raises(SchemaRegistryError) as info:
        fn()
    return info.value.http_status_code, info.value.error_code


def test_serializer_deserializer_and_id_lookups(sr):
    v1 = avro("Click", ("member", "long"), ("page", "string"))
    ctx = SerializationContext("clicks", MessageField.VALUE)
    data = AvroSerializer(sr, v1.schema_str)({"member": 7, "page": "home"}, ctx)
    sid = int.from_bytes(data[1:5], "big")
    assert data[0] == 0 and sr.get_latest_version("clicks-value").schema_id == sid
    fresh = SchemaRegistryClient({"url": sr._rest_client.base_urls[0]})  # no cache: asks the server
    assert AvroDeserializer(fresh)(data, ctx) == {"member": 7, "page": "home"}
    assert sr.register_schema("clicks-copy-value", v1) == sid  # one schema, one id across subjects
    assert fresh.get_schema_versions(sid) == [SchemaVersion("clicks-copy-value", 1), SchemaVersion("clicks-value", 1)]
    assert fresh.get_subjects_by_schema_id(sid) == ["clicks-copy-value", "clicks-value"]
    assert fresh.lookup_schema("clicks-value", v1).version == 1
    assert fresh.get_version("clicks-value", 1).schema_id == sid
    assert sr_error(lambda: fresh.get_schema_versions(987654)) == (404, 40403)
    assert sr_error(lambda: fresh.get_subjects_by_schema_id(987654)) == (404, 40403)
    assert fresh.get_schema_types() == ["AVRO"]


def test_compatibility_endpoints(sr, reg):
    s = "compat-value"
    sr.register_schema(s, avro("C", ("a", "int")))
    with_default = avro("C", ("a", "int"), ("b", "string", "x"))
    without_default = avro("C", ("a", "int"), ("b", "string"))
    assert sr.test_compatibility(s, with_default) is True
    assert sr.test_compatibility(s, without_default) is False
    assert sr.test_compatibility(s, without_default, version=1) is False
    assert sr.test_compatibility_all_versions(s, with_default) is True
    assert sr.test_compatibility_all_versions(s, without_default) is False
    # verbose: the reason, with field and rule
    status, body = call(reg.url, "POST", f"/compatibility/subjects/{s}/versions/latest?verbose=true",
                        json.dumps({"schema": without_default.schema_str}).encode())
    assert status == 200 and body["is_compatible"] is False
    assert any("READER_FIELD_MISSING_DEFAULT_VALUE" in m and "'b'" in m for m in body["messages"]), body
    assert body["messages"][-1] == "{compatibility: 'BACKWARD'}"
    status, body = call(reg.url, "POST", f"/compatibility/subjects/{s}/versions/1?verbose=true",
                        json.dumps({"schema": with_default.schema_str}).encode())
    assert (status, body) == (200, {"is_compatible": True, "messages": []})
    # no subject yet: "latest" is compatible (nothing to break); a numbered version is not found
    assert sr.test_compatibility("nothing-value", without_default) is True
    assert sr_error(lambda: sr.test_compatibility("nothing-value", without_default, version=1)) == (404, 40401)
    assert sr_error(lambda: sr.test_compatibility(s, with_default, version=9)) == (404, 40402)
    assert sr_error(lambda: sr.test_compatibility(s, with_default, version="zero")) == (422, 42202)
    bad = Schema('{"type": "recrod"}', "AVRO")
    assert sr_error(lambda: sr.test_compatibility(s, bad)) == (422, 42201)
    status, body = call(reg.url, "POST", f"/compatibility/subjects/{s}/versions/latest?verbose=true",
                        json.dumps({"schema": bad.schema_str}).encode())
    assert status == 200 and body["is_compatible"] is False and "Invalid schema" in body["messages"][0]
    # the subject's level decides: FORWARD accepts what BACKWARD refused, NONE accepts anything
    assert sr_error(lambda: sr.get_compatibility(s)) == (404, 40408)  # no level of its own yet
    assert call(reg.url, "GET", f"/config/{s}?defaultToGlobal=true") == (200, {"compatibilityLevel": "BACKWARD"})
    sr.set_compatibility(s, "FORWARD")
    assert sr.get_compatibility(s) == "FORWARD"
    assert sr.test_compatibility(s, without_default) is True
    sr.set_compatibility(s, "NONE")
    assert sr.test_compatibility(s, avro("C", ("a", "string"))) is True
    # registration refuses with Confluent's 409 / 40901
    sr.set_compatibility(s, "BACKWARD")
    assert sr_error(lambda: sr.register_schema(s, without_default)) == (409, 40901)


def test_soft_and_permanent_delete_of_versions(sr):
    s = "del-version-value"
    v1, v2 = avro("D", ("a", "int")), avro("D", ("a", "int"), ("b", "int", 0))
    id1, id2 = sr.register_schema(s, v1), sr.register_schema(s, v2)
    assert sr.delete_version(s, 2) == 2
    assert sr.get_versions(s) == [1]
    assert sr.get_versions(s, deleted=True) == [1, 2]
    assert sr.get_versions(s, deleted_only=True) == [2]
    assert sr_error(lambda: sr.get_version(s, 2)) == (404, 40402)
    assert sr.get_version(s, 2, deleted=True).schema_id == id2
    assert sr.get_latest_version(s).version == 1
    assert sr_error(lambda: sr.delete_version(s, 2)) == (404, 40406)  # already soft-deleted
    assert sr_error(lambda: sr.delete_version(s, 1, permanent=True)) == (404, 40407)  # not soft-deleted first
    assert sr.get_schema_versions(id2) == []
    assert sr.get_schema_versions(id2, deleted=True) == [SchemaVersion(s, 2)]
    assert sr_error(lambda: sr.lookup_schema(s, v2)) == (404, 40403)
    assert sr.lookup_schema(s, v2, deleted=True).version == 2
    assert sr.delete_version(s, 2, permanent=True) == 2
    assert sr.get_versions(s, deleted=True) == [1]
    assert sr_error(lambda: sr.delete_version(s, 7)) == (404, 40402)
    assert sr_error(lambda: sr.delete_version("no-such-value", 1)) == (404, 40401)
    # the id stays decodable (the warehouse holds data written with it)
    assert json.loads(sr.get_schema(id2).schema_str)["fields"][1]["name"] == "b"
    # a soft-deleted version is no longer checked: v1 deleted, anything registers after it
    assert sr.delete_version(s, "latest") == 1
    assert sr.register_schema(s, avro("D", ("z", "string"))) not in (id1, id2)
    assert sr.get_versions(s, deleted=True) == [1, 2]  # version 2 again: 2 was removed for good
    # registering a soft-deleted schema again: a new version with the same id, and the
    # soft-deleted version holding that id goes for good (Confluent's register)
    sr.set_compatibility(s, "NONE")
    sr.clear_caches()  # the client remembers v1's id from before (it cannot know "latest" was 1)
    assert sr.register_schema(s, v1) == id1
    assert sr.get_versions(s, deleted=True) == [2, 3]
    assert sr.get_version(s, 3).schema_id == id1


def test_soft_and_permanent_delete_of_subjects(sr):
    s, t = "del-subject-value", "del-keep-value"
    v1, v2 = avro("E", ("a", "int")), avro("E", ("a", "int"), ("b", "int", 0))
    ctx = SerializationContext("del-subject", MessageField.VALUE)
    data = AvroSerializer(sr, v1.schema_str)({"a": 1}, ctx)
    sr.register_schema(s, v2)
    sr.register_schema(t, v1)
    sr.set_compatibility(s, "FULL")
    assert sr.delete_subject(s) == [1, 2]
    assert s not in sr.get_subjects() and t in sr.get_subjects()
    assert s in sr.get_subjects(deleted=True)
    assert sr.get_subjects(subject_prefix="del-s", deleted_only=True) == [s]
    assert sr_error(lambda: sr.get_versions(s)) == (404, 40401)
    assert sr.get_versions(s, deleted=True) == [1, 2]
    assert sr_error(lambda: sr.get_latest_version(s)) == (404, 40401)
    assert sr_error(lambda: sr.delete_subject(s)) == (404, 40404)  # soft-deleted already
    assert sr_error(lambda: sr.delete_subject(t, permanent=True)) == (404, 40405)  # not soft-deleted first
    assert sr.delete_subject(s, permanent=True) == [1, 2]
    assert s not in sr.get_subjects(deleted=True)
    assert sr_error(lambda: sr.get_compatibility(s)) == (404, 40408)  # its own level went with it
    assert sr_error(lambda: sr.delete_subject(s)) == (404, 40401)
    assert sr_error(lambda: sr.delete_subject(s, permanent=True)) == (404, 40401)
    # data written before the delete still deserializes (ids are never removed)
    fresh = SchemaRegistryClient({"url": sr._rest_client.base_urls[0]})
    assert AvroDeserializer(fresh)(data, ctx) == {"a": 1}
    # the subject starts again at version 1
    sr.register_schema(s, v2)
    assert sr.get_versions(s) == [1]


def test_subject_prefix(sr):
    for name in ("pfx.a-value", "pfx.b-value", "pfy.c-value"):
        sr.register_schema(name, avro("P", ("a", "int")))
    assert sr.get_subjects(subject_prefix="pfx.") == ["pfx.a-value", "pfx.b-value"]
    assert sr.get_subjects(subject_prefix="pfy.") == ["pfy.c-value"]
    assert sr.get_subjects(subject_prefix="pfz") == []
    assert sr.get_subjects(subject_prefix="pf", offset=1, limit=1) == ["pfx.b-value"]
    sr.delete_subject("pfx.a-value")
    assert sr.get_subjects(subject_prefix="pfx.") == ["pfx.b-value"]
    assert sr.get_subjects(subject_prefix="pfx.", deleted=True) == ["pfx.a-value", "pfx.b-value"]


def test_every_error_has_a_confluent_body(reg):
    url = reg.url
    assert call(url, "GET", "/no/such/thing")[1]["error_code"] == 404
    assert call(url, "GET", "/no/such/thing")[0] == 404
    status, body = call(url, "PATCH", "/subjects")
    assert (status, body["error_code"]) == (405, 405) and "GET" in body["message"]
    assert call(url, "PUT", "/subjects/x/versions")[1]["error_code"] == 405
    assert call(url, "DELETE", "/schemas/ids/1")[0:1] == (405,)
    status, body = call(url, "FROBNICATE", "/subjects")
    assert (status, body["error_code"]) == (405, 405) and "FROBNICATE" in body["message"]
    assert call(url, "TRACE", "/nowhere")[1]["error_code"] == 404
    with urllib.request.urlopen(urllib.request.Request(url + "/subjects", method="HEAD"), timeout=10) as r:
        assert (r.status, r.read()) == (200, b"")
    status, body = call(url, "POST", "/subjects/x/versions", b"{not json")
    assert (status, body["error_code"]) == (400, 400)
    status, body = call(url, "DELETE", "/subjects/x/versions/0")
    assert (status, body["error_code"]) == (422, 42202) and "'0'" in body["message"]
    assert call(url, "GET", "/") == (200, {})
    assert call(url, "DELETE", "/config/never-configured-value") == (
        404, {"error_code": 40401, "message": "Subject 'never-configured-value' not found."})


def test_python_schema_registry_client(reg):
    c = PyClient(url=reg.url)
    s = "py-client-value"
    v1 = {"type": "record", "name": "Q", "fields": [{"name": "a", "type": "int"}]}
    v2 = {"type": "record", "name": "Q", "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "int"}]}
    v2_ok = {"type": "record", "name": "Q", "fields": [{"name": "a", "type": "int"},
                                                      {"name": "b", "type": "int", "default": 0}]}
    sid = c.register(s, v1)
    assert c.test_compatibility(s, v2_ok) is True
    assert c.test_compatibility(s, v2) is False
    verbose = c.test_compatibility(s, v2, verbose=True)
    assert verbose["is_compatible"] is False and any("'b'" in m for m in verbose["messages"])
    assert [(v.subject, v.version) for v in c.get_schema_subject_versions(sid)] == [(s, 1)]
    c.register(s, v2_ok)
    assert c.delete_version(s, 2) == 2
    assert c.get_versions(s) == [1]
    assert c.delete_subject(s) == [1]
    assert c.get_versions(s) == []  # this client maps 40401 to []
    assert c.delete_version(s, 1) is None  # and every 4xx of a delete to None


def test_a_store_written_before_soft_deletes_is_served(tmp_path):
    """Version files holding a bare id (the only form older registries wrote) read, delete and list."""
    store = tmp_path / "old"
    (store / "ids").mkdir(parents=True)
    (store / "config").mkdir()
    sub = store / "subjects" / "s-old-value"
    sub.mkdir(parents=True)
    (store / "ids" / "1.json").write_text('{"fields":[{"name":"a","type":"int"}],"name":"O","type":"record"}')
    (sub / "1").write_text("1")
    with RegistryProcess(store) as proc:
        sr = SchemaRegistryClient({"url": proc.url})
        assert sr.get_latest_version("old-value").schema_id == 1
        assert sr.delete_version("old-value", 1) == 1
        assert json.loads((sub / "1").read_text()) == {"id": 1, "deleted": True}
        proc.stop()
        proc.start()  # the soft delete is state, not memory
        assert sr.get_subjects(deleted=True) == ["old-value"] and sr.get_subjects() == []
        assert sr_error(lambda: sr.get_version("old-value", 1)) == (404, 40401)
        assert sr.get_version("old-value", 1, deleted=True).schema_id == 1

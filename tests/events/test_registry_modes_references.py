"""The endpoints Confluent's clients call beyond the basics: modes, contexts, ``/schemas``, references.

Run with confluent-kafka's ``SchemaRegistryClient``, ``AvroSerializer`` and
``AvroDeserializer`` (and the project's own ``EventDeserializer``) against a real
``ingest registry start`` process, once per store (directory and ZooKeeper).
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient, SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from ingest.events.registry_client import RegistryClient
from ingest.events.serde import EventDeserializer
from tests.harness.registry import RegistryProcess
from tests.harness.zookeeper import fresh_chroot

pytestmark = pytest.mark.processes  # registry processes

ADDRESS = {"type": "record", "name": "Address", "namespace": "com.acme",
           "fields": [{"name": "street", "type": "string"}, {"name": "zip", "type": "int"}]}


def person(*extra: dict) -> dict:
    return {"type": "record", "name": "Person", "namespace": "com.acme.people",
            "fields": [{"name": "name", "type": "string"}, {"name": "home", "type": "com.acme.Address"},
                       {"name": "work", "type": ["null", "com.acme.Address"], "default": None}, *extra]}


@pytest.fixture(scope="module", params=["directory", "zookeeper"])
def reg(request, tmp_path_factory):
    if request.param == "directory":
        proc = RegistryProcess(tmp_path_factory.mktemp("registry"))
    else:
        proc = RegistryProcess(zk=fresh_chroot(request.getfixturevalue("zookeeper")))
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def sr(reg) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": reg.url, "max.retries": 0})


def call(url: str, method: str, path: str, body: object = None) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method,
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


def record(name: str, *fields: str) -> Schema:
    return Schema(json.dumps({"type": "record", "name": name, "fields": [{"name": f, "type": "int"} for f in fields]}))


def test_modes_read_write_read_only_and_per_subject(sr, reg):
    assert sr.get_global_mode() == "READWRITE"
    assert sr_error(lambda: sr.get_mode("mode-a-value")) == (404, 40409)  # no mode of its own
    assert call(reg.url, "GET", "/mode/mode-a-value?defaultToGlobal=true") == (200, {"mode": "READWRITE"})
    sr.register_schema("mode-a-value", record("MA", "a"))
    assert sr.update_mode("mode-a-value", "READONLY") == "READONLY"
    assert sr.get_mode("mode-a-value") == "READONLY"
    # read-only: no registration, delete or config change in that subject; reads and other subjects go on
    assert sr_error(lambda: sr.register_schema("mode-a-value", record("MA", "a", "b"))) == (422, 42205)
    assert sr_error(lambda: sr.delete_subject("mode-a-value")) == (422, 42205)
    assert sr_error(lambda: sr.delete_version("mode-a-value", 1)) == (422, 42205)
    assert sr_error(lambda: sr.set_compatibility("mode-a-value", "NONE")) == (422, 42205)
    assert sr.get_latest_version("mode-a-value").version == 1
    assert sr.register_schema("mode-b-value", record("MB", "a")) > 0
    assert sr.delete_mode("mode-a-value") == "READONLY"  # answers the mode it had
    assert sr_error(lambda: sr.delete_mode("mode-a-value")) == (404, 40401)
    assert sr.register_schema("mode-a-value", Schema(json.dumps(
        {"type": "record", "name": "MA", "fields": [{"name": "a", "type": "int"},
                                                    {"name": "b", "type": "int", "default": 0}]}))) > 0
    # invalid modes: 42204; READONLY_OVERRIDE is Confluent's old name of READONLY
    assert sr_error(lambda: sr.update_mode("mode-a-value", "READWRIT")) == (422, 42204)
    assert sr_error(lambda: sr.update_global_mode("FORWARD")) == (422, 42204)
    assert sr.update_global_mode("READONLY_OVERRIDE") == "READONLY"
    assert sr_error(lambda: sr.register_schema("mode-c-value", record("MC", "a"))) == (422, 42205)
    assert sr.update_mode("mode-c-value", "READWRITE") == "READWRITE"  # a subject's mode wins
    assert sr.register_schema("mode-c-value", record("MC", "a")) > 0
    assert call(reg.url, "DELETE", "/mode") == (200, {"mode": "READONLY"})
    assert sr.get_global_mode() == "READWRITE"
    sr.delete_mode("mode-c-value")


def test_import_mode_keeps_ids_and_versions(sr, reg):
    sid = sr.register_schema("imp-existing-value", record("IE", "a"))
    # a registry with subjects cannot switch to IMPORT unless forced (Confluent's 42205)
    assert sr_error(lambda: sr.update_mode("imp-existing-value", "IMPORT")) == (422, 42205)
    status, body = call(reg.url, "PUT", "/mode/imp-value", {"mode": "IMPORT"})
    assert (status, body) == (200, {"mode": "IMPORT"})
    # IMPORT takes only schemas that bring their id, and checks no compatibility
    assert sr_error(lambda: sr.register_schema("imp-value", record("I", "a"))) == (422, 42205)
    top = max(s["id"] for s in call(reg.url, "GET", "/schemas?deleted=true")[1])
    imported = top + 1  # the id a new registration would take next: it must then skip it
    assert call(reg.url, "POST", "/subjects/imp-value/versions",
                {"schema": record("I", "a").schema_str, "id": imported, "version": 3}) == (200, {"id": imported})
    assert call(reg.url, "POST", "/subjects/imp-value/versions",
                {"schema": record("I", "x").schema_str, "id": imported + 5, "version": 4}) == (200, {"id": imported + 5})
    assert sr.get_versions("imp-value") == [3, 4]
    assert sr.get_version("imp-value", 3).schema_id == imported
    assert json.loads(sr.get_schema(imported + 5).schema_str)["fields"][0]["name"] == "x"
    # the same again is a no-op; another schema under a taken id or version is refused
    assert call(reg.url, "POST", "/subjects/imp-value/versions",
                {"schema": record("I", "a").schema_str, "id": imported, "version": 3}) == (200, {"id": imported})
    status, body = call(reg.url, "POST", "/subjects/imp-value/versions",
                        {"schema": record("I", "zzz").schema_str, "id": imported})
    assert (status, body["error_code"]) == (422, 42205) and f"id {imported}" in body["message"]
    status, body = call(reg.url, "POST", "/subjects/imp-value/versions",
                        {"schema": record("I", "b").schema_str, "id": imported + 9, "version": 3})
    assert (status, body["error_code"]) == (422, 42205)
    # an id outside IMPORT mode is refused
    status, body = call(reg.url, "POST", "/subjects/imp-existing-value/versions",
                        {"schema": record("IE", "a").schema_str, "id": 77777})
    assert (status, body["error_code"]) == (422, 42205)
    # back to READWRITE: new ids never collide with imported ones
    assert sr.update_mode("imp-value", "READWRITE") == "READWRITE"
    fresh = {sr.register_schema(f"imp-after-{i}-value", record(f"IA{i}", "a")) for i in range(3)}
    assert not fresh & {sid, imported, imported + 5}, fresh
    assert sr.update_mode("imp-existing-value", "IMPORT", force=True) == "IMPORT"
    sr.delete_mode("imp-existing-value")


def test_contexts_schemas_listing_and_versions_of_an_id(sr, reg):
    assert sr.get_contexts() == ["."]
    assert call(reg.url, "GET", "/contexts?offset=1") == (200, [])
    a1 = sr.register_schema("list.a-value", record("LA", "a"))
    a2 = sr.register_schema("list.a-value", Schema(json.dumps(
        {"type": "record", "name": "LA", "fields": [{"name": "a", "type": "int"},
                                                    {"name": "b", "type": "int", "default": 1}]})))
    b1 = sr.register_schema("list.b-value", record("LA", "a"))  # same schema: same id
    assert b1 == a1
    status, body = call(reg.url, "GET", "/schemas?subjectPrefix=list.")
    assert status == 200
    assert [(s["subject"], s["version"], s["id"]) for s in body] == [
        ("list.a-value", 1, a1), ("list.a-value", 2, a2), ("list.b-value", 1, b1)]
    assert json.loads(body[1]["schema"])["fields"][1]["name"] == "b"
    assert [(s["subject"], s["version"]) for s in call(reg.url, "GET", "/schemas?subjectPrefix=list.&latestOnly=true")[1]] == [
        ("list.a-value", 2), ("list.b-value", 1)]
    assert len(call(reg.url, "GET", "/schemas?subjectPrefix=list.&offset=1&limit=1")[1]) == 1
    sr.delete_version("list.a-value", 2)
    assert [s["version"] for s in call(reg.url, "GET", "/schemas?subjectPrefix=list.a")[1]] == [1]
    assert [s["version"] for s in call(reg.url, "GET", "/schemas?subjectPrefix=list.a&deleted=true")[1]] == [1, 2]
    assert call(reg.url, "GET", f"/schemas/ids/{a1}/versions") == (
        200, [{"subject": "list.a-value", "version": 1}, {"subject": "list.b-value", "version": 1}])
    assert call(reg.url, "GET", f"/schemas/ids/{a1}/schema")[1]["name"] == "LA"


def test_schema_references_register_resolve_check_and_decode(sr, reg):
    # a record type defined in another subject: registered with `references`
    address_id = sr.register_schema("address-value", Schema(json.dumps(ADDRESS)))
    ref = SchemaReference("com.acme.Address", "address-value", 1)
    person_id = sr.register_schema("people-value", Schema(json.dumps(person()), "AVRO", [ref]))
    assert person_id != address_id
    got = SchemaRegistryClient({"url": reg.url}).get_schema(person_id)
    assert [(r.name, r.subject, r.version) for r in got.references] == [("com.acme.Address", "address-value", 1)]
    assert call(reg.url, "GET", f"/schemas/ids/{person_id}")[1]["references"] == [
        {"name": "com.acme.Address", "subject": "address-value", "version": 1}]
    assert sr.get_latest_version("people-value").schema.references[0].subject == "address-value"
    assert sr.lookup_schema("people-value", Schema(json.dumps(person()), "AVRO", [ref])).schema_id == person_id
    # the same text with other references is another schema
    assert sr_error(lambda: sr.lookup_schema("people-value", Schema(json.dumps(person())))) in (
        (404, 40403), (422, 42201))
    # who refers to what
    assert sr.get_referenced_by("address-value", 1) == [person_id]
    assert call(reg.url, "GET", "/subjects/address-value/versions/latest/referencedby") == (200, [person_id])
    assert sr.get_referenced_by("people-value", 1) == []
    # a referenced version cannot go (Confluent's 42206)
    assert sr_error(lambda: sr.delete_version("address-value", 1)) == (422, 42206)
    assert sr_error(lambda: sr.delete_subject("address-value")) == (422, 42206)
    # references resolve when checking compatibility (the referenced fields are compared too)
    without_default = person({"name": "age", "type": "int"})
    with_default = person({"name": "age", "type": "int", "default": 0})
    assert sr.test_compatibility("people-value", Schema(json.dumps(without_default), "AVRO", [ref])) is False
    assert sr.test_compatibility("people-value", Schema(json.dumps(with_default), "AVRO", [ref])) is True
    assert sr_error(lambda: sr.register_schema("people-value", Schema(json.dumps(without_default), "AVRO", [ref]))) == (
        409, 40901)
    # Address v2 changes a field's type: a Person that refers to it breaks BACKWARD, with the path named
    sr.set_compatibility("address-value", "NONE")
    address2 = dict(ADDRESS, fields=[{"name": "street", "type": "string"}, {"name": "zip", "type": "string"}])
    sr.register_schema("address-value", Schema(json.dumps(address2)))
    ref2 = SchemaReference("com.acme.Address", "address-value", -1)  # -1: the latest, fixed when registered
    status, body = call(reg.url, "POST", "/compatibility/subjects/people-value/versions/latest?verbose=true",
                        {"schema": json.dumps(person()), "references": [ref2.to_dict()]})
    assert status == 200 and body["is_compatible"] is False
    assert any("home.zip" in m and "TYPE_MISMATCH" in m for m in body["messages"]), body
    sr.set_compatibility("people-value", "NONE")
    p2 = sr.register_schema("people-value", Schema(json.dumps(person()), "AVRO", [ref2]))
    assert call(reg.url, "GET", f"/schemas/ids/{p2}")[1]["references"][0]["version"] == 2
    # references that do not resolve are invalid schemas
    missing = SchemaReference("com.acme.Address", "no-such-value", 1)
    assert sr_error(lambda: sr.register_schema("people2-value", Schema(json.dumps(person()), "AVRO", [missing]))) == (
        422, 42201)
    assert sr_error(lambda: sr.register_schema("people2-value", Schema(json.dumps(person())))) == (422, 42201)
    # and they resolve when decoding: Confluent's serializer and deserializer, and the project's own reader
    ctx = SerializationContext("people", MessageField.VALUE)
    writer = SchemaRegistryClient({"url": reg.url})  # `sr` caches the latest version it saw before p2
    serializer = AvroSerializer(writer, conf={"auto.register.schemas": False, "use.latest.version": True})
    value = {"name": "Ada", "home": {"street": "Main", "zip": "12345"}, "work": None}
    data = serializer(value, ctx)
    assert int.from_bytes(data[1:5], "big") == p2
    fresh = SchemaRegistryClient({"url": reg.url})
    assert AvroDeserializer(fresh)(data, ctx) == value
    assert EventDeserializer(RegistryClient(reg.url)).deserialize(data, topic="people") == value

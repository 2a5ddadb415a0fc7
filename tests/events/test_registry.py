"""The schema registry as a real subprocess: REST contract, compatibility, persistence, ZooKeeper ids."""
from __future__ import annotations

import concurrent.futures
import copy
import json
import urllib.error
import urllib.request

import pytest

from ingest.errors import IncompatibleSchemaError, RegistryUnavailableError, SchemaError, SchemaNotFoundError
from ingest.events.registry_client import RegistryClient
from ingest.events.schemas import canonical, load_schema
from tests.harness.registry import RegistryProcess

pytestmark = pytest.mark.processes  # registry processes


def call(url, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def rec(name, *fields):
    return {"type": "record", "name": name, "fields": [{"name": n, "type": t, **({"default": d} if d is not ... else {})}
                                                      for n, t, d in fields]}


def test_rest_contract(registry_proc):
    url = registry_proc.url
    pv = load_schema("page_view")
    status, body = call(url, "POST", "/subjects/page-views-value/versions", {"schema": json.dumps(pv)})
    assert status == 200 and isinstance(body["id"], int)
    first = body["id"]
    # same schema again, written differently (other key order, docs, whitespace): same id, no new version
    again = json.dumps(json.loads(canonical(pv)), indent=2, sort_keys=False)
    assert call(url, "POST", "/subjects/page-views-value/versions", {"schema": again}) == (200, {"id": first})
    assert call(url, "GET", "/subjects/page-views-value/versions") == (200, [1])
    status, body = call(url, "GET", f"/schemas/ids/{first}")
    assert status == 200 and json.loads(body["schema"])["name"] == "PageViewEvent"
    status, body = call(url, "GET", "/subjects/page-views-value/versions/latest")
    assert status == 200 and body["version"] == 1 and body["id"] == first and body["subject"] == "page-views-value"
    assert call(url, "GET", "/subjects/page-views-value/versions/1")[1]["id"] == first
    # the same schema under another subject keeps its id (ids are global)
    assert call(url, "POST", "/subjects/other-value/versions", {"schema": json.dumps(pv)}) == (200, {"id": first})
    status, subjects = call(url, "GET", "/subjects")
    assert status == 200 and {"page-views-value", "other-value"} <= set(subjects)
    # a compatible evolution gets a new id and version 2
    v2 = copy.deepcopy(pv)
    v2["fields"].append({"name": "experiment", "type": ["null", "string"], "default": None})
    status, body = call(url, "POST", "/subjects/page-views-value/versions", {"schema": json.dumps(v2)})
    assert status == 200 and body["id"] != first
    assert call(url, "GET", "/subjects/page-views-value/versions") == (200, [1, 2])
    assert call(url, "POST", "/subjects/page-views-value", {"schema": json.dumps(pv)})[1]["version"] == 1


def test_errors_use_the_confluent_body(registry_proc):
    url = registry_proc.url
    assert call(url, "GET", "/schemas/ids/99999") == (404, {"error_code": 40403, "message": "Schema 99999 not found"})
    status, body = call(url, "GET", "/subjects/nope/versions")
    assert (status, body["error_code"]) == (404, 40401)
    call(url, "POST", "/subjects/e-value/versions", {"schema": json.dumps(rec("E", ("a", "int", ...)))})
    assert call(url, "GET", "/subjects/e-value/versions/7")[1]["error_code"] == 40402
    assert call(url, "GET", "/subjects/e-value/versions/zero")[1]["error_code"] == 42202
    status, body = call(url, "POST", "/subjects/e-value/versions", {"schema": "{not json"})
    assert (status, body["error_code"]) == (422, 42201) and "not JSON" in body["message"]
    status, body = call(url, "POST", "/subjects/e-value/versions", {"schema": json.dumps({"type": "recrod"})})
    assert (status, body["error_code"]) == (422, 42201)
    status, body = call(url, "PUT", "/config", {"compatibility": "SIDEWAYS"})
    assert (status, body["error_code"]) == (422, 42203) and "BACKWARD" in body["message"]


def test_incompatible_schema_is_refused_with_field_and_rule(registry_proc):
    url = registry_proc.url
    v1 = rec("C", ("a", "int", ...))
    assert call(url, "POST", "/subjects/c-value/versions", {"schema": json.dumps(v1)})[0] == 200
    v2 = rec("C", ("a", "int", ...), ("b", "string", ...))
    status, body = call(url, "POST", "/subjects/c-value/versions", {"schema": json.dumps(v2)})
    assert status == 409 and body["error_code"] == 40901
    assert "'b'" in body["message"] and "READER_FIELD_MISSING_DEFAULT_VALUE" in body["message"]
    assert call(url, "GET", "/subjects/c-value/versions") == (200, [1])
    # per-subject level: FORWARD accepts it (old readers skip b), NONE accepts anything
    assert call(url, "PUT", "/config/c-value", {"compatibility": "FORWARD"}) == (200, {"compatibility": "FORWARD"})
    assert call(url, "GET", "/config/c-value") == (200, {"compatibilityLevel": "FORWARD"})
    assert call(url, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert call(url, "POST", "/subjects/c-value/versions", {"schema": json.dumps(v2)})[0] == 200
    v3 = rec("C", ("a", "string", ...))
    status, body = call(url, "POST", "/subjects/c-value/versions", {"schema": json.dumps(v3)})
    assert status == 409 and "TYPE_MISMATCH" in body["message"] and "'a'" in body["message"]
    call(url, "PUT", "/config/c-value", {"compatibility": "NONE"})
    assert call(url, "POST", "/subjects/c-value/versions", {"schema": json.dumps(v3)})[0] == 200


def test_client_caches_and_maps_errors(registry_proc):
    client = RegistryClient(registry_proc.url)
    schema = rec("Cached", ("a", "long", ...))
    sid = client.register("cached-value", schema)
    assert client.register("cached-value", schema) == sid
    assert client.get_schema(sid) == json.loads(canonical(schema))
    assert client.latest("cached-value")[0] == sid
    with pytest.raises(SchemaNotFoundError, match="40403"):
        client.get_schema(123456)
    with pytest.raises(IncompatibleSchemaError, match="TYPE_MISMATCH"):
        client.register("cached-value", rec("Cached", ("a", "string", ...)))
    with pytest.raises(SchemaError, match="42201"):
        client.register("cached-value", {"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]})
    with pytest.raises(RegistryUnavailableError, match="unreachable"):
        RegistryClient("http://127.0.0.1:9", timeout_s=2).get_schema(1)


def test_state_survives_restart_and_sigkill(tmp_path):
    reg = RegistryProcess(tmp_path / "store").start()
    try:
        client = RegistryClient(reg.url)
        a = client.register("r-value", rec("R", ("a", "int", ...)))
        b = client.register("r-value", rec("R", ("a", "int", ...), ("b", "int", 0)))
        client.set_compatibility("FULL", "r-value")
        reg.kill()
        reg.start()
        fresh = RegistryClient(reg.url)
        assert fresh.versions("r-value") == [1, 2]
        assert fresh.latest("r-value")[0] == b
        assert fresh.get_schema(a) == json.loads(canonical(rec("R", ("a", "int", ...))))
        assert fresh.get_compatibility("r-value") == "FULL"
        reg.stop()
        reg.start()
        c = fresh.register("s-value", rec("S", ("x", "int", ...)))
        assert c not in (a, b)  # ids keep counting after restarts
    finally:
        reg.stop()


def test_two_registries_on_one_zookeeper_never_share_an_id(zk_connect):
    regs = [RegistryProcess(zk=zk_connect).start() for _ in range(2)]
    try:
        clients = [RegistryClient(r.url) for r in regs]
        jobs = []
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for i in range(40):
                schema = rec(f"Race{i}", ("a", "int", ...))
                # every schema is registered by both registries at once
                jobs.append((i, pool.submit(clients[0].register, f"race{i}-value", schema),
                             pool.submit(clients[1].register, f"race{i}-value", schema)))
        ids = {}
        for i, fa, fb in jobs:
            assert fa.result() == fb.result(), "one schema registered twice must get one id"
            ids[i] = fa.result()
        assert len(set(ids.values())) == 40, "two schemas got the same id"
        for i, sid in ids.items():
            for c in clients:  # each registry serves the other's schemas
                assert c.get_schema(sid)["name"] == f"Race{i}"
            assert clients[1].versions(f"race{i}-value") == [1]
    finally:
        for r in regs:
            r.stop()


def test_zookeeper_id_allocation_is_atomic_without_the_lock(zk_connect):
    """Two stores racing add_schema (no write lock): distinct texts get distinct ids, one text one id."""
    from ingest.events.registry_store import ZooKeeperStore

    stores = [ZooKeeperStore(zk_connect) for _ in range(2)]
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            distinct = [pool.submit(stores[i % 2].add_schema, f'{{"type":"fixed","name":"F{i}","size":{i + 1}}}')
                        for i in range(30)]
            same = [pool.submit(stores[i % 2].add_schema, '{"type":"fixed","name":"Same","size":1}')
                    for i in range(10)]
        assert len({f.result() for f in distinct}) == 30
        assert len({f.result() for f in same}) == 1
        assert not {f.result() for f in distinct} & {same[0].result()}
    finally:
        for s in stores:
            s.close()


def test_primitive_schemas_register_and_evolve_like_any_other(registry_proc):
    """Key subjects often hold a primitive schema ("string"); it once failed with a 500 store error."""
    url = registry_proc.url
    status, body = call(url, "POST", "/subjects/clicks-key/versions", {"schema": json.dumps("string")})
    assert status == 200, body
    sid = body["id"]
    assert call(url, "POST", "/subjects/clicks-key/versions", {"schema": '{"type": "string"}'}) == (200, {"id": sid})
    assert call(url, "GET", f"/schemas/ids/{sid}") == (200, {"schema": '"string"'})
    status, body = call(url, "POST", "/subjects/clicks-key/versions", {"schema": json.dumps("long")})
    assert status == 409 and body["error_code"] == 40901 and "TYPE_MISMATCH" in body["message"], body
    # promotions between primitives follow the subject's level (BACKWARD: the new schema reads the old)
    assert call(url, "POST", "/subjects/ids-key/versions", {"schema": json.dumps("int")})[0] == 200
    assert call(url, "POST", "/subjects/ids-key/versions", {"schema": json.dumps("long")})[0] == 200
    status, body = call(url, "POST", "/subjects/ids-key/versions", {"schema": json.dumps("int")})
    assert status == 200  # "int" is already version 1 of this subject: its id, no new version
    assert call(url, "GET", "/subjects/ids-key/versions") == (200, [1, 2])
    assert call(url, "POST", "/subjects/n-key/versions", {"schema": json.dumps("long")})[0] == 200
    status, body = call(url, "POST", "/subjects/n-key/versions", {"schema": json.dumps("int")})
    assert status == 409 and "long" in body["message"], body  # an int reader cannot read longs
    assert call(url, "PUT", "/config/n-key", {"compatibility": "FORWARD"})[0] == 200
    assert call(url, "POST", "/subjects/n-key/versions", {"schema": json.dumps("int")})[0] == 200
    assert RegistryClient(url).get_schema(sid) == "string"

"""The one error tree: its wire map round-trips, docs/protocol.md lists it, every error lives in it."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ingest import errors
from ingest.broker import protocol as p
from ingest.broker.handlers import BrokerHandlers
from ingest.client.connection import error_for_code
from ingest.errors import WIRE_ERRORS, ErrorCode, IngestError

ROOT = Path(__file__).resolve().parent.parent


def _tree() -> list[type[IngestError]]:
    out, stack = [], [IngestError]
    while stack:
        cls = stack.pop()
        out.append(cls)
        stack.extend(cls.__subclasses__())
    return out


def _error_classes_of_errors_module() -> list[type]:
    return [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, BaseException)]


def test_every_code_decodes_to_exactly_one_class_that_encodes_to_that_code():
    assert set(WIRE_ERRORS) == set(ErrorCode) - {ErrorCode.NONE}
    assert len(set(WIRE_ERRORS.values())) == len(WIRE_ERRORS)   # one class per code
    for code, cls in WIRE_ERRORS.items():
        assert cls.code == code, (code, cls)
        assert errors.error_class(int(code)) is cls
        exc = error_for_code(int(code), "a test request")        # what a client raises
        assert type(exc) is cls and f"{code.name} ({int(code)})" in str(exc)


def test_a_class_sets_a_code_only_as_a_wire_error_and_subclasses_decode_to_their_wire_parent():
    for cls in _tree():
        if "code" in vars(cls):
            assert WIRE_ERRORS[cls.code] is cls, f"{cls.__name__} sets code {cls.code!r} but is not its WIRE_ERRORS entry"
        # what the broker sends for cls decodes to cls or an ancestor of it, never a sibling
        assert issubclass(cls, WIRE_ERRORS[cls.code]), cls


def test_errors_without_a_wire_code_go_out_as_unknown():
    wire = tuple(c for c in WIRE_ERRORS.values() if c is not IngestError)
    no_code = [c for c in _tree() if not issubclass(c, wire)]
    assert errors.ConfigError in no_code and errors.MalformedResponseError in no_code
    assert all(c.code is ErrorCode.UNKNOWN for c in no_code)
    assert errors.error_class(-1) is IngestError
    assert errors.error_class(0) is IngestError and errors.error_class(99) is IngestError
    assert "code 99" in str(error_for_code(99, "x"))


def test_the_broker_answers_an_error_without_a_wire_code_with_unknown(tmp_path):
    def refuse(body, client):
        raise errors.ConfigError("no wire code of its own")

    def fail_storage(body, client):
        raise errors.LogCorruptionError("corrupt bytes")

    handlers = BrokerHandlers(None, {}, broker_id=0, host="h", port=1)
    handlers.table[p.RequestType.OFFSETS] = refuse
    handlers.table[p.RequestType.FETCH] = fail_storage
    reply = handlers.dispatch(p.RequestType.OFFSETS, memoryview(b""), "test")
    assert p.ErrorResponse.decode(reply.parts[0][4:]).error == ErrorCode.UNKNOWN
    reply = handlers.dispatch(p.RequestType.FETCH, memoryview(b""), "test")
    assert p.ErrorResponse.decode(reply.parts[0][4:]).error == ErrorCode.STORAGE_ERROR


def test_the_codes_that_used_to_decode_to_the_wrong_class():
    # the old subclass walk decoded 14 to BufferUnderrunError and 16 to LogCorruptionError,
    # and sent StorageError as UNKNOWN
    assert WIRE_ERRORS[ErrorCode.MALFORMED_REQUEST] is errors.MalformedRequestError
    assert WIRE_ERRORS[ErrorCode.STORAGE_ERROR] is errors.StorageError
    assert errors.StorageError.code == ErrorCode.STORAGE_ERROR
    assert errors.DiskFullError.code == ErrorCode.DISK_FULL and issubclass(errors.DiskFullError, errors.StorageError)
    assert not issubclass(errors.MalformedResponseError, errors.MalformedRequestError)


@pytest.mark.parametrize("cls,retriable", [
    (IngestError, False), (errors.StorageError, True), (errors.DiskFullError, True),
    (errors.LogCorruptionError, False), (errors.BrokerUnavailableError, True),
    (errors.MalformedResponseError, True), (errors.MalformedRequestError, False),
    (errors.CommitConflictError, True), (errors.CommitError, False), (errors.BrokerIdTakenError, False),
    (errors.CoordinationError, True), (errors.RegistryUnavailableError, True), (errors.DataLossError, False),
])
def test_retriable_flags(cls, retriable):
    assert cls.retriable is retriable


def test_data_loss_error_carries_its_lost_ranges():
    exc = errors.DataLossError("lost [0, 5)", lost_ranges=["r1", "r2"])
    assert exc.lost_ranges == ("r1", "r2") and str(exc) == "lost [0, 5)"
    assert errors.DataLossError("none given").lost_ranges == ()


def test_registry_http_error_is_in_the_tree_and_keeps_its_http_fields():
    exc = errors.RegistryHttpError(404, 40403, "Schema 7 not found")
    assert isinstance(exc, errors.SchemaError) and (exc.status, exc.error_code, exc.message) == (404, 40403, "Schema 7 not found")


def test_every_error_class_of_the_errors_module_is_in_the_tree():
    for cls in _error_classes_of_errors_module():
        assert issubclass(cls, IngestError), cls


def test_error_classes_are_defined_only_in_ingest_errors():
    # One tree in one file: a module that needs a new error adds it to ingest/errors.py.
    found = []
    for path in sorted((ROOT / "ingest").rglob("*.py")):
        if path == ROOT / "ingest" / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and re.search(r"(Error|Exception)$", node.name):
                found.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert found == []


def _docs_table() -> list[list[str]]:
    text = (ROOT / "docs" / "protocol.md").read_text()
    section = text.split("## Error codes", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert header == ["code", "name", "exception", "meaning", "retry helps?"]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows[2:]]


def test_docs_protocol_error_table_matches_the_code():
    rows = _docs_table()
    assert [(int(r[0]), r[1]) for r in rows] == [(int(c), c.name) for c in ErrorCode]
    for code, name, exception, _meaning, retry in rows:
        code = ErrorCode(int(code))
        if code is ErrorCode.NONE:
            assert exception == "" and retry == ""
            continue
        cls = WIRE_ERRORS[code]
        assert exception == f"`{cls.__name__}`", (code, exception)
        assert retry.split(",")[0].split(":")[0] == ("yes" if cls.retriable else "no"), (code, retry)


def test_a_malformed_response_closes_the_connection_and_raises_malformed_response_error():
    import socket
    import threading

    from ingest.client.connection import BrokerConnection

    listener = socket.create_server(("127.0.0.1", 0))
    answers = [p.response_frame(0, b""),                        # OFFSETS body without its count
               p.OffsetsResponse(0, (42,)).encode()]            # then a good answer, on a new connection

    def serve():
        for answer in answers:
            conn, _ = listener.accept()
            with conn:
                p.recv_response(conn)   # request frames share the response framing: size + int16
                conn.sendall(answer)
                conn.recv(1)            # until the client closes

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    conn = BrokerConnection("127.0.0.1", listener.getsockname()[1], timeout_s=10)
    request = p.OffsetsRequest("t", 0, p.LATEST_TIME, 1).encode()
    with pytest.raises(errors.MalformedResponseError, match=r"bad response from .*OffsetsResponse\.count"):
        conn.request(request, p.OffsetsResponse)
    assert conn._sock is None                                    # closed: the stream is out of sync
    assert conn.request(request, p.OffsetsResponse).offsets == (42,)
    conn.close()
    server.join(10)
    listener.close()

"""The wire's error tables: each code goes out for its class and comes back as it, subclasses go out
with their nearest listed ancestor's code, docs/protocol.md lists exactly the 0.7 table."""
from __future__ import annotations

from pathlib import Path

from ingest import errors
from ingest.broker.handlers import BrokerHandlers
from ingest.errors import IngestError
from ingest.wire import protocol as p
from ingest.wire.errors import (KAFKA, PORT07, ErrorCode, KafkaErrorCode, code_for, error_class, error_for,
                                error_name, kafka_code)

ROOT = Path(__file__).resolve().parents[2]


def _tree() -> list[type[IngestError]]:
    out, stack = [], [IngestError]
    while stack:
        cls = stack.pop()
        out.append(cls)
        stack.extend(cls.__subclasses__())
    return out


def test_every_0_7_code_has_exactly_one_class_and_it_goes_out_with_that_code():
    assert set(PORT07.by_code) == set(ErrorCode) - {ErrorCode.NONE}
    assert len(set(PORT07.by_class)) == len(PORT07.by_class) == len(PORT07.by_code)   # one class per code
    for code, cls in PORT07.by_code.items():
        assert code_for(cls) == code, (code, cls)
        assert error_class(int(code)) is cls
        exc = error_for(int(code), "a test request")        # what a client raises
        assert type(exc) is cls and f"{code.name} ({int(code)})" in str(exc)


def test_a_subclass_goes_out_with_its_nearest_listed_ancestors_code_and_decodes_to_that_ancestor():
    for cls in _tree():
        sent = code_for(cls)
        assert issubclass(cls, error_class(sent)), (cls, sent)     # the client sees cls or an ancestor
    assert code_for(errors.LogCorruptionError) == ErrorCode.STORAGE_ERROR
    assert code_for(errors.CorruptRangeError) == ErrorCode.CORRUPT_RANGE             # listed itself
    assert code_for(errors.NeedsZooKeeperError) == ErrorCode.COORDINATION_UNAVAILABLE
    assert code_for(errors.UnsupportedCompressionError) == ErrorCode.INVALID_MESSAGE
    assert code_for(errors.DiskFullError("full")) == ErrorCode.DISK_FULL             # an instance as its class


def test_errors_without_a_listed_ancestor_go_out_as_unknown():
    listed = tuple(c for c in PORT07.by_class if c is not IngestError)
    no_code = [c for c in _tree() if not issubclass(c, listed)]
    assert errors.ConfigError in no_code and errors.MalformedResponseError in no_code
    assert all(code_for(c) is ErrorCode.UNKNOWN for c in no_code)
    assert code_for(ValueError("not ours")) is ErrorCode.UNKNOWN
    assert error_class(-1) is IngestError
    assert error_class(0) is IngestError and error_class(99) is IngestError
    assert "code 99" in str(error_for(99, "x")) and error_name(99) == "code 99"


def test_the_broker_answers_an_error_without_a_wire_code_with_unknown():
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


def test_the_codes_that_once_decoded_to_the_wrong_class():
    # a subclass walk once decoded 14 to BufferUnderrunError and 16 to LogCorruptionError,
    # and sent StorageError as UNKNOWN
    assert error_class(ErrorCode.MALFORMED_REQUEST) is errors.MalformedRequestError
    assert error_class(ErrorCode.STORAGE_ERROR) is errors.StorageError
    assert code_for(errors.StorageError) == ErrorCode.STORAGE_ERROR
    assert code_for(errors.DiskFullError) == ErrorCode.DISK_FULL


def test_the_kafka_table_goes_both_ways_and_never_mixes_with_the_0_7_codes():
    for cls, code in KAFKA.by_class.items():
        assert kafka_code(cls) == code
        assert kafka_code(KAFKA.error_class(code)) == code          # the first class listed for a code
    assert KAFKA.error_class(KafkaErrorCode.KAFKA_STORAGE_ERROR) is errors.StorageError
    assert kafka_code(errors.LogOfflineError) == KafkaErrorCode.KAFKA_STORAGE_ERROR
    assert kafka_code(errors.RecordTooLargeError) == KafkaErrorCode.MESSAGE_TOO_LARGE
    assert kafka_code(errors.ConfigError) == KafkaErrorCode.UNKNOWN_SERVER_ERROR
    assert KAFKA.error_class(999) is IngestError and KAFKA.error_class(KafkaErrorCode.NONE) is IngestError
    # the same failure, two numbers: Kafka's 2 is CORRUPT_MESSAGE, the 0.7 port's INVALID_MESSAGE
    assert code_for(errors.CorruptRecordError) == 2 == kafka_code(errors.CorruptRecordError)
    assert code_for(errors.MessageTooLargeError) == 10 == kafka_code(errors.MessageTooLargeError)
    assert code_for(errors.InvalidTopicError) == 11 and kafka_code(errors.InvalidTopicError) == 17
    # a topic of the other kind: the 0.7 port's own code, Kafka's INVALID_TOPIC_EXCEPTION (so that no Kafka
    # client auto-creates over a 0.7 topic)
    assert code_for(errors.WrongTopicKindError) == 31 and kafka_code(errors.WrongTopicKindError) == 17
    assert kafka_code(errors.WrongPartitionError) == kafka_code(errors.TopicCreationRefusedError) == 3
    assert kafka_code(errors.NotLeaderForPartitionError) == 6 and kafka_code(errors.CoordinationUnavailableError) == 7


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
        cls = error_class(code)
        assert exception == f"`{cls.__name__}`", (code, exception)
        assert retry.split(",")[0].split(":")[0] == ("yes" if cls.retriable else "no"), (code, retry)

"""The wire's error codes: each protocol's codes and the exception class of each, one table both ways.

As Kafka's ``Errors`` (beside its protocol, apart from the exception classes): the exceptions of
:mod:`ingest.errors` say what went wrong and whether a retry can help; which number goes out for
which exception is written here, once, in one table (:data:`ERRORS`) with a column per protocol:

- the broker answers an exception with :func:`code_for`: the code of its class or of its nearest
  ancestor in the table; an error whose ancestors are not listed goes out as UNKNOWN;
- a client raises :func:`error_for` a code: the first class listed with that code, and
  :class:`~ingest.errors.IngestError` for UNKNOWN and for a code it does not know.

So a subclass of a listed error goes out with its parent's code (a client sees the parent), unless
it is listed itself (``DiskFullError``, a ``StorageError``, has its own code).

The 0.7 port's codes (:class:`ErrorCode`) and the Kafka port's (:class:`KafkaErrorCode`) collide
(Kafka's 2 is CORRUPT_MESSAGE, 10 MESSAGE_TOO_LARGE, ...): each has its own column, never mixed.
docs/protocol.md, "Error codes", lists the 0.7 table; ``tests/wire/test_errors.py`` checks both.
"""
from __future__ import annotations

from enum import IntEnum

from ingest import errors as e


class ErrorCode(IntEnum):
    """The 0.7 port's error codes: -1 to 4 fixed by the Kafka 0.7 protocol, ours from 10 up."""

    UNKNOWN = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    INVALID_MESSAGE = 2
    WRONG_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    MESSAGE_TOO_LARGE = 10
    INVALID_TOPIC = 11
    REQUEST_TOO_LARGE = 12
    UNKNOWN_REQUEST_TYPE = 13
    MALFORMED_REQUEST = 14
    # 15 was reserved for a BROKER_SHUTTING_DOWN that was never sent; not reused.
    STORAGE_ERROR = 16
    DISK_FULL = 17
    LOG_OFFLINE = 18
    TOPIC_CREATION_REFUSED = 19
    CORRUPT_RANGE = 20
    NOT_LEADER_FOR_PARTITION = 21
    LEADER_NOT_AVAILABLE = 22
    NOT_ENOUGH_REPLICAS = 23
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 24
    REQUEST_TIMED_OUT = 25
    STALE_LEADER_EPOCH = 26
    INVALID_REQUIRED_ACKS = 27
    OFFSET_MISMATCH = 28
    COORDINATION_UNAVAILABLE = 30
    WRONG_TOPIC_KIND = 31
    CLUSTER_AUTHORIZATION_FAILED = 32


class KafkaErrorCode(IntEnum):
    """Kafka protocol error codes (Apache Kafka's ``Errors``), used only on the Kafka port.

    Only the codes the product sends are listed; add a code with the code that sends it. Codes from
    10000 belong to the private APIs (keys from 10000, docs/kafka-protocol.md) and answer nothing else.
    """

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    REASSIGNMENT_IN_PROGRESS = 60
    GROUP_ID_NOT_FOUND = 69
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    INVALID_RECORD = 87
    UNSUPPORTED_ENDPOINT_TYPE = 119
    OFFSET_MISMATCH = 10000
    """Private (never sent to a Kafka client): AppendAt's log end is not the expected offset."""


class CodeTable:
    """One protocol's column of :data:`ERRORS`: classes to codes and codes to classes.

    Args:
        rows: ``(class, code, ...)`` rows; ``column`` picks this protocol's code (None: as the
            nearest listed ancestor). A code listed twice decodes to its first class.
        unknown: the code of an error with no listed ancestor.
    """

    def __init__(self, rows, column: int, unknown: IntEnum) -> None:
        self.by_class: dict[type[e.IngestError], IntEnum] = {row[0]: row[column] for row in rows
                                                             if row[column] is not None}
        self.by_code: dict[IntEnum, type[e.IngestError]] = {}
        for cls, code in self.by_class.items():
            self.by_code.setdefault(code, cls)
        self.unknown = unknown

    def code(self, exc: BaseException | type[BaseException]) -> IntEnum:
        """The code for ``exc`` (an error or its class): its nearest listed ancestor's."""
        cls = exc if isinstance(exc, type) else type(exc)
        for klass in cls.__mro__:
            found = self.by_class.get(klass)
            if found is not None:
                return found
        return self.unknown

    def error_class(self, code: int) -> type[e.IngestError]:
        """The class a client raises for ``code``: :class:`~ingest.errors.IngestError` when unknown."""
        try:
            return self.by_code.get(type(self.unknown)(code), e.IngestError)
        except ValueError:
            return e.IngestError


_ = None
ERRORS = (
    # error class                           0.7 port                                Kafka port
    (e.IngestError,                         ErrorCode.UNKNOWN,                      KafkaErrorCode.UNKNOWN_SERVER_ERROR),
    (e.OffsetOutOfRangeError,               ErrorCode.OFFSET_OUT_OF_RANGE,          KafkaErrorCode.OFFSET_OUT_OF_RANGE),
    (e.InvalidMessageError,                 ErrorCode.INVALID_MESSAGE,              KafkaErrorCode.CORRUPT_MESSAGE),
    (e.CorruptRecordError,                  _,                                      KafkaErrorCode.CORRUPT_MESSAGE),
    (e.InvalidRecordError,                  _,                                      KafkaErrorCode.INVALID_RECORD),
    (e.InvalidTimestampError,               _,                                      KafkaErrorCode.INVALID_TIMESTAMP),
    (e.UnsupportedCodecError,               _,                                      KafkaErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    (e.UnknownTopicError,                   _,                                      KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (e.WrongPartitionError,                 ErrorCode.WRONG_PARTITION,              KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (e.InvalidFetchSizeError,               ErrorCode.INVALID_FETCH_SIZE,           _),
    (e.MessageTooLargeError,                ErrorCode.MESSAGE_TOO_LARGE,            KafkaErrorCode.MESSAGE_TOO_LARGE),
    (e.RecordListTooLargeError,             _,                                      KafkaErrorCode.RECORD_LIST_TOO_LARGE),
    (e.InvalidTopicError,                   ErrorCode.INVALID_TOPIC,                KafkaErrorCode.INVALID_TOPIC_EXCEPTION),
    (e.RequestTooLargeError,                ErrorCode.REQUEST_TOO_LARGE,            _),
    (e.UnknownRequestTypeError,             ErrorCode.UNKNOWN_REQUEST_TYPE,         _),
    (e.MalformedRequestError,               ErrorCode.MALFORMED_REQUEST,            KafkaErrorCode.INVALID_REQUEST),
    (e.StorageError,                        ErrorCode.STORAGE_ERROR,                KafkaErrorCode.KAFKA_STORAGE_ERROR),
    (e.DiskFullError,                       ErrorCode.DISK_FULL,                    _),
    (e.LogOfflineError,                     ErrorCode.LOG_OFFLINE,                  KafkaErrorCode.KAFKA_STORAGE_ERROR),
    (e.TopicCreationRefusedError,           ErrorCode.TOPIC_CREATION_REFUSED,       KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (e.CorruptRangeError,                   ErrorCode.CORRUPT_RANGE,                KafkaErrorCode.CORRUPT_MESSAGE),
    (e.NotLeaderForPartitionError,          ErrorCode.NOT_LEADER_FOR_PARTITION,     KafkaErrorCode.NOT_LEADER_OR_FOLLOWER),
    (e.LeaderNotAvailableError,             ErrorCode.LEADER_NOT_AVAILABLE,         KafkaErrorCode.LEADER_NOT_AVAILABLE),
    (e.NotEnoughReplicasError,              ErrorCode.NOT_ENOUGH_REPLICAS,          KafkaErrorCode.NOT_ENOUGH_REPLICAS),
    (e.NotEnoughReplicasAfterAppendError,   ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, KafkaErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND),
    (e.RequestTimedOutError,                ErrorCode.REQUEST_TIMED_OUT,            KafkaErrorCode.REQUEST_TIMED_OUT),
    (e.StaleLeaderEpochError,               ErrorCode.STALE_LEADER_EPOCH,           KafkaErrorCode.FENCED_LEADER_EPOCH),
    (e.UnknownLeaderEpochError,             _,                                      KafkaErrorCode.UNKNOWN_LEADER_EPOCH),
    (e.InvalidRequiredAcksError,            ErrorCode.INVALID_REQUIRED_ACKS,        KafkaErrorCode.INVALID_REQUIRED_ACKS),
    (e.OutOfOrderSequenceError,             _,                                      KafkaErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    (e.InvalidProducerEpochError,           _,                                      KafkaErrorCode.INVALID_PRODUCER_EPOCH),
    (e.OffsetMismatchError,                 ErrorCode.OFFSET_MISMATCH,              KafkaErrorCode.OFFSET_MISMATCH),
    (e.CoordinationUnavailableError,        ErrorCode.COORDINATION_UNAVAILABLE,     KafkaErrorCode.REQUEST_TIMED_OUT),
    (e.WrongTopicKindError,                 ErrorCode.WRONG_TOPIC_KIND,             KafkaErrorCode.INVALID_TOPIC_EXCEPTION),
    (e.ClusterAuthorizationFailedError,     ErrorCode.CLUSTER_AUTHORIZATION_FAILED, KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    (e.UnsupportedVersionError,             _,                                      KafkaErrorCode.UNSUPPORTED_VERSION),
    (e.TopicAlreadyExistsError,             _,                                      KafkaErrorCode.TOPIC_ALREADY_EXISTS),
    (e.InvalidPartitionsError,              _,                                      KafkaErrorCode.INVALID_PARTITIONS),
    (e.InvalidReplicationFactorError,       _,                                      KafkaErrorCode.INVALID_REPLICATION_FACTOR),
    (e.ReassignmentInProgressError,         _,                                      KafkaErrorCode.REASSIGNMENT_IN_PROGRESS),
    (e.InvalidReplicaAssignmentError,       _,                                      KafkaErrorCode.INVALID_REPLICA_ASSIGNMENT),
    (e.InvalidConfigError,                  _,                                      KafkaErrorCode.INVALID_CONFIG),
    (e.PolicyViolationError,                _,                                      KafkaErrorCode.POLICY_VIOLATION),
    (e.SaslAuthenticationError,             _,                                      KafkaErrorCode.SASL_AUTHENTICATION_FAILED),
    (e.UnsupportedSaslMechanismError,       _,                                      KafkaErrorCode.UNSUPPORTED_SASL_MECHANISM),
    (e.IllegalSaslStateError,               _,                                      KafkaErrorCode.ILLEGAL_SASL_STATE),
)
"""The one table: each error class and the code it goes out with on each port (``_``: as its
nearest listed ancestor). The 0.7 column has one class per code (the table of docs/protocol.md)."""
del _

PORT07 = CodeTable(ERRORS, 1, ErrorCode.UNKNOWN)
KAFKA = CodeTable(ERRORS, 2, KafkaErrorCode.UNKNOWN_SERVER_ERROR)


def code_for(exc: BaseException | type[BaseException]) -> ErrorCode:
    """The 0.7 code the broker answers ``exc`` with."""
    return PORT07.code(exc)


def kafka_code(exc: BaseException | type[BaseException]) -> KafkaErrorCode:
    """The Kafka code the Kafka port answers ``exc`` with."""
    return KAFKA.code(exc)


def error_class(code: int) -> type[e.IngestError]:
    """The class for a broker's 0.7 error ``code``: IngestError for UNKNOWN and unknown codes."""
    return PORT07.error_class(code)


def error_name(code: int) -> str:
    """``OFFSET_OUT_OF_RANGE`` for 1; ``code 99`` for a code this version does not know."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"code {code}"


def error_for(code: int, context: str) -> e.IngestError:
    """The exception a client raises for a broker's error ``code``, its message naming the request."""
    return error_class(code)(f"broker answered {error_name(code)} ({code}) to {context}")


def kafka_error_name(code: int) -> str:
    """``NOT_LEADER_OR_FOLLOWER`` for 6; ``code 99`` for a Kafka code this table does not list."""
    try:
        return KafkaErrorCode(code).name
    except ValueError:
        return f"code {code}"


def kafka_error_for(code: int, context: str) -> e.IngestError:
    """The exception a Kafka-protocol client raises for a broker's Kafka error ``code``, naming the request."""
    return KAFKA.error_class(code)(f"broker answered {kafka_error_name(code)} ({code}) to {context}")


def check(error: int, context: str) -> None:
    """Raise the matching error when a response's ``error`` is not NONE."""
    if error != ErrorCode.NONE:
        raise error_for(error, context)

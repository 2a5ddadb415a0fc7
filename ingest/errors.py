"""The one error tree of the product.

Every error raised on purpose by ``ingest`` derives from :class:`IngestError`.
A subclass carries the wire error code (``code``, see :class:`ErrorCode` and
``docs/protocol.md``) and whether retrying the same operation can help
(``retriable``). Messages say what was wrong, with the offending value, and
what to do; causes are chained with ``raise ... from``.
"""
from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Wire error codes: 0-4 fixed by the Kafka 0.7 protocol, ours from 10 up."""

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
    BROKER_SHUTTING_DOWN = 15
    STORAGE_ERROR = 16
    LOG_OFFLINE = 17


class IngestError(Exception):
    """Root of every error the product raises on purpose."""

    code: ErrorCode = ErrorCode.UNKNOWN
    retriable: bool = False


# --- configuration -----------------------------------------------------------


class ConfigError(IngestError):
    """A configuration key is unknown, missing, or has a value out of range."""


# --- encoding / decoding -----------------------------------------------------


class BufferUnderrunError(IngestError):
    """A buffer ended before a field it must contain (names field and sizes)."""

    code = ErrorCode.MALFORMED_REQUEST


class InvalidMessageError(IngestError):
    """A message failed validation: bad CRC, unknown magic or codec, bad size."""

    code = ErrorCode.INVALID_MESSAGE


class MessageTooLargeError(IngestError):
    """A message or message set exceeds the configured maximum size."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class UnsupportedCodecError(InvalidMessageError):
    """A compression codec is unknown or its library is not installed."""


# --- broker / log --------------------------------------------------------------


class InvalidTopicError(IngestError):
    """A topic name is not 1-249 characters of ``[A-Za-z0-9._-]`` or is '.'/'..'."""

    code = ErrorCode.INVALID_TOPIC


class OffsetOutOfRangeError(IngestError):
    """An offset is deleted by retention, past the end, or not on a message boundary."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE


class WrongPartitionError(IngestError):
    """A partition number is outside the topic's partition range."""

    code = ErrorCode.WRONG_PARTITION


class InvalidFetchSizeError(IngestError):
    """A fetch size is negative, zero or above the allowed maximum."""

    code = ErrorCode.INVALID_FETCH_SIZE


class LogCorruptionError(IngestError):
    """Corrupt bytes found in a log segment that recovery may not truncate."""

    code = ErrorCode.STORAGE_ERROR


class LogOfflineError(IngestError):
    """A partition log stopped serving after an I/O error (failed fsync or write); the broker's
    other logs keep serving, and recovery at the next start decides what is on disk."""

    code = ErrorCode.LOG_OFFLINE
    retriable = True  # elsewhere: another partition takes the data; this one stays offline until restart


class RequestTooLargeError(IngestError):
    """A request frame is larger than ``max.socket.request.bytes``."""

    code = ErrorCode.REQUEST_TOO_LARGE


class UnknownRequestTypeError(IngestError):
    """A request carries a type number the broker does not know."""

    code = ErrorCode.UNKNOWN_REQUEST_TYPE


class MalformedRequestError(IngestError):
    """A request body does not match its declared layout."""

    code = ErrorCode.MALFORMED_REQUEST


class BrokerShuttingDownError(IngestError):
    """The broker is stopping and refuses new work; another broker may serve it."""

    code = ErrorCode.BROKER_SHUTTING_DOWN
    retriable = True


# --- client side ---------------------------------------------------------------


class BrokerUnavailableError(IngestError):
    """A broker could not be reached or closed the connection."""

    retriable = True


class FetchSizeTooSmallError(IngestError):
    """A message is larger than the client's fetch-size ceiling."""

    code = ErrorCode.INVALID_FETCH_SIZE


class ProducerQueueFullError(IngestError):
    """The async producer's bounded queue is full (``queue.enqueue.timeout.ms``)."""

    retriable = True


class ConsumerTimeoutError(IngestError):
    """No message arrived on a consumer stream within ``consumer.timeout.ms``."""

    retriable = True


class CoordinationError(IngestError):
    """A ZooKeeper operation failed: registry conflict, session loss, rebalance."""

    retriable = True


class BrokerIdTakenError(CoordinationError):
    """Another live broker already registered this ``brokerid`` in ZooKeeper."""

    retriable = False


# --- events / schemas ----------------------------------------------------------


class SchemaError(IngestError):
    """A schema does not parse, or is not registered."""


class SchemaNotFoundError(SchemaError):
    """A schema id or subject is unknown to the registry."""


class IncompatibleSchemaError(SchemaError):
    """A schema breaks the subject's compatibility rule (names field and rule)."""


class RegistryUnavailableError(SchemaError):
    """The schema registry could not be reached or answered with a server error."""

    retriable = True


class EventDecodeError(IngestError):
    """A payload's framing or Avro body is invalid (names topic, offset, schema id)."""


# --- loader / storage / audit -------------------------------------------------------


class StorageError(IngestError):
    """A storage operation (local or HDFS) failed."""

    retriable = True


class CommitError(IngestError):
    """A load could not be committed; the previous committed state is untouched."""


class DataLossError(IngestError):
    """Messages were lost (e.g. deleted by retention before they were loaded)."""


class AuditFailedError(IngestError):
    """The audit judged at least one window below the completeness threshold."""

"""The one error tree of the product.

Every error raised on purpose by ``ingest`` derives from :class:`IngestError`.
A subclass says whether retrying the same operation can help (``retriable``);
messages say what was wrong, with the offending value, and what to do; causes
are chained with ``raise ... from``.

The code each error goes out with on the wire, and the error a client raises
for each code, are one table per protocol beside the wire layer
(:mod:`ingest.wire.errors`, as Kafka keeps its ``Errors`` beside its protocol
and its exceptions apart).
"""
from __future__ import annotations

from typing import Sequence


class IngestError(Exception):
    """Root of every error the product raises on purpose."""

    retriable: bool = False


# --- configuration -----------------------------------------------------------


class ConfigError(IngestError):
    """A configuration key is unknown, missing, or has a value out of range."""


class UnknownTopicError(IngestError):
    """An operator named a topic that does not exist where it was looked for (no broker holds it,
    it was never audited, nothing of it was loaded); the message lists the topics that do exist."""


# --- messages ------------------------------------------------------------------


class InvalidMessageError(IngestError):
    """A message failed validation: bad CRC, unknown magic or codec, bad size."""


class BufferUnderrunError(InvalidMessageError):
    """A message's bytes end before the field its header promises (names field and sizes)."""


class UnsupportedCodecError(InvalidMessageError):
    """A compression codec is unknown or its library is not installed."""


class MessageTooLargeError(IngestError):
    """A message or message set exceeds the configured maximum size."""


# --- Kafka record formats (ingest.records) ------------------------------------------


class CorruptRecordError(InvalidMessageError):
    """A Kafka record batch or legacy message fails its CRC, or its size fields contradict its bytes
    (Kafka's CorruptRecordException: CORRUPT_MESSAGE)."""


class InvalidRecordError(InvalidMessageError):
    """A Kafka record batch is well framed but breaks a rule: its count, offsets or record lengths
    lie, a varint is malformed, a client wrote a control batch (Kafka's InvalidRecordException)."""


class InvalidTimestampError(InvalidRecordError):
    """A batch's timestamps are outside ``message.timestamp.before/after.max.ms`` of the broker's
    clock, or a client set LOG_APPEND_TIME (Kafka's INVALID_TIMESTAMP)."""


class UnsupportedCompressionError(UnsupportedCodecError):
    """A batch names a compression type Kafka does not define (5-7), or one the target format cannot
    hold (zstd in a magic 0/1 message set)."""


class RecordTooLargeError(MessageTooLargeError):
    """A record batch is larger than ``max.message.bytes``, or inflates to more than the limit
    (a decompression bomb)."""


class RecordListTooLargeError(MessageTooLargeError):
    """A produced record set is larger than the segment can ever hold (``segment.bytes``)."""


# --- broker requests -------------------------------------------------------------


class InvalidTopicError(IngestError):
    """A topic name is not 1-249 characters of ``[A-Za-z0-9._-]`` or is '.'/'..'."""


class WrongTopicKindError(IngestError):
    """A request named a topic of the other kind: a Kafka-format topic on the 0.7 port, or a 0.7 topic on
    the Kafka listener (docs/kafka-protocol.md, D2). Each kind of client sees only its own kind."""


class ClusterAuthorizationFailedError(IngestError):
    """A request only a broker may send (a replica's fetch, the mirror's conditional append) came from a
    connection not allowed ClusterAction, or on the 0.7 port of a broker with security configured, which
    serves them only on its Kafka inter-broker listener (docs/security.md, "The 0.7 port")."""


class OffsetOutOfRangeError(IngestError):
    """An offset is deleted by retention, past the end, or not on a message boundary."""


class WrongPartitionError(IngestError):
    """A partition number is outside the topic's partition range."""


class TopicCreationRefusedError(IngestError):
    """The broker will not create a topic or partition: ``max.topics`` or ``max.broker.partitions``
    is reached, or ``auto.create.topics.enable`` is false and the topic is not configured."""


class InvalidFetchSizeError(IngestError):
    """A fetch size is negative, zero or above the allowed maximum."""


class LogOfflineError(IngestError):
    """A partition log stopped serving after an I/O error (failed fsync or write); the broker's
    other logs keep serving, and recovery at the next start decides what is on disk."""

    retriable = True  # elsewhere: another partition takes the data; this one stays offline until restart


class RequestTooLargeError(IngestError):
    """A request frame is larger than ``max.socket.request.bytes``."""


class UnknownRequestTypeError(IngestError):
    """A request carries a type number the broker does not know."""


class MalformedRequestError(IngestError):
    """A request frame or body does not match its declared layout (short, trailing bytes, bad UTF-8)."""


# --- replication -----------------------------------------------------------------


class NotLeaderForPartitionError(IngestError):
    """This broker is not (or no longer) the leader of that replicated partition: refresh the
    metadata (TOPIC_METADATA) and send to the leader it names. Nothing was appended."""

    retriable = True


class LeaderNotAvailableError(IngestError):
    """The replicated partition has no leader at the moment (an election is under way, or every
    in-sync replica is down and unclean election is off). Nothing was appended."""

    retriable = True


class NotEnoughReplicasError(IngestError):
    """acks=-1 and fewer than ``min.insync.replicas`` replicas are in sync: refused before the
    append, nothing was written."""

    retriable = True


class NotEnoughReplicasAfterAppendError(IngestError):
    """acks=-1: the set was appended by the leader, but the in-sync set shrank below
    ``min.insync.replicas`` before every member had it; not acknowledged (a retry may duplicate it)."""

    retriable = True


class RequestTimedOutError(IngestError):
    """acks=-1: the in-sync replicas did not all have the set within the request's timeout
    (``request.timeout.ms``); not acknowledged (a retry may duplicate it)."""

    retriable = True


class StaleLeaderEpochError(IngestError):
    """A replica fetch names an older leader epoch than the leader's: the follower has not seen
    the latest partition state yet and must re-read it before fetching again."""

    retriable = True


class UnknownLeaderEpochError(IngestError):
    """A Kafka request names a leader epoch newer than the partition's on this broker (its leader has
    not caught up with the controller yet, or the client knows a newer leader): retry after a metadata
    refresh (Kafka's UNKNOWN_LEADER_EPOCH)."""

    retriable = True


class OutOfOrderSequenceError(IngestError):
    """An idempotent producer's batch does not continue its sequence on the partition (a gap, or an old
    batch no longer among the last five the leader keeps per producer): refused, nothing appended
    (Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER). A producer that gets it has lost or reordered a batch."""


class InvalidProducerEpochError(IngestError):
    """An idempotent producer's batch carries an older producer epoch than the partition has seen from that
    producer id: a fenced instance; refused, nothing appended (Kafka's INVALID_PRODUCER_EPOCH)."""


class InvalidRequiredAcksError(IngestError):
    """``request.required.acks`` is not one of -1, 0, 1."""


class OffsetMismatchError(IngestError):
    """APPEND_AT: the partition's log end is not the offset the set was meant to start at; nothing
    was appended. ``log_end`` is the log end the broker has (the mirror resumes from it)."""


    def __init__(self, message: str = "", log_end: int | None = None) -> None:
        super().__init__(message)
        self.log_end = log_end


class ReplicationConfigError(IngestError):
    """An operator's replication request cannot be done: replication factor 0 or above the live
    brokers, an unknown broker id in a manual assignment, a topic that already exists, or no
    ZooKeeper (the static broker-list mode keeps replication factor 1)."""


class TopicAlreadyExistsError(IngestError):
    """CreateTopics named a topic that exists (of either kind) or is being deleted."""


class InvalidPartitionsError(IngestError):
    """A partition count below 1 or above the limit, or CreatePartitions asking for no more than a topic has."""


class ReassignmentInProgressError(IngestError):
    """A topic's partitions cannot be added to, nor the topic deleted, while some of its partitions are being
    reassigned (Kafka's REASSIGNMENT_IN_PROGRESS): the moves finish or are cancelled first."""


class InvalidReplicationFactorError(IngestError):
    """A replication factor below 1 or above the live brokers."""


class InvalidReplicaAssignmentError(IngestError):
    """A manual replica assignment that is not partitions 0..n-1 of distinct, registered brokers, of one size."""


class InvalidConfigError(IngestError):
    """A topic config that is unknown, or whose value is outside what is allowed (the admin API)."""


class UnreplicatedTopicError(IngestError):
    """An operator asked for something only a topic with an assignment in ZooKeeper has (deletion) of an
    unreplicated 0.7 topic, which is only a log on each broker that received it."""


class PolicyViolationError(IngestError):
    """An admin request that is well formed but refused by this product's rules (docs/kafka-protocol.md,
    "The admin API"), e.g. a topic whose ``min.insync.replicas`` exceeds its replication factor."""


class StaleControllerError(IngestError):
    """A controller's decision was refused because a newer controller epoch exists in ZooKeeper."""


# --- storage ---------------------------------------------------------------------


class StorageError(IngestError):
    """A storage operation failed: a broker log's I/O, or the loader's local or HDFS storage.

    Retriable: the operation may succeed later or elsewhere (another broker,
    a storage node back up).
    """

    retriable = True


class DiskFullError(StorageError):
    """A write failed because the file system is full (ENOSPC); retry once space is freed."""


class LogWriteError(StorageError):
    """A write to a partition log failed with an I/O error other than a full disk; it was cut back,
    nothing appended (STORAGE_ERROR on the wire)."""


class LogCorruptionError(StorageError):
    """Corrupt bytes found in a log segment that recovery may not truncate."""

    retriable = False


class CorruptRangeError(LogCorruptionError):
    """A fetch at or inside a damaged range of a log: skip to ``next_offset``, the next valid message.

    The bytes ``[start_offset, next_offset)`` existed but failed validation; the
    broker recorded them as damaged (docs/log-format.md, "Damaged ranges"). On
    the wire the FETCH answer's body is ``next_offset:int64`` (docs/protocol.md).
    ``start_offset`` is -1 when unknown (a client knows only where it fetched).
    ``messages`` is how many messages the range held, -1 when the broker cannot
    count them exactly (docs/log-format.md, "Damaged ranges").
    """


    def __init__(self, message: str, *, start_offset: int = -1, next_offset: int = -1, messages: int = -1) -> None:
        super().__init__(message)
        self.start_offset = start_offset
        self.next_offset = next_offset
        self.messages = messages


# --- client side ---------------------------------------------------------------


class MalformedResponseError(IngestError):
    """A broker's response frame or body does not match its declared layout.

    Never sent on the wire: the client closes the connection, which can no
    longer be trusted to be in sync, and raises this. Retriable, as
    kafka-python's protocol errors: the next request opens a new connection,
    possibly to another broker.
    """

    retriable = True


class BrokerUnavailableError(IngestError):
    """A broker could not be reached or closed the connection."""

    retriable = True


class UnsupportedVersionError(IngestError):
    """A Kafka-protocol broker does not speak a version of an API that this client can use (its
    ApiVersions answer has no version in common with the client's range). Not retriable: the broker
    must be upgraded, or the client's need is too new for it."""


# --- authentication (SASL on the Kafka listener) ----------------------------------------


class SaslAuthenticationError(IngestError):
    """SASL authentication failed: a wrong password, an unknown user, a malformed token (Kafka's
    SaslAuthenticationException: SASL_AUTHENTICATION_FAILED). The broker closes the connection after
    answering; retrying with the same credentials cannot help."""


class UnsupportedSaslMechanismError(SaslAuthenticationError):
    """The client asked for a SASL mechanism the listener has not enabled (UNSUPPORTED_SASL_MECHANISM);
    the message lists the enabled ones."""


class IllegalSaslStateError(SaslAuthenticationError):
    """A request that does not fit the connection's SASL state, e.g. a SaslAuthenticate before the
    handshake (ILLEGAL_SASL_STATE)."""


class DeliveryFailedError(IngestError):
    """A Kafka-protocol producer could not write some batches within its retries and
    ``delivery.timeout.ms``: nothing of them is known to be written (a batch refused with an error is
    never reported written). ``failed`` lists ``(topic, partition, records, error)`` per batch,
    ``delivered`` the deliveries that did succeed in the same flush."""

    def __init__(self, message: str, failed: Sequence = (), delivered: Sequence = ()) -> None:
        super().__init__(message)
        self.failed = list(failed)
        self.delivered = list(delivered)


class FetchSizeTooSmallError(IngestError):
    """A message is larger than the client's fetch-size ceiling (raise ``max.fetch.size``)."""


class ProducerQueueFullError(IngestError):
    """The async producer's bounded queue is full (``queue.enqueue.timeout.ms``)."""

    retriable = True


class ProducerClosedError(IngestError):
    """The producer was closed with a timeout that passed before these messages were sent: they
    were not sent (or not retried further), and are reported failed."""


class ConsumerTimeoutError(IngestError):
    """No message arrived on a consumer stream within ``consumer.timeout.ms``."""

    retriable = True


class GroupRequestError(IngestError):
    """A consumer-group request refused by the group coordinator; ``code`` is the Kafka error code to answer
    (NOT_COORDINATOR, ILLEGAL_GENERATION, ...), the message says why (for the broker's log)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class CoordinationError(IngestError):
    """A ZooKeeper operation failed: registry conflict, session loss, rebalance."""

    retriable = True


class CoordinationUnavailableError(CoordinationError):
    """A broker needed ZooKeeper to serve a request (a produce naming a topic it does not know yet) and
    ZooKeeper did not answer within ``zk.connectiontimeout.ms``; nothing was done: retry."""

    retriable = True


class NeedsZooKeeperError(CoordinationUnavailableError):
    """Raised by a request handler on a broker network thread when serving the request needs ZooKeeper,
    before anything was done: the handlers serve the request again on their coordination thread (a
    network thread never waits for ZooKeeper). Should one escape, it goes out as COORDINATION_UNAVAILABLE."""


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


class RegistryHttpError(SchemaError):
    """A request the registry service refuses: HTTP status, Confluent error code, message."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message


class EventDecodeError(IngestError):
    """A payload's framing or Avro body is invalid (names topic, offset, schema id)."""


# --- loader / compaction / demo -------------------------------------------------------


class CommitError(IngestError):
    """A load could not be committed; the previous committed state is untouched."""


class CommitConflictError(CommitError):
    """Another job committed the same sequence number first; re-read the state and retry."""

    retriable = True


class DataLossError(IngestError):
    """Messages were lost (deleted by retention before they were loaded).

    Args:
        message: names every lost range and what to do.
        lost_ranges: the ``ingest.loader.records.LostRange`` records, for the
            failed run's record.
    """

    def __init__(self, message: str, lost_ranges: Sequence[object] = ()) -> None:
        super().__init__(message)
        self.lost_ranges: tuple = tuple(lost_ranges)


class QuarantineLimitError(IngestError):
    """More messages than ``max.quarantine.ratio`` allows were undecodable; nothing was committed."""


class CompactionError(IngestError):
    """An hour could not be compacted (unreadable file, unknown format, missing header)."""


class MirrorConfigError(ConfigError):
    """A mirror configuration that cannot work: no source, an unknown source name, a regex that does
    not compile, a target topic whose partitions cannot hold the mapping (names the topic and counts)."""


class MirrorError(IngestError):
    """The mirror cannot go on with one partition: its checkpoint is unreadable or was moved by
    another owner, or the target lost data below the checkpoint (names the partition and offsets)."""


# --- mirror data path ------------------------------------------------------------

class MirrorOwnershipLostError(MirrorError):
    """A partition's checkpoint was written by another owner since this copier read it (its
    conditional write failed): this copier stops that partition (names the partition and versions)."""


class DemoError(IngestError):
    """A demo step failed (names the step, its exit code and its log file)."""


# --- cluster artifact (ingest package) ---

class PackageError(IngestError):
    """``ingest package`` cannot build the cluster artifact: no checkout to build, a build step
    (pip wheel, pip install, venv-pack) failed (names the command and its output's tail)."""


# --- loader state checkpoints ---

class CheckpointCorruptError(StorageError):
    """A checkpoint file of the loader state fails its checksum, does not parse, or disagrees with its
    name (names the file). Readers catch it and fall back to an older checkpoint or the manifests."""

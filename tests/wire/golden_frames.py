"""Golden frames: every request and response of the 0.7 port (types 0-4 and 10-16) as bytes.

The hex in ``golden_frames.json`` was recorded from the hand-written codecs that the declared
schemas of the wire layer replaced; ``test_golden_frames.py`` checks that today's codecs write
the same bytes and read them back to equal objects. Regenerate the file only when a layout
changes on purpose (and say why in the commit)::

    python -m tests.wire.golden_frames --write

Each sample is ``name -> (kind, response class or None, build)``: ``request`` samples are decoded
with ``decode_request``; ``response`` samples with the response class (from the bytes after
``size``); ``bytes`` samples are the headers the broker writes before a ``sendfile`` region and
the bodies it builds by hand; ``decode`` samples are frames another writer sends (an error-only
body, an older broker's CORRUPT_RANGE body) with the object they must decode to; ``raised``
samples are the answer the broker sends when a handler raises each error of the tree.
"""
from __future__ import annotations

import argparse
import json
import struct
from pathlib import Path

from ingest.errors import IngestError
from ingest.wire import protocol as p
from ingest.wire.errors import code_for

DATA = Path(__file__).with_name("golden_frames.json")

SET = b"\x00\x00\x00\x0b\x02\x00\x9a\x8b\x0b\x3c" + b"hello"   # the bytes are opaque to the codecs
TOPIC = "page-views.v1"
BIG = (1 << 62) + 12345


def _requests() -> dict:
    return {
        "produce": p.ProduceRequest(TOPIC, 3, SET),
        "produce_empty_set": p.ProduceRequest("t", 0, b""),
        "produce_unicode_topic": p.ProduceRequest("bé-ü", 2**31 - 1, b"x" * 300),
        "fetch": p.FetchRequest(TOPIC, 1, BIG, 300 * 1024),
        "fetch_negative_values": p.FetchRequest("t", -1, -1, -1),
        "multifetch": p.MultiFetchRequest((p.FetchRequest("a", 0, 0, 10), p.FetchRequest("b_c", 7, 99, 1 << 20))),
        "multifetch_empty": p.MultiFetchRequest(()),
        "multiproduce": p.MultiProduceRequest((p.ProduceRequest("a", 0, SET), p.ProduceRequest("b", 1, b""))),
        "multiproduce_empty": p.MultiProduceRequest(()),
        "offsets_latest": p.OffsetsRequest(TOPIC, 0, p.LATEST_TIME, 10),
        "offsets_earliest": p.OffsetsRequest("t", 5, p.EARLIEST_TIME, 1),
        "offsets_by_time": p.OffsetsRequest("t", 5, 1_700_000_000_000, 3),
        "produce_ack": p.ProduceAckRequest(TOPIC, 4, SET),
        "produce_ack_empty_set": p.ProduceAckRequest("t", 0, b""),
        "metadata_all": p.MetadataRequest(()),
        "metadata_some": p.MetadataRequest(("a", "bé", TOPIC)),
        "produce_acks_all": p.ProduceAcksRequest(-1, 10_000, p.ProduceRequest(TOPIC, 2, SET)),
        "produce_acks_leader": p.ProduceAcksRequest(1, 0, p.ProduceRequest("t", 0, b"")),
        "replica_fetch": p.ReplicaFetchRequest(2, 7, 500, p.FetchRequest(TOPIC, 3, BIG, 1 << 20)),
        "replica_fetch_repair": p.ReplicaFetchRequest(-1, 0, 0, p.FetchRequest("t", 0, 0, 1)),
        "topic_metadata_all": p.TopicMetadataRequest(()),
        "topic_metadata_some": p.TopicMetadataRequest(("r1", "r2")),
        "append_at": p.AppendAtRequest(TOPIC, 3, 1 << 40, -1, 10_000, SET),
        "append_at_query": p.AppendAtRequest("t", 0, -1, 1, 0, b""),
        "deleted_segments": p.DeletedSegmentsRequest("t-é", 7, 0, 1 << 62),
        "replica_fetches": p.ReplicaFetchesRequest(2, 500, 1, 10 << 20, (
            p.ReplicaPartitionFetch(TOPIC, 3, 7, BIG, 1 << 20), p.ReplicaPartitionFetch("t-é", 0, 1, 0, 4096))),
        "replica_fetches_empty": p.ReplicaFetchesRequest(0, 0, 0, 0, ()),
    }


def _responses() -> dict:
    partitions = (p.PartitionReplicas(0, 1, 3, (1, 2, 3), (1, 2)), p.PartitionReplicas(1, -1, 0, (2,), ()))
    return {
        "error": (p.ErrorResponse, p.ErrorResponse(13)),
        "error_unknown": (p.ErrorResponse, p.ErrorResponse(-1)),
        "fetch": (p.FetchResponse, p.FetchResponse(0, SET * 3)),
        "fetch_empty": (p.FetchResponse, p.FetchResponse(0, b"")),
        "fetch_error": (p.FetchResponse, p.FetchResponse(1)),
        "fetch_corrupt_range": (p.FetchResponse, p.FetchResponse.corrupt_range(4096, 1024, 17)),
        "fetch_corrupt_range_unknown": (p.FetchResponse, p.FetchResponse.corrupt_range(4096)),
        "multifetch": (p.MultiFetchResponse, p.MultiFetchResponse(0, (p.FetchResponse(0, SET), p.FetchResponse(1),
                                                                      p.FetchResponse(0, b"yy")))),
        "multifetch_empty": (p.MultiFetchResponse, p.MultiFetchResponse(0, ())),
        "offsets": (p.OffsetsResponse, p.OffsetsResponse(0, (900, 500, 0))),
        "offsets_none": (p.OffsetsResponse, p.OffsetsResponse(0, ())),
        "offsets_error": (p.OffsetsResponse, p.OffsetsResponse(3, ())),
        "produce_ack": (p.ProduceAckResponse, p.ProduceAckResponse(0, 4096)),
        "produce_ack_error": (p.ProduceAckResponse, p.ProduceAckResponse(11, -1)),
        "metadata": (p.MetadataResponse, p.MetadataResponse(0, 7, "127.0.0.1", 9092, (
            p.TopicMetadata("a", (p.PartitionMetadata(0, 0, 100), p.PartitionMetadata(1, 50, BIG))),
            p.TopicMetadata("b", ())))),
        "metadata_no_topics": (p.MetadataResponse, p.MetadataResponse(0, 0, "host-ü", 1, ())),
        "metadata_error": (p.MetadataResponse, p.MetadataResponse(30)),
        "replica_fetch": (p.ReplicaFetchResponse, p.ReplicaFetchResponse(0, 100, 0, 200, SET)),
        "replica_fetch_empty": (p.ReplicaFetchResponse, p.ReplicaFetchResponse(0, 5, 1, 5)),
        "replica_fetch_out_of_range": (p.ReplicaFetchResponse, p.ReplicaFetchResponse(1, 10, 4, 12)),
        "replica_fetch_error": (p.ReplicaFetchResponse, p.ReplicaFetchResponse(26)),
        "topic_metadata": (p.TopicMetadataResponse, p.TopicMetadataResponse(
            0, ((1, "h1", 9092), (2, "h2", 9093), (3, "h-é", 1)),
            (p.ReplicatedTopic("r", 0, partitions), p.ReplicatedTopic("plain", 0, ()),
             p.ReplicatedTopic("gone", 22, ())))),
        "topic_metadata_empty": (p.TopicMetadataResponse, p.TopicMetadataResponse(0, (), ())),
        "topic_metadata_error": (p.TopicMetadataResponse, p.TopicMetadataResponse(30)),
        "append_at": (p.ProduceAckResponse, p.ProduceAckResponse(0, 77)),
        "append_at_mismatch": (p.ProduceAckResponse, p.ProduceAckResponse(28, 1234)),
        "deleted_segments": (p.DeletedSegmentsResponse, p.DeletedSegmentsResponse(
            0, (p.DeletionRecord(0, 367, 11, 367, 5), p.DeletionRecord(367, 688, -1, 321, 1_700_000_000_000)))),
        "deleted_segments_none": (p.DeletedSegmentsResponse, p.DeletedSegmentsResponse(0, ())),
        "deleted_segments_error": (p.DeletedSegmentsResponse, p.DeletedSegmentsResponse(11)),
        "replica_fetches": (p.ReplicaFetchesResponse, p.ReplicaFetchesResponse(0, (
            p.ReplicaPartitionData(TOPIC, 3, 0, 100, 0, 200, SET),
            p.ReplicaPartitionData("t", 0, 1, 10, 4, 12, b""),
            p.ReplicaPartitionData("t", 1, 20, 5, 0, 9, p.FetchResponse.corrupt_range(9, 2, -1).message_set)))),
        "replica_fetches_none": (p.ReplicaFetchesResponse, p.ReplicaFetchesResponse(0, ())),
        "replica_fetches_error": (p.ReplicaFetchesResponse, p.ReplicaFetchesResponse(32)),
    }


def _hand_built() -> dict:
    """Bytes the broker writes around a sendfile region, or assembles part by part."""
    return {
        "fetch_header": p.FetchResponse.header(0, 5000),
        "fetch_header_error": p.FetchResponse.header(20, 0),
        "multifetch_part_header": p.FetchResponse.header(0, 77),   # a framed FetchResponse
        "replica_fetch_header": p.ReplicaFetchResponse.header(0, 100, 3, 250, 4096),
        "corrupt_range_body": p.FetchResponse.corrupt_range(9, 2, -1).message_set,
        "replica_fetches_parts": b"".join(p.ReplicaFetchesResponse.parts(0, [
            (p.ReplicaPartitionData(TOPIC, 3, 0, 100, 0, 200, b""), SET),
            (p.ReplicaPartitionData("t", 0, 0, 5, 1, 5, b""), b"")])),
    }


_RESPONSE_CLASSES = {"ErrorResponse": p.ErrorResponse, "FetchResponse": p.FetchResponse,
                     "MultiFetchResponse": p.MultiFetchResponse, "OffsetsResponse": p.OffsetsResponse,
                     "ProduceAckResponse": p.ProduceAckResponse, "MetadataResponse": p.MetadataResponse,
                     "ReplicaFetchResponse": p.ReplicaFetchResponse, "TopicMetadataResponse": p.TopicMetadataResponse,
                     "AppendAtResponse": p.ProduceAckResponse,   # APPEND_AT's answer: the same class
                     "DeletedSegmentsResponse": p.DeletedSegmentsResponse,
                     "ReplicaFetchesResponse": p.ReplicaFetchesResponse}


def _foreign() -> dict:
    """Frames written by something else than ``encode``, and what each decodes to."""
    out = {f"error_only_as_{name}": (cls, p.response_frame(14), cls.decode(p.response_frame(14)[4:]))
           for name, cls in _RESPONSE_CLASSES.items()}
    old = p.response_frame(20, struct.pack(">q", 555))              # a broker that sent next_offset alone
    out["fetch_corrupt_range_next_offset_only"] = (p.FetchResponse, old, p.FetchResponse.decode(old[4:]))
    return out


def _error_tree() -> list[type]:
    """Every error class of the product, whichever modules the run has imported so far (so: all of them)."""
    import importlib
    import pkgutil

    import ingest
    for m in pkgutil.walk_packages(ingest.__path__, "ingest."):
        importlib.import_module(m.name)
    out, stack = [], [IngestError]
    while stack:
        cls = stack.pop()
        out.append(cls)
        stack.extend(cls.__subclasses__())
    return sorted(out, key=lambda c: c.__name__)


def _answers_to_errors() -> dict:
    """What the broker answers when a handler raises each error of the tree: its error-only frame."""
    return {cls.__name__: p.ErrorResponse(code_for(cls)) for cls in _error_tree()}


def samples() -> dict:
    """name -> (kind, response class or None, object or bytes, frame bytes)."""
    out = {}
    for name, req in _requests().items():
        out[f"request:{name}"] = ("request", None, req, req.encode())
    for name, (cls, resp) in _responses().items():
        out[f"response:{name}"] = ("response", cls, resp, resp.encode())
    for name, data in _hand_built().items():
        out[f"bytes:{name}"] = ("bytes", None, data, data)
    for name, resp in _answers_to_errors().items():
        out[f"raised:{name}"] = ("response", p.ErrorResponse, resp, resp.encode())
    for name, (cls, frame, obj) in _foreign().items():
        out[f"decode:{name}"] = ("decode", cls, obj, frame)
    return out


def record() -> dict:
    return {name: frame.hex() for name, (_k, _c, _o, frame) in samples().items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {DATA.name} from today's codecs")
    args = parser.parse_args(argv)
    frames = record()
    if args.write:
        DATA.write_text(json.dumps(frames, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(frames)} frames to {DATA}")
        return 0
    recorded = json.loads(DATA.read_text())
    differ = sorted(n for n in frames.keys() | recorded.keys() if frames.get(n) != recorded.get(n))
    print("\n".join(differ) if differ else f"all {len(frames)} frames as recorded")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())

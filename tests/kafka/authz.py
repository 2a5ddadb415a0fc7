"""Helpers for the authorization tests: raw Kafka requests from a chosen source address, ACLs in ZooKeeper.

A client's host is what an ACL's host is compared with. The whole 127.0.0.0/8 range is loopback, so a
test connects from 127.0.0.2 to play a client on another machine while the brokers (and their
followers' fetches) use 127.0.0.1: ACLs can tell them apart by host before connections authenticate.
"""
from __future__ import annotations

import socket
import struct

from ingest.broker.authorizer import zk_store
from ingest.broker.authorizer.acl import AclEntry, Operation, PatternType, Permission, ResourcePattern, ResourceType
from ingest.wire.kafka.message import decode_response, encode_request

BROKER_HOST = "127.0.0.1"
OTHER_HOST = "127.0.0.2"
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"


def connect(port: int, source: str = OTHER_HOST, timeout: float = 20.0) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect((BROKER_HOST, port))
    return s


def recv_frame(sock: socket.socket) -> bytes | None:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = bytearray()
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return bytes(body)


def send(sock: socket.socket, request, version: int, corr: int = 7) -> None:
    sock.sendall(encode_request(request, version, corr, "authz-test"))


def answer(sock: socket.socket, response_cls, version: int):
    body = recv_frame(sock)
    assert body is not None, f"{response_cls.__name__} v{version}: the broker closed the connection"
    return decode_response(response_cls, body, version)[1]


def call(port: int, request, version: int, response_cls, source: str = OTHER_HOST):
    with connect(port, source) as s:
        send(s, request, version)
        return answer(s, response_cls, version)


def allow(zk, principal: str, op: str, rtype: str, name: str, host: str = "*", prefixed: bool = False,
          deny: bool = False) -> None:
    """Store one ACL as ``ingest acls add`` does."""
    kind = PatternType.PREFIXED if prefixed else PatternType.LITERAL
    pattern = ResourcePattern(ResourceType.parse(rtype), name, kind)
    entry = AclEntry(principal, host, Operation.parse(op), Permission.DENY if deny else Permission.ALLOW)
    zk_store.change(zk, pattern, add={entry})


def brokers_acl(zk) -> None:
    """The brokers (ANONYMOUS from the brokers' own address) may replicate: ClusterAction on the cluster."""
    allow(zk, "User:ANONYMOUS", "ClusterAction", "Cluster", "kafka-cluster", host=BROKER_HOST)

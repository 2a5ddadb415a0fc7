"""A ZooKeeper identity for secured clusters in tests, and a client without one to attack them with.

::

    brokers = broker_factory(n=2, zk_connect=zk_connect, overrides={**zk_secure.SECURE, ...})
    with zk_secure.anonymous(zk_connect) as anon:
        zk_secure.assert_no_auth(lambda: anon.delete("/controller"))
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

USERNAME, PASSWORD = "ingest", "zk-test-secret"

CREDENTIALS: dict[str, Any] = {"zookeeper.digest.username": USERNAME, "zookeeper.digest.password": PASSWORD}
"""Overrides of step 1 of the rolling procedure: authenticate, create open nodes."""
SECURE: dict[str, Any] = {**CREDENTIALS, "zookeeper.set.acl": True}
"""Overrides of a secured cluster: authenticate and create every node with ACLs."""


@contextmanager
def anonymous(zk_connect: str) -> Iterator[Any]:
    """A started kazoo client that does not authenticate (anyone who can reach ZooKeeper)."""
    from kazoo.client import KazooClient  # deferred: kazoo

    client = KazooClient(hosts=zk_connect, timeout=10.0)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@contextmanager
def product(zk_connect: str, *, set_acl: bool = True) -> Iterator[Any]:
    """A started client with the product's identity, made as the product makes them."""
    from ingest.zk_security import ZkSecurity, new_kazoo

    client = new_kazoo(zk_connect, ZkSecurity(USERNAME, PASSWORD, set_acl=set_acl), timeout=10.0)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def assert_no_auth(call: Callable[[], Any]) -> None:
    """``call`` is refused by ZooKeeper with NoAuthError (and so changed nothing)."""
    from kazoo.exceptions import NoAuthError  # deferred: kazoo

    try:
        call()
    except NoAuthError:
        return
    raise AssertionError(f"ZooKeeper allowed {call} to a client without credentials")

"""Who the product is to ZooKeeper, and the ACLs its znodes get (Kafka's ``zookeeper.set.acl``).

Every ZooKeeper client of the product (brokers, the registry's store, producers and consumers
with ``zk.connect``, the loader, the mirror, the command-line tools) is made by
:func:`new_kazoo`, so that one place decides how it authenticates and which ACLs its nodes get:

- ``zookeeper.digest.username`` / ``zookeeper.digest.password`` set: the session authenticates
  with ZooKeeper's ``digest`` scheme (``addauth digest user:password``). ZooKeeper needs no server
  configuration for it: a digest identity is whatever the client asserts, and what it may do is
  decided by the ACLs of each node, which hold the SHA-1 digest of the password, never the password.
- ``zookeeper.set.acl=true`` (needs the credentials): every node the client creates gets, as
  Kafka's ``ZkData.defaultAcls``: the product's digest identity ALL, everyone else READ; nodes
  under :data:`~ingest.znodes.SENSITIVE_ROOTS` (credentials, broker configs, the authorizer's
  ACLs) the product's identity only; nodes under :data:`~ingest.znodes.OPEN_ROOTS` (the 0.7
  consumers' ``/consumers``) stay open to everyone.

Kafka authenticates to ZooKeeper through a JAAS file (SASL, DigestLoginModule's ``username`` and
``password``); the product has no JAAS, so the same two values are plain keys (the password
key's name ends in ``password``, the suffix by which secrets are recognised).
The ACL names the identity explicitly (``digest:user:hash``) rather than Kafka's ``auth``
(creator) scheme: the same thing for a session with one identity, and what ``ingest zk-acls``
can set on nodes other sessions created.

Without the keys nothing changes: a plain ``KazooClient``, nodes open to everyone (as before).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Mapping

from ingest import znodes
from ingest.config import Bool, Key, Str
from ingest.errors import ConfigError, CoordinationError

SET_ACL = "zookeeper.set.acl"
DIGEST_USERNAME = "zookeeper.digest.username"
DIGEST_PASSWORD = "zookeeper.digest.password"

ZK_SECURITY_KEYS = (
    Key(SET_ACL, Bool(), False,
        "create every znode with ACLs: the product's digest identity may change it, everyone else only read "
        "it (nothing under /config/users, /config/brokers, /kafka-acl*; /consumers stays open); needs "
        "zookeeper.digest.username and zookeeper.digest.password (docs/security.md, \"ZooKeeper\")"),
    Key(DIGEST_USERNAME, Str(pattern=r"[^:\s]*"), "",
        "the product's ZooKeeper identity (digest scheme); empty: the session does not authenticate"),
    Key(DIGEST_PASSWORD, Str(), "",
        "the password of zookeeper.digest.username (ZooKeeper stores only its SHA-1 digest in the ACLs)"),
)
"""The keys of every component that connects to ZooKeeper."""

_PER_PATH = object()
"""Stands for "the policy's ACL of each node" where kazoo passes one ACL down a path."""


@dataclass(frozen=True)
class ZkSecurity:
    """The product's ZooKeeper identity and whether its nodes get ACLs.

    Args:
        username, password: the digest identity ("" = the session does not authenticate).
        set_acl: create nodes with :meth:`acl_for`'s ACLs (needs the identity).
    Raises:
        ConfigError: ``set_acl`` without an identity, or half an identity.
    """

    username: str = ""
    password: str = field(default="", repr=False)
    set_acl: bool = False

    def __post_init__(self) -> None:
        if ":" in self.username:
            raise ConfigError(f"{DIGEST_USERNAME} {self.username!r} contains ':'; a digest user name cannot")
        if bool(self.username) != bool(self.password):
            missing = DIGEST_PASSWORD if self.username else DIGEST_USERNAME
            raise ConfigError(f"ZooKeeper digest authentication needs both {DIGEST_USERNAME} and "
                              f"{DIGEST_PASSWORD}; {missing} is not set")
        if self.set_acl and not self.username:
            raise ConfigError(f"{SET_ACL}=true needs the identity the ACLs name: set {DIGEST_USERNAME} and "
                              f"{DIGEST_PASSWORD} (or set {SET_ACL}=false)")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "ZkSecurity":
        """From a component's config (a config without the keys gives no security)."""
        return cls(username=config.get(DIGEST_USERNAME) or "", password=config.get(DIGEST_PASSWORD) or "",
                   set_acl=bool(config.get(SET_ACL)))

    @property
    def authenticated(self) -> bool:
        return bool(self.username)

    def auth_data(self) -> list[tuple[str, str]]:
        """kazoo's ``auth_data``: ``[("digest", "user:password")]``, or none."""
        return [("digest", f"{self.username}:{self.password}")] if self.authenticated else []

    def acl_for(self, path: str) -> list:
        """The ACL a node at ``path`` (relative to the chroot) gets under this policy.

        Without ``set_acl``: open to everyone (ZooKeeper's ``OPEN_ACL_UNSAFE``, what kazoo gives).
        """
        # deferred: kazoo, only where ZooKeeper is used
        from kazoo.security import OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, make_digest_acl

        if not self.set_acl or znodes.under(path, znodes.OPEN_ROOTS):
            return list(OPEN_ACL_UNSAFE)
        own = make_digest_acl(self.username, self.password, all=True)
        if znodes.under(path, znodes.SENSITIVE_ROOTS):
            return [own]
        return [own, *READ_ACL_UNSAFE]


NO_SECURITY = ZkSecurity()


def new_kazoo(connect: str, security: ZkSecurity | None = None, **kwargs: Any):
    """A (not yet started) KazooClient for ``connect`` that authenticates and sets ACLs as ``security`` says.

    ``kwargs`` go to ``KazooClient`` (``timeout``, ``connection_retry``, ``command_retry``, ...).
    """
    security = security or NO_SECURITY
    if not security.authenticated:
        # deferred: kazoo, only where ZooKeeper is used
        from kazoo.client import KazooClient

        return KazooClient(hosts=connect, **kwargs)
    if not security.set_acl:
        from kazoo.client import KazooClient  # deferred: kazoo

        return KazooClient(hosts=connect, auth_data=security.auth_data(), **kwargs)
    client = _acl_client_class()(hosts=connect, auth_data=security.auth_data(), **kwargs)
    client.acl_policy = security.acl_for
    return client


NO_AUTH_HINT = (f"ZooKeeper refused a change: the cluster's nodes are secured ({SET_ACL}); give this command "
                f"the cluster's identity ({DIGEST_USERNAME} and {DIGEST_PASSWORD} in its config)")
"""What a command says when ZooKeeper refused it (NoAuthError) where no better message was given."""


def is_no_auth(exc: BaseException) -> bool:
    """Whether ``exc`` is kazoo's NoAuthError (without importing kazoo where ZooKeeper was never used)."""
    return type(exc).__name__ == "NoAuthError" and type(exc).__module__.startswith("kazoo")


def refused_message(connect: str, security: ZkSecurity) -> str:
    """What to tell an operator whose client ZooKeeper refused a change (NoAuthError)."""
    who = (f"the identity {security.username!r} (zookeeper.digest.username) is not the one the nodes name: "
           f"check it and {DIGEST_PASSWORD}") if security.authenticated else (
        f"this client has no identity: set {DIGEST_USERNAME} and {DIGEST_PASSWORD} (the cluster's)")
    return f"ZooKeeper at {connect!r} refused the change: the cluster's nodes are secured ({SET_ACL}) and {who}"


def same_acls(a, b) -> bool:
    """Whether two ACL lists grant the same (order and duplicates aside)."""
    def key(acls):
        return {(acl.perms, acl.id.scheme, acl.id.id) for acl in acls}
    return key(a) == key(b)


def secure_chroot(client, security: ZkSecurity) -> None:
    """With ``set_acl``: give the chroot's node (the cluster's root) the policy's ACL, and create the open
    subtrees' roots (``/consumers``) that clients without credentials could no longer create.

    Without it anyone could delete ``/controller`` or add nodes beside ``/brokers``, whatever
    their own ACLs say (ZooKeeper checks a delete or create against the parent). Kafka creates
    its chroot with its ACLs; here the chroot usually exists already, so a broker sets them once.
    Without a chroot the ensemble's root belongs to every tenant and is left alone (``ingest
    zk-acls secure`` sets it, as Kafka's migration tool does). Kafka's brokers create
    ``/consumers`` at start-up for the same reason.

    Raises:
        CoordinationError: ZooKeeper refused (the node is secured for another identity).
    """
    from kazoo.exceptions import NoAuthError  # deferred: kazoo

    if not security.set_acl:
        return
    try:
        if client.chroot:
            want = security.acl_for("/")
            acls, _ = client.retry(client.get_acls, "/")
            if not same_acls(acls, want):
                client.retry(client.set_acls, "/", want)
        for root in znodes.OPEN_ROOTS:
            client.retry(client.ensure_path, root)
    except NoAuthError as exc:
        raise CoordinationError(
            f"ZooKeeper refused to set the ACL of the chroot {client.chroot!r} for {security.username!r}: it is "
            f"secured for another identity; check {DIGEST_USERNAME} and {DIGEST_PASSWORD}") from exc


@functools.cache
def _acl_client_class():
    """KazooClient whose creates take each node's ACL from ``acl_policy(path)`` (kazoo itself only has one
    ``default_acl`` for every node, and gives a path's parents the ACL of the child)."""
    # deferred: kazoo, only where ZooKeeper is used
    from kazoo.client import KazooClient, TransactionRequest

    class PolicyTransaction(TransactionRequest):
        def create(self, path, value=b"", acl=None, ephemeral=False, sequence=False):
            if acl is None:
                acl = self.client.acl_policy(path)
            return super().create(path, value, acl, ephemeral, sequence)

    class AclPolicyClient(KazooClient):
        acl_policy = None

        def create_async(self, path, value=b"", acl=None, *args, **kwargs):
            if acl is None or acl is _PER_PATH:
                acl = self.acl_policy(path)
            return super().create_async(path, value, acl, *args, **kwargs)

        def ensure_path_async(self, path, acl=None):
            # every node of the path gets its own ACL (kazoo would give the parents the leaf's)
            return super().ensure_path_async(path, acl=_PER_PATH)

        def transaction(self):
            return PolicyTransaction(self)

    return AclPolicyClient

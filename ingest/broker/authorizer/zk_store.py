"""ACLs in ZooKeeper, in Kafka 2.x's layout (kazoo; every call through ``client.retry``).

Znode layout (relative to the chroot of ``zk.connect``)::

    /kafka-acl/[Topic|Group|Cluster|TransactionalId]/[name]          literal patterns ("*": every name)
    /kafka-acl-extended/prefixed/[Type]/[prefix]                     prefixed patterns
    /kafka-acl-changes/acl_changes_[seq]             -> "Topic:name"  (a literal pattern changed)
    /kafka-acl-extended-changes/acl_changes_[seq]    -> {"version":1,"resourceType":"Topic",
                                                          "name":"pv-","patternType":"PREFIXED"}

A pattern's znode holds ``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
"operation":"Read","host":"*"}]}``. A change rewrites that znode with a conditional set (its version:
two writers never lose each other's ACLs, Kafka's ``updateResourceAcls``), deletes it once empty, and
then adds a change notification, which every broker's cache watches
(:mod:`ingest.broker.authorizer.cache`). Notifications older than 15 minutes are deleted by the next
writer (Kafka's ``changeExpirationMs``).
"""
from __future__ import annotations

import json
import time

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ingest.broker.authorizer.acl import Acl, AclEntry, PatternType, ResourcePattern, ResourceType

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
CHANGE_EXPIRATION_S = 15 * 60


def pattern_path(p: ResourcePattern) -> str:
    if "/" in p.name:
        raise ValueError(f"resource name {p.name!r} may not contain '/'")
    root = LITERAL_ROOT if p.pattern is PatternType.LITERAL else PREFIXED_ROOT
    return f"{root}/{p.type.value}/{p.name}"


def acls_value(entries) -> bytes:
    ordered = sorted(entries, key=lambda e: (e.principal, e.permission.value, e.operation.value, e.host))
    return json.dumps({"version": 1, "acls": [e.to_json() for e in ordered]}, separators=(",", ":")).encode()


def parse_acls(data: bytes) -> frozenset[AclEntry]:
    """The entries of a pattern's znode (ValueError if it is not one)."""
    try:
        return frozenset(AclEntry.from_json(d) for d in json.loads(data.decode("utf-8"))["acls"])
    except (KeyError, TypeError, AttributeError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not an ACL znode: {data[:200]!r}") from exc


def read(zk, p: ResourcePattern) -> tuple[frozenset[AclEntry], int]:
    """The pattern's entries and its znode version (-1: no znode)."""
    try:
        data, stat = zk.retry(zk.get, pattern_path(p))
    except NoNodeError:
        return frozenset(), -1
    return parse_acls(data), stat.version


def read_all(zk) -> dict[ResourcePattern, frozenset[AclEntry]]:
    """Every pattern with its entries (unreadable znodes raise ValueError naming them)."""
    out: dict[ResourcePattern, frozenset[AclEntry]] = {}
    for root, kind in ((LITERAL_ROOT, PatternType.LITERAL), (PREFIXED_ROOT, PatternType.PREFIXED)):
        for type_name in _children(zk, root):
            try:
                rtype = ResourceType.parse(type_name)
            except ValueError:
                continue   # a type this broker does not know (a newer Kafka's): not ours to judge
            for name in _children(zk, f"{root}/{type_name}"):
                p = ResourcePattern(rtype, name, kind)
                try:
                    entries = read(zk, p)[0]
                except ValueError as exc:
                    raise ValueError(f"{pattern_path(p)}: {exc}") from exc
                if entries:
                    out[p] = entries
    return out


def _children(zk, path: str) -> list[str]:
    try:
        return zk.retry(zk.get_children, path)
    except NoNodeError:
        return []


def change(zk, p: ResourcePattern, add=frozenset(), remove=frozenset(), remove_all: bool = False) \
        -> frozenset[AclEntry]:
    """Add ``add`` to the pattern's entries and take ``remove`` (``remove_all``: every entry) away,
    conditionally on the znode's version; a change notification follows. Returns the entries now stored."""
    path = pattern_path(p)
    while True:
        current, version = read(zk, p)
        new = (frozenset() if remove_all else current - frozenset(remove)) | frozenset(add)
        if new == current:
            return current
        try:
            if not new:
                zk.retry(zk.delete, path, version=version)
            elif version < 0:
                zk.retry(zk.create, path, acls_value(new), makepath=True)
            else:
                zk.retry(zk.set, path, acls_value(new), version=version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue   # another writer changed it meanwhile: apply ours to theirs
        _notify(zk, p)
        return new


def _notify(zk, p: ResourcePattern) -> None:
    if p.pattern is PatternType.LITERAL:
        root, data = LITERAL_CHANGES, f"{p.type.value}:{p.name}".encode()
    else:
        root = EXTENDED_CHANGES
        data = json.dumps({"version": 1, "resourceType": p.type.value, "name": p.name,
                           "patternType": p.pattern.value.upper()}, separators=(",", ":")).encode()
    zk.retry(zk.create, f"{root}/{CHANGE_PREFIX}", data, sequence=True, makepath=True)
    _purge(zk, root)


def _purge(zk, root: str) -> None:
    now_ms = time.time() * 1000
    for child in _children(zk, root):
        path = f"{root}/{child}"
        try:
            stat = zk.retry(zk.exists, path)
            if stat is not None and now_ms - stat.ctime > CHANGE_EXPIRATION_S * 1000:
                zk.retry(zk.delete, path)
        except NoNodeError:
            pass


def acls(stored: dict[ResourcePattern, frozenset[AclEntry]]) -> list[Acl]:
    """``read_all``'s answer as bindings, sorted for printing."""
    out = [Acl(p, e) for p, entries in stored.items() for e in entries]
    return sorted(out, key=lambda a: (a.resource.type.value, a.resource.pattern.value, a.resource.name,
                                      a.entry.principal, a.entry.permission.value, a.entry.operation.value,
                                      a.entry.host))

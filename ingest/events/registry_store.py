"""Where the schema registry keeps its state: a local directory or ZooKeeper.

Both stores hold the same three things: schemas by id (immutable, global,
deduplicated by canonical text), each subject's versions (version -> id, and
whether the version is soft-deleted) and compatibility levels (global and per
subject).

A version's value is its schema id in decimal (``12``: live, the only form
registries before soft deletes wrote, so their stores read unchanged) or, once
soft-deleted, ``{"id": 12, "deleted": true}``. A permanent delete removes the
version's file or znode; schema texts are never removed (ids stay decodable).

Directory layout (``--store DIR``)::

    DIR/ids/<id>.json                    canonical schema text
    DIR/subjects/<quoted subject>/<version>   version value (above)
    DIR/config/_global | <quoted subject>     compatibility level
    DIR/lock                             flock'ed by writers (several processes may share DIR)

ZooKeeper layout (``--zk CONNECT``, under ``/schema-registry``; paths built by :mod:`ingest.znodes`)::

    /schema-registry/ids/id-<10 digits>        canonical schema text; id = sequence number + 1
                                               (sequential znode: ZooKeeper hands each creator
                                               its own number, so ids are never shared)
    /schema-registry/hashes/<sha256>           id of that canonical text (create() is the
                                               arbiter when two registries register one schema)
    /schema-registry/subjects/<quoted>/<version>   version value (above)
    /schema-registry/config/_global | <quoted>     compatibility level
    /schema-registry/lock                      kazoo Lock around read-check-write of a subject

Concurrency contract: every store is safe to share between threads; writes that
must be atomic with a prior read (compatibility check then append) run inside
``write_lock()``, which also excludes other processes using the same store.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Iterator, NamedTuple, Protocol
from urllib.parse import quote, unquote

from ingest import znodes
from ingest.errors import StorageError

log = logging.getLogger(__name__)

GLOBAL = "_global"  # config name of the global level; subjects are stored as "s-<quoted>", never clash


def _subject_key(subject: str) -> str:
    return "s-" + quote(subject, safe="")


def _subject_from_key(key: str) -> str:
    return unquote(key[2:])


def schema_hash(canonical_text: str) -> str:
    return hashlib.sha256(canonical_text.encode("utf-8")).hexdigest()


class VersionEntry(NamedTuple):
    """One version of a subject: the schema id it holds and whether it is soft-deleted."""

    id: int
    deleted: bool = False


def encode_version(entry: VersionEntry) -> str:
    """``12`` for a live version (the legacy form), JSON once soft-deleted."""
    return json.dumps({"id": entry.id, "deleted": True}) if entry.deleted else str(entry.id)


def decode_version(text: str) -> VersionEntry:
    text = text.strip()
    if text.startswith("{"):
        value = json.loads(text)
        return VersionEntry(int(value["id"]), bool(value.get("deleted", False)))
    return VersionEntry(int(text))


class RegistryStore(Protocol):
    """Storage of the schema registry (see module docstring)."""

    def write_lock(self) -> contextlib.AbstractContextManager: ...
    def get_schema(self, schema_id: int) -> str | None: ...
    def find_id(self, canonical_text: str) -> int | None: ...
    def add_schema(self, canonical_text: str) -> int: ...
    def subjects(self) -> list[str]: ...
    def version_entries(self, subject: str) -> dict[int, VersionEntry]: ...
    def versions(self, subject: str) -> dict[int, int]: ...
    def add_version(self, subject: str, schema_id: int) -> int: ...
    def mark_deleted(self, subject: str, version: int, schema_id: int) -> None: ...
    def remove_version(self, subject: str, version: int) -> None: ...
    def get_config(self, subject: str | None) -> str | None: ...
    def set_config(self, subject: str | None, level: str) -> None: ...
    def delete_config(self, subject: str) -> None: ...
    def close(self) -> None: ...


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class DirectoryStore:
    """The registry's state in a local directory; survives restarts."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        try:
            for d in ("ids", "subjects", "config"):
                (self.root / d).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create registry store directory {self.root}: {exc.strerror}") from exc
        self._lock = threading.RLock()
        self._hash_index: dict[str, int] = {}
        self._cache: dict[int, str] = {}

    @contextlib.contextmanager
    def write_lock(self) -> Iterator[None]:
        with self._lock, open(self.root / "lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def get_schema(self, schema_id: int) -> str | None:
        if schema_id in self._cache:
            return self._cache[schema_id]
        try:
            text = (self.root / "ids" / f"{schema_id}.json").read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        self._cache[schema_id] = text
        return text

    def _ids(self) -> list[int]:
        return sorted(int(p.stem) for p in (self.root / "ids").glob("*.json") if p.stem.isdigit())

    def find_id(self, canonical_text: str) -> int | None:
        h = schema_hash(canonical_text)
        if h in self._hash_index:
            return self._hash_index[h]
        for i in self._ids():  # another process may have added it: rescan (registrations are rare)
            text = self.get_schema(i)
            if text is not None:
                self._hash_index.setdefault(schema_hash(text), i)
        return self._hash_index.get(h)

    def add_schema(self, canonical_text: str) -> int:
        """Store a new schema under the next id; caller holds ``write_lock()``."""
        ids = self._ids()
        new_id = (ids[-1] if ids else 0) + 1
        _write_atomic(self.root / "ids" / f"{new_id}.json", canonical_text)
        self._hash_index[schema_hash(canonical_text)] = new_id
        return new_id

    def subjects(self) -> list[str]:
        return sorted(_subject_from_key(p.name) for p in (self.root / "subjects").iterdir()
                      if p.name.startswith("s-") and any(p.iterdir()))

    def version_entries(self, subject: str) -> dict[int, VersionEntry]:
        """Every version of ``subject``, soft-deleted ones included."""
        d = self.root / "subjects" / _subject_key(subject)
        if not d.is_dir():
            return {}
        out = {}
        for p in d.iterdir():
            if p.name.isdigit():
                try:
                    out[int(p.name)] = decode_version(p.read_text())
                except FileNotFoundError:  # permanently deleted meanwhile by another process
                    continue
        return out

    def versions(self, subject: str) -> dict[int, int]:
        """Live versions of ``subject``: version -> schema id."""
        return {v: e.id for v, e in self.version_entries(subject).items() if not e.deleted}

    def add_version(self, subject: str, schema_id: int) -> int:
        """Append ``schema_id`` as the subject's next version (after soft-deleted ones too);
        caller holds ``write_lock()``."""
        d = self.root / "subjects" / _subject_key(subject)
        d.mkdir(exist_ok=True)
        version = max(self.version_entries(subject), default=0) + 1
        _write_atomic(d / str(version), str(schema_id))
        return version

    def mark_deleted(self, subject: str, version: int, schema_id: int) -> None:
        """Soft-delete one version; caller holds ``write_lock()``."""
        _write_atomic(self.root / "subjects" / _subject_key(subject) / str(version),
                      encode_version(VersionEntry(schema_id, True)))

    def remove_version(self, subject: str, version: int) -> None:
        """Permanently delete one version (the subject goes when its last version does)."""
        d = self.root / "subjects" / _subject_key(subject)
        (d / str(version)).unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # not empty: other versions remain
            d.rmdir()

    def get_config(self, subject: str | None) -> str | None:
        name = GLOBAL if subject is None else _subject_key(subject)
        try:
            return (self.root / "config" / name).read_text().strip() or None
        except FileNotFoundError:
            return None

    def set_config(self, subject: str | None, level: str) -> None:
        name = GLOBAL if subject is None else _subject_key(subject)
        _write_atomic(self.root / "config" / name, level)

    def delete_config(self, subject: str) -> None:
        (self.root / "config" / _subject_key(subject)).unlink(missing_ok=True)

    def close(self) -> None:
        pass


class ZooKeeperStore:
    """The registry's state in ZooKeeper; several registry processes may share it."""

    def __init__(self, connect: str, *, timeout_s: float = 15.0) -> None:
        from kazoo.client import KazooClient
        from kazoo.retry import KazooRetry

        self._zk = KazooClient(hosts=connect, timeout=timeout_s,
                               connection_retry=KazooRetry(max_tries=-1, max_delay=2))
        try:
            self._zk.start(timeout=timeout_s)
        except Exception as exc:
            raise StorageError(f"cannot connect to ZooKeeper at {connect}: {exc}") from exc
        for d in znodes.SCHEMA_REGISTRY_DIRS:
            self._zk.retry(self._zk.ensure_path, znodes.registry_dir(d))
        self._lock = self._zk.Lock(znodes.registry_lock_path())
        self._local = threading.RLock()
        self._cache: dict[int, str] = {}

    @contextlib.contextmanager
    def write_lock(self) -> Iterator[None]:
        with self._local:
            self._lock.acquire(timeout=30)
            try:
                yield
            finally:
                self._lock.release()

    def get_schema(self, schema_id: int) -> str | None:
        if schema_id in self._cache:
            return self._cache[schema_id]
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self._zk.retry(self._zk.get, znodes.registry_id_path(schema_id))
        except NoNodeError:
            return None
        text = data.decode("utf-8")
        self._cache[schema_id] = text
        return text

    def find_id(self, canonical_text: str) -> int | None:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self._zk.retry(self._zk.get, znodes.registry_hash_path(schema_hash(canonical_text)))
        except NoNodeError:
            return None
        return int(data)

    def add_schema(self, canonical_text: str) -> int:
        """Allocate an id with a sequential znode; if another registry won the hash, use its id."""
        from kazoo.exceptions import NodeExistsError

        path = self._zk.retry(self._zk.create, znodes.registry_id_prefix(), canonical_text.encode("utf-8"),
                              sequence=True)
        new_id = znodes.registry_id_from_path(path)
        try:
            self._zk.retry(self._zk.create, znodes.registry_hash_path(schema_hash(canonical_text)),
                           str(new_id).encode())
        except NodeExistsError:
            winner = self.find_id(canonical_text)
            log.info("schema registered concurrently as id %s; id %s stays unused", winner, new_id)
            return int(winner)
        self._cache[new_id] = canonical_text
        return new_id

    def subjects(self) -> list[str]:
        kids = self._zk.retry(self._zk.get_children, znodes.registry_dir("subjects"))
        return sorted(_subject_from_key(k) for k in kids if k.startswith("s-"))

    def version_entries(self, subject: str) -> dict[int, VersionEntry]:
        """Every version of ``subject``, soft-deleted ones included."""
        from kazoo.exceptions import NoNodeError

        key = _subject_key(subject)
        try:
            kids = self._zk.retry(self._zk.get_children, znodes.registry_subject_dir(key))
        except NoNodeError:
            return {}
        out = {}
        for k in kids:
            if not k.isdigit():
                continue
            try:
                data, _ = self._zk.retry(self._zk.get, znodes.registry_version_path(key, k))
            except NoNodeError:  # permanently deleted meanwhile by another registry
                continue
            out[int(k)] = decode_version(data.decode("utf-8"))
        return out

    def versions(self, subject: str) -> dict[int, int]:
        """Live versions of ``subject``: version -> schema id."""
        return {v: e.id for v, e in self.version_entries(subject).items() if not e.deleted}

    def add_version(self, subject: str, schema_id: int) -> int:
        key = _subject_key(subject)
        self._zk.retry(self._zk.ensure_path, znodes.registry_subject_dir(key))
        version = max(self.version_entries(subject), default=0) + 1
        # create() fails if a version number was taken meanwhile: the write lock prevents that.
        self._zk.retry(self._zk.create, znodes.registry_version_path(key, version), str(schema_id).encode())
        return version

    def mark_deleted(self, subject: str, version: int, schema_id: int) -> None:
        path = znodes.registry_version_path(_subject_key(subject), version)
        self._zk.retry(self._zk.set, path, encode_version(VersionEntry(schema_id, True)).encode())

    def remove_version(self, subject: str, version: int) -> None:
        from kazoo.exceptions import NoNodeError, NotEmptyError

        key = _subject_key(subject)
        with contextlib.suppress(NoNodeError):
            self._zk.retry(self._zk.delete, znodes.registry_version_path(key, version))
        with contextlib.suppress(NoNodeError, NotEmptyError):  # the subject goes with its last version
            self._zk.retry(self._zk.delete, znodes.registry_subject_dir(key))

    def get_config(self, subject: str | None) -> str | None:
        from kazoo.exceptions import NoNodeError

        name = GLOBAL if subject is None else _subject_key(subject)
        try:
            data, _ = self._zk.retry(self._zk.get, znodes.registry_config_path(name))
        except NoNodeError:
            return None
        return data.decode() or None

    def set_config(self, subject: str | None, level: str) -> None:
        path = znodes.registry_config_path(GLOBAL if subject is None else _subject_key(subject))
        from kazoo.exceptions import NodeExistsError

        try:
            self._zk.retry(self._zk.create, path, level.encode())
        except NodeExistsError:
            self._zk.retry(self._zk.set, path, level.encode())

    def delete_config(self, subject: str) -> None:
        from kazoo.exceptions import NoNodeError

        with contextlib.suppress(NoNodeError):
            self._zk.retry(self._zk.delete, znodes.registry_config_path(_subject_key(subject)))

    def close(self) -> None:
        self._zk.stop()
        self._zk.close()

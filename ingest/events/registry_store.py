"""Where the schema registry keeps its state: a local directory or ZooKeeper.

Both stores hold the same four things: schemas by id (immutable, global,
deduplicated by their stored text: canonical text, plus references if any, see
:mod:`ingest.events.registry_references`), each subject's versions (version -> id,
and whether the version is soft-deleted), compatibility levels and modes (global
and per subject).

A version's value is its schema id in decimal (``12``: live, the only form
registries before soft deletes wrote, so their stores read unchanged) or, once
soft-deleted, ``{"id": 12, "deleted": true}``. A permanent delete removes the
version's file or znode; schema texts are never removed (ids stay decodable).

Directory layout (``--store DIR``)::

    DIR/ids/<id>.json                    stored schema text
    DIR/subjects/<subject name>/<version>     version value (above)
    DIR/subjects/h-<sha256>/name              (long subjects) the subject itself
    DIR/config/_global | <subject name>       compatibility level
    DIR/mode/_global | <subject name>         mode (READWRITE, READONLY, IMPORT)
    DIR/lock                             flock'ed by writers (several processes may share DIR)

A subject name is ``s-<percent-quoted subject>`` while that fits in
:data:`MAX_NAME_BYTES` (a file name is at most 255 bytes, and the temporary file
of an atomic write adds ``.<pid>.<thread>.tmp``), else ``h-<sha256 of the
subject>`` with the subject in ``name``: any subject fits. Files are written to
``.<name>.<pid>.<thread>.tmp`` and renamed; a process killed in between leaves
that file, and the next start removes those of writers that are no longer alive.

ZooKeeper layout (``--zk CONNECT``, under ``/schema-registry``; paths built by :mod:`ingest.znodes`)::

    /schema-registry/ids/id-<10 digits>        stored schema text; id = sequence number + 1
                                               (sequential znode: ZooKeeper hands each creator
                                               its own number, so ids are never shared; an
                                               imported id is created by name, and a sequence
                                               number that meets one is skipped)
    /schema-registry/hashes/<sha256>           id of that stored text (create() is the
                                               arbiter when two registries register one schema)
    /schema-registry/subjects/<quoted>/<version>   version value (above)
    /schema-registry/config/_global | <quoted>     compatibility level
    /schema-registry/mode/_global | <quoted>       mode
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
import re
import threading
from pathlib import Path
from typing import Iterator, NamedTuple, Protocol
from urllib.parse import quote, unquote

from ingest import znodes
from ingest.errors import StorageError
from ingest.zk_security import ZkSecurity, new_kazoo

log = logging.getLogger(__name__)

GLOBAL = "_global"  # config name of the global level; subjects are stored as "s-<quoted>", never clash
MAX_NAME_BYTES = 200  # longest "s-<quoted>" file name; 255 minus room for ".<pid>.<thread>.tmp"
SUBJECT_NAME_FILE = "name"  # in an "h-<sha256>" subject directory: the subject itself
_MAX_ID_SKIPS = 100_000  # sequence numbers an id allocation may skip over imported ids
_TEMP_FILE = re.compile(r"^\.(?P<target>.+)\.(?P<pid>\d+)\.(?P<thread>\d+)\.tmp$")


def _subject_key(subject: str) -> str:
    return "s-" + quote(subject, safe="")


def _hashed_key(subject: str) -> str:
    return "h-" + hashlib.sha256(subject.encode("utf-8")).hexdigest()


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
    def put_schema(self, schema_id: int, text: str) -> None: ...
    def put_version(self, subject: str, version: int, schema_id: int) -> None: ...
    def get_config(self, subject: str | None) -> str | None: ...
    def set_config(self, subject: str | None, level: str) -> None: ...
    def delete_config(self, subject: str | None) -> None: ...
    def get_mode(self, subject: str | None) -> str | None: ...
    def set_mode(self, subject: str | None, mode: str) -> None: ...
    def delete_mode(self, subject: str | None) -> None: ...
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
            for d in ("ids", "subjects", "config", "mode"):
                (self.root / d).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create registry store directory {self.root}: {exc.strerror}") from exc
        self._lock = threading.RLock()
        self._hash_index: dict[str, int] = {}
        self._cache: dict[int, str] = {}
        self._remove_debris()

    def _remove_debris(self) -> None:
        """Delete the temporary files of writes that a dead process left unfinished.

        A file whose writer is alive (another registry sharing the directory) is kept.
        """
        removed = []
        with self.write_lock():
            dirs = [self.root / d for d in ("ids", "config", "mode")]
            dirs += [p for p in (self.root / "subjects").iterdir() if p.is_dir()]
            for d in dirs:
                for p in d.iterdir():
                    m = _TEMP_FILE.match(p.name)
                    if m and not _alive(int(m["pid"])):
                        p.unlink(missing_ok=True)
                        removed.append(p)
        if removed:
            log.info("removed %d temporary file(s) of writes interrupted by a crash, e.g. %s",
                     len(removed), removed[0])

    @contextlib.contextmanager
    def write_lock(self) -> Iterator[None]:
        with self._lock, open(self.root / "lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _name(self, parent: Path, subject: str) -> str:
        """The file or directory name of ``subject`` under ``parent`` (module docstring)."""
        key = _subject_key(subject)
        size = len(key.encode("utf-8"))
        if size <= MAX_NAME_BYTES or (size <= 255 and (parent / key).exists()):  # the latter: older stores
            return key
        return _hashed_key(subject)

    def _subject_dir(self, subject: str) -> Path:
        parent = self.root / "subjects"
        return parent / self._name(parent, subject)

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
        self.put_schema(new_id, canonical_text)
        return new_id

    def put_schema(self, schema_id: int, text: str) -> None:
        """Store a schema under a given id (imports); caller holds ``write_lock()``."""
        _write_atomic(self.root / "ids" / f"{schema_id}.json", text)
        self._hash_index.setdefault(schema_hash(text), schema_id)

    def subjects(self) -> list[str]:
        out = []
        for p in (self.root / "subjects").iterdir():
            if not p.is_dir() or not any(c.name.isdigit() for c in p.iterdir()):
                continue
            if p.name.startswith("s-"):
                out.append(_subject_from_key(p.name))
            elif p.name.startswith("h-"):
                with contextlib.suppress(FileNotFoundError):
                    out.append((p / SUBJECT_NAME_FILE).read_text(encoding="utf-8"))
        return sorted(out)

    def version_entries(self, subject: str) -> dict[int, VersionEntry]:
        """Every version of ``subject``, soft-deleted ones included."""
        d = self._subject_dir(subject)
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
        version = max(self.version_entries(subject), default=0) + 1
        self.put_version(subject, version, schema_id)
        return version

    def put_version(self, subject: str, version: int, schema_id: int) -> None:
        """Write one version of ``subject``; caller holds ``write_lock()``."""
        d = self._subject_dir(subject)
        d.mkdir(exist_ok=True)
        if d.name.startswith("h-") and not (d / SUBJECT_NAME_FILE).exists():
            _write_atomic(d / SUBJECT_NAME_FILE, subject)
        _write_atomic(d / str(version), str(schema_id))

    def mark_deleted(self, subject: str, version: int, schema_id: int) -> None:
        """Soft-delete one version; caller holds ``write_lock()``."""
        _write_atomic(self._subject_dir(subject) / str(version), encode_version(VersionEntry(schema_id, True)))

    def remove_version(self, subject: str, version: int) -> None:
        """Permanently delete one version (the subject goes when its last version does)."""
        d = self._subject_dir(subject)
        (d / str(version)).unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # other versions remain
            if not any(c.name.isdigit() for c in d.iterdir()):
                (d / SUBJECT_NAME_FILE).unlink(missing_ok=True)
                d.rmdir()

    def _setting_path(self, kind: str, subject: str | None) -> Path:
        parent = self.root / kind
        return parent / (GLOBAL if subject is None else self._name(parent, subject))

    def _get_setting(self, kind: str, subject: str | None) -> str | None:
        try:
            return self._setting_path(kind, subject).read_text().strip() or None
        except FileNotFoundError:
            return None

    def get_config(self, subject: str | None) -> str | None:
        return self._get_setting("config", subject)

    def set_config(self, subject: str | None, level: str) -> None:
        _write_atomic(self._setting_path("config", subject), level)

    def delete_config(self, subject: str | None) -> None:
        self._setting_path("config", subject).unlink(missing_ok=True)

    def get_mode(self, subject: str | None) -> str | None:
        return self._get_setting("mode", subject)

    def set_mode(self, subject: str | None, mode: str) -> None:
        _write_atomic(self._setting_path("mode", subject), mode)

    def delete_mode(self, subject: str | None) -> None:
        self._setting_path("mode", subject).unlink(missing_ok=True)

    def close(self) -> None:
        pass


def _alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine (signal 0 checks without sending)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class ZooKeeperStore:
    """The registry's state in ZooKeeper; several registry processes may share it."""

    def __init__(self, connect: str, *, timeout_s: float = 15.0, security: ZkSecurity | None = None) -> None:
        from kazoo.retry import KazooRetry  # deferred: kazoo

        self._zk = new_kazoo(connect, security, timeout=timeout_s,
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

        data = canonical_text.encode("utf-8")
        for _ in range(_MAX_ID_SKIPS):
            try:
                path = self._zk.retry(self._zk.create, znodes.registry_id_prefix(), data, sequence=True)
                break
            except NodeExistsError:
                # an imported id holds this sequence number: move the counter past it (a child's
                # create and delete each advance the parent's cversion, the sequence source)
                skip = self._zk.retry(self._zk.create, znodes.registry_dir("ids") + "/skip-", b"", sequence=True)
                self._zk.retry(self._zk.delete, skip)
        else:
            raise StorageError(f"no free schema id after skipping {_MAX_ID_SKIPS} imported ids")
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

    def put_schema(self, schema_id: int, text: str) -> None:
        """Store a schema under a given id (imports); caller holds ``write_lock()``."""
        from kazoo.exceptions import NodeExistsError

        self._zk.retry(self._zk.create, znodes.registry_id_path(schema_id), text.encode("utf-8"))
        with contextlib.suppress(NodeExistsError):  # the text has another id already: that one stays its id
            self._zk.retry(self._zk.create, znodes.registry_hash_path(schema_hash(text)), str(schema_id).encode())
        self._cache[schema_id] = text

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
        version = max(self.version_entries(subject), default=0) + 1
        self.put_version(subject, version, schema_id)
        return version

    def put_version(self, subject: str, version: int, schema_id: int) -> None:
        key = _subject_key(subject)
        self._zk.retry(self._zk.ensure_path, znodes.registry_subject_dir(key))
        # create() fails if a version number was taken meanwhile: the write lock prevents that.
        self._zk.retry(self._zk.create, znodes.registry_version_path(key, version), str(schema_id).encode())

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

    def _get_setting(self, path: str) -> str | None:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self._zk.retry(self._zk.get, path)
        except NoNodeError:
            return None
        return data.decode() or None

    def _set_setting(self, path: str, value: str) -> None:
        from kazoo.exceptions import NodeExistsError

        try:
            self._zk.retry(self._zk.create, path, value.encode())
        except NodeExistsError:
            self._zk.retry(self._zk.set, path, value.encode())

    def _delete_setting(self, path: str) -> None:
        from kazoo.exceptions import NoNodeError

        with contextlib.suppress(NoNodeError):
            self._zk.retry(self._zk.delete, path)

    @staticmethod
    def _name(subject: str | None) -> str:
        return GLOBAL if subject is None else _subject_key(subject)

    def get_config(self, subject: str | None) -> str | None:
        return self._get_setting(znodes.registry_config_path(self._name(subject)))

    def set_config(self, subject: str | None, level: str) -> None:
        self._set_setting(znodes.registry_config_path(self._name(subject)), level)

    def delete_config(self, subject: str | None) -> None:
        self._delete_setting(znodes.registry_config_path(self._name(subject)))

    def get_mode(self, subject: str | None) -> str | None:
        return self._get_setting(znodes.registry_mode_path(self._name(subject)))

    def set_mode(self, subject: str | None, mode: str) -> None:
        self._set_setting(znodes.registry_mode_path(self._name(subject)), mode)

    def delete_mode(self, subject: str | None) -> None:
        self._delete_setting(znodes.registry_mode_path(self._name(subject)))

    def close(self) -> None:
        self._zk.stop()
        self._zk.close()

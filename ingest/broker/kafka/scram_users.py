"""SASL users: their SCRAM credentials in ZooKeeper ``/config/users/[name]`` (Kafka's node and form), written
by ``ingest users`` and cached, watched, by every broker.

The value is Kafka's (KIP-84)::

    {"version":1,"config":{"SCRAM-SHA-256":"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096",
                           "SCRAM-SHA-512":"..."}}

No password is stored, only what :mod:`ingest.wire.scram` needs to check one. A user may hold one
credential per mechanism; adding a mechanism keeps the others (a versioned read-modify-write).

:class:`UserCache` keeps every user's credentials in memory: a kazoo ``ChildrenWatch`` on
``/config/users`` and a ``DataWatch`` on each user (kazoo re-arms both after a lost connection), so a
user added, changed or removed works on the next login, without a restart. Concurrency: the watch
callbacks (kazoo's thread) replace an immutable dict; network threads read it without a lock.
"""
from __future__ import annotations

import logging
import threading

from ingest import znodes
from ingest.wire import scram

log = logging.getLogger(__name__)


def _read(client, name: str) -> tuple[dict[str, str], object | None]:
    from kazoo.exceptions import NoNodeError  # deferred: kazoo only with ZooKeeper

    try:
        data, stat = client.retry(client.get, znodes.user_path(name))
    except NoNodeError:
        return {}, None
    return znodes.parse_user(data), stat


def add_user(client, name: str, mechanism: str, password: str, iterations: int = scram.DEFAULT_ITERATIONS) -> None:
    """Set ``name``'s credential for ``mechanism`` (other mechanisms kept).

    Raises:
        ValueError: an empty name, an unknown mechanism, iterations out of range, an empty password.
    """
    from kazoo.exceptions import BadVersionError, NodeExistsError  # deferred: kazoo only with ZooKeeper

    if not name:
        raise ValueError("the user name is empty")
    credential = scram.new_credential(mechanism, password, iterations).to_text()
    for _attempt in range(10):
        current, stat = _read(client, name)
        current[mechanism] = credential
        try:
            if stat is None:
                client.retry(client.create, znodes.user_path(name), znodes.user_value(current), makepath=True)
            else:
                client.retry(client.set, znodes.user_path(name), znodes.user_value(current), version=stat.version)
            return
        except (BadVersionError, NodeExistsError):
            continue   # another writer in between: read again
    raise RuntimeError(f"user {name!r}: /config/users kept changing under 10 attempts; try again")


def remove_user(client, name: str, mechanism: str | None = None) -> bool:
    """Drop ``name``'s credential for ``mechanism`` (all of them when None); False if there was none."""
    from kazoo.exceptions import BadVersionError, NoNodeError  # deferred: kazoo only with ZooKeeper

    for _attempt in range(10):
        current, stat = _read(client, name)
        if stat is None or (mechanism is not None and mechanism not in current):
            return False
        left = {} if mechanism is None else {m: c for m, c in current.items() if m != mechanism}
        try:
            if left:
                client.retry(client.set, znodes.user_path(name), znodes.user_value(left), version=stat.version)
            else:
                client.retry(client.delete, znodes.user_path(name), version=stat.version)
            return True
        except (BadVersionError, NoNodeError):
            continue
    raise RuntimeError(f"user {name!r}: /config/users kept changing under 10 attempts; try again")


def list_users(client) -> dict[str, list[str]]:
    """user name -> its mechanisms (never a credential), sorted by name."""
    from kazoo.exceptions import NoNodeError  # deferred: kazoo only with ZooKeeper

    try:
        nodes = client.retry(client.get_children, znodes.CONFIG_USERS)
    except NoNodeError:
        return {}
    out = {}
    for node in sorted(nodes):
        name = znodes.user_name(node)
        creds, stat = _read(client, name)
        if stat is not None:
            out[name] = sorted(creds)
    return out


def _parse(name: str, data: bytes | None) -> dict[str, scram.ScramCredential]:
    out = {}
    try:
        stored = znodes.parse_user(data)
    except ValueError as exc:
        log.warning("user %r: /config/users value is not Kafka's JSON (%s); the user cannot log in", name, exc)
        return out
    for mechanism, text in stored.items():
        if mechanism not in scram.MECHANISMS:
            continue
        try:
            out[mechanism] = scram.ScramCredential.from_text(text)
        except ValueError as exc:
            log.warning("user %r: bad %s credential in /config/users (%s); ignored", name, mechanism, exc)
    return out


class UserCache:
    """Every user's SCRAM credentials, watched in ZooKeeper (see the module docstring)."""

    def __init__(self, client) -> None:
        self.client = client
        self._users: dict[str, dict[str, scram.ScramCredential]] = {}
        self._watched: set[str] = set()
        self._lock = threading.Lock()   # watch callbacks only
        self.ready = threading.Event()

    def start(self) -> "UserCache":
        self.client.retry(self.client.ensure_path, znodes.CONFIG_USERS)
        self.client.ChildrenWatch(znodes.CONFIG_USERS, self._on_children)
        self.ready.set()
        return self

    def credential(self, name: str, mechanism: str) -> scram.ScramCredential | None:
        """``name``'s credential for ``mechanism``, or None (unknown user or mechanism)."""
        return self._users.get(name, {}).get(mechanism)

    def credentials(self, name: str) -> dict[str, scram.ScramCredential]:
        return dict(self._users.get(name, {}))

    def _on_children(self, children) -> None:
        names = {znodes.user_name(c) for c in children}
        with self._lock:
            gone = set(self._users) - names
            if gone:
                self._users = {n: c for n, c in self._users.items() if n not in gone}
            new = names - self._watched
            self._watched |= new   # a DataWatch outlives its node's deletion and sees it come back
        for name in sorted(new):
            self.client.DataWatch(znodes.user_path(name), self._data_watcher(name))

    def _data_watcher(self, name: str):
        def on_data(data, stat) -> bool | None:
            with self._lock:
                users = dict(self._users)
                if stat is None:
                    users.pop(name, None)
                else:
                    users[name] = _parse(name, data)
                self._users = users
            log.info("SASL user %r: %s", name, "removed" if stat is None else
                     f"credentials for {sorted(users[name]) or 'no mechanism'}")
            return None
        return on_data

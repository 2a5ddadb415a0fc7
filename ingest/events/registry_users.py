"""The registry's users file: ``user: PBKDF2-SHA256:<iterations>:<salt>:<hash>,role,...`` per line, and checks.

Confluent's registry authenticates HTTP basic auth through a JAAS
``PropertyFileLoginModule`` whose file has Jetty's format, ``user: password[,role ...]``, where
the password may be written with a credential prefix (``MD5:``, ``CRYPT:``). This file has the
same lines, but only one credential form is accepted: a salted PBKDF2-HMAC-SHA256 hash
(``PBKDF2-SHA256:<iterations>:<base64 salt>:<base64 hash>``), so the file never holds a
password that works when read. A cleartext (or any other) credential is refused at start-up,
naming the line, never the text. ``ingest registry passwd`` writes such lines.

``#`` and ``!`` start comment lines; blank lines are ignored.

The file is read again when it changes (its modification time, size or inode, looked at on each
check: one ``stat``), as Jetty's ``PropertyUserStore`` with hot reload, so users and passwords
change without a restart; a changed file that does not read keeps the users read before (logged,
rate-limited), a missing one too.

Checking a password costs one PBKDF2 (tens of milliseconds at the default iterations, by
design). A credential that passed is remembered (its own salted digest, not the password) so a
client's next requests cost a dictionary look-up; at most :data:`REMEMBERED` are kept, and a
failed attempt is never remembered (guessing stays slow).

Concurrency contract: :class:`UserStore` is called from every worker thread; the users are
replaced whole (one reference) when the file is read again, and that and the cache of passed
credentials are guarded by one lock. Writers of the file should replace it by rename (as
``ingest registry passwd`` does), so that no reader sees half of it.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from ingest.errors import ConfigError
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)
_reload_errors = RateLimitedLog(log)

SCHEME = "PBKDF2-SHA256"
DEFAULT_ITERATIONS = 100_000
SALT_BYTES = 16
REMEMBERED = 1024

_LINE = re.compile(r"([^:\s]+)\s*:\s*(.*)$")


def hash_password(password: str, *, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None) -> str:
    """``PBKDF2-SHA256:<iterations>:<salt>:<hash>`` of ``password`` (a fresh random salt unless given)."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    return f"{SCHEME}:{iterations}:{base64.b64encode(salt).decode()}:{base64.b64encode(digest).decode()}"


def user_line(user: str, password: str, roles: tuple[str, ...], *, iterations: int = DEFAULT_ITERATIONS) -> str:
    """One line of the users file (without the newline)."""
    if not user or not re.fullmatch(r"[^:\s,]+", user):
        raise ConfigError(f"user name {user!r}: allowed is a non-empty name without ':', ',' or blanks")
    bad = [r for r in roles if not re.fullmatch(r"[^:\s,]+", r)]
    if bad:
        raise ConfigError(f"roles {bad}: allowed are names without ':', ',' or blanks")
    return f"{user}: {','.join((hash_password(password, iterations=iterations), *roles))}"


@dataclass(frozen=True)
class _Credential:
    iterations: int
    salt: bytes
    digest: bytes
    roles: frozenset[str]


class UserStore:
    """The users of one users file, with their roles (module docstring)."""

    def __init__(self, path: str | Path) -> None:
        """Raises:
            ConfigError: the file cannot be read, or a line is not ``user: PBKDF2-SHA256:...[,role...]``.
        """
        self.path = Path(path)
        self._lock = threading.Lock()
        self._passed: dict[tuple[str, bytes], frozenset[str]] = {}
        self._key = os.urandom(32)  # keys the remembered credentials: they are not the passwords either
        self._version = self._stat()
        self._users = self._read()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def _read(self) -> dict[str, _Credential]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read the registry users file {self.path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"the registry users file {self.path} is not UTF-8 text") from None
        users: dict[str, _Credential] = {}
        for lineno, line in enumerate(text.splitlines(), 1):
            stripped = line.strip()
            if not stripped or stripped[0] in "#!":
                continue
            users[self._user(stripped, lineno)] = self._credential(stripped, lineno)
        return users

    def _reload_if_changed(self) -> None:
        version = self._stat()
        if version == self._version or version is None:
            return
        with self._lock:
            if version == self._version:
                return
            self._version = version
            try:
                users = self._read()
            except ConfigError as exc:
                _reload_errors.warning("*", "users file", "%s; the users read before stay in force", exc)
                return
            self._users = users
            self._passed.clear()
        log.info("registry users file %s read again: %d users", self.path, len(users))

    def _where(self, lineno: int) -> str:
        return f"registry users file {self.path}, line {lineno}"

    def _user(self, line: str, lineno: int) -> str:
        m = _LINE.match(line)
        if not m:
            raise ConfigError(f"{self._where(lineno)}: expected 'user: {SCHEME}:...[,role ...]'")
        return m.group(1)

    def _credential(self, line: str, lineno: int) -> _Credential:
        fields = [f.strip() for f in _LINE.match(line).group(2).split(",")]  # type: ignore[union-attr]
        parts = fields[0].split(":")
        try:
            if len(parts) != 4 or parts[0] != SCHEME:
                raise ValueError
            iterations = int(parts[1])
            salt, digest = base64.b64decode(parts[2], validate=True), base64.b64decode(parts[3], validate=True)
            if iterations < 1 or not salt or not digest:
                raise ValueError
        except ValueError:
            raise ConfigError(f"{self._where(lineno)}: the password is not a {SCHEME}:<iterations>:<salt>:<hash> "
                              "hash (cleartext and other forms are refused; write the line with "
                              "`ingest registry passwd`)") from None
        return _Credential(iterations, salt, digest, frozenset(r for r in fields[1:] if r))

    def __len__(self) -> int:
        return len(self._users)

    def authenticate(self, user: str, password: str) -> frozenset[str] | None:
        """The user's roles when ``password`` is theirs, else None (unknown user or wrong password)."""
        self._reload_if_changed()
        credential = self._users.get(user)
        if credential is None:
            # the same work as a known user, so the answer's time does not tell which names exist
            hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), b"\0" * SALT_BYTES, DEFAULT_ITERATIONS)
            return None
        token = (user, hmac.new(self._key, password.encode("utf-8"), "sha256").digest())
        with self._lock:
            if token in self._passed:
                return self._passed[token]
        attempt = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), credential.salt, credential.iterations)
        if not hmac.compare_digest(attempt, credential.digest):
            return None
        with self._lock:
            if self._users.get(user) is not credential:
                return None  # the file changed meanwhile and no longer holds this credential
            if len(self._passed) >= REMEMBERED:
                self._passed.pop(next(iter(self._passed)))
            self._passed[token] = credential.roles
        return credential.roles

"""SCRAM (RFC 5802, RFC 7677) as Kafka speaks it (KIP-84): credentials, their stored form, both sides' messages.

Kafka's mechanisms SCRAM-SHA-256 and SCRAM-SHA-512, without channel binding (``n,,``), iterations
4096-16384 (Kafka's ``ScramMechanism`` bounds). The messages::

    client-first   n,[a=authzid],n=<saslname>,r=<client nonce>[,ext=value ...]
    server-first   r=<client nonce><server nonce>,s=<salt b64>,i=<iterations>
    client-final   c=biws,r=<nonce>,p=<proof b64>          (biws = base64 of "n,,")
    server-final   v=<server signature b64>  |  e=<error>

    SaltedPassword  = PBKDF2-HMAC-H(password, salt, i)
    ClientKey       = HMAC(SaltedPassword, "Client Key");  StoredKey = H(ClientKey)
    ServerKey       = HMAC(SaltedPassword, "Server Key")
    AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
    ClientProof     = ClientKey XOR HMAC(StoredKey, AuthMessage)
    ServerSignature = HMAC(ServerKey, AuthMessage)

A server keeps only salt, StoredKey, ServerKey and the iterations (:class:`ScramCredential`), in
Kafka's text form ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`` (the value of
``/config/users/<name>``, :mod:`ingest.znodes`): neither the password nor anything that logs in
without it. A user name travels as a *saslname* (``,`` as ``=2C``, ``=`` as ``=3D``).

Errors: :class:`~ingest.errors.SaslAuthenticationError`; ``client_message`` on it, when set, is what
Kafka would tell the client (otherwise the broker sends its generic refusal and only logs the reason).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass

from ingest.errors import SaslAuthenticationError

MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
"""Kafka's SCRAM mechanism names -> hashlib's name of their hash."""
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
SALT_BYTES = 32
GS2_HEADER = "n,,"
MAX_TOKEN_BYTES = 4096
"""A SCRAM message longer than this is refused before it is parsed (a real one is a few hundred bytes)."""


def refuse(detail: str, client_message: str | None = None) -> SaslAuthenticationError:
    """The error to raise: ``detail`` for the broker's log, ``client_message`` (if any) for the client."""
    exc = SaslAuthenticationError(detail)
    exc.client_message = client_message
    return exc


def check_mechanism(mechanism: str) -> str:
    """``mechanism`` if it is a SCRAM mechanism; ValueError naming the allowed ones otherwise."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"{mechanism!r} is not a SCRAM mechanism: allowed are {sorted(MECHANISMS)}")
    return mechanism


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise ValueError(f"{what} is not base64: {text[:40]!r}") from exc


def _hmac(mechanism: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, MECHANISMS[mechanism]).digest()


def _hash(mechanism: str, data: bytes) -> bytes:
    return hashlib.new(MECHANISMS[mechanism], data).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode("utf-8"), salt, iterations)


@dataclass(frozen=True)
class ScramCredential:
    """What a server stores for one user and mechanism (never the password)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        """Kafka's stored form: ``salt=...,stored_key=...,server_key=...,iterations=N``."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},server_key={_b64(self.server_key)},"
                f"iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> "ScramCredential":
        """Kafka's stored form back; ValueError naming what is missing or malformed."""
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        missing = [k for k in ("salt", "stored_key", "server_key", "iterations") if k not in fields]
        if missing:
            raise ValueError(f"SCRAM credential lacks {missing}: expected salt=,stored_key=,server_key=,iterations=")
        try:
            iterations = int(fields["iterations"])
        except ValueError:
            raise ValueError(f"SCRAM credential iterations={fields['iterations']!r} is not an integer") from None
        return cls(_unb64(fields["salt"], "salt"), _unb64(fields["stored_key"], "stored_key"),
                   _unb64(fields["server_key"], "server_key"), iterations)


def new_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                   salt: bytes | None = None) -> ScramCredential:
    """A fresh credential for ``password`` (random salt unless given).

    Raises:
        ValueError: an unknown mechanism, iterations outside [4096, 16384], an empty password.
    """
    check_mechanism(mechanism)
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations {iterations} is outside [{MIN_ITERATIONS}, {MAX_ITERATIONS}] (Kafka's bounds "
                         f"for {mechanism})")
    if not password:
        raise ValueError("the password is empty")
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    salted = salted_password(mechanism, password, salt, iterations)
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(salt, _hash(mechanism, client_key), _hmac(mechanism, salted, b"Server Key"), iterations)


def password_matches(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (PLAIN checks passwords this way)."""
    salted = salted_password(mechanism, password, credential.salt, credential.iterations)
    return hmac.compare_digest(_hash(mechanism, _hmac(mechanism, salted, b"Client Key")), credential.stored_key)


def sasl_name(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def username_of(saslname: str) -> str:
    """A saslname decoded; ValueError for a ``=`` not followed by 2C or 3D (RFC 5802)."""
    out, i = [], 0
    while i < len(saslname):
        if saslname[i] == "=":
            code = saslname[i + 1:i + 3]
            if code not in ("2C", "3D"):
                raise ValueError(f"invalid escape {saslname[i:i + 3]!r} in user name")
            out.append("," if code == "2C" else "=")
            i += 3
        else:
            out.append(saslname[i])
            i += 1
    return "".join(out)


def nonce() -> str:
    """A random printable nonce (no ``,``)."""
    return base64.b64encode(os.urandom(24)).decode("ascii").replace("=", "")


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ValueError(f"{what}: {part[:20]!r} is not an attribute=value")
        out.append((part[0], part[2:]))
    return out


def _decode(token: bytes, what: str) -> str:
    if len(token) > MAX_TOKEN_BYTES:
        raise ValueError(f"{what} of {len(token)} bytes is larger than {MAX_TOKEN_BYTES}")
    try:
        return bytes(token).decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what} is not UTF-8") from None


class ScramServer:
    """The server side of one SCRAM exchange: two tokens in, two out.

    Args:
        mechanism: SCRAM-SHA-256 or SCRAM-SHA-512.
        lookup: user name -> its :class:`ScramCredential` for this mechanism, or None.
    """

    def __init__(self, mechanism: str, lookup) -> None:
        self.mechanism = check_mechanism(mechanism)
        self.lookup = lookup
        self.username: str | None = None
        self.complete = False
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2_header = GS2_HEADER
        self._nonce = ""
        self._step = 0

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's next token.

        Raises:
            SaslAuthenticationError: a malformed message, an unknown user, a wrong nonce or proof.
        """
        step, self._step = self._step, self._step + 1
        try:
            if step == 0:
                return self._first(_decode(token, "client-first message"))
            if step == 1:
                return self._final(_decode(token, "client-final message"))
        except ValueError as exc:
            raise refuse(f"{self.mechanism}: {exc}") from None
        raise refuse(f"{self.mechanism}: unexpected token after the exchange ended")

    def _first(self, message: str) -> bytes:
        gs2, sep, rest = message.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or gs2 not in ("n", "y"):
            raise ValueError("client-first message does not start with a GS2 header 'n,,' (channel binding is "
                             "not supported)")
        attrs = _attributes(bare, "client-first message")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ValueError("client-first message lacks n=<user>,r=<nonce>")
        username = username_of(attrs[0][1])
        if authzid and authzid != f"a={sasl_name(username)}":
            raise refuse(f"{self.mechanism}: user {username!r} asked for authorization id {authzid[2:]!r}",
                         "Authentication failed: Client requested an authorization id that is different from username")
        self.username = username
        credential = self.lookup(username)
        if credential is None:
            raise refuse(f"{self.mechanism}: unknown user {username!r} (no {self.mechanism} credential in "
                         "/config/users)")
        if credential.iterations < MIN_ITERATIONS:
            raise refuse(f"{self.mechanism}: user {username!r} has iterations {credential.iterations}, less than "
                         f"the minimum {MIN_ITERATIONS}")
        self._credential = credential
        self._client_first_bare = bare
        self._gs2_header = f"{gs2},{authzid},"
        self._nonce = attrs[1][1] + nonce()
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        return self._server_first.encode("ascii")

    def _final(self, message: str) -> bytes:
        without_proof, sep, proof_attr = message.rpartition(",")
        attrs = dict(_attributes(without_proof, "client-final message")) if sep else {}
        if not sep or not proof_attr.startswith("p=") or "c" not in attrs or "r" not in attrs:
            raise ValueError("client-final message is not c=<binding>,r=<nonce>,p=<proof>")
        if attrs["r"] != self._nonce:
            raise refuse(f"{self.mechanism}: user {self.username!r}: invalid client nonce in the final client message")
        if attrs["c"] != _b64(self._gs2_header.encode("utf-8")):
            raise ValueError("client-final message's c= is not the base64 of the client-first GS2 header (channel "
                             "binding is not supported)")
        proof = _unb64(proof_attr[2:], "client proof")
        cred = self._credential
        assert cred is not None
        auth = f"{self._client_first_bare},{self._server_first},{without_proof}".encode("utf-8")
        signature = _hmac(self.mechanism, cred.stored_key, auth)
        if len(proof) != len(signature):
            raise refuse(f"{self.mechanism}: user {self.username!r}: client proof of {len(proof)} bytes, expected "
                         f"{len(signature)}")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(_hash(self.mechanism, client_key), cred.stored_key):
            raise refuse(f"{self.mechanism}: user {self.username!r}: invalid client credentials (wrong password)")
        self.complete = True
        self._credential = None
        return f"v={_b64(_hmac(self.mechanism, cred.server_key, auth))}".encode("ascii")


class ScramClient:
    """The client side of one SCRAM exchange (the product's Kafka client and the replica fetcher)."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = check_mechanism(mechanism)
        self.username = username
        self.password = password
        self._nonce = nonce()
        self._client_first_bare = f"n={sasl_name(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"{GS2_HEADER}{self._client_first_bare}".encode("utf-8")

    def final(self, server_first: bytes) -> bytes:
        """The client-final message; SaslAuthenticationError if the server's message is malformed."""
        try:
            text = _decode(server_first, "server-first message")
            attrs = dict(_attributes(text, "server-first message"))
            full_nonce, salt, iterations = attrs["r"], _unb64(attrs["s"], "salt"), int(attrs["i"])
        except (KeyError, ValueError) as exc:
            raise refuse(f"bad server-first message from the broker: {exc}") from None
        if not full_nonce.startswith(self._nonce) or full_nonce == self._nonce:
            raise refuse("the broker's nonce does not extend the client's")
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise refuse(f"the broker asks for {iterations} iterations, outside [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
        salted = salted_password(self.mechanism, self.password, salt, iterations)
        client_key = _hmac(self.mechanism, salted, b"Client Key")
        without_proof = f"c={_b64(GS2_HEADER.encode())},r={full_nonce}"
        auth = f"{self._client_first_bare},{text},{without_proof}".encode("utf-8")
        signature = _hmac(self.mechanism, _hash(self.mechanism, client_key), auth)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = _hmac(self.mechanism, _hmac(self.mechanism, salted, b"Server Key"), auth)
        return f"{without_proof},p={_b64(proof)}".encode("ascii")

    def verify(self, server_final: bytes) -> None:
        """Check the server's signature (it knew the credential); SaslAuthenticationError otherwise."""
        text = bytes(server_final).decode("utf-8", "replace")
        if text.startswith("e="):
            raise refuse(f"the broker refused: {text[2:]}")
        if not text.startswith("v=") or not hmac.compare_digest(text[2:].encode(), _b64(self._server_signature).encode()):
            raise refuse("the broker's SCRAM server signature does not match: it does not hold this user's credential")


def plain_token(username: str, password: str) -> bytes:
    """SASL/PLAIN's one token (RFC 4616): ``[authzid] NUL user NUL password``."""
    return b"\0" + username.encode("utf-8") + b"\0" + password.encode("utf-8")

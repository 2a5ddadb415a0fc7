"""The broker's TLS keys (Kafka's ``ssl.*`` names, PEM only) and the SSL contexts made from them.

A listener whose protocol is ``SSL`` (``listener.security.protocol.map``) serves TLS with the
broker's keystore; when the inter-broker listener is ``SSL``, the broker's followers connect to their
leaders with the same keystore as their client certificate and the truststore to verify the
leader (:func:`inter_broker_context`), and the subject of that certificate is the principal the broker
registers for itself (:func:`keystore_principal`). Files are read when the broker starts: replacing them takes
a restart (docs/security.md, "TLS").
"""
from __future__ import annotations

import os
import ssl
import tempfile

from ingest.broker.listeners import parse_protocol_map
from ingest.config import Choice, Key, Str
from ingest.errors import ConfigError
from ingest.wire.tls import CLIENT_AUTH, client_context, principal_of, server_context

SSL = "SSL"

TLS_KEYS = (
    Key("ssl.keystore.type", Choice(("PEM",)), "PEM",
        "format of the keystore: PEM only (Kafka's JKS and PKCS12 are not read; convert them with openssl)"),
    Key("ssl.keystore.location", Str(), "",
        "PEM file with the broker's certificate chain and private key, for its SSL listeners (and its client"
        " certificate towards an SSL inter-broker listener)"),
    Key("ssl.keystore.certificate.chain", Str(), "",
        "the certificate chain in PEM, inline (instead of ssl.keystore.location; with ssl.keystore.key)"),
    Key("ssl.keystore.key", Str(), "", "the private key in PEM, inline (with ssl.keystore.certificate.chain)"),
    Key("ssl.key.password", Str(), "", "password of the keystore's private key, if it is encrypted"),
    Key("ssl.truststore.type", Choice(("PEM",)), "PEM", "format of the truststore: PEM only"),
    Key("ssl.truststore.location", Str(), "",
        "PEM bundle of the CA certificates trusted for client certificates (ssl.client.auth) and for the leaders"
        " of an SSL inter-broker listener (empty: the system's CAs)"),
    Key("ssl.truststore.certificates", Str(), "", "the trusted CA certificates in PEM, inline (instead of"
        " ssl.truststore.location)"),
    Key("ssl.client.auth", Choice(CLIENT_AUTH), "none",
        "client certificates on SSL listeners: none (not asked), requested (verified if given), required"
        " (a client without a trusted certificate is refused); a verified certificate's subject is the principal;"
        " on the SSL inter-broker listener, requested or required makes this broker register its own"
        " certificate's subject as its principal"),
    Key("ssl.endpoint.identification.algorithm", Choice(("https", "")), "https",
        "https: a follower checks that its leader's certificate names the leader's host; empty: it does not"
        " (the certificate is still verified against the truststore)"),
)


class _Pem:
    """PEM files of the keystore and truststore; inline PEM values are written to private temporary files,
    removed once loaded."""

    def __init__(self, config) -> None:
        self.config = config
        self._tmp: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> "_Pem":
        return self

    def __exit__(self, *exc) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()

    def _write(self, name: str, text: str) -> str:
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ingest-tls-")
        path = os.path.join(self._tmp.name, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text.replace("\\n", "\n").strip() + "\n")
        return path

    def keystore(self, why: str) -> str:
        cfg = self.config
        if cfg["ssl.keystore.location"]:
            return cfg["ssl.keystore.location"]
        chain, key = cfg["ssl.keystore.certificate.chain"], cfg["ssl.keystore.key"]
        if chain and key:
            return self._write("keystore.pem", chain.replace("\\n", "\n").strip() + "\n" + key)
        raise ConfigError(f"{why} needs a keystore: set ssl.keystore.location (a PEM file with the certificate "
                          "chain and the private key), or ssl.keystore.certificate.chain and ssl.keystore.key")

    def truststore(self) -> str | None:
        cfg = self.config
        if cfg["ssl.truststore.location"]:
            return cfg["ssl.truststore.location"]
        if cfg["ssl.truststore.certificates"]:
            return self._write("truststore.pem", cfg["ssl.truststore.certificates"])
        return None


def listener_context(config, listener: str) -> ssl.SSLContext:
    """The server context of SSL listener ``listener``.

    Raises:
        ConfigError: no keystore, or a file that cannot be read as PEM (naming the key).
    """
    with _Pem(config) as pem:
        return server_context(pem.keystore(f"listener {listener} (SSL)"), key_password=config["ssl.key.password"],
                              truststore=pem.truststore(), client_auth=config["ssl.client.auth"])


def keystore_principal(config) -> str:
    """``User:<subject DN>`` of the broker's own keystore certificate (the first certificate of the chain):
    the principal a TLS listener that asks for client certificates gives this broker's follower connections,
    computed the same way (:func:`ingest.wire.tls.principal_of` on the certificate as the ssl module decodes it).

    Raises:
        ConfigError: no keystore, or one that holds no readable PEM certificate.
    """
    with _Pem(config) as pem:
        path = pem.keystore("the broker's certificate principal")
        try:
            # the decoder behind SSLSocket.getpeercert(), so both sides read the subject alike
            decoded = ssl._ssl._test_decode_cert(path)  # type: ignore[attr-defined]
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"ssl.keystore.location: cannot read a PEM certificate from {path!r}: {exc}") from exc
    return principal_of(decoded)


def inter_broker_context(config, listener: str | None) -> ssl.SSLContext | None:
    """The client context a follower uses towards its leader's ``listener``: None unless that listener is SSL
    or SASL_SSL (TLS under the SASL login)."""
    if listener is None or parse_protocol_map(config["listener.security.protocol.map"]).get(listener) not in (
            SSL, "SASL_SSL"):
        return None
    with _Pem(config) as pem:
        return client_context(ca_location=pem.truststore(), certificate_location=pem.keystore(
            f"the SSL inter-broker listener {listener}"), key_password=config["ssl.key.password"],
            check_hostname=config["ssl.endpoint.identification.algorithm"] == "https")

"""TLS for the Kafka listener and its clients: SSL contexts from PEM files, and the principal of a certificate.

Only PEM (Kafka's ``ssl.keystore.type=PEM``, librdkafka's ``ssl.*.location`` files): a keystore
is one PEM file holding the certificate chain and the private key (or two files, the client's
``ssl.certificate.location`` and ``ssl.key.location``), encrypted or not (``ssl.key.password``);
a truststore is a PEM bundle of CA certificates. TLS 1.2 is the oldest version either side
accepts (Kafka 3.x's ``ssl.enabled.protocols`` default, TLSv1.2,TLSv1.3).

The principal of a client certificate is Kafka's default principal builder's: ``"User:"`` + the
subject's distinguished name as an RFC 2253 string (``X500Principal.getName()``: the most
specific RDN first, ``CN=alice,OU=ops,O=Example,C=US``), ``"User:ANONYMOUS"`` without one.
"""
from __future__ import annotations

import ssl
from typing import Any

from ingest.errors import ConfigError

ANONYMOUS = "User:ANONYMOUS"
CLIENT_AUTH = ("none", "requested", "required")
"""Kafka's ``ssl.client.auth``: no client certificate asked, asked but optional, required."""

_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}

# RFC 2253 section 2.3's keywords (Java's X500Principal adds none for getName()); other attributes
# keep the name Python's ssl module gives them
_KEYWORDS = {"commonName": "CN", "localityName": "L", "stateOrProvinceName": "ST", "organizationName": "O",
             "organizationalUnitName": "OU", "countryName": "C", "streetAddress": "STREET",
             "domainComponent": "DC", "userId": "UID"}


def _load_chain(ctx: ssl.SSLContext, certfile: str, keyfile: str | None, password: str | None, what: str) -> None:
    try:
        ctx.load_cert_chain(certfile, keyfile, password=password or None)
    except FileNotFoundError as exc:
        raise ConfigError(f"{what}: {exc.filename or certfile} does not exist") from exc
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"{what}: cannot load the certificate chain and private key from {certfile!r}"
                          f"{'' if keyfile is None else f' and {keyfile!r}'}: {exc}; the file(s) must be PEM with "
                          "the certificate chain and the private key (encrypted keys need ssl.key.password)") from exc


def _load_trust(ctx: ssl.SSLContext, cafile: str, what: str) -> None:
    try:
        ctx.load_verify_locations(cafile=cafile)
    except FileNotFoundError as exc:
        raise ConfigError(f"{what}: {cafile} does not exist") from exc
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"{what}: cannot load CA certificates from {cafile!r}: {exc}; it must be a PEM bundle") \
            from exc


def server_context(keystore: str, *, key_password: str | None = None, truststore: str | None = None,
                   client_auth: str = "none") -> ssl.SSLContext:
    """The context of a TLS listener.

    Args:
        keystore: PEM file with the broker's certificate chain and private key (``ssl.keystore.location``).
        key_password: the private key's password (``ssl.key.password``), if it is encrypted.
        truststore: PEM bundle of the CAs whose client certificates are accepted (``ssl.truststore.location``);
            without it the system's default CAs.
        client_auth: ``ssl.client.auth``, one of :data:`CLIENT_AUTH`.

    Raises:
        ConfigError: a file missing or not PEM, a bad ``client_auth``, naming the key and the value.
    """
    if client_auth not in _VERIFY:
        raise ConfigError(f"ssl.client.auth={client_auth!r} is not one of {', '.join(CLIENT_AUTH)}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # the network layer drives writes and reads separately: a renegotiation would make a write wait to read
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    _load_chain(ctx, keystore, None, key_password, "ssl.keystore.location")
    if client_auth != "none":
        if truststore:
            _load_trust(ctx, truststore, "ssl.truststore.location")
        else:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    ctx.verify_mode = _VERIFY[client_auth]
    return ctx


def client_context(*, ca_location: str | None = None, certificate_location: str | None = None,
                   key_location: str | None = None, key_password: str | None = None,
                   check_hostname: bool = True) -> ssl.SSLContext:
    """The context of a client of a TLS listener (librdkafka's settings).

    Args:
        ca_location: PEM bundle of the CAs that sign the brokers' certificates (``ssl.ca.location``);
            without it the system's default CAs.
        certificate_location, key_location: the client's own certificate (chain) and key, for mutual TLS
            (``ssl.certificate.location``, ``ssl.key.location``; the key may be in the certificate's file).
        key_password: ``ssl.key.password``.
        check_hostname: ``ssl.endpoint.identification.algorithm=https`` (the broker's certificate must name
            the host connected to); false for ``none`` (the certificate is still verified against the CAs).

    Raises:
        ConfigError: a file missing or not PEM.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = check_hostname
    if ca_location:
        _load_trust(ctx, ca_location, "ssl.ca.location")
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if certificate_location:
        _load_chain(ctx, certificate_location, key_location or None, key_password, "ssl.certificate.location")
    elif key_location:
        raise ConfigError(f"ssl.key.location={key_location!r} needs ssl.certificate.location (the client "
                          "certificate that goes with the key)")
    return ctx


def _escape(value: str) -> str:
    """An attribute value escaped as RFC 2253 section 2.4 says."""
    out = "".join("\\" + ch if ch in ',+"\\<>;' else ch for ch in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def distinguished_name(subject: Any) -> str:
    """The RFC 2253 string of a subject as :meth:`ssl.SSLSocket.getpeercert` gives it (RDNs in
    certificate order, each a tuple of ``(attribute, value)``): most specific RDN first."""
    rdns = ["+".join(f"{_KEYWORDS.get(k, k)}={_escape(v)}" for k, v in rdn) for rdn in subject]
    return ",".join(reversed(rdns))


def principal_of(peer_cert: dict | None) -> str:
    """``User:<subject DN>`` of a verified peer certificate (``getpeercert()``), else ``User:ANONYMOUS``."""
    if not peer_cert or not peer_cert.get("subject"):
        return ANONYMOUS
    return "User:" + distinguished_name(peer_cert["subject"])

"""Certificates for TLS tests, made with the ``openssl`` command into a directory.

Usage::

    from tests.harness.tls import make_pki

    pki = make_pki(tmp_path)            # a CA, a server certificate for 127.0.0.1/localhost, clients
    pki.server                          # PEM: certificate + key (Kafka's ssl.keystore.location)
    pki.ca                              # PEM: the CA (ssl.truststore.location, ssl.ca.location)
    pki.client("alice")                 # (certificate, key) signed by the CA, subject CN=alice,O=ingest-test
    pki.untrusted_ca, pki.untrusted_client("mallory")   # a second CA nobody trusts, and its client

Every certificate is valid for a day, RSA 2048 (fast to make: about 0.1 s each).
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

SUBJECT_O = "ingest-test"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _ca(d: Path, name: str) -> tuple[Path, Path]:
    cert, key = d / f"{name}.pem", d / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
             "-subj", f"/O={SUBJECT_O}/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return cert, key


def _leaf(d: Path, name: str, subject: str, ca: tuple[Path, Path], ext: str) -> tuple[Path, Path]:
    cert, key, csr, extfile = d / f"{name}.pem", d / f"{name}.key", d / f"{name}.csr", d / f"{name}.ext"
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", subject)
    extfile.write_text(ext)
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
             "-out", str(cert), "-days", "1", "-extfile", str(extfile))
    return cert, key


@dataclass
class Pki:
    dir: Path
    ca: Path
    ca_key: Path
    server: Path                # certificate chain + key in one PEM file (a broker's keystore)
    server_cert: Path
    server_key: Path
    untrusted_ca: Path
    untrusted_ca_key: Path

    def client(self, cn: str, *, ca: tuple[Path, Path] | None = None) -> tuple[Path, Path]:
        """A client certificate and key for subject ``CN=<cn>,O=ingest-test`` (RFC 2253), signed by the CA."""
        return _leaf(self.dir, f"client-{cn}", f"/O={SUBJECT_O}/CN={cn}", ca or (self.ca, self.ca_key),
                     "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")

    def untrusted_client(self, cn: str) -> tuple[Path, Path]:
        return self.client(cn, ca=(self.untrusted_ca, self.untrusted_ca_key))

    def principal(self, cn: str) -> str:
        """The principal the broker gives a client certificate of :meth:`client`."""
        return f"User:CN={cn},O={SUBJECT_O}"


def make_pki(directory: Path, server_cn: str = "localhost") -> Pki:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ca = _ca(d, "ca")
    server = _leaf(d, "server", f"/O={SUBJECT_O}/CN={server_cn}", ca,
                   "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n"
                   "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    keystore = d / "server-keystore.pem"
    keystore.write_text(server[0].read_text() + server[1].read_text())
    untrusted = _ca(d, "untrusted-ca")
    return Pki(d, ca[0], ca[1], keystore, server[0], server[1], untrusted[0], untrusted[1])

"""Certificates made by a test, as PEM files in a directory: two ways to the same thing.

With the ``openssl`` command (the Kafka listener's tests)::

    pki = make_pki(tmp_path)            # a CA, a server certificate for 127.0.0.1/localhost, clients
    pki.server                          # PEM: certificate + key (Kafka's ssl.keystore.location)
    pki.ca                              # PEM: the CA (ssl.truststore.location, ssl.ca.location)
    pki.client("alice")                 # (certificate, key) signed by the CA, subject CN=alice,O=ingest-test
    pki.broker("broker0")               # a broker's own keystore (server and client use), CN=broker0,O=...
    pki.untrusted_ca, pki.untrusted_client("mallory")   # a second CA nobody trusts, and its client

RSA 2048, valid for a day. With the ``cryptography`` package (the registry's tests)::

    ca = CertificateAuthority(tmp_path / "ca")          # ca.cert: the CA bundle (a truststore)
    server = ca.issue("registry")                        # .cert, .key, .pem (chain + key in one file)
    client = ca.issue("alice", client=True)              # subject CN=alice, for mutual TLS

Server certificates name ``127.0.0.1``, ``::1`` and ``localhost`` (IP and DNS SANs), so clients that
check host names accept them on loopback.
"""
from __future__ import annotations

import datetime
import ipaddress
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

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

    def broker(self, cn: str) -> Path:
        """A broker's own keystore (certificate for server and client use, naming loopback, subject
        ``CN=<cn>,O=ingest-test``, and its key in one PEM file), for mutual TLS between brokers."""
        cert, key = _leaf(self.dir, f"broker-{cn}", f"/O={SUBJECT_O}/CN={cn}", (self.ca, self.ca_key),
                          "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n"
                          "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        keystore = self.dir / f"broker-{cn}-keystore.pem"
        keystore.write_text(cert.read_text() + key.read_text())
        return keystore

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


# --- with the cryptography package ---------------------------------------------------------

LOOPBACK = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class Issued:
    cert: Path  # the certificate (PEM)
    key: Path   # its private key (PEM, encrypted when issued with a password)
    pem: Path   # certificate followed by the key: a PEM keystore (ssl.keystore.location)
    subject: str  # RFC 4514 string of the subject, e.g. "CN=alice"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class CertificateAuthority:
    """A self-signed CA whose files live in ``directory`` (created)."""

    def __init__(self, directory: str | Path, name: str = "ingest test CA") -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self._name = _name(name)
        self._cert = (x509.CertificateBuilder().subject_name(self._name).issuer_name(self._name)
                      .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
                      .not_valid_before(now - datetime.timedelta(hours=1))
                      .not_valid_after(now + datetime.timedelta(days=2))
                      .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                      .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                   content_commitment=False, key_encipherment=False,
                                                   data_encipherment=False, key_agreement=False,
                                                   encipher_only=False, decipher_only=False), critical=True)
                      .sign(self._key, hashes.SHA256()))
        self.cert = self.dir / "ca.pem"
        self.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, hosts: tuple[str, ...] = LOOPBACK, client: bool = False,
              key_password: str | None = None) -> Issued:
        """A certificate for ``name`` (CN) signed by this CA; server use naming ``hosts``, or client use."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(self._name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client
                                                         else ExtendedKeyUsageOID.SERVER_AUTH]), critical=False))
        if not client:
            sans: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    sans.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        encryption = (serialization.BestAvailableEncryption(key_password.encode()) if key_password
                      else serialization.NoEncryption())
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        paths = Issued(self.dir / f"{name}.crt", self.dir / f"{name}.key", self.dir / f"{name}.pem",
                       cert.subject.rfc4514_string())
        paths.cert.write_bytes(cert_pem)
        paths.key.write_bytes(key_pem)
        paths.pem.write_bytes(cert_pem + key_pem)
        for p in (paths.key, paths.pem):
            p.chmod(0o600)
        return paths


def handshake_refusals(broker_output: str) -> list[str]:
    """The TLS handshakes a broker refused, from its log: the peers it could not verify or understand.

    A peer that hangs up in the middle of its handshake (``UNEXPECTED_EOF_WHILE_READING``) is left out: a
    librdkafka client closed while it is still connecting to a bootstrap broker does that, and it says
    nothing about the certificates.
    """
    return [line for line in broker_output.splitlines()
            if "TLS handshake failed" in line and "UNEXPECTED_EOF_WHILE_READING" not in line]

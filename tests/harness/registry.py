"""The schema registry as a real subprocess (``ingest registry start``) on a free loopback port.

    reg = RegistryProcess(store_dir).start()      # or RegistryProcess(zk="127.0.0.1:2181/chroot")
    reg.url                                      # http://127.0.0.1:PORT
    reg.stop()  /  reg.kill()  /  reg.start()    # restart keeps the same port and store

    RegistryProcess(store_dir, https=True, overrides={"ssl.keystore.location": pem, ...})
    reg.url                                      # https://127.0.0.1:PORT (Confluent's listeners key)
"""
from __future__ import annotations

import http.client
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from ingest.events.registry_users import user_line
from tests.harness.net import free_port
from tests.harness import reaper
from tests.harness.tls import CertificateAuthority

REPO = Path(__file__).resolve().parents[2]


_PROBE_TLS = ssl.create_default_context()
_PROBE_TLS.check_hostname = False
_PROBE_TLS.verify_mode = ssl.CERT_NONE


class RegistryProcess:
    """One registry process; ``store`` directory (default: a fresh temp dir) or ``zk`` connect string."""

    def __init__(self, store: str | Path | None = None, *, zk: str | None = None, port: int | None = None,
                 compatibility: str = "BACKWARD", overrides: dict[str, object] | None = None,
                 https: bool = False) -> None:
        """``overrides``: registry config keys passed as ``--set key=value``; ``https``: listen with TLS
        (``listeners=https://127.0.0.1:PORT``; the ``ssl.*`` keys go in ``overrides``)."""
        self.zk = zk
        self.https = https
        self.overrides = dict(overrides or {})
        self.store = None if zk else Path(store or tempfile.mkdtemp(prefix="registry-"))
        self.port = port or free_port()
        self.compatibility = compatibility
        self.proc: subprocess.Popen | None = None
        self.log_path = Path(tempfile.mkstemp(prefix="registry-", suffix=".log")[1])

    @property
    def url(self) -> str:
        return f"{'https' if self.https else 'http'}://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> "RegistryProcess":
        cmd = [sys.executable, "-m", "ingest.cli", "registry", "start", "--compatibility", self.compatibility]
        if self.https:
            cmd += ["--set", f"listeners=https://127.0.0.1:{self.port}"]
        else:
            cmd += ["--port", str(self.port)]
        cmd += ["--zk", self.zk] if self.zk else ["--store", str(self.store)]
        for key, value in self.overrides.items():
            cmd += ["--set", f"{key}={value}"]
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
            reaper.watch(self.proc)  # stopped even if pytest itself is killed
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"registry exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                if self.https:
                    # a completed TLS handshake means it serves (whatever it then asks of clients); the
                    # probe trusts any certificate
                    with socket.create_connection(("127.0.0.1", self.port), timeout=1) as raw:
                        with _PROBE_TLS.wrap_socket(raw, server_hostname="127.0.0.1"):
                            return self
                # any HTTP answer means it serves (401 with authentication on)
                with urllib.request.urlopen(self.url + "/config", timeout=1) as r:
                    r.read()
                return self
            except urllib.error.HTTPError:
                return self
            except (OSError, http.client.HTTPException):  # not up yet, or another process answers on the port
                if time.monotonic() > deadline:
                    self.kill()
                    raise TimeoutError(f"registry on {self.url} not up after {timeout_s}s: "
                                       f"{self.log_path.read_text()[-2000:]}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM and wait (clean shutdown)."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL: no chance to clean up."""
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> "RegistryProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def secured_registry(directory: Path, users: dict[str, tuple[str, tuple[str, ...]]], *,
                     key_password: str | None = None) -> tuple[RegistryProcess, CertificateAuthority]:
    """A registry (not started) serving HTTPS with a certificate of a fresh CA and HTTP basic auth.

    ``users``: name -> (password, roles); ``admin`` is the write role. Returns the process and the CA
    (``ca.cert`` is what clients trust: ``ssl.ca.location`` / ``schema.registry.ssl.ca.location``).
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority(directory / "ca")
    server = ca.issue("registry", key_password=key_password)
    users_file = directory / "users"
    users_file.write_text("".join(user_line(name, pw, roles, iterations=20_000) + "\n"
                                  for name, (pw, roles) in users.items()))
    overrides: dict[str, object] = {"ssl.keystore.location": server.pem, "authentication.method": "BASIC",
                                    "authentication.users.file": users_file}
    if key_password:
        overrides["ssl.key.password"] = key_password
    return RegistryProcess(directory / "store", https=True, overrides=overrides), ca

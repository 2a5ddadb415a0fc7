"""Network namespaces of the test's own, for network-partition tests (Debian iproute2, needs root).

Layout (one :class:`NetnsLab`)::

    root namespace: bridge ingt<pid>br, address 10.213.N.1/24   (ZooKeeper and the test process live here)
       |-- veth ingt<pid>v1 ==== ingt<pid>p1 (10.213.N.2) in namespace ingt<pid>-<name1>
       |-- veth ingt<pid>v2 ==== ingt<pid>p2 (10.213.N.3) in namespace ingt<pid>-<name2>
       ...

Every namespace reaches every other one and the root namespace through the
bridge. :meth:`NetnsLab.cut` takes the root-side end of one namespace's veth
down: that namespace can then reach nobody (not ZooKeeper, not the other
brokers) and nobody reaches it; packets are dropped, so open TCP connections
hang (no reset) as in a real partition. :meth:`NetnsLab.heal` brings it back.
(A link going down rather than a firewall rule: this machine has neither
iptables nor nft, and a dead link cuts both directions at once.)
A process inside the cut namespace still reaches its own addresses, so a
client on the same side of the partition is a socket made inside that
namespace (:meth:`NetnsLab.connect_from`), e.g. a producer that keeps writing
to a leader that lost ZooKeeper.

Usage::

    lab = NetnsLab("part").create()          # or the ``netns_lab`` fixture (skips when impossible)
    ns = lab.add("b0")                       # Namespace(name, address, root_veth)
    Popen(lab.exec_prefix(ns) + [...])        # run a process inside it (``ip netns exec``: same pid)
    lab.cut(ns); ...; lab.heal(ns)
    lab.close()                              # idempotent; also run by atexit

Cleanup: ``close`` kills whatever still runs inside the lab's namespaces (only
the test's own processes can be there), deletes the veths, the namespaces and
the bridge. It runs from the fixture's finalizer and from ``atexit``; every
lab also first removes stale objects of earlier runs (names carry the pid of
the process that made them; those whose process is gone are removed).

Subnet: 10.213.N.0/24 with the first N (from a pid-derived start) that no
address or route of the root namespace uses.
"""
from __future__ import annotations

import atexit
import ctypes
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass

import pytest

log = logging.getLogger(__name__)

PREFIX = "ingt"
CLONE_NEWNET = 0x40000000
_NAME = re.compile(rf"^{PREFIX}(\d+)(?:-|br$|v\d+$|p\d+$)")
_LIVE_LABS: list["NetnsLab"] = []


class NetnsError(RuntimeError):
    """An ``ip`` command failed; the message names the command and its output."""


def _ip(*args: str, check: bool = True, ns: str | None = None) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NetnsError(f"`{' '.join(cmd)}` failed with code {done.returncode}: "
                         f"{(done.stderr or done.stdout).strip()}")
    return done


@dataclass(frozen=True)
class Namespace:
    """One namespace of a lab: its name, its address on the bridge, its root-side veth end."""

    name: str
    address: str
    root_veth: str
    peer_veth: str


def unavailable_reason() -> str | None:
    """None when this machine lets the test make namespaces, veth pairs and a bridge; else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root (`ip netns add` is refused to uid %d)" % os.geteuid()
    if shutil.which("ip") is None:
        return "the `ip` command (Debian package iproute2) is not installed"
    probe = f"{PREFIX}{os.getpid()}-probe{uuid.uuid4().hex[:4]}"
    veth = f"{PREFIX}{os.getpid()}v99"
    try:
        _ip("netns", "add", probe)
        _ip("link", "add", veth, "type", "veth", "peer", "name", f"{PREFIX}{os.getpid()}p99")
        _ip("link", "set", f"{PREFIX}{os.getpid()}p99", "netns", probe)
    except (NetnsError, OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot create a network namespace with a veth pair on this machine: {exc}"
    finally:
        _ip("link", "del", veth, check=False)
        _ip("netns", "del", probe, check=False)
    return None


def _pid_alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def remove_stale() -> list[str]:
    """Delete namespaces, veths and bridges named by this module whose creating process is gone."""
    removed: list[str] = []
    for ns in _list_namespaces():
        m = _NAME.match(ns)
        if m and not _pid_alive(int(m.group(1))):
            _kill_inside(ns)
            _wait_empty([ns])
            _ip("netns", "del", ns, check=False)
            removed.append(ns)
    for dev in _list_links():
        m = _NAME.match(dev)
        if m and not _pid_alive(int(m.group(1))):
            _ip("link", "del", dev, check=False)
            removed.append(dev)
    if removed:
        log.info("removed stale network objects of dead test runs: %s", ", ".join(removed))
    return removed


def _list_namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _list_links() -> list[str]:
    out = _ip("-o", "link", "show", check=False).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def _kill_inside(ns: str) -> None:
    """SIGKILL the processes left inside one of our namespaces (only our own processes run there)."""
    for pid in _ip("netns", "pids", ns, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
            log.warning("killed pid %s left running in namespace %s", pid, ns)
        except (ProcessLookupError, ValueError):
            pass


def _wait_empty(namespaces: list[str], timeout: float = 5.0) -> None:
    """Until no process is left in ``namespaces`` (a namespace with a process outlives ``ip netns del``)."""
    deadline = time.monotonic() + timeout
    while any(_ip("netns", "pids", ns, check=False).stdout.strip() for ns in namespaces) \
            and time.monotonic() < deadline:
        time.sleep(0.05)


def _free_subnet() -> int:
    used = _ip("-4", "-o", "addr", "show", check=False).stdout + _ip("-4", "route", "show", check=False).stdout
    start = 20 + os.getpid() % 200
    for i in range(235):
        n = 20 + (start - 20 + i) % 235
        if not re.search(rf"\b10\.213\.{n}\.", used):
            return n
    raise NetnsError("no free 10.213.N.0/24 subnet: every N from 20 to 254 is in use")


class NetnsLab:
    """A bridge in the root namespace and namespaces attached to it; see the module docstring."""

    def __init__(self, label: str = "lab") -> None:
        self.label = label
        self.tag = f"{PREFIX}{os.getpid()}"
        self.bridge = f"{self.tag}br"
        self.subnet: int | None = None
        self.namespaces: list[Namespace] = []
        self._lock = threading.Lock()
        self._closed = False
        self._created_bridge = False

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge (bind ZooKeeper here)."""
        return f"10.213.{self.subnet}.1"

    def create(self) -> "NetnsLab":
        remove_stale()
        # one lab per process at a time: names carry only the pid
        _ip("link", "del", self.bridge, check=False)
        self.subnet = _free_subnet()
        _ip("link", "add", "name", self.bridge, "type", "bridge")
        self._created_bridge = True
        _LIVE_LABS.append(self)
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        log.info("network lab %s: bridge %s on 10.213.%d.0/24", self.label, self.bridge, self.subnet)
        return self

    def add(self, name: str) -> Namespace:
        """A new namespace ``<tag>-<name>`` attached to the bridge, with loopback up."""
        if self.subnet is None:
            raise NetnsError("NetnsLab.add before create()")
        idx = len(self.namespaces) + 1
        ns = Namespace(f"{self.tag}-{name}", f"10.213.{self.subnet}.{idx + 1}", f"{self.tag}v{idx}",
                       f"{self.tag}p{idx}")
        _ip("netns", "add", ns.name)
        self.namespaces.append(ns)
        _ip("link", "add", ns.root_veth, "type", "veth", "peer", "name", ns.peer_veth)
        _ip("link", "set", ns.peer_veth, "netns", ns.name)
        _ip("link", "set", ns.root_veth, "master", self.bridge)
        _ip("link", "set", ns.root_veth, "up")
        _ip("addr", "add", f"{ns.address}/24", "dev", ns.peer_veth, ns=ns.name)
        _ip("link", "set", ns.peer_veth, "up", ns=ns.name)
        _ip("link", "set", "lo", "up", ns=ns.name)
        self.wait_reachable(ns)
        return ns

    def exec_prefix(self, ns: Namespace) -> list[str]:
        """The command prefix that runs a program inside ``ns`` (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", ns.name]

    def cut(self, ns: Namespace) -> float:
        """Isolate ``ns`` from everyone (ZooKeeper, other namespaces, the root namespace).

        Returns the monotonic time at which the cut was in force.
        """
        _ip("link", "set", ns.root_veth, "down")
        log.info("cut %s (%s) off the network", ns.name, ns.address)
        return time.monotonic()

    def heal(self, ns: Namespace, timeout: float = 30.0) -> float:
        """Undo :meth:`cut` and wait until the root namespace reaches ``ns`` again; returns that time."""
        _ip("link", "set", ns.root_veth, "up")
        self.wait_reachable(ns, timeout)
        log.info("healed %s (%s)", ns.name, ns.address)
        return time.monotonic()

    def is_cut(self, ns: Namespace) -> bool:
        """True while the root-side end of ``ns``'s veth is down."""
        flags = re.search(r"<([^>]*)>", _ip("-o", "link", "show", ns.root_veth).stdout)
        return not flags or "UP" not in flags.group(1).split(",")

    def wait_reachable(self, ns: Namespace, timeout: float = 30.0) -> None:
        """Until a TCP connect from the root namespace to ``ns`` gets an answer (a refusal counts)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection((ns.address, 9), timeout=0.5):
                    return
            except ConnectionRefusedError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise NetnsError(f"{ns.name} ({ns.address}) not reachable after {timeout}s") from None
                time.sleep(0.05)

    def connect_from(self, ns: Namespace, host: str, port: int, timeout: float = 10.0) -> socket.socket:
        """A TCP socket made inside ``ns`` and connected to ``host:port`` (a client on ``ns``'s side).

        The socket stays in ``ns`` for its whole life; use it from any thread.
        """
        result: dict[str, object] = {}

        def inside() -> None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                with open(f"/var/run/netns/{ns.name}") as f:
                    if libc.setns(f.fileno(), CLONE_NEWNET) != 0:
                        err = ctypes.get_errno()
                        raise OSError(err, f"setns into {ns.name}: {os.strerror(err)}")
                result["sock"] = socket.create_connection((host, port), timeout=timeout)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                result["error"] = exc

        t = threading.Thread(target=inside, name=f"setns-{ns.name}")  # a thread of its own: setns is per thread
        t.start()
        t.join()
        if "error" in result:
            raise result["error"]  # type: ignore[misc]
        return result["sock"]  # type: ignore[return-value]

    def close(self) -> None:
        """Remove every namespace, veth and the bridge of this lab (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for ns in self.namespaces:
            _kill_inside(ns.name)
        _wait_empty([ns.name for ns in self.namespaces])
        for ns in self.namespaces:
            _ip("link", "del", ns.root_veth, check=False)
            _ip("netns", "del", ns.name, check=False)
        if self._created_bridge:
            _ip("link", "del", self.bridge, check=False)
        if self in _LIVE_LABS:
            _LIVE_LABS.remove(self)
        log.info("network lab %s removed", self.label)

    def __enter__(self) -> "NetnsLab":
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.close()


@atexit.register
def _close_all() -> None:
    for lab in list(_LIVE_LABS):
        try:
            lab.close()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            log.exception("could not remove network lab %s", lab.label)


@pytest.fixture(scope="module")
def netns_lab(request):
    """A :class:`NetnsLab` for the module; skipped (with the reason) where namespaces cannot be made."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"network-partition test needs network namespaces: {reason}")
    lab = NetnsLab(request.module.__name__.rsplit(".", 1)[-1])
    request.addfinalizer(lab.close)
    try:
        lab.create()
    except NetnsError as exc:
        pytest.skip(f"network-partition test needs network namespaces: could not set up the lab: {exc}")
    return lab

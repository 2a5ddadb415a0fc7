"""A disk that really fails under a flush: ext4 on a loop device cut short right after a file.

``FailingDisk.fail_after(path)`` cuts the device right after the blocks ``path``
already holds: the next data blocks the kernel writes lie past the end of the
device, their writeback fails and ``fdatasync`` returns EIO, as a disk failing
under a flush would. ``heal()`` gives the device its size back (a later
``fdatasync`` then succeeds although the pages of the failed flush never
reached it: the kernel reports a writeback error once); ``remount()`` drops
the page cache so that only what the disk holds remains. This kernel has no
device-mapper, and a loop over a full tmpfs loses data silently instead of
failing fsync, hence the cut device.

Usage (root and the tools of :data:`TOOLS` needed; skipped otherwise)::

    from tests.harness.failing_disk import failing_disk   # noqa: F401  (fixture)

    def test_x(failing_disk):
        log_dir = failing_disk.mountpoint / "logs"
        ...
        failing_disk.fail_after(segment_path)     # its next flush fails with EIO
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

BLOCK = 4096
DISK_BYTES = 64 << 20
TOOLS = ("losetup", "mkfs.ext4", "e2fsck", "filefrag", "mount", "umount")


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True)


class FailingDisk:
    """ext4 on a loop device over a sparse image file; ``fail_after`` cuts the device short."""

    def __init__(self, workdir: Path) -> None:
        self.image = workdir / "disk.img"
        self.mountpoint = workdir / "mnt"
        self.mountpoint.mkdir(parents=True)
        self.loop: str | None = None
        self.mounted = False
        with open(self.image, "wb") as f:
            f.truncate(DISK_BYTES)
        # No journal and no backup superblocks: every block the file system writes later is
        # either metadata near the start or file data, so cutting after the data fails only data.
        _run("mkfs.ext4", "-q", "-F", "-b", str(BLOCK), "-O", "^has_journal,sparse_super2",
             "-E", "num_backup_sb=0,nodiscard,lazy_itable_init=0", str(self.image))
        self.loop = _run("losetup", "-f", "--show", str(self.image)).stdout.strip()
        try:
            self.mount()
        except BaseException:
            self.close()
            raise

    def mount(self) -> None:
        _run("mount", "-o", "errors=continue", self.loop, str(self.mountpoint))
        self.mounted = True

    def umount(self) -> None:
        for _ in range(50):
            if subprocess.run(["umount", str(self.mountpoint)], capture_output=True).returncode == 0:
                self.mounted = False
                return
            time.sleep(0.1)
        subprocess.run(["umount", "-l", str(self.mountpoint)], capture_output=True)
        self.mounted = False

    def _set_size(self, size: int) -> None:
        os.truncate(self.image, size)
        _run("losetup", "-c", self.loop)

    @staticmethod
    def last_block(path: Path) -> int:
        out = _run("filefrag", "-v", f"-b{BLOCK}", str(path)).stdout
        ends = [int(m.group(1)) for m in re.finditer(r"^\s*\d+:\s+\d+\.\.\s*\d+:\s+\d+\.\.\s*(\d+):", out, re.M)]
        return max(ends, default=-1)

    def fail_after(self, victim: Path) -> None:
        """Cut the device right after ``victim``'s last block: its next flush fails with EIO."""
        last = self.last_block(victim)
        others = {f: self.last_block(f) for f in self.mountpoint.rglob("*") if f.is_file() and f != victim}
        beyond = {str(f): b for f, b in others.items() if b > last}
        assert last > 0 and not beyond, f"layout assumption broken: {victim} ends at block {last}, {beyond} after it"
        self._set_size((last + 1) * BLOCK)

    def heal(self) -> None:
        """Give the device its full size back (the cut-off blocks read as zeros)."""
        self._set_size(DISK_BYTES)

    def remount(self) -> None:
        """Unmount, check, mount: the page cache of the file system is gone, only the disk remains."""
        self.umount()
        r = subprocess.run(["e2fsck", "-fy", self.loop], capture_output=True, text=True)
        assert r.returncode in (0, 1), r.stdout + r.stderr  # 1: errors corrected
        self.mount()

    def close(self) -> None:
        try:
            if self.loop:
                self.heal()
        finally:
            if self.mounted:
                self.umount()
            if self.loop:
                subprocess.run(["losetup", "-d", self.loop], capture_output=True)
                self.loop = None


def need_root_and_tools() -> None:
    """Skip the test unless it runs as root with every tool of :data:`TOOLS`."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a loop device / tmpfs")
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")


@pytest.fixture
def failing_disk(tmp_path):
    need_root_and_tools()
    try:
        disk = FailingDisk(tmp_path / "disk")
    except (subprocess.CalledProcessError, OSError) as exc:
        detail = exc.stderr if isinstance(exc, subprocess.CalledProcessError) else exc
        pytest.skip(f"cannot set up a loop-device ext4 here: {detail}")
    try:
        yield disk
    finally:
        disk.close()

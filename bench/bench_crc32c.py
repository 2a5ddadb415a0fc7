"""CRC-32C candidates measured in one run: 200 B and 1 MB buffers, bytes and a memoryview of a bytearray.

Candidates (each measured when importable; install the missing ones in a throwaway venv to compare):
``crc32c`` (ICRAR), ``google-crc32c``, ``crcmod``'s C extension (``crc-32c``); ``cramjam`` and ``isal``
are looked for and have no CRC-32C (cramjam has none, isal exposes CRC-32/IEEE only). Every candidate must
give 0xE3069283 for b"123456789" and agree with the others on the 1 MB buffer.

Usage: python bench/bench_crc32c.py
"""
from __future__ import annotations

import os
import timeit


def candidates() -> dict[str, object]:
    out = {}
    try:
        import crc32c
        out["crc32c (ICRAR)"] = crc32c.crc32c
    except ImportError:
        pass
    try:
        import google_crc32c
        out[f"google-crc32c ({google_crc32c.implementation})"] = google_crc32c.value
    except ImportError:
        pass
    try:
        import crcmod.crcmod
        import crcmod.predefined
        ext = "C extension" if getattr(crcmod.crcmod, "_crcfunext", None) else "pure Python"
        out[f"crcmod crc-32c ({ext})"] = crcmod.predefined.mkCrcFun("crc-32c")
    except ImportError:
        pass
    for name in ("cramjam", "isal.isal_zlib"):
        try:
            mod = __import__(name, fromlist=["x"])
            found = [a for a in dir(mod) if "crc32c" in a.lower() or "castagnoli" in a.lower()]
            print(f"{name}: {'CRC-32C as ' + ', '.join(found) if found else 'no CRC-32C function'}")
        except ImportError:
            print(f"{name}: not installed")
    return out


def main() -> None:
    small, big = os.urandom(200), os.urandom(1 << 20)
    view = memoryview(bytearray(big))
    cands = candidates()
    ref = None
    load = os.getloadavg()
    print(f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for name, fn in cands.items():
        assert fn(b"123456789") == 0xE3069283, name
        value = fn(big)
        assert ref is None or value == ref, name
        ref = value
        t_small = min(timeit.repeat(lambda: fn(small), number=100_000, repeat=5)) / 100_000
        t_big = min(timeit.repeat(lambda: fn(big), number=50, repeat=5)) / 50
        try:
            fn(view)
            views = "yes"
        except TypeError:
            views = "no (needs bytes: a copy)"
        print(f"{name:<34} 200 B {t_small * 1e9:7.0f} ns   1 MB {t_big * 1e6:8.1f} us "
              f"({(1 << 20) / t_big / 1e9:5.1f} GB/s)   memoryview of a bytearray: {views}")


if __name__ == "__main__":
    main()

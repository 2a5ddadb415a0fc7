"""``ingest package``: build what a Spark cluster runs, from the checkout, without the checkout.

The bootstrap installs the project in editable mode: ``.venv`` holds only a finder
(``__editable___ingest_*_finder.py``) that maps ``ingest`` to the checkout, so a packed
``.venv`` carries no code of the project (venv-pack 0.2.0 does not notice: its editable
check reads ``.pth`` lines as paths, and the finder's ``.pth`` line is an ``import``).
This command builds, into ``--out DIR``:

- ``wheels/ingest-<version>-<python>-<abi>-<platform>.whl``: a non-editable wheel (``pip wheel``)
  of a clean copy of the sources (a stale ``build/`` or in-place ``.so`` in the checkout cannot leak
  into it), and next to it the wheels of its pinned runtime dependencies. The wheel holds the
  compiled column decoder and record reader (``ingest/loader/_cdecode.c``, ``ingest/records/_crecords.c``,
  built by ``setup.py``), so it is
  platform-specific: built here, it runs on executors of the same OS, CPU architecture and Python
  minor version (as the packed environment's interpreter already requires). Built without a C
  compiler it holds no extension and the executors run the Python decoder and record reader (one
  warning per task process);
- ``ingest-env.tar.gz``: a fresh venv with that wheel and its runtime dependencies, pinned to
  the versions installed where the command runs, packed with venv-pack. pyspark and py4j are
  left out: Spark puts its own ``pyspark.zip`` and py4j on every Python worker's path, and a
  second pyspark in the environment could only disagree with the cluster's Spark;
- ``jobs/`` and ``conf/``: the driver-side files ``spark-submit`` is given;
- ``requirements.txt`` and ``Dockerfile``: the executor image for Kubernetes, installing the same
  wheel and the same pinned dependencies;
- ``build-info.json``: what was built, from what, with sizes and the base interpreter the
  environment needs on every node (a venv links to its interpreter, it does not contain it).

Ship it the way Spark's "Python Package Management" page does: ``--archives
ingest-env.tar.gz#environment`` and ``PYSPARK_PYTHON=./environment/bin/python``
(docs/cluster.md).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import venv
import zipfile
from dataclasses import dataclass, field
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import ingest
from ingest.errors import PackageError

log = logging.getLogger(__name__)

ENV_ARCHIVE = "ingest-env.tar.gz"
ARCHIVE_ALIAS = "environment"  # the directory name after '#' in --archives
#: runtime requirements the cluster's Spark provides (its python/lib/pyspark.zip and py4j zip)
PROVIDED_BY_SPARK = frozenset({"pyspark", "py4j"})
#: what the wheel is built from: a clean copy of these (nothing else of the checkout)
WHEEL_SOURCES = ("pyproject.toml", "setup.py", "README.md", "ingest", "pyspark_ingest")
DRIVER_DIRS = ("jobs", "conf")
DOCKERFILE = "scripts/cluster/Dockerfile"

EXAMPLES = """examples:
  .venv/bin/ingest package --out dist/cluster
  .venv/bin/ingest package --out dist/cluster --with-pyspark   # for a cluster without Spark's Python files
"""


@dataclass
class Artifact:
    """What :func:`build` made, with sizes in bytes and the seconds each step took."""

    out: Path
    wheel: Path
    env_archive: Path
    driver_files: list[Path]
    dockerfile: Path
    build_info: Path
    requirements: list[str]
    seconds: dict[str, float] = field(default_factory=dict)

    def sizes(self) -> dict[str, int]:
        def size(p: Path) -> int:
            return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size

        paths = [self.wheel, self.wheel.parent, self.env_archive, *self.driver_files,
                 self.out / "requirements.txt", self.dockerfile, self.build_info]
        return {str(p.relative_to(self.out)) + ("/" if p.is_dir() else ""): size(p) for p in paths}


def find_source(start: Path | None = None) -> Path:
    """The checkout to build: ``start``, else the directory above the imported ``ingest`` package
    (an editable install imports it from the checkout), else the current directory."""
    candidates = [start] if start is not None else [Path(ingest.__file__).resolve().parents[1], Path.cwd()]
    for c in candidates:
        if (c / "pyproject.toml").is_file() and (c / "ingest" / "__init__.py").is_file():
            return c.resolve()
    raise PackageError(f"no ingest checkout at {', '.join(str(c) for c in candidates)}: allowed is a directory "
                       f"holding pyproject.toml and ingest/ (pass --source DIR)")


# Variables that would let the checkout leak into pip's view of the new environment: with
# PYTHONPATH naming the checkout, its ingest.egg-info (from the editable install) made pip answer
# "already satisfied" and install nothing (found by a fresh-clone test run).
_LEAKY = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PIP_TARGET", "PIP_PREFIX")


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LEAKY}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _run(cmd: list[str], what: str) -> None:
    log.debug("running %s", " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(), cwd=tempfile.gettempdir())
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
        raise PackageError(f"{what} failed (exit {r.returncode}): {' '.join(cmd)}\n{tail}")


def build_wheel(source: Path, wheels: Path) -> Path:
    """``pip wheel --no-deps`` of a clean copy of the sources; the wheel's path."""
    with tempfile.TemporaryDirectory(prefix="ingest-wheel-src-") as tmp:
        clean = Path(tmp) / "src"
        clean.mkdir()
        for name in WHEEL_SOURCES:
            src = source / name
            if src.is_dir():
                shutil.copytree(src, clean / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
            elif src.is_file():
                shutil.copy2(src, clean / name)
        before = set(wheels.glob("ingest-*.whl"))
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(wheels), str(clean)],
             "building the wheel")
    built = sorted(set(wheels.glob("ingest-*.whl")) - before) or sorted(wheels.glob("ingest-*.whl"))
    if len(built) != 1:
        raise PackageError(f"expected one ingest wheel in {wheels}, found {[p.name for p in built]}")
    return built[0]


def runtime_requirements(wheel: Path, with_pyspark: bool = False) -> list[str]:
    """The wheel's ``Requires-Dist`` outside extras, less what Spark provides unless ``with_pyspark``."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(z.read(name).decode())
    out = []
    for req in meta.get_all("Requires-Dist") or []:
        if "extra ==" in req.replace('"', "'").replace("extra==", "extra =="):
            continue
        if not with_pyspark and _req_name(req) in PROVIDED_BY_SPARK:
            continue
        out.append(req)
    return out


def _req_name(req: str) -> str:
    for i, ch in enumerate(req):
        if not (ch.isalnum() or ch in "-_."):
            return req[:i].lower().replace("_", "-")
    return req.lower().replace("_", "-")


def pinned_versions() -> list[str]:
    """``name==version`` of every distribution installed here (the versions the tests ran), as pip
    constraints: the environment gets what was tested, not whatever is newest today."""
    pins = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name and name != "ingest":
            pins[name] = f"{name}=={dist.version}"
    return sorted(pins.values())


def build_env(wheel: Path, requirements: list[str], env_dir: Path) -> list[str]:
    """A fresh venv at ``env_dir`` (no pip) with the wheel and ``requirements`` installed; returns what
    it holds besides ingest, pinned (``pip freeze``): the Dockerfile installs exactly that."""
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    pip = [sys.executable, "-m", "pip", "--python", py, "install", "--quiet", "--disable-pip-version-check"]
    _run([*pip, "--no-deps", str(wheel)], "installing the wheel into the environment")
    if not list(env_dir.glob("lib/python*/site-packages/ingest/__init__.py")):
        raise PackageError(f"installing {wheel.name} left no ingest package in {env_dir}: allowed is an "
                           f"environment that holds the code (is the checkout on PYTHONPATH?)")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="ingest-constraints-", delete=False) as f:
        f.write("\n".join(pinned_versions()) + "\n")
    try:
        _run([*pip, "--constraint", f.name, *requirements], "installing the runtime dependencies")
    finally:
        os.unlink(f.name)
    r = subprocess.run([sys.executable, "-m", "pip", "--python", py, "freeze", "--exclude", "ingest",
                        "--disable-pip-version-check"], capture_output=True, text=True, check=False,
                       env=_clean_env(), cwd=tempfile.gettempdir())
    if r.returncode != 0:
        raise PackageError(f"pip freeze of {env_dir} failed (exit {r.returncode}): {r.stderr.strip()[-500:]}")
    return [ln for ln in r.stdout.splitlines() if ln and not ln.startswith("#")]


def download_wheels(pins: list[str], wheels: Path) -> None:
    """The pinned dependencies' wheels into ``wheels/`` (this platform's, as the environment has): the
    Dockerfile installs from them with ``--no-index``, so the image holds the same files as the
    environment and its build needs no package index."""
    # pip wheel, not pip download: crcmod 1.7 exists only as an sdist (pip's wheel cache has its build)
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
          "--wheel-dir", str(wheels), *pins], "collecting the dependencies' wheels")


def pack_env(env_dir: Path, archive: Path) -> None:
    """venv-pack ``env_dir`` into ``archive`` (run as a program: it is a build tool, not a library here)."""
    venv_pack = Path(sys.executable).parent / "venv-pack"
    if not venv_pack.exists():
        found = shutil.which("venv-pack")
        if found is None:
            raise PackageError(f"venv-pack not found next to {sys.executable} nor on PATH: allowed is an "
                               f"environment with venv-pack>=0.2.0 installed (.venv/bin/pip install venv-pack)")
        venv_pack = Path(found)
    archive.unlink(missing_ok=True)
    _run([str(venv_pack), "--prefix", str(env_dir), "--output", str(archive), "--format", "tar.gz"],
         "venv-pack of the environment")
    archive.chmod(0o644)  # venv-pack writes 0600; the cluster's users (YARN, Spark) must read it


def copy_driver_files(source: Path, out: Path) -> list[Path]:
    """jobs/*.py and conf/ (the files spark-submit and the jobs' --config arguments name)."""
    copied = []
    for name in DRIVER_DIRS:
        src, dst = source / name, out / name
        if not src.is_dir():
            raise PackageError(f"{src} missing: allowed is a checkout with {', '.join(DRIVER_DIRS)}/")
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        copied.append(dst)
    return copied


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build(out: Path, source: Path | None = None, with_pyspark: bool = False) -> Artifact:
    """Build every part of the artifact into ``out`` (created; earlier artifacts there are replaced)."""
    source = find_source(source)
    out = Path(out).resolve()
    inside = [d for d in (*WHEEL_SOURCES, *DRIVER_DIRS) if out == source / d or source / d in out.parents]
    if out == source or inside:
        raise PackageError(f"--out {out}: allowed is a directory that is neither the checkout nor inside its "
                           f"{', '.join(d + '/' for d in (*WHEEL_SOURCES[2:], *DRIVER_DIRS))} (e.g. dist/cluster)")
    out.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    t = time.monotonic()
    wheels = out / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir()
    wheel = build_wheel(source, wheels)
    seconds["wheel"] = time.monotonic() - t
    requirements = runtime_requirements(wheel, with_pyspark)
    t = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ingest-env-build-") as tmp:
        env_dir = Path(tmp) / "env"
        frozen = build_env(wheel, requirements, env_dir)
        download_wheels(frozen, wheels)
        seconds["environment"] = time.monotonic() - t
        t = time.monotonic()
        archive = out / ENV_ARCHIVE
        pack_env(env_dir, archive)
        seconds["pack"] = time.monotonic() - t
    driver_files = copy_driver_files(source, out)
    (out / "requirements.txt").write_text("\n".join(frozen) + "\n")
    dockerfile = out / "Dockerfile"
    template = source / DOCKERFILE
    dockerfile.write_text(template.read_text().replace("@WHEEL@", wheel.name))
    # the image needs wheels/ and requirements.txt only: keep the packed environment out of the build context
    (out / ".dockerignore").write_text(f"{ENV_ARCHIVE}\n{DRIVER_DIRS[0]}\n{DRIVER_DIRS[1]}\nbuild-info.json\n")
    info = out / "build-info.json"
    artifact = Artifact(out, wheel, archive, driver_files, dockerfile, info, requirements, seconds)
    base = Path(getattr(sys, "_base_executable", sys.executable))
    info.write_text(json.dumps({
        "wheel": wheel.name, "wheel_sha256": _sha256(wheel),
        "env_archive": ENV_ARCHIVE, "env_archive_sha256": _sha256(archive),
        "requirements": requirements, "left_out": [] if with_pyspark else sorted(PROVIDED_BY_SPARK),
        "python": ".".join(map(str, sys.version_info[:3])), "base_interpreter": str(base),
        "source": str(source), "seconds": {k: round(v, 1) for k, v in seconds.items()},
    }, indent=2) + "\n")
    return artifact


def _human(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB"


def summary_text(a: Artifact) -> str:
    """What was built, each part's size, and how to ship it (the commands of docs/cluster.md)."""
    sizes = a.sizes()
    width = max(len(k) for k in sizes)
    lines = [f"built in {a.out} ({', '.join(f'{k} {v:.1f}s' for k, v in a.seconds.items())}):"]
    lines += [f"  {name:<{width}}  {_human(size):>9}" for name, size in sizes.items()]
    base = json.loads(a.build_info.read_text())["base_interpreter"]
    lines += [
        f"every node needs the interpreter {base} (the environment links to it, see build-info.json)",
        "ship it (docs/cluster.md): in the directory spark-submit runs from (client mode), unpack the same archive,",
        f"  mkdir -p {ARCHIVE_ALIAS} && tar -xzf {a.env_archive.name} -C {ARCHIVE_ALIAS}",
        f"and give spark-submit (SPARK_HOME set) PYSPARK_PYTHON=./{ARCHIVE_ALIAS}/bin/python "
        f"PYSPARK_DRIVER_PYTHON=./{ARCHIVE_ALIAS}/bin/python",
        f"  --archives {a.env_archive}#{ARCHIVE_ALIAS} {a.out}/jobs/load.py --config CONFIG",
    ]
    return "\n".join(lines)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "package", help="build the wheel and the packed executor environment for a cluster",
        description=__doc__, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="directory to build into (created)")
    p.add_argument("--source", type=Path, default=None,
                   help="the checkout to build (default: the one the running ingest is imported from)")
    p.add_argument("--with-pyspark", action="store_true",
                   help="install pyspark into the environment too (default: left out, Spark provides it)")
    p.set_defaults(func=_run_command)


def _run_command(args) -> int:
    artifact = build(args.out, args.source, args.with_pyspark)
    print(summary_text(artifact))
    return 0

"""``ingest package``: the cluster artifact holds the code, and executors import ``ingest`` only from it.

The artifact is built once per content of the sources (``ingest package`` takes 35-90 s on the
2-core machine: pip wheel with build isolation, a fresh venv, venv-pack) and cached under
``~/.cache/ingest-tests/package/<digest>``; a change to the sources, jobs/, conf/, the Dockerfile,
pyproject or the installed versions builds it again.

The local-cluster run copies only the artifact into a fresh directory outside the checkout and
starts spark-submit there with no PYTHONPATH, a Spark installation linked outside the checkout,
the driver's and the executors' Python = the unpacked archive.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.harness.spark import SHORT_JVM_OPTS
from tests.loader.helpers import committed_ids, produce

pytestmark = [pytest.mark.slow, pytest.mark.processes]  # `ingest package`, spark-submit, a venv

REPO = Path(__file__).resolve().parents[1]
VENV_PY = REPO / ".venv" / "bin" / "python"  # the checkout's venv: ingest through the editable finder
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ingest-tests" / "package"
HASHED = ("ingest", "pyspark_ingest", "jobs", "conf", "scripts/cluster", "pyproject.toml", "setup.py", "README.md")
SITE = "lib/python{}.{}/site-packages".format(*sys.version_info[:2])
TOPIC = "package-views"


def _digest() -> str:
    from ingest.package import pinned_versions

    h = hashlib.sha256("\n".join(pinned_versions()).encode())
    for name in HASHED:
        p = REPO / name
        for f in sorted([p] if p.is_file() else p.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".so":  # in-place builds are not shipped
                h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


@pytest.fixture(scope="module")
def artifact():
    """The built artifact directory (cached by content, see the module docstring)."""
    out = CACHE / _digest()
    if not (out / "build-info.json").is_file():
        tmp = CACHE / f"{out.name}.building-{os.getpid()}"  # another pytest may build the same digest
        shutil.rmtree(tmp, ignore_errors=True)
        env = dict(os.environ, PYTHONPATH=str(REPO))
        r = subprocess.run([sys.executable, "-m", "ingest.cli", "package", "--out", str(tmp), "--source", str(REPO)],
                           env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "ingest-env.tar.gz" in r.stdout and "MB" in r.stdout and "--archives" in r.stdout, r.stdout
        for old in CACHE.iterdir():  # one cached artifact at a time: drop the other finished ones
            if old.name != out.name and ".building-" not in old.name:
                shutil.rmtree(old, ignore_errors=True)
        try:
            tmp.rename(out)
        except OSError:  # the other build finished first: use it
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _py_files(root: Path) -> dict[str, bytes]:
    return {str(f.relative_to(root.parent)): f.read_bytes() for f in root.rglob("*.py") if "__pycache__" not in f.parts}


def test_the_artifact_holds_the_code_not_a_finder_pointing_at_the_checkout(artifact):
    info = json.loads((artifact / "build-info.json").read_text())
    expected = {**_py_files(REPO / "ingest"), **_py_files(REPO / "pyspark_ingest")}

    wheel = artifact / "wheels" / info["wheel"]
    with zipfile.ZipFile(wheel) as z:
        in_wheel = {n: z.read(n) for n in z.namelist() if n.endswith(".py")}
        assert not [n for n in z.namelist() if n.endswith(".pth") or "__editable__" in n]
        # the compiled column decoder and record reader (ingest/loader/_cdecode.c, ingest/records/_crecords.c):
        # the wheel is this platform's
        assert [n for n in z.namelist() if re.fullmatch(r"ingest/loader/_cdecode\..*\.so", n)], z.namelist()
        assert [n for n in z.namelist() if re.fullmatch(r"ingest/records/_crecords\..*\.so", n)], z.namelist()
    assert re.fullmatch(r"ingest-0\.1\.0-cp\d+-cp\d+-linux_\w+\.whl", wheel.name), wheel.name
    assert in_wheel == expected  # every module, byte for byte, and nothing stale

    names, in_env, pths = [], {}, []
    with tarfile.open(artifact / "ingest-env.tar.gz", "r|gz") as t:  # one streaming pass: gzip cannot seek back
        for m in t:
            names.append(m.name)
            parts = m.name.split("/")
            if m.name.startswith(SITE + "/") and m.name.endswith(".py") and parts[3] in ("ingest", "pyspark_ingest"):
                in_env[m.name[len(SITE) + 1:]] = t.extractfile(m).read()
            elif m.name.endswith(".pth"):
                pths.append(t.extractfile(m).read().decode())
    assert in_env == expected
    assert not [n for n in names if "__editable__" in n]
    assert not [p for p in pths if str(REPO) in p or "/work/" in p]
    assert not [n for n in names if n.startswith(f"{SITE}/pyspark/") or n.startswith(f"{SITE}/py4j/")]
    assert "bin/python" in names and "pyvenv.cfg" in names

    # the environment holds exactly the versions installed here (the ones the tests ran)
    from importlib import metadata

    pins = (artifact / "requirements.txt").read_text().split()
    assert pins and all(metadata.version(p.split("==")[0]) == p.split("==")[1] for p in pins)
    assert {p.split("==")[0] for p in pins} >= {"pyarrow", "fastavro", "kazoo", "hdfs", "crcmod", "cramjam"}
    assert not [p for p in pins if p.split("==")[0] in ("pyspark", "py4j", "ingest")]
    assert info["left_out"] == ["py4j", "pyspark"]

    for name in ("jobs", "conf"):
        src = {str(f.relative_to(REPO)): f.read_bytes() for f in (REPO / name).rglob("*")
               if f.is_file() and "__pycache__" not in f.parts}
        got = {str(f.relative_to(artifact)): f.read_bytes() for f in (artifact / name).rglob("*") if f.is_file()}
        assert got == src and got

    # the Dockerfile installs this wheel and these pins from the build context, with no package index
    docker = (artifact / "Dockerfile").read_text()
    copies = [ln.split()[1:-1] for ln in docker.splitlines() if ln.startswith("COPY ")]
    assert copies == [["wheels"], ["requirements.txt"]]
    wheels = {f.name.lower() for f in (artifact / "wheels").glob("*.whl")}
    for pin in pins:
        name, version = pin.split("==")
        assert [w for w in wheels if w.startswith(f"{name.replace('-', '_').lower()}-{version}-")], (pin, wheels)
    assert len(wheels) == len(pins) + 1 and info["wheel"].lower() in wheels
    assert f"/tmp/ingest/wheels/{info['wheel']}" in docker and "--no-index" in docker and "@WHEEL@" not in docker


def test_the_dockerfile_steps_install_the_same_wheel_offline(artifact, tmp_path):
    """The Dockerfile's COPY and RUN steps, executed as written in a fresh directory: ``/`` of the image becomes
    ``tmp_path`` and ``python3`` the build's interpreter (the image's own stands in for it here; no image is
    started by the tests, see docs/cluster.md). pip gets no index: everything comes from the build context."""
    text = (artifact / "Dockerfile").read_text().replace("\\\n", " ")
    root = tmp_path / "image"
    base = json.loads((artifact / "build-info.json").read_text())["base_interpreter"]
    ran = []
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "COPY":
            *srcs, dst = rest.split()
            target = root / dst.lstrip("/")
            for src in srcs:  # Docker's rules: a directory's contents go into dst; a file into dst/ or as dst
                if (artifact / src).is_dir():
                    shutil.copytree(artifact / src, target, dirs_exist_ok=True)
                else:
                    (target if dst.endswith("/") else target.parent).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(artifact / src, target / Path(src).name if dst.endswith("/") else target)
        elif word == "RUN":
            cmd = re.sub(r"(?<![\w.-])/(opt|tmp)/", f"{root}/\\1/", rest)
            cmd = re.sub(r"^python3 ", f"{base} ", cmd)
            r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300,
                               env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_CONFIG_FILE": os.devnull})
            assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-3000:])
            ran.append(cmd)
    assert len(ran) == 4 and not (root / "tmp" / "ingest").exists()  # venv, install, import check, clean-up
    env_py = root / "opt" / "ingest-env" / "bin" / "python"
    r = subprocess.run([str(env_py), "-c", "import ingest, sys; print(ingest.__file__); print(sys.prefix)"],
                       capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path, timeout=60)
    assert r.stdout.split() == [str(root / "opt" / "ingest-env" / SITE / "ingest" / "__init__.py"),
                                str(root / "opt" / "ingest-env")], r.stderr
    frozen = subprocess.run([sys.executable, "-m", "pip", "--python", str(env_py), "freeze", "--exclude", "ingest"],
                            capture_output=True, text=True).stdout.split()
    assert frozen == (artifact / "requirements.txt").read_text().split()  # the image holds exactly the pins


def _spark_home(run: Path) -> Path:
    """A Spark installation outside the checkout: the pip pyspark's bin/, jars/ and python/ (Spark's
    scripts, jars, and the pyspark.zip + py4j zip it puts on the Python workers' path), hard-linked
    (same file system, instant) so that no path the JVMs or Python see leads into the checkout's venv."""
    import pyspark

    home = run / "spark"
    src = Path(pyspark.__file__).parent
    for name in ("bin", "jars", "python"):
        shutil.copytree(src / name, home / name, copy_function=_link_or_copy,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return home


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copy2(src, dst)


def _clean_env(run: Path, spark_home: Path) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(run / "home"), "LANG": "C.UTF-8",
        "SPARK_HOME": str(spark_home), "SPARK_LOCAL_DIRS": str(run / "local"),  # local-cluster workers: SPARK_HOME/work
        "SPARK_SUBMIT_OPTS": SHORT_JVM_OPTS,  # short runs: C1 JIT starts faster
        # the way Spark's "Python Package Management" page ships a venv: the same relative path on the
        # driver (client mode: unpacked next to spark-submit) and on every executor (--archives ...#environment)
        "PYSPARK_PYTHON": "./environment/bin/python", "PYSPARK_DRIVER_PYTHON": "./environment/bin/python",
    }
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    (run / "home").mkdir()
    return env


def archive_problems(report: dict, run: Path) -> list[str]:
    """Why ``report`` (one process of the probe) did not run on an unpacked archive under ``run`` alone: its
    interpreter, where ``ingest`` came from, where it could come from, and any path or finder to a checkout."""
    checkouts = {str(REPO), str(REPO.resolve()), str((REPO / ".venv").resolve().parent)}  # + the editable target
    prefix = Path(report["prefix"])
    problems = []
    if prefix != Path(report["cwd"]) / "environment" or run not in prefix.parents:
        problems.append(f"sys.prefix {prefix} is not the unpacked archive {report['cwd']}/environment under {run}")
    if report["ingest"] != str(prefix / SITE / "ingest" / "__init__.py") or run not in Path(report["ingest"]).parents:
        problems.append(f"ingest imported from {report['ingest']}")
    if report["importable_from"] != [str(prefix / SITE)]:
        problems.append(f"ingest importable from {report['importable_from']}")
    if report["editable_finders"]:
        problems.append(f"editable finders loaded: {report['editable_finders']}")
    reach = [p for p in report["sys_path"] + report["pythonpath"].split(os.pathsep)
             if any(p == c or p.startswith(c + "/") for c in checkouts)]
    if reach:
        problems.append(f"sys.path/PYTHONPATH entries inside the checkout: {reach}")
    return problems


def test_local_cluster_executors_import_ingest_only_from_the_shipped_archive(artifact, tmp_path_factory,
                                                                             brokers, registry_url):
    run = tmp_path_factory.mktemp("cluster-run")
    assert not str(run).startswith("/work/") and str(REPO) not in str(run)
    for name in ("ingest-env.tar.gz", "jobs", "conf"):  # only the artifact
        (shutil.copytree if (artifact / name).is_dir() else shutil.copy2)(artifact / name, run / name)
    shutil.copy2(REPO / "tests" / "package_probe.py", run / "package_probe.py")
    (run / "environment").mkdir()  # the driver's copy (client mode), as docs/cluster.md says
    with tarfile.open(run / "ingest-env.tar.gz") as t:
        t.extractall(run / "environment", filter="tar")
    spark_home = _spark_home(run)

    ids = produce(brokers, registry_url, TOPIC, 120, chunk=10)
    dest = run / "warehouse"
    conf = run / "conf" / "loader-test.properties"
    conf.write_text(f"destination={dest}\nbrokers={','.join(f'{b.host}:{b.port}' for b in brokers)}\n"
                    f"registry.url={registry_url}\ntopics={TOPIC}\nformat=parquet\n")

    cmd = [str(spark_home / "bin" / "spark-submit"), "--master", "local-cluster[2,1,1024]",
           "--archives", "ingest-env.tar.gz#environment",
           "--conf", "spark.ui.enabled=false", "--conf", f"spark.executor.extraJavaOptions={SHORT_JVM_OPTS}",
           "package_probe.py", "jobs/load.py", str(conf), str(VENV_PY)]
    r = subprocess.run(cmd, cwd=run, env=_clean_env(run, spark_home), capture_output=True, text=True, timeout=400)
    out = r.stdout + r.stderr
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("PROBE-JSON ")), None)
    assert r.returncode == 0 and line, out[-6000:]
    report = json.loads(line[len("PROBE-JSON "):])
    print("seconds inside the application:", {k: round(v, 1) for k, v in report["seconds"].items()})

    # the real load committed every message exactly once
    assert report["load_rc"] == 0 and "COMMITTED" in r.stdout, out[-4000:]
    got = committed_ids(dest, TOPIC)
    assert sum(got.values()) == 120 and set(got) == set(ids) and max(got.values()) == 1
    # ... its Parquet chunks decoded by the compiled decoder of the shipped wheel (the run record says so)
    (record,) = [json.loads(p.read_text()) for p in (dest / "_ingest" / "runs").glob("*.json")]
    assert {d for p in record["partitions"] for d in p.get("decoders", ())} == {"compiled"}, record["partitions"]

    # the driver and both executors import ingest from the unpacked archive only
    assert report["driver"]["cwd"] == str(run)
    assert archive_problems(report["driver"], run) == []
    executors = {e["cwd"] for e in report["executors"]}
    assert len(executors) == 2 and all(Path(c).parent.parent == run / "spark" / "work" for c in executors), executors
    for e in report["executors"]:
        assert archive_problems(e, run) == []
        # the compiled decoder from the wheel in the archive, not a build in the checkout
        assert e["cdecode"] and Path(e["cdecode"]).parent == Path(e["prefix"]) / SITE / "ingest" / "loader", e["cdecode"]

    # negative check: the same executors running the checkout's editable venv are caught
    assert report["negative"] and {n["cwd"] for n in report["negative"]} <= executors
    editable = subprocess.run([str(VENV_PY), "-c", "import ingest; print(ingest.__file__)"], cwd=run, text=True,
                              capture_output=True, env={"PATH": "/usr/bin:/bin"}).stdout.strip()
    assert run not in Path(editable).parents and editable.endswith("/ingest/__init__.py"), editable
    for n in report["negative"]:
        assert n["ingest"] == editable, n  # the checkout, through the editable finder
        problems = archive_problems(n, run)
        assert f"ingest imported from {n['ingest']}" in problems, problems
        assert any(p.startswith("editable finders loaded: ['__editable___ingest") for p in problems), problems


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    from tests.harness.brokers import broker_cluster, stop_all

    started = broker_cluster(tmp_path_factory, n=1, num_partitions=2)
    yield started
    stop_all(started)


@pytest.fixture(scope="module")
def registry_url(tmp_path_factory):
    from tests.harness.registry import RegistryProcess

    proc = RegistryProcess(tmp_path_factory.mktemp("registry")).start()
    yield proc.url
    proc.stop()


def test_package_refuses_to_build_into_the_checkout_or_without_one(tmp_path):
    """Refused before anything is built or deleted: the command exits 2 with one line naming the value."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for out, source, says in ((REPO, REPO, f"--out {REPO}: allowed is a directory that is neither the checkout"),
                              (REPO / "jobs" / "x", REPO, f"--out {REPO / 'jobs' / 'x'}: allowed is"),
                              (tmp_path / "out", tmp_path, f"no ingest checkout at {tmp_path}: allowed is")):
        r = subprocess.run([sys.executable, "-m", "ingest.cli", "package", "--out", str(out), "--source", str(source)],
                           env=env, capture_output=True, text=True, timeout=60)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"ingest package: error: {says}"), r.stderr
    assert not (REPO / "jobs" / "x").exists() and not (tmp_path / "out").exists()

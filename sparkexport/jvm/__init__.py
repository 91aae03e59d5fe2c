"""The JVM data source: build its jar from the Java sources shipped in this package.

The jar is built at first use with the machine's ``javac`` (Java 17+) against the jars pyspark
ships, into a cache folder keyed by the pyspark version and a hash of the Java sources, under a
lock (several processes may ask at once). pip's isolated build has no pyspark, so this is the
build step, not ``pip install``; ``python -m pocketmq.sparkexport.jvm build`` (or ``pocketmq
spark-jar``) builds it and prints its path, for ``spark-submit --jars``.

Pure Python (no pyspark import: the pyspark folder is found by its spec), so it imports anywhere.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

__all__ = [
    "SOURCE_DIR",
    "JvmBuildError",
    "build_jar",
    "cache_dir",
    "jar_path",
    "pyspark_jars",
    "pyspark_version",
    "source_hash",
]

SOURCE_DIR = Path(__file__).resolve().parent / "src"
JAR_NAME = "pocketmq-spark.jar"
JAVA_RELEASE = "17"
_BUILD_TIMEOUT_S = 600


class JvmBuildError(RuntimeError):
    """The jar could not be built (no javac, no pyspark, a compile error): says which."""


def _pyspark_dir() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise JvmBuildError(
            "the JVM data source is built against pyspark's jars, and pyspark is not installed "
            "(from a pocketmq checkout: python3 -m pip install -e '.[spark]')"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def pyspark_jars() -> Path:
    folder = _pyspark_dir() / "jars"
    if not folder.is_dir():
        raise JvmBuildError(f"pyspark has no jars folder at {folder}")
    return folder


def pyspark_version() -> str:
    text = (_pyspark_dir() / "version.py").read_text()
    for line in text.splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise JvmBuildError(f"no __version__ in {_pyspark_dir() / 'version.py'}")


def _sources() -> list[Path]:
    return sorted(p for p in SOURCE_DIR.rglob("*") if p.is_file())


def source_hash() -> str:
    """A hash of every file under ``src/`` (names and bytes) and the target release."""
    digest = hashlib.sha256(JAVA_RELEASE.encode())
    for path in _sources():
        digest.update(path.relative_to(SOURCE_DIR).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    """``$POCKETMQ_JVM_CACHE``, else ``$XDG_CACHE_HOME/pocketmq/spark-jar``, else ``~/.cache/...``."""
    configured = os.environ.get("POCKETMQ_JVM_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pocketmq" / "spark-jar"


def jar_path() -> Path:
    """Where the jar for this pyspark and these sources is (built or not)."""
    return cache_dir() / f"pyspark-{pyspark_version()}-{source_hash()}" / JAR_NAME


def _javac() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").is_file():
        return str(Path(home) / "bin" / "javac")
    found = shutil.which("javac")
    if found is None:
        raise JvmBuildError(
            "the JVM data source needs javac (a JDK 17 or newer; a JRE has none): install one "
            "or set JAVA_HOME, or use the Python data source (POCKETMQ_SPARK_SOURCE=python)"
        )
    return found


def build_jar(*, force: bool = False) -> Path:
    """The jar's path, compiling it first if the cache has none (under a file lock)."""
    target = jar_path()
    if target.is_file() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file() and not force:
            return target  # another process built it while we waited
        with tempfile.TemporaryDirectory(dir=target.parent) as work:
            classes = Path(work) / "classes"
            classes.mkdir()
            java = [str(p) for p in _sources() if p.suffix == ".java"]
            command = [
                _javac(),
                "--release",
                JAVA_RELEASE,
                "-encoding",
                "UTF-8",
                "-proc:none",
                "-nowarn",
                "-cp",
                str(pyspark_jars() / "*"),
                "-d",
                str(classes),
                *java,
            ]
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S
                )
            except subprocess.TimeoutExpired:
                raise JvmBuildError(f"javac took over {_BUILD_TIMEOUT_S} s") from None
            if done.returncode != 0:
                raise JvmBuildError(f"javac failed ({done.returncode}):\n{done.stderr[-4000:]}")
            staged = Path(work) / JAR_NAME
            with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as jar:
                jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
                for path in sorted(classes.rglob("*.class")):
                    jar.write(path, path.relative_to(classes).as_posix())
                for path in _sources():
                    if path.suffix != ".java":  # resources: the service registration
                        jar.write(path, path.relative_to(SOURCE_DIR).as_posix())
            os.replace(staged, target)
    return target

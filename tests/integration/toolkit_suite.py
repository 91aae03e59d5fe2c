"""Run a user's own test suite (files written into a temporary folder, no conftest) with
``python -m pytest`` in a subprocess, against the installed package: how the toolkit's tests
show that the plugin, its fixtures and helpers work outside this repository."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SuiteRun", "run_user_suite"]

_TIMEOUT_S = 300


@dataclass
class SuiteRun:
    returncode: int
    stdout: str
    output: str  # stdout, then stderr

    def outcome(self) -> str:
        """pytest's last line, e.g. ``2 passed, 1 failed in 3.1s``."""
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        return lines[-1] if lines else ""


def run_user_suite(folder: Path, files: dict[str, str], *args: str) -> SuiteRun:
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_S,
    )
    return SuiteRun(result.returncode, result.stdout, result.stdout + result.stderr)

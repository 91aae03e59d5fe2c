"""The README's two set-up commands and CI agree, so a clean machine builds what CI built."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# These read the checkout itself (sources, README, CI, compose): not run against a wheel.
pytestmark = pytest.mark.checkout


def setup_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set-up: two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)


def test_the_readme_has_exactly_two_commands_each_making_its_venv() -> None:
    commands = setup_commands()
    assert len(commands) == 2, commands
    for command in commands:
        assert "\n" not in command, f"one command, one line: {command!r}"
        # PEP 668 systems refuse a bare pip install: each command makes (or reuses) a venv.
        assert command.startswith("python3 -m venv .venv && . .venv/bin/activate && "), command
    run, test = commands
    assert run.endswith("pocketmq standalone") and "pip install -e" in run
    assert test.endswith("python3 -m pytest") and ".[test,spark,grpc]" in test


def test_ci_runs_the_readme_test_command_word_for_word() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = setup_commands()[1]
    assert test_command in ci.splitlines(), "the README's test command is not a line of .ci/run"
    # A reused venv would hide what pip picks today: CI refuses one.
    assert "if [ -e .venv ]" in ci

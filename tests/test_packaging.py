"""The distribution installs one top-level package, ``pocketmq``, and every folder of code in it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# These read the checkout itself (sources, README, CI, compose): not run against a wheel.
pytestmark = pytest.mark.checkout


def test_every_package_folder_is_installed_under_pocketmq() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = setuptools["package-dir"]
    assert all(name.startswith("pocketmq.") for name in [*mapping, *setuptools["packages"]])
    folders = {
        f"pocketmq.{folder}": folder
        for folder in ("broker", "cli", "client", "ids", "sparkexport", "store", "testing")
    }
    assert mapping == folders
    found = {
        "pocketmq." + ".".join(init.parent.relative_to(ROOT).parts)
        for folder in folders.values()
        for init in (ROOT / folder).rglob("__init__.py")
    }
    assert set(setuptools["packages"]) == found


def test_the_console_script_is_the_cli_above_everything() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"pocketmq": "pocketmq.cli:main"}

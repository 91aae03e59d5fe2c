"""One clear message when the optional Spark dependencies are missing."""

from __future__ import annotations

import importlib

__all__ = ["INSTALL_HINT", "SparkMissingError", "missing_spark_modules", "require_spark"]

# pocketmq is not on PyPI: the extra is installed from a checkout of the repository.
INSTALL_HINT = "from a pocketmq checkout: python3 -m pip install -e '.[spark]'"
_MODULES = ("pyspark", "pyarrow", "numpy")


class SparkMissingError(ImportError):
    pass


def missing_spark_modules() -> list[str]:
    missing = []
    for name in _MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def require_spark() -> None:
    """Raise :class:`SparkMissingError` (an ImportError) naming what to install."""
    missing = missing_spark_modules()
    if missing:
        raise SparkMissingError(
            f"the pocketmq Spark exporter needs {', '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed ({INSTALL_HINT})",
            name=missing[0],
        )

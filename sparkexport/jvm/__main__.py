"""``python -m pocketmq.sparkexport.jvm [build|path|generate]``: build the JVM data source's jar
and print its path (for ``spark-submit --jars``), print where it would be, or regenerate
``RecordLayout.java``."""

from __future__ import annotations

import argparse
import sys

from pocketmq.sparkexport.jvm import JvmBuildError, build_jar, jar_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pocketmq.sparkexport.jvm")
    parser.add_argument("action", nargs="?", default="build", choices=("build", "path", "generate"))
    parser.add_argument("--force", action="store_true", help="build again even if cached")
    args = parser.parse_args(argv)
    try:
        if args.action == "generate":
            from pocketmq.sparkexport.jvm.generate import main as generate

            return generate()
        print(jar_path() if args.action == "path" else build_jar(force=args.force))
    except JvmBuildError as error:
        print(f"pocketmq: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A clean stop of ``pocketmq standalone`` (the installed console script), read from its log.

On SIGTERM or SIGINT the broker unregisters from the name server over the connection it
registered on, then closes it: the name server logs the broker ``unregistered``, never
``(it was not registered)`` (which it did when the registering connection closed first and the
name server dropped the broker for that), and nothing raises.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

POCKETMQ = Path(sys.executable).parent / "pocketmq"


@pytest.mark.skipif(not POCKETMQ.exists(), reason="the pocketmq console script is not installed")
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_clean_stop_of_standalone_unregisters_once_and_quietly(stop: signal.Signals) -> None:
    process = subprocess.Popen(
        [
            str(POCKETMQ),
            "standalone",
            "--memory",
            "--no-grpc",
            "--no-http",  # 8082 may be taken on a shared machine: its WARNING is not the point here
            "--port",
            "0",
            "--namesrv-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()  # blocks until the ready line (or the exit)
        assert "ready" in ready, ready
        process.send_signal(stop)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert "unregistered" in stderr, stderr  # the name server did see the unregistration
    assert "not registered" not in stderr, stderr
    assert "Traceback" not in stderr, stderr
    assert "ERROR" not in stderr and "WARNING" not in stderr, stderr

"""The self-signed certificate is checked and made in a child interpreter, so the broker never
imports cryptography (about 7 MiB of an idle standalone's memory): the pair is made once, kept
while it names the hosts, made again when it does not, and serves TLS."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pocketmq.broker.remoting.tls import CERT_FILE, KEY_FILE

ENSURE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from pocketmq.broker.remoting.tls import ensure_certificate, server_context
    cert, key = ensure_certificate(Path(sys.argv[1]), sys.argv[2:])
    server_context(cert, key)  # loads as a TLS server's certificate and key
    print("cryptography" in sys.modules)
    """
)


def ensure(folder: Path, *hosts: str) -> bool:
    """ensure_certificate in a fresh interpreter; whether it imported cryptography."""
    done = subprocess.run(
        [sys.executable, "-c", ENSURE, str(folder), *hosts],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip() == "True"


def test_the_certificate_is_made_kept_and_remade_without_cryptography_here(
    tmp_path: Path,
) -> None:
    assert ensure(tmp_path, "127.0.0.1") is False
    cert, key = tmp_path / CERT_FILE, tmp_path / KEY_FILE
    first = cert.read_bytes()
    assert first.startswith(b"-----BEGIN CERTIFICATE-----")
    assert key.stat().st_mode & 0o077 == 0  # the key readable by its owner only
    assert ensure(tmp_path, "127.0.0.1") is False
    assert cert.read_bytes() == first  # it names the host: kept
    assert ensure(tmp_path, "127.0.0.1", "broker.example") is False
    assert cert.read_bytes() != first  # a host it does not name: made again


def test_a_folder_that_cannot_be_made_is_an_os_error(tmp_path: Path) -> None:
    from pocketmq.broker.remoting.tls import _self_signed_apart

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError, match="self-signed certificate"):
        _self_signed_apart(blocker / "tls", ["127.0.0.1"])

"""TLS for the broker's ports: the certificate, the server context, the permissive listener.

RocketMQ's proxy serves TLS and plaintext on one gRPC port (``tls.server.mode``: disabled,
permissive, enforcing; permissive by default) with a self-signed certificate in its test mode
(``tls.test.mode.enable``, default true), and its 4.x remoting server tells the two apart by the
first byte (0x16, a TLS handshake record). The 5.x SDKs for Java, Go and C# dial TLS by default
and trust any certificate; the Python and Node.js ones dial plaintext by default.

pocketmq does the same:

* ``ensure_certificate`` makes a self-signed certificate (localhost, 127.0.0.1, the advertised
  host) in the data folder at first start, or takes the one given;
* ``broker.grpc.tls.SniffingFront`` listens on the public gRPC port in permissive mode;
* ``sniffing_server`` serves a remoting port the same way without a splice: the first byte is
  peeked at on the accepted socket, which asyncio then serves with or without TLS.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import logging
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

__all__ = [
    "TLS_MODES",
    "TLS_RECORD_HANDSHAKE",
    "ensure_certificate",
    "make_certificate",
    "server_context",
    "sniffing_server",
]

log = logging.getLogger("pocketmq.tls")

TLS_MODES: Final = ("off", "permissive", "enforcing")
TLS_RECORD_HANDSHAKE: Final = 0x16  # the content type of a ClientHello's record
CERT_FILE: Final = "pocketmq-cert.pem"
KEY_FILE: Final = "pocketmq-key.pem"
CERT_VALID_DAYS: Final = 3650
# A connection must send its first byte this soon or is closed (grpc's handshake timeout and
# the remoting ports' first-request timeout only start once a byte picked a side).
FIRST_BYTE_TIMEOUT_S: Final = 15.0


def _names(hosts: Iterable[str]) -> list[Any]:
    from cryptography import x509

    names: list[Any] = []
    for host in dict.fromkeys(["localhost", "127.0.0.1", *hosts]):
        if not host or host in ("0.0.0.0", "::"):  # a wildcard listens; nobody dials it
            continue
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _covers(cert_pem: bytes, hosts: Iterable[str]) -> bool:
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    now = datetime.datetime.now(datetime.UTC)
    return all(name in san for name in _names(hosts)) and cert.not_valid_after_utc > now


def make_certificate(hosts: Iterable[str]) -> tuple[bytes, bytes]:
    """A self-signed certificate for ``hosts`` (and localhost, 127.0.0.1): PEM cert, PEM key.

    It is its own CA (basic constraints, key usage, key identifiers), so a client given it as
    the trusted root (``--tls-ca``, ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``) verifies it, strict
    X.509 checks included."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pocketmq self-signed")])
    now = datetime.datetime.now(datetime.UTC)
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))  # clocks a little behind
        .not_valid_after(now + datetime.timedelta(days=CERT_VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def ensure_certificate(
    folder: Path, hosts: Iterable[str], cert: Path | None = None, key: Path | None = None
) -> tuple[Path, Path]:
    """The certificate and key files to serve: ``cert``/``key`` when given, else the
    self-signed pair in ``folder``, made (again) when missing, expired or not naming one of
    ``hosts``. ``OSError`` when a given file cannot be read; ``ValueError`` when only one is
    given."""
    if cert is not None or key is not None:
        if cert is None or key is None:
            raise ValueError("a TLS certificate and its key go together")
        cert.read_bytes(), key.read_bytes()  # unreadable: say so at start, not per handshake
        return cert, key
    hosts = list(hosts)
    # In this process when cryptography is loaded already (nothing to save) or there is no
    # interpreter to start (an embedding application).
    if "cryptography" in sys.modules or not sys.executable:
        _self_signed(folder, hosts)
    else:
        _self_signed_apart(folder, hosts)
    return folder / CERT_FILE, folder / KEY_FILE


def _self_signed(folder: Path, hosts: list[str]) -> bool:
    """The self-signed pair in ``folder``, made when missing, expired or not naming one of
    ``hosts``; True when made."""
    cert_path, key_path = folder / CERT_FILE, folder / KEY_FILE
    if cert_path.exists() and key_path.exists() and _covers(cert_path.read_bytes(), hosts):
        return False
    cert_pem, key_pem = make_certificate(hosts)
    folder.mkdir(parents=True, exist_ok=True)
    # The key first, readable by the owner only; the certificate last marks the pair whole.
    key_path.touch(mode=0o600, exist_ok=True)
    key_path.chmod(0o600)
    key_path.write_bytes(key_pem)
    cert_path.write_bytes(cert_pem)
    log.info("TLS: made a self-signed certificate %s", cert_path)
    return True


# The child's exit status when cryptography cannot be imported.
_NO_CRYPTOGRAPHY: Final = 3


def _self_signed_apart(folder: Path, hosts: list[str]) -> None:
    """``_self_signed`` in a child interpreter: checking or making the certificate imports
    cryptography, about 7 MiB resident that a broker which then only serves the files would
    hold for its whole life (an idle standalone's memory). ``ImportError`` when cryptography
    is not installed; ``OSError`` when the child fails otherwise."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pocketmq.broker.remoting.tls", str(folder), *hosts],
            capture_output=True,
            text=True,
            timeout=_CHILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise OSError(f"making a self-signed certificate in {folder} took over 120 s") from None
    if done.returncode == _NO_CRYPTOGRAPHY:
        raise ImportError("cryptography is not installed (the grpc extra needs it)")
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise OSError(
            f"making a self-signed certificate in {folder} failed: "
            f"{lines[-1] if lines else f'exit status {done.returncode}'}"
        )
    if done.stdout.strip() == "made":
        log.info("TLS: made a self-signed certificate %s", folder / CERT_FILE)


_CHILD_TIMEOUT_S: Final = 120.0


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


# -- a remoting port with TLS as an option: peek, then serve -----------------------------------


class _Sniffer:
    """Accepts on ``sock``; each connection, once its first byte shows whether it speaks TLS,
    is handed to asyncio (``connect_accepted_socket``) with or without ``context``."""

    def __init__(
        self,
        sock: socket.socket,
        factory: Callable[[], asyncio.BaseProtocol],
        context: ssl.SSLContext,
    ) -> None:
        self.sock = sock
        self.factory = factory
        self.context = context
        self.waiting: dict[socket.socket, asyncio.TimerHandle] = {}
        self.tasks: set[asyncio.Future[Any]] = set()
        self.loop = asyncio.get_running_loop()
        self.loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(64):  # a burst, then let the loop breathe
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # EMFILE and the like: the next accept may do
                log.warning("remoting TLS: accept failed: %s", error)
                return
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.waiting[conn] = self.loop.call_later(FIRST_BYTE_TIMEOUT_S, self._drop, conn)
            self.loop.add_reader(conn.fileno(), self._peek, conn)

    def _drop(self, conn: socket.socket) -> None:
        self.loop.remove_reader(conn.fileno())
        self.waiting.pop(conn, None)
        conn.close()

    def _peek(self, conn: socket.socket) -> None:
        try:
            first = conn.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            first = b""
        timer = self.waiting.pop(conn, None)
        if timer is not None:
            timer.cancel()
        self.loop.remove_reader(conn.fileno())
        if not first:  # closed before a byte
            conn.close()
            return
        context = self.context if first[0] == TLS_RECORD_HANDSHAKE else None
        task = asyncio.ensure_future(self._serve(conn, context))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _serve(self, conn: socket.socket, context: ssl.SSLContext | None) -> None:
        try:
            await self.loop.connect_accepted_socket(self.factory, conn, ssl=context)
        except (OSError, ssl.SSLError) as error:  # a failed handshake: that client's problem
            log.info("remoting TLS: handshake failed: %s", error)
            conn.close()

    def close(self) -> None:
        self.loop.remove_reader(self.sock.fileno())
        for conn, timer in self.waiting.items():
            timer.cancel()
            self.loop.remove_reader(conn.fileno())
            conn.close()
        self.waiting.clear()
        for task in self.tasks:
            task.cancel()
        self.sock.close()


class SniffingServer:
    """What ``sniffing_server`` returns: the listening sockets and ``close``."""

    def __init__(self, sniffer: _Sniffer) -> None:
        self._sniffer = sniffer
        self.sockets = [sniffer.sock]

    def close(self) -> None:
        self._sniffer.close()

    async def wait_closed(self) -> None:
        return None


async def sniffing_server(
    factory: Callable[[], asyncio.BaseProtocol],
    host: str,
    port: int,
    context: ssl.SSLContext,
    backlog: int = 1024,
) -> SniffingServer:
    """Listen on ``host:port``, serving each connection with TLS if its first byte begins a
    TLS handshake and in plaintext otherwise (RocketMQ's permissive ``tls.server.mode``)."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return SniffingServer(_Sniffer(sock, factory, context))


if __name__ == "__main__":  # the child of _self_signed_apart: FOLDER HOST...
    try:
        import cryptography  # noqa: F401
    except ImportError:
        sys.exit(_NO_CRYPTOGRAPHY)
    print("made" if _self_signed(Path(sys.argv[1]), sys.argv[2:]) else "kept")

"""One end of a remoting connection without I/O: the request/response session.

The SDK's connection (``client/connection.py``) and both remoting ends of the broker (the
server's connections, ``broker/remoting/server.py``, and its outbound connection to the name
servers, ``broker/remoting/client.py``) keep their request/response state here and wrap it in a
thin asyncio adapter that moves the bytes, owns the futures and runs the timers. The models are
h11's ``Connection`` (bytes in, events out; the caller does the I/O) and asyncpg's
``CoreProtocol`` (the protocol's state apart from the transport).

What the session holds and decides:

* **opaque ids**: each request this end starts gets the next opaque, 1, 2, ... up to a Java
  int's maximum, then 1 again (RocketMQ's ``requestId`` is an ``AtomicInteger``).
* **the pending map**: ``send_request(cmd, token, deadline, timeout_ms)`` returns the frame
  and keeps the request until its response arrives (``receive_data`` hands back the response
  with the caller's ``token``, e.g. a future), its deadline passes (``expire``), the caller gives
  up (``forget``) or the connection is lost (``connection_lost``).
* **oneway**: ``send_oneway(cmd)`` sets the oneway bit; nothing waits for an answer. A request
  of the peer with that bit gets none either: ``respond`` returns ``None`` for it.
* **timeouts as deadlines**: a deadline is a number on the adapter's clock (asyncio's loop
  time); the session never reads a clock. The adapter calls ``expire(now)`` when the earliest
  deadline it knows of has passed; ``expire`` returns the requests that ran out and the next
  deadline left, for the adapter's next timer.
* **requests started by the other side**: ``receive_data`` lists them in arrival order; the
  adapter runs a handler and answers through ``respond``; ``not_supported`` and ``failed`` build
  the answers to an unknown request code and to a handler that raised, in this end's language
  and version.
* **a broken stream**: a frame that cannot be decoded loses the stream (as Java's
  ``NettyDecoder`` closes the channel). ``receive_data`` then returns the error, together with
  what was decoded before it; the adapter closes the connection.

Sending a frame on a closed connection, corking, back-pressure and the handlers' tasks are the
adapter's business. Tested without sockets in ``tests/unit/test_protocol_session.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Generic, TypeVar

from .codes import DEFAULT_VERSION, RPC_ONEWAY, RPC_TYPE, LanguageCode, ResponseCode
from .errors import RemoteProtocolError
from .frames import FRAME_SIZE_MAX, FrameDecoder, RemotingCommand, encode_frame_parts

__all__ = ["OPAQUE_MAX", "Answer", "Expired", "RemotingSession", "Received"]

T = TypeVar("T")

OPAQUE_MAX: Final = 2**31 - 1  # a Java int
_INF: Final = float("inf")
_NOTHING: Final[tuple[()]] = ()

# (token, response): the answer to one of our requests
Answer = tuple[T, RemotingCommand]
# (token, request code, timeout_ms): a request whose deadline passed
Expired = tuple[T, int, float]
# What one read held: the peer's requests, the answers to ours, and the error that lost the
# stream (None while it is fine)
Received = tuple[Sequence[RemotingCommand], Sequence[Answer[T]], RemoteProtocolError | None]


class RemotingSession(Generic[T]):
    """The request/response state of one connection; ``T`` is the adapter's token type.

    ``language`` and ``version`` are this end's, used in the answers the session builds
    (``not_supported``, ``failed``): a broker says JAVA, the SDK PYTHON.
    """

    __slots__ = (
        "_decoder",
        "_opaque",
        "_pending",
        "error",
        "language",
        "stray_responses",
        "version",
    )

    def __init__(
        self,
        *,
        frame_size_max: int = FRAME_SIZE_MAX,
        language: LanguageCode = LanguageCode.JAVA,
        version: int = DEFAULT_VERSION,
    ) -> None:
        self._decoder = FrameDecoder(frame_size_max=frame_size_max)
        self._opaque = 0
        # opaque -> (token, deadline, request code, timeout_ms) of each request awaiting its answer
        self._pending: dict[int, tuple[T, float, int, float]] = {}
        self.language = language
        self.version = version
        self.error: RemoteProtocolError | None = None  # set once the stream is lost
        self.stray_responses = 0  # responses to no pending request (late, or never asked)

    @property
    def requests_pending(self) -> int:
        return len(self._pending)

    @property
    def buffered_bytes(self) -> int:
        """Bytes received that do not make a whole frame yet."""
        return self._decoder.buffered_bytes

    def discard_buffered(self) -> None:
        """Let go of a partial frame's bytes now: the connection is being closed, and its
        memory should not wait for the loop to report it lost."""
        self._decoder.discard()

    def deadlines(self) -> dict[int, float]:
        """opaque -> deadline of every pending request."""
        return {opaque: entry[1] for opaque, entry in self._pending.items()}

    # -- incoming ------------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> Received[T]:
        """Decode ``data``: the peer's requests in order, the answers to our requests (each
        taken out of the pending map, with its token), and the error if the stream is lost.

        After an error, the commands decoded before it are still returned; later calls return
        nothing but the same error.
        """
        if self.error is not None:
            return _NOTHING, _NOTHING, self.error
        try:
            frames = self._decoder.feed(data)
        except RemoteProtocolError as error:
            self.error = error
            frames = error.frames  # type: ignore[assignment]
        else:
            for command in frames:
                if command.flag & RPC_TYPE:
                    break
            else:  # requests only (a server's usual read): no second list
                return frames, _NOTHING, None
        requests: list[RemotingCommand] = []
        answers: list[Answer[T]] = []
        pending = self._pending
        for command in frames:
            if command.flag & RPC_TYPE:
                entry = pending.pop(command.opaque, None)
                if entry is None:
                    self.stray_responses += 1
                else:
                    answers.append((entry[0], command))
            else:
                requests.append(command)
        return requests, answers, self.error

    # -- outgoing requests ---------------------------------------------------------------------

    def _next_opaque(self) -> int:
        self._opaque = opaque = self._opaque + 1 if self._opaque < OPAQUE_MAX else 1
        return opaque

    def send_request(
        self, command: RemotingCommand, token: T, deadline: float, timeout_ms: float
    ) -> list[bytes]:
        """Number ``command`` (its opaque and flag are overwritten) and return its frame (parts
        for ``writelines``). It is pending until its answer arrives, ``deadline`` passes
        (``expire``), or ``forget``/``connection_lost``; ``timeout_ms`` is only reported."""
        self._opaque = opaque = self._opaque + 1 if self._opaque < OPAQUE_MAX else 1
        command.opaque = opaque
        command.flag = 0
        parts = encode_frame_parts(command)  # a LocalProtocolError leaves nothing pending
        self._pending[opaque] = (token, deadline, command.code, timeout_ms)
        return parts

    def send_oneway(self, command: RemotingCommand) -> list[bytes]:
        """Number ``command``, set its oneway bit and return its frame; nothing waits for it."""
        command.opaque = self._next_opaque()
        command.flag = RPC_ONEWAY
        return encode_frame_parts(command)

    def forget(self, opaque: int, token: T) -> None:
        """Stop waiting for the answer to request ``opaque`` (the caller gave up on it)."""
        entry = self._pending.get(opaque)
        if entry is not None and entry[0] is token:
            del self._pending[opaque]

    def expire(self, now: float) -> tuple[list[Expired[T]], float]:
        """Take out every request whose deadline is ``now`` or earlier; returns them and the
        earliest deadline left (``inf`` when none is)."""
        expired: list[Expired[T]] = []
        next_deadline = _INF
        pending = self._pending
        for opaque, (token, deadline, code, timeout_ms) in list(pending.items()):
            if deadline <= now:
                del pending[opaque]
                expired.append((token, code, timeout_ms))
            elif deadline < next_deadline:
                next_deadline = deadline
        return expired, next_deadline

    def connection_lost(self) -> list[T]:
        """The tokens of every pending request, which no answer will reach now."""
        pending, self._pending = self._pending, {}
        return [entry[0] for entry in pending.values()]

    # -- answering the peer's requests ---------------------------------------------------------

    def respond(
        self, request: RemotingCommand, response: RemotingCommand | bytes | None
    ) -> Sequence[bytes] | None:
        """The frame answering ``request``: ``response`` encoded, or already encoded (bytes).
        None when there is nothing to send: no response, or a oneway request (RocketMQ
        answers those with nothing, whatever the handler returned)."""
        if response is None or request.flag & RPC_ONEWAY:
            return None
        if type(response) is bytes:
            return (response,)
        return encode_frame_parts(response)  # type: ignore[arg-type]

    def not_supported(self, request: RemotingCommand) -> RemotingCommand:
        """REQUEST_CODE_NOT_SUPPORTED, with RocketMQ's remark."""
        return request.make_response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            f" request type {request.code} not supported",
            language=self.language,
            version=self.version,
        )

    def failed(self, request: RemotingCommand, remark: str) -> RemotingCommand:
        """SYSTEM_ERROR: the handler of ``request`` raised."""
        return request.make_response(
            ResponseCode.SYSTEM_ERROR, remark, language=self.language, version=self.version
        )

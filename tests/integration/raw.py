"""A bare remoting client for tests that must send exactly the bytes they choose."""

from __future__ import annotations

import socket
import time

from pocketmq.broker.protocol import FrameDecoder, RemotingCommand, RequestCode, encode_frame
from pocketmq.broker.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeaderV2


class RawClient:
    def __init__(self, address: str, *, timeout_s: float = 10.0) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.decoder = FrameDecoder()
        self.opaque = 0
        self.pending: list[RemotingCommand] = []

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def call(self, command: RemotingCommand) -> RemotingCommand:
        self.opaque += 1
        command.opaque = self.opaque
        self.sock.sendall(encode_frame(command))
        return self.read_response(self.opaque)

    def read_response(self, opaque: int) -> RemotingCommand:
        while True:
            for frame in self.pending:
                if frame.is_response and frame.opaque == opaque:
                    self.pending.remove(frame)
                    return frame
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the server closed the connection")
            self.pending.extend(self.decoder.feed(data))

    def closed_by_peer(self, wait_s: float = 5.0) -> bool:
        self.sock.settimeout(wait_s)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def send_message(
        self,
        topic: str,
        body: bytes,
        *,
        queue_id: int = 0,
        properties: str = "",
        code: int = RequestCode.SEND_MESSAGE_V2,
    ) -> RemotingCommand:
        header = SendMessageRequestHeaderV2(
            producer_group="raw-producer",
            topic=topic,
            default_topic="TBW102",
            default_topic_queue_nums=4,
            queue_id=queue_id,
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            flag=0,
            properties=properties or None,
        )
        return self.call(RemotingCommand(code=code, ext_fields=header.to_ext_fields(), body=body))

    def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        group: str = "raw-group",
        max_count: int = 32,
        suspend_ms: int = 0,
    ) -> RemotingCommand:
        header = PullMessageRequestHeader(
            consumer_group=group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=max_count,
            sys_flag=0x4 | (0x2 if suspend_ms else 0),
            commit_offset=0,
            suspend_timeout_millis=suspend_ms,
            subscription="*",
            sub_version=0,
        )
        return self.call(
            RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=header.to_ext_fields())
        )

    def clock(self, action: str = "get", **values: str) -> dict[str, str]:
        response = self.call(
            RemotingCommand(
                code=RequestCode.POCKETMQ_CLOCK, ext_fields={"action": action, **values}
            )
        )
        if response.code != 0:
            raise AssertionError(f"clock {action} refused: {response.code} {response.remark}")
        return dict(response.ext_fields or {})

    def send_back(
        self,
        commitlog_offset: int,
        group: str,
        *,
        delay_level: int = 0,
        max_reconsume_times: int | None = None,
    ) -> RemotingCommand:
        ext = {"offset": str(commitlog_offset), "group": group, "delayLevel": str(delay_level)}
        if max_reconsume_times is not None:
            ext["maxReconsumeTimes"] = str(max_reconsume_times)
        return self.call(RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=ext))

    def pop(
        self,
        topic: str,
        group: str,
        *,
        queue_id: int = -1,
        max_count: int = 32,
        invisible_ms: int = 30_000,
        poll_ms: int = 0,
        order: bool = False,
        exp: str = "*",
    ) -> tuple[RemotingCommand, list[tuple[object, str]]]:
        """POP_MESSAGE; returns the response and (message, receipt handle) pairs, handles built
        from the response header as RocketMQ's client does (ExtraInfoUtil)."""
        from pocketmq.broker.protocol.message_codec import decode_messages

        ext = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": str(queue_id),
            "maxMsgNums": str(max_count),
            "invisibleTime": str(invisible_ms),
            "pollTime": str(poll_ms),
            "bornTime": str(int(time.time() * 1000)),
            "initMode": "0",
            "expType": "TAG",
            "exp": exp,
            "order": "true" if order else "false",
        }
        response = self.call(RemotingCommand(code=RequestCode.POP_MESSAGE, ext_fields=ext))
        if response.code != 0 or not response.body:
            return response, []
        header = response.ext_fields
        starts = {}
        for part in header["startOffsetInfo"].split(";"):
            retry, queue, start = part.split(" ")
            starts[(retry, int(queue))] = int(start)
        pairs = []
        for message in decode_messages(response.body):
            retry = "1" if message.topic.startswith("%RETRY%") else "0"
            start = starts[(retry, message.queue_id)]
            handle = f"{start} {header['popTime']} {header['invisibleTime']} {header['reviveQid']} {retry} broker-a {message.queue_id} {message.queue_offset}"
            pairs.append((message, handle))
        return response, pairs

    def ack(self, topic: str, group: str, handle: str) -> RemotingCommand:
        parts = handle.split(" ")
        queue = parts[6] if len(parts) > 6 and parts[6].isdigit() else "0"
        offset = parts[-1] if parts[-1].isdigit() else "0"
        ext = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": queue,
            "extraInfo": handle,
            "offset": offset,
        }
        return self.call(RemotingCommand(code=RequestCode.ACK_MESSAGE, ext_fields=ext))

    def change_invisible(
        self, topic: str, group: str, handle: str, invisible_ms: int
    ) -> tuple[RemotingCommand, str]:
        parts = handle.split(" ")
        ext = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": parts[6],
            "extraInfo": handle,
            "offset": parts[7],
            "invisibleTime": str(invisible_ms),
        }
        response = self.call(
            RemotingCommand(code=RequestCode.CHANGE_MESSAGE_INVISIBLETIME, ext_fields=ext)
        )
        if response.code == 0:
            parts[1], parts[2] = (
                response.ext_fields["popTime"],
                response.ext_fields["invisibleTime"],
            )
        return response, " ".join(parts)

    def heartbeat_producer(self, group: str, client_id: str = "raw-producer@1") -> RemotingCommand:
        import json as _json

        body = _json.dumps(
            {
                "clientID": client_id,
                "producerDataSet": [{"groupName": group}],
                "consumerDataSet": [],
            }
        ).encode()
        return self.call(RemotingCommand(code=RequestCode.HEART_BEAT, body=body))

    def wait_request(self, code: int, timeout_s: float = 5.0) -> RemotingCommand:
        """The next request the server sent us with this code (e.g. CHECK_TRANSACTION_STATE)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for frame in self.pending:
                if not frame.is_response and frame.code == code:
                    self.pending.remove(frame)
                    return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no request {code} from the server")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                raise TimeoutError(f"no request {code} from the server") from None
            finally:
                self.sock.settimeout(10.0)
            if not data:
                raise ConnectionError("the server closed the connection")
            self.pending.extend(self.decoder.feed(data))

    def requests_received(self, code: int) -> int:
        """Drain what has arrived without blocking; count requests with this code."""
        self.sock.setblocking(False)
        try:
            while True:
                try:
                    data = self.sock.recv(1 << 20)
                except BlockingIOError:
                    break
                if not data:
                    break
                self.pending.extend(self.decoder.feed(data))
        finally:
            self.sock.setblocking(True)
            self.sock.settimeout(10.0)
        count = sum(1 for f in self.pending if not f.is_response and f.code == code)
        self.pending = [f for f in self.pending if f.is_response or f.code != code]
        return count


async def call(address: str, command: RemotingCommand) -> RemotingCommand:
    """One request on a fresh asyncio connection (for tests inside the broker's event loop)."""
    import asyncio

    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        command.opaque = 1
        writer.write(encode_frame(command))
        decoder = FrameDecoder()
        while True:
            data = await reader.read(65536)
            assert data, "the broker closed the connection"
            for frame in decoder.feed(data):
                return frame
    finally:
        writer.close()
        await writer.wait_closed()

"""Pure codecs and generators for RocketMQ message IDs (stdlib only, no I/O).

Three schemes: the broker's offset ID (`offset_id`), the 4.x client unique key UNIQ_KEY
(`uniq_id`) and the 5.x client ID (`v5_id`); `decode_message_id` guesses which one a string is.
"""

from __future__ import annotations

from pocketmq.ids.decode import decode_message_id, looks_like_offset_msg_id
from pocketmq.ids.errors import InvalidMessageIdError
from pocketmq.ids.offset_id import (
    OffsetMsgId,
    decode_offset_msg_id,
    encode_offset_msg_id,
    offset_msg_id_from_packed,
)
from pocketmq.ids.uniq_id import (
    UniqId,
    UniqIdGenerator,
    decode_uniq_id,
    encode_uniq_id,
    month_relative_ms,
    month_start_ms,
    nearly_time_ms,
)
from pocketmq.ids.v5_id import (
    V5_EPOCH,
    V5IdGenerator,
    V5MessageId,
    decode_v5_id,
    encode_v5_id,
    v5_seconds,
)

__all__ = [
    "V5_EPOCH",
    "InvalidMessageIdError",
    "OffsetMsgId",
    "UniqId",
    "UniqIdGenerator",
    "V5IdGenerator",
    "V5MessageId",
    "decode_message_id",
    "decode_offset_msg_id",
    "decode_uniq_id",
    "decode_v5_id",
    "encode_offset_msg_id",
    "encode_uniq_id",
    "encode_v5_id",
    "looks_like_offset_msg_id",
    "month_relative_ms",
    "month_start_ms",
    "nearly_time_ms",
    "offset_msg_id_from_packed",
    "v5_seconds",
]

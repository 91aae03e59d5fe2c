package io.pocketmq.spark;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/** Text as the Python reader makes it: UTF-8 (bad bytes replaced), hosts, upper-case hex. */
final class Text {
    private Text() {}

    private static final byte[] HEX = "0123456789ABCDEF".getBytes(StandardCharsets.US_ASCII);

    private static final VarHandle LONG = MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.BIG_ENDIAN);

    /** Whether bytes[from, from + length) is valid UTF-8 (ASCII checked fast, 8 bytes a step). */
    static boolean isUtf8(byte[] bytes, int from, int length) {
        int end = from + length;
        int i = from;
        while (i + 8 <= end && ((long) LONG.get(bytes, i) & 0x8080808080808080L) == 0) {
            i += 8;
        }
        while (i < end && bytes[i] >= 0) {
            i++;
        }
        if (i == end) {
            return true;
        }
        return strictUtf8(bytes, from, length) != null;
    }

    /** The text, or null when the bytes are not UTF-8. */
    static String strictUtf8(byte[] bytes, int from, int length) {
        try {
            CharBuffer chars = StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(bytes, from, length));
            return chars.toString();
        } catch (CharacterCodingException e) {
            return null;
        }
    }

    /** UTF-8 bytes of the text with every bad sequence replaced by U+FFFD. */
    static byte[] replaced(byte[] bytes, int from, int length) {
        return new String(bytes, from, length, StandardCharsets.UTF_8).getBytes(StandardCharsets.UTF_8);
    }

    /** str(store.record.Host): "a.b.c.d:port" or "[ipv6]:port" (RFC 5952, as Python's ipaddress). */
    static byte[] host(byte[] bytes, int at, boolean v6) {
        StringBuilder text = new StringBuilder(48);
        int port;
        if (!v6) {
            for (int i = 0; i < 4; i++) {
                if (i > 0) {
                    text.append('.');
                }
                text.append(bytes[at + i] & 0xFF);
            }
            port = ByteBuffer.wrap(bytes, at + 4, 4).getInt();
        } else {
            int[] groups = new int[8];
            for (int i = 0; i < 8; i++) {
                groups[i] = (bytes[at + 2 * i] & 0xFF) << 8 | (bytes[at + 2 * i + 1] & 0xFF);
            }
            int bestStart = -1;
            int bestLength = 0;
            for (int i = 0; i < 8; ) {
                if (groups[i] != 0) {
                    i++;
                    continue;
                }
                int j = i;
                while (j < 8 && groups[j] == 0) {
                    j++;
                }
                if (j - i > bestLength) {
                    bestStart = i;
                    bestLength = j - i;
                }
                i = j;
            }
            if (bestLength < 2) {
                bestStart = -1;
            }
            text.append('[');
            for (int i = 0; i < 8; i++) {
                if (i == bestStart) {
                    text.append("::");
                    i += bestLength - 1;
                    continue;
                }
                if (i > 0 && i != bestStart + bestLength) {
                    text.append(':');
                }
                text.append(Integer.toHexString(groups[i]));
            }
            text.append(']');
            port = ByteBuffer.wrap(bytes, at + 16, 4).getInt();
        }
        return text.append(':').append(port).toString().getBytes(StandardCharsets.US_ASCII);
    }

    /** Upper-case hex of bytes[at, at + length) into out[outAt ...]. */
    static void hex(byte[] bytes, int at, int length, byte[] out, int outAt) {
        for (int i = 0; i < length; i++) {
            int b = bytes[at + i] & 0xFF;
            out[outAt + 2 * i] = HEX[b >>> 4];
            out[outAt + 2 * i + 1] = HEX[b & 15];
        }
    }

    static void hexLong(long value, byte[] out, int outAt) {
        for (int i = 15; i >= 0; i--) {
            out[outAt + i] = HEX[(int) (value & 15)];
            value >>>= 4;
        }
    }
}

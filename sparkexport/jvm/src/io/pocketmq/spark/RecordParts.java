package io.pocketmq.spark;

import java.nio.ByteBuffer;

import static io.pocketmq.spark.RecordLayout.*;

/**
 * Where the parts of one record are, its structure checked as {@code store.record._parts}
 * checks it (magic, then every length, so that the fields add up to TOTALSIZE within the
 * buffer). {@link #check} returns null for a sound record, else the same reason text.
 */
final class RecordParts {
    int size;
    int magic;
    int sysflag;
    int bodyAt;
    int bodyLength;
    int topicAt; // first topic byte
    int topicLength;
    int propertiesAt; // first properties byte
    int propertiesLength;
    boolean blank; // an END-OF-FILE filler (check returned "not a record")

    static final String NOT_A_RECORD = "not a record";

    /** Check the record at {@code position} of {@code buf} (whose limit is the file's end). */
    String check(ByteBuffer buf, int position) {
        blank = false;
        int end = buf.limit();
        long remaining = (long) end - position;
        if (remaining < END_FILE_MIN_BLANK_LENGTH) {
            return "only " + remaining + " bytes left, no record header";
        }
        int total = buf.getInt(position);
        int magicCode = buf.getInt(position + MAGIC_AT);
        if (magicCode == BLANK_MAGIC) {
            blank = true;
            return NOT_A_RECORD;
        }
        if (magicCode != MAGIC_V1 && magicCode != MAGIC_V2) {
            if (total == 0 && magicCode == 0) {
                return "zero bytes (end of written data)";
            }
            return String.format("bad magic code 0x%08X", magicCode & 0xFFFFFFFFL);
        }
        if (total < MIN_RECORD_SIZE || total > remaining) {
            return "record size " + total + " does not fit the " + remaining + " bytes left";
        }
        int flags = buf.getInt(position + SYSFLAG_AT);
        int body = position + BODY_AT_V4;
        if ((flags & SYSFLAG_BORNHOST_V6) != 0) {
            body += V6_SHIFT;
        }
        if ((flags & SYSFLAG_STOREHOST_V6) != 0) {
            body += V6_SHIFT;
        }
        long recordEnd = (long) position + total;
        if (body + 3L > recordEnd) {
            return "record size " + total + " is smaller than its fixed fields";
        }
        int bodyLen = buf.getInt(body - 4);
        long topicField = (long) body + bodyLen;
        if (bodyLen < 0 || topicField + 3 > recordEnd) {
            return "body length " + bodyLen + " overruns the record";
        }
        int topicLen;
        long propsField;
        int topicStart;
        if (magicCode == MAGIC_V1) {
            topicLen = buf.get((int) topicField); // a signed byte
            topicStart = (int) topicField + 1;
        } else {
            topicLen = buf.getShort((int) topicField);
            topicStart = (int) topicField + 2;
        }
        propsField = (long) topicStart + topicLen;
        if (topicLen < 0 || propsField + 2 > recordEnd) {
            return "topic length " + topicLen + " overruns the record";
        }
        int propsLen = buf.getShort((int) propsField);
        if (propsField + 2 + propsLen != recordEnd) {
            return "length mismatch: TOTALSIZE " + total + ", fields add up to "
                    + (propsField + 2 + propsLen - position);
        }
        size = total;
        magic = magicCode;
        sysflag = flags;
        bodyAt = body;
        bodyLength = bodyLen;
        topicAt = topicStart;
        topicLength = topicLen;
        propertiesAt = (int) propsField + 2;
        propertiesLength = propsLen;
        return null;
    }
}

package io.pocketmq.spark;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.zip.CRC32;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

import static io.pocketmq.spark.RecordLayout.*;

/**
 * One partition's messages as columnar batches: the record walk, the options' filters (right
 * after the topic, store time and state are known, before the other columns are built), then
 * only the columns the query asked for. Row values are those of sparkexport.columns.
 */
final class MessageReader implements PartitionReader<ColumnarBatch> {
    // Columns, by name in the schema (sparkexport.columns.COLUMNS).
    private static final String[] NAMES = {
        "physical_offset", "size", "magic", "version", "body_crc", "crc_ok", "queue_id", "queue_offset",
        "flag", "sysflag", "transaction_type", "born_timestamp", "born_timestamp_ms", "born_host",
        "store_timestamp", "store_timestamp_ms", "store_host", "reconsume_times",
        "prepared_transaction_offset", "topic", "tags", "keys", "properties", "body", "msg_id",
        "offset_msg_id", "state", "state_reason", "segment"};
    private static final int PHYSICAL = 0, SIZE = 1, MAGIC = 2, VERSION = 3, BODY_CRC = 4, CRC_OK = 5,
            QUEUE_ID = 6, QUEUE_OFFSET = 7, FLAG = 8, SYSFLAG = 9, TX_TYPE = 10, BORN_TS = 11,
            BORN_MS = 12, BORN_HOST = 13, STORE_TS = 14, STORE_MS = 15, STORE_HOST = 16, RECONSUME = 17,
            PREPARED = 18, TOPIC = 19, TAGS = 20, KEYS = 21, PROPERTIES = 22, BODY = 23, MSG_ID = 24,
            OFFSET_MSG_ID = 25, STATE = 26, STATE_REASON = 27, SEGMENT = 28;
    private static final long MIN_MS = -62_135_596_800_000L; // years 1 to 9999
    private static final long MAX_MS = 253_402_300_799_999L;
    private static final byte[] KEY_TAGS = "TAGS".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] KEY_KEYS = "KEYS".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] KEY_UNIQ = "UNIQ_KEY".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] KEY_CRC = CRC_PROPERTY_NAME.getBytes(StandardCharsets.US_ASCII);
    private static final byte[][] TX_LABELS = utf8(TRANSACTION_LABELS);
    private static final byte[][] STATE_TEXT = utf8(STATE_LABELS);

    private final RangePartition plan;
    private final ReadOptions options;
    private final RangeWalker walker;
    private final CrcCheck crc;
    private final int[] kinds;
    private final OnHeapColumnVector[] vectors;
    private final ColumnarBatch batch;
    private final boolean needProperties;
    private final boolean needCrc;
    private final byte[] segment;
    private final TopicCache topics = new TopicCache();
    private final byte[][] systemTopics = utf8(SYSTEM_TOPICS);
    private final byte[] systemPrefix = SYSTEM_TOPIC_PREFIX.getBytes(StandardCharsets.UTF_8);
    private final byte[][] wanted;

    private byte[] rec = new byte[4096];
    private ByteBuffer recView = ByteBuffer.wrap(rec); // big-endian reads of the copied record
    private final HostCache bornHosts = new HostCache();
    private final HostCache storeHosts = new HostCache();
    private final byte[] id = new byte[56];
    // Properties of the current record: pairs [key at, key length, value at, value length].
    private int[] pairs = new int[64];
    private int pairCount;
    private byte[] props; // the bytes the pairs point into (rec, or its UTF-8 repaired copy)

    MessageReader(RangePartition plan, ReadOptions options, StructType schema) {
        this.plan = plan;
        this.options = options;
        this.walker = new RangeWalker(plan);
        this.crc = new CrcCheck(walker, new CRC32());
        StructField[] fields = schema.fields();
        kinds = new int[fields.length];
        boolean properties = false;
        boolean crcWanted = false;
        for (int i = 0; i < fields.length; i++) {
            kinds[i] = Arrays.asList(NAMES).indexOf(fields[i].name());
            if (kinds[i] < 0) {
                throw new IllegalArgumentException("pocketmq: no column " + fields[i].name());
            }
            properties |= kinds[i] == TAGS || kinds[i] == KEYS || kinds[i] == PROPERTIES || kinds[i] == MSG_ID;
            crcWanted |= kinds[i] == CRC_OK;
        }
        needProperties = properties;
        needCrc = crcWanted;
        vectors = OnHeapColumnVector.allocateColumns(options.batchRows, schema);
        batch = new ColumnarBatch(vectors);
        segment = plan.path.getBytes(StandardCharsets.UTF_8);
        if (options.topics != null) {
            wanted = new byte[options.topics.size()][];
            int i = 0;
            for (String topic : options.topics) {
                wanted[i++] = topic.getBytes(StandardCharsets.UTF_8);
            }
        } else {
            wanted = null;
        }
    }

    private static byte[][] utf8(String[] texts) {
        byte[][] out = new byte[texts.length][];
        for (int i = 0; i < texts.length; i++) {
            out[i] = texts[i].getBytes(StandardCharsets.UTF_8);
        }
        return out;
    }

    @Override
    public boolean next() {
        for (WritableColumnVector vector : vectors) {
            vector.reset();
        }
        int rows = 0;
        long bytes = 0;
        while (rows < options.batchRows && bytes < options.batchBytes && walker.next()) {
            if (add(rows)) {
                rows++;
                bytes += walker.parts.size;
            }
        }
        batch.setNumRows(rows);
        return rows > 0;
    }

    @Override
    public ColumnarBatch get() {
        return batch;
    }

    @Override
    public void close() {
        batch.close();
        walker.close();
    }

    /** Adds the walker's current record as row {@code row} if the options keep it. */
    private boolean add(int row) {
        RecordParts parts = walker.parts;
        int position = walker.current;
        int size = parts.size;
        if (rec.length < size) {
            rec = new byte[Math.max(size, rec.length * 2)];
            recView = ByteBuffer.wrap(rec);
        }
        walker.buf.get(position, rec, 0, size);
        ByteBuffer view = recView;
        long physical = plan.segmentStart + position;
        int topicAt = parts.topicAt - position;
        int topic = topics.find(rec, topicAt, parts.topicLength);
        int sysflag = parts.sysflag;
        boolean bornV6 = (sysflag & SYSFLAG_BORNHOST_V6) != 0;
        boolean storeV6 = (sysflag & SYSFLAG_STOREHOST_V6) != 0;
        int storeTsAt = BORN_ADDRESS_AT + (bornV6 ? HOST_SIZE_V6 : HOST_SIZE_V4);
        int storeHostAt = storeTsAt + (STORE_ADDRESS_AT - STORE_TIMESTAMP_AT);
        int reconsumeAt = storeHostAt + (storeV6 ? HOST_SIZE_V6 : HOST_SIZE_V4);
        long storeMs = view.getLong(storeTsAt);
        States states = plan.states;
        int change = states.isEmpty() ? -1 : states.changeOf(physical);
        int stateCode = change == -1 ? STATE_AVAILABLE : states.code(change);
        if (options.filtersRows()) {
            if (!topics.keep[topic]) {
                return false;
            }
            if (options.startMs != null && storeMs < options.startMs) {
                return false;
            }
            if (options.endMs != null && storeMs >= options.endMs) {
                return false;
            }
            if (options.states != null && !options.states.contains(stateCode)) {
                return false;
            }
        }
        if (needProperties) {
            parseProperties(parts.propertiesAt - position, parts.propertiesLength);
        }
        int bodyAt = parts.bodyAt - position;
        for (int c = 0; c < kinds.length; c++) {
            WritableColumnVector v = vectors[c];
            switch (kinds[c]) {
                case PHYSICAL -> v.putLong(row, physical);
                case SIZE -> v.putInt(row, size);
                case MAGIC -> v.putLong(row, parts.magic & 0xFFFFFFFFL);
                case VERSION -> v.putInt(row, parts.magic == MAGIC_V2 ? 2 : 1);
                case BODY_CRC -> v.putLong(row, view.getInt(BODY_CRC_AT) & 0xFFFFFFFFL);
                case CRC_OK -> v.putBoolean(row, crc.ok(position));
                case QUEUE_ID -> v.putInt(row, view.getInt(QUEUE_ID_AT));
                case QUEUE_OFFSET -> v.putLong(row, view.getLong(QUEUE_OFFSET_AT));
                case FLAG -> v.putInt(row, view.getInt(FLAG_AT));
                case SYSFLAG -> v.putInt(row, sysflag);
                case TX_TYPE -> put(v, row, TX_LABELS[(sysflag >> 2) & 3]);
                case BORN_TS -> putTimestamp(v, row, view.getLong(BORN_TIMESTAMP_AT));
                case BORN_MS -> v.putLong(row, view.getLong(BORN_TIMESTAMP_AT));
                case BORN_HOST -> put(v, row, bornHosts.text(view, BORN_ADDRESS_AT, bornV6));
                case STORE_TS -> putTimestamp(v, row, storeMs);
                case STORE_MS -> v.putLong(row, storeMs);
                case STORE_HOST -> put(v, row, storeHosts.text(view, storeHostAt, storeV6));
                case RECONSUME -> v.putInt(row, view.getInt(reconsumeAt));
                case PREPARED -> v.putLong(row, view.getLong(reconsumeAt + 4));
                case TOPIC -> put(v, row, topics.text[topic]);
                case TAGS -> putValue(v, row, lastValue(KEY_TAGS));
                case KEYS -> putKeys(v, row, lastValue(KEY_KEYS));
                case PROPERTIES -> putProperties(v, row);
                case BODY -> v.putByteArray(row, rec, bodyAt, parts.bodyLength);
                case MSG_ID -> {
                    int uniq = lastValue(KEY_UNIQ);
                    if (uniq >= 0) {
                        putValue(v, row, uniq);
                    } else {
                        v.putByteArray(row, id, 0, offsetMsgId(storeHostAt, storeV6, physical));
                    }
                }
                case OFFSET_MSG_ID -> v.putByteArray(row, id, 0, offsetMsgId(storeHostAt, storeV6, physical));
                case STATE -> put(v, row, STATE_TEXT[stateIndex(stateCode)]);
                case STATE_REASON -> {
                    String reason = change == -1 ? null : states.reason(change);
                    if (reason == null) {
                        v.putNull(row);
                    } else {
                        put(v, row, reason.getBytes(StandardCharsets.UTF_8));
                    }
                }
                case SEGMENT -> put(v, row, segment);
                default -> throw new IllegalStateException("column " + kinds[c]);
            }
        }
        return true;
    }

    private static int stateIndex(int code) {
        for (int i = 0; i < STATE_CODES.length; i++) {
            if (STATE_CODES[i] == code) {
                return i;
            }
        }
        throw new IllegalStateException("state code " + code);
    }

    private static void put(WritableColumnVector v, int row, byte[] text) {
        v.putByteArray(row, text, 0, text.length);
    }

    private static void putTimestamp(WritableColumnVector v, int row, long ms) {
        if (ms < MIN_MS || ms > MAX_MS) {
            v.putNull(row);
        } else {
            v.putLong(row, ms * 1000);
        }
    }

    /** ids.offset_msg_id_from_packed: store host bytes (address, port) + offset, upper hex. */
    private int offsetMsgId(int hostAt, boolean v6, long physical) {
        int width = v6 ? HOST_SIZE_V6 : HOST_SIZE_V4;
        Text.hex(rec, hostAt, width, id, 0);
        Text.hexLong(physical, id, 2 * width);
        return 2 * width + 16;
    }

    /** RocketMQ's parse: pairs split on 0x02; a pair needs 0x01 neither first nor last. */
    private void parseProperties(int at, int length) {
        byte[] source = rec;
        if (!Text.isUtf8(rec, at, length)) {
            source = Text.replaced(rec, at, length);
            at = 0;
            length = source.length;
        }
        props = source;
        pairCount = 0;
        int end = at + length;
        int start = at;
        while (start <= end) {
            int stop = start;
            while (stop < end && source[stop] != PROPERTY_SEPARATOR) {
                stop++;
            }
            int mark = start;
            while (mark < stop && source[mark] != NAME_VALUE_SEPARATOR) {
                mark++;
            }
            if (mark > start && mark < stop - 1 && !(mark - start == KEY_CRC.length
                    && Arrays.equals(source, start, mark, KEY_CRC, 0, KEY_CRC.length))) {
                if (pairs.length < 4 * (pairCount + 1)) {
                    pairs = Arrays.copyOf(pairs, pairs.length * 2);
                }
                int k = 4 * pairCount++;
                pairs[k] = start;
                pairs[k + 1] = mark - start;
                pairs[k + 2] = mark + 1;
                pairs[k + 3] = stop - mark - 1;
            }
            start = stop + 1;
        }
    }

    /** Index of the last pair named {@code key}, or -1. */
    private int lastValue(byte[] key) {
        for (int p = pairCount - 1; p >= 0; p--) {
            int k = 4 * p;
            if (pairs[k + 1] == key.length
                    && Arrays.equals(props, pairs[k], pairs[k] + key.length, key, 0, key.length)) {
                return p;
            }
        }
        return -1;
    }

    private void putValue(WritableColumnVector v, int row, int pair) {
        if (pair < 0) {
            v.putNull(row);
        } else {
            v.putByteArray(row, props, pairs[4 * pair + 2], pairs[4 * pair + 3]);
        }
    }

    /** The KEYS property split on spaces, empty tokens dropped; empty when there is none. */
    private void putKeys(WritableColumnVector v, int row, int pair) {
        WritableColumnVector child = v.arrayData();
        int first = child.getElementsAppended();
        int count = 0;
        if (pair >= 0) {
            int at = pairs[4 * pair + 2];
            int end = at + pairs[4 * pair + 3];
            int start = at;
            for (int i = at; i <= end; i++) {
                if (i == end || props[i] == ' ') {
                    if (i > start) {
                        child.appendByteArray(props, start, i - start);
                        count++;
                    }
                    start = i + 1;
                }
            }
        }
        v.putArray(row, first, count);
    }

    private void putProperties(WritableColumnVector v, int row) {
        WritableColumnVector keys = (WritableColumnVector) v.getChild(0);
        WritableColumnVector values = (WritableColumnVector) v.getChild(1);
        int first = keys.getElementsAppended();
        for (int p = 0; p < pairCount; p++) {
            int k = 4 * p;
            keys.appendByteArray(props, pairs[k], pairs[k + 1]);
            values.appendByteArray(props, pairs[k + 2], pairs[k + 3]);
        }
        v.putArray(row, first, pairCount);
    }

    /** Topics met so far: their text (UTF-8, repaired) and whether the options keep them. */
    private final class TopicCache {
        byte[][] raw = new byte[8][];
        byte[][] text = new byte[8][];
        boolean[] keep = new boolean[8];
        int count;
        int last;

        int find(byte[] bytes, int at, int length) {
            if (count > 0 && raw[last].length == length
                    && Arrays.equals(raw[last], 0, length, bytes, at, at + length)) {
                return last;
            }
            for (int i = 0; i < count; i++) {
                if (raw[i].length == length && Arrays.equals(raw[i], 0, length, bytes, at, at + length)) {
                    last = i;
                    return i;
                }
            }
            if (count == raw.length) {
                if (count >= 4096) {
                    count = 0; // many topics: start over rather than grow without bound
                } else {
                    raw = Arrays.copyOf(raw, count * 2);
                    text = Arrays.copyOf(text, count * 2);
                    keep = Arrays.copyOf(keep, count * 2);
                }
            }
            byte[] copy = Arrays.copyOfRange(bytes, at, at + length);
            byte[] utf8 = Text.isUtf8(copy, 0, length) ? copy : Text.replaced(copy, 0, length);
            raw[count] = copy;
            text[count] = utf8;
            keep[count] = keeps(utf8);
            last = count;
            return count++;
        }

        /** The topic is asked for, and not a system topic unless those are asked for too. */
        private boolean keeps(byte[] topic) {
            if (wanted != null) {
                boolean found = false;
                for (byte[] w : wanted) {
                    found |= Arrays.equals(w, topic);
                }
                if (!found) {
                    return false;
                }
            }
            if (options.includeSystemTopics) {
                return true;
            }
            for (byte[] system : systemTopics) {
                if (Arrays.equals(system, topic)) {
                    return false;
                }
            }
            // As the Python reader's vectorised check: the set and the rmq_sys_ prefix.
            return !(topic.length >= systemPrefix.length
                    && Arrays.equals(topic, 0, systemPrefix.length, systemPrefix, 0, systemPrefix.length));
        }
    }

    /** Host text by its stored bytes: one text for a run of records from the same host. */
    private static final class HostCache {
        private boolean v6;
        private long first; // the first 8 stored bytes (an IPv4 address and port)
        private long second; // IPv6: the other 12
        private int third;
        private byte[] text;

        byte[] text(ByteBuffer rec, int at, boolean isV6) {
            long a = rec.getLong(at);
            long b = isV6 ? rec.getLong(at + 8) : 0;
            int c = isV6 ? rec.getInt(at + 16) : 0;
            if (text == null || isV6 != v6 || a != first || b != second || c != third) {
                v6 = isV6;
                first = a;
                second = b;
                third = c;
                text = Text.host(rec.array(), at, isV6);
            }
            return text;
        }
    }

    /** Body CRC, or the whole-record CRC where the store wrote one (storeFormat.json). */
    static final class CrcCheck {
        private final RangeWalker walker;
        private final CRC32 crc;
        private final ByteBuffer view;
        private final byte[] tail = new byte[CRC_PROPERTY_LENGTH];

        CrcCheck(RangeWalker walker, CRC32 crc) {
            this.walker = walker;
            this.crc = crc;
            this.view = walker.buf.duplicate();
        }

        boolean ok(int position) {
            RecordParts parts = walker.parts;
            RangePartition plan = walker.plan;
            long physical = plan.segmentStart + position;
            boolean whole = plan.recordCrcFrom >= 0 && physical >= plan.recordCrcFrom
                    && physical < plan.recordCrcUntil;
            crc.reset();
            view.clear();
            int end = position + parts.size;
            if (!whole) {
                view.position(parts.bodyAt);
                view.limit(parts.bodyAt + parts.bodyLength);
                crc.update(view);
                return (crc.getValue() & CRC_MASK) == (walker.buf.getInt(position + BODY_CRC_AT) & 0xFFFFFFFFL);
            }
            view.position(position);
            view.limit(end - CRC_PROPERTY_LENGTH);
            crc.update(view);
            long computed = crc.getValue() & CRC_MASK;
            if (parts.propertiesLength < CRC_PROPERTY_LENGTH) {
                return false;
            }
            walker.buf.get(end - CRC_PROPERTY_LENGTH, tail, 0, CRC_PROPERTY_LENGTH);
            int name = KEY_CRC.length;
            if (!Arrays.equals(tail, 0, name, KEY_CRC, 0, name) || tail[name] != NAME_VALUE_SEPARATOR
                    || tail[CRC_PROPERTY_LENGTH - 1] != PROPERTY_SEPARATOR) {
                return false;
            }
            long stored = 0;
            long scale = 1;
            for (int k = 0; k < 10; k++) { // least significant digit first, as RocketMQ writes it
                int digit = tail[name + 1 + k] - '0';
                if (digit < 0 || digit > 9) {
                    return false;
                }
                stored += digit * scale;
                scale *= 10;
            }
            return stored == computed;
        }
    }
}

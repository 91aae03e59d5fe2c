package io.pocketmq.spark;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.zip.CRC32;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

import static io.pocketmq.spark.RecordLayout.*;

/**
 * One partition's messages as columnar batches: the record walk, the options' filters (right
 * after the topic, store time and state are known, before the other columns are built), then
 * only the columns the query asked for. Row values are those of sparkexport.columns.
 *
 * <p>Each kept record is copied once, into the batch buffer ({@link Slices.Buffer}); string and
 * binary columns are slices of it (the body, topic, properties, tags, keys and unique key are
 * not copied again), fixed-width columns are Spark's on-heap vectors, and the properties are
 * parsed only when a column that needs them is asked for.
 */
final class MessageReader implements PartitionReader<ColumnarBatch> {
    private static final VarHandle INT = MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.BIG_ENDIAN);
    private static final VarHandle LONG = MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.BIG_ENDIAN);
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
    private static final byte[] KEY_CRC = CRC_PROPERTY_NAME.getBytes(StandardCharsets.US_ASCII);
    // Property names read as one big-endian int or long.
    private static final int NAME_TAGS = getInt("TAGS".getBytes(StandardCharsets.US_ASCII), 0);
    private static final int NAME_KEYS = getInt("KEYS".getBytes(StandardCharsets.US_ASCII), 0);
    private static final long NAME_UNIQ = getLong("UNIQ_KEY".getBytes(StandardCharsets.US_ASCII), 0);
    private static final long NAME_CRC = getLong(KEY_CRC, 0);

    static {
        if (KEY_CRC.length != 8) { // NAME_CRC compares exactly 8 bytes
            throw new IllegalStateException("the CRC property's name is not 8 bytes: " + CRC_PROPERTY_NAME);
        }
    }
    private static final byte[][] TX_LABELS = utf8(TRANSACTION_LABELS);
    private static final byte[][] STATE_TEXT = utf8(STATE_LABELS);

    private final RangePartition plan;
    private final ReadOptions options;
    private final RangeWalker walker;
    private final CrcCheck crc;
    private final int[] kinds;
    private final ColumnVector[] vectors;
    private final WritableColumnVector[] fixed; // the fixed-width columns (else null)
    private final Slices.Values[] slices; // the string and binary columns (else null)
    private final Slices.Lists keyLists; // the keys column, if asked for
    private final Slices.Maps propertyMaps; // the properties column, if asked for
    private final ColumnarBatch batch;
    private final boolean needProperties;
    private final boolean keepsBytes; // a column slices the batch buffer (else one record's room is reused)
    private final byte[] segment;
    private final TopicCache topics = new TopicCache();
    private final byte[][] systemTopics = utf8(SYSTEM_TOPICS);
    private final byte[] systemPrefix = SYSTEM_TOPIC_PREFIX.getBytes(StandardCharsets.UTF_8);
    private final byte[] replySuffix = REPLY_TOPIC_SUFFIX.getBytes(StandardCharsets.UTF_8);
    private final byte[][] wanted;

    private final Slices.Buffer buffer;
    private final HostCache bornHosts = new HostCache();
    private final HostCache storeHosts = new HostCache();
    // Where this batch's constant texts are in the buffer.
    private int segmentAt;
    private final int[] txAt = new int[TX_LABELS.length];
    private final int[] stateAt = new int[STATE_TEXT.length];
    // Properties of the current record: pairs [key at, key length, value at, value length], at
    // positions in the buffer; the last TAGS, KEYS and UNIQ_KEY pairs (-1: none).
    private int[] pairs = new int[64];
    private int pairCount;
    private int tagsPair;
    private int keysPair;
    private int uniqPair;

    MessageReader(RangePartition plan, ReadOptions options, StructType schema) {
        this.plan = plan;
        this.options = options;
        this.walker = new RangeWalker(plan);
        this.crc = new CrcCheck(walker, new CRC32());
        StructField[] fields = schema.fields();
        kinds = new int[fields.length];
        vectors = new ColumnVector[fields.length];
        fixed = new WritableColumnVector[fields.length];
        slices = new Slices.Values[fields.length];
        boolean slicing = false;
        for (StructField field : fields) {
            slicing |= !(field.dataType() instanceof org.apache.spark.sql.types.NumericType
                    || field.dataType() instanceof org.apache.spark.sql.types.BooleanType
                    || field.dataType() instanceof org.apache.spark.sql.types.TimestampType);
        }
        keepsBytes = slicing;
        // A batch ends at batchBytes of records: room for that (or the range) from the start when
        // columns slice the buffer; else it holds one record at a time (and grows if one is big).
        long room = Math.min(options.batchBytes, plan.hi - plan.lo) + (256 << 10);
        buffer = new Slices.Buffer(slicing ? (int) Math.min(room, 1 << 30) : 1 << 16);
        Slices.Lists lists = null;
        Slices.Maps maps = null;
        boolean properties = false;
        int capacity = options.batchRows;
        for (int i = 0; i < fields.length; i++) {
            int kind = Arrays.asList(NAMES).indexOf(fields[i].name());
            if (kind < 0) {
                throw new IllegalArgumentException("pocketmq: no column " + fields[i].name());
            }
            kinds[i] = kind;
            properties |= kind == TAGS || kind == KEYS || kind == PROPERTIES || kind == MSG_ID;
            switch (kind) {
                case KEYS -> vectors[i] = lists = new Slices.Lists(fields[i].dataType(), buffer, capacity);
                case PROPERTIES -> vectors[i] = maps = new Slices.Maps(fields[i].dataType(), buffer, capacity);
                case TX_TYPE, BORN_HOST, STORE_HOST, TOPIC, TAGS, BODY, MSG_ID, OFFSET_MSG_ID, STATE,
                        STATE_REASON, SEGMENT ->
                    vectors[i] = slices[i] = new Slices.Values(fields[i].dataType(), buffer, capacity);
                default -> vectors[i] = fixed[i] = new OnHeapColumnVector(capacity, fields[i].dataType());
            }
        }
        keyLists = lists;
        propertyMaps = maps;
        needProperties = properties;
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
        for (int c = 0; c < vectors.length; c++) {
            if (fixed[c] != null) {
                fixed[c].reset();
            } else if (slices[c] != null) {
                slices[c].reset();
            }
        }
        if (keyLists != null) {
            keyLists.reset();
        }
        if (propertyMaps != null) {
            propertyMaps.reset();
        }
        buffer.clear();
        segmentAt = buffer.append(segment, 0, segment.length);
        for (int i = 0; i < TX_LABELS.length; i++) {
            txAt[i] = buffer.append(TX_LABELS[i], 0, TX_LABELS[i].length);
        }
        for (int i = 0; i < STATE_TEXT.length; i++) {
            stateAt[i] = buffer.append(STATE_TEXT[i], 0, STATE_TEXT[i].length);
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

    private static int getInt(byte[] bytes, int at) {
        return (int) INT.get(bytes, at);
    }

    private static long getLong(byte[] bytes, int at) {
        return (long) LONG.get(bytes, at);
    }

    /** Adds the walker's current record as row {@code row} if the options keep it. */
    private boolean add(int row) {
        RecordParts parts = walker.parts;
        int position = walker.current;
        int size = parts.size;
        int base = buffer.reserve(size); // the record's copy; given back if the filters drop it
        byte[] rec = buffer.data;
        walker.buf.get(position, rec, base, size);
        long physical = plan.segmentStart + position;
        int topicAt = base + parts.topicAt - position;
        int topic = topics.find(rec, topicAt, parts.topicLength);
        int sysflag = parts.sysflag;
        boolean bornV6 = (sysflag & SYSFLAG_BORNHOST_V6) != 0;
        boolean storeV6 = (sysflag & SYSFLAG_STOREHOST_V6) != 0;
        int storeTsAt = base + BORN_ADDRESS_AT + (bornV6 ? HOST_SIZE_V6 : HOST_SIZE_V4);
        int storeHostAt = storeTsAt + (STORE_ADDRESS_AT - STORE_TIMESTAMP_AT);
        int reconsumeAt = storeHostAt + (storeV6 ? HOST_SIZE_V6 : HOST_SIZE_V4);
        long storeMs = getLong(rec, storeTsAt);
        States states = plan.states;
        int change = states.isEmpty() ? -1 : states.changeOf(physical);
        int stateCode = change == -1 ? STATE_AVAILABLE : states.code(change);
        if (options.filtersRows()) {
            if (!topics.keep[topic]
                    || (options.startMs != null && storeMs < options.startMs)
                    || (options.endMs != null && storeMs >= options.endMs)
                    || (options.states != null && !options.states.contains(stateCode))) {
                buffer.used = base;
                return false;
            }
        }
        if (needProperties) {
            parseProperties(base + parts.propertiesAt - position, parts.propertiesLength);
        }
        int bodyAt = base + parts.bodyAt - position;
        for (int c = 0; c < kinds.length; c++) {
            switch (kinds[c]) {
                case PHYSICAL -> fixed[c].putLong(row, physical);
                case SIZE -> fixed[c].putInt(row, size);
                case MAGIC -> fixed[c].putLong(row, parts.magic & 0xFFFFFFFFL);
                case VERSION -> fixed[c].putInt(row, parts.magic == MAGIC_V2 ? 2 : 1);
                case BODY_CRC -> fixed[c].putLong(row, getInt(rec, base + BODY_CRC_AT) & 0xFFFFFFFFL);
                case CRC_OK -> fixed[c].putBoolean(row, crc.ok(position));
                case QUEUE_ID -> fixed[c].putInt(row, getInt(rec, base + QUEUE_ID_AT));
                case QUEUE_OFFSET -> fixed[c].putLong(row, getLong(rec, base + QUEUE_OFFSET_AT));
                case FLAG -> fixed[c].putInt(row, getInt(rec, base + FLAG_AT));
                case SYSFLAG -> fixed[c].putInt(row, sysflag);
                case TX_TYPE -> {
                    int kind = (sysflag >> 2) & 3;
                    slices[c].put(row, txAt[kind], TX_LABELS[kind].length);
                }
                case BORN_TS -> putTimestamp(fixed[c], row, getLong(rec, base + BORN_TIMESTAMP_AT));
                case BORN_MS -> fixed[c].putLong(row, getLong(rec, base + BORN_TIMESTAMP_AT));
                case BORN_HOST -> bornHosts.put(slices[c], row, base + BORN_ADDRESS_AT, bornV6);
                case STORE_TS -> putTimestamp(fixed[c], row, storeMs);
                case STORE_MS -> fixed[c].putLong(row, storeMs);
                case STORE_HOST -> storeHosts.put(slices[c], row, storeHostAt, storeV6);
                case RECONSUME -> fixed[c].putInt(row, getInt(rec, reconsumeAt));
                case PREPARED -> fixed[c].putLong(row, getLong(rec, reconsumeAt + 4));
                case TOPIC -> topics.put(slices[c], row, topic, topicAt);
                case TAGS -> putValue(slices[c], row, tagsPair);
                case KEYS -> putKeys(row);
                case PROPERTIES -> putProperties(row);
                case BODY -> slices[c].put(row, bodyAt, parts.bodyLength);
                case MSG_ID -> {
                    if (uniqPair >= 0) {
                        putValue(slices[c], row, uniqPair);
                    } else {
                        putOffsetMsgId(slices[c], row, storeHostAt, storeV6, physical);
                    }
                }
                case OFFSET_MSG_ID -> putOffsetMsgId(slices[c], row, storeHostAt, storeV6, physical);
                case STATE -> {
                    int index = stateIndex(stateCode);
                    slices[c].put(row, stateAt[index], STATE_TEXT[index].length);
                }
                case STATE_REASON -> {
                    String reason = change == -1 ? null : states.reason(change);
                    if (reason == null) {
                        slices[c].putNull(row);
                    } else {
                        byte[] text = reason.getBytes(StandardCharsets.UTF_8);
                        slices[c].put(row, buffer.append(text, 0, text.length), text.length);
                    }
                }
                case SEGMENT -> slices[c].put(row, segmentAt, segment.length);
                default -> throw new IllegalStateException("column " + kinds[c]);
            }
        }
        if (!keepsBytes) {
            buffer.used = base; // only fixed-width columns: the next record reuses this room
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

    private static void putTimestamp(WritableColumnVector v, int row, long ms) {
        if (ms < MIN_MS || ms > MAX_MS) {
            v.putNull(row);
        } else {
            v.putLong(row, ms * 1000);
        }
    }

    /** ids.offset_msg_id_from_packed: store host bytes (address, port) + offset, upper hex. */
    private void putOffsetMsgId(Slices.Values v, int row, int hostAt, boolean v6, long physical) {
        int width = v6 ? HOST_SIZE_V6 : HOST_SIZE_V4;
        int length = 2 * width + 16;
        int at = buffer.reserve(length);
        byte[] data = buffer.data; // after reserve: it may have grown
        Text.hex(data, hostAt, width, data, at);
        Text.hexLong(physical, data, at + 2 * width);
        v.put(row, at, length);
    }

    /**
     * RocketMQ's parse: pairs split on 0x02; a pair needs 0x01 neither first nor last. Properties
     * that are not UTF-8 are parsed from their repaired copy (appended to the buffer).
     */
    private void parseProperties(int at, int length) {
        byte[] source = buffer.data;
        if (!Text.isUtf8(source, at, length)) {
            byte[] repaired = Text.replaced(source, at, length);
            at = buffer.append(repaired, 0, repaired.length);
            length = repaired.length;
            source = buffer.data;
        }
        pairCount = 0;
        tagsPair = keysPair = uniqPair = -1;
        int end = at + length;
        int start = at;
        while (start <= end) {
            int stop = start;
            int mark = -1;
            while (stop < end) {
                byte b = source[stop];
                if (b == PROPERTY_SEPARATOR) {
                    break;
                }
                if (b == NAME_VALUE_SEPARATOR && mark < 0) {
                    mark = stop;
                }
                stop++;
            }
            int keyLength = mark - start;
            // Names of 4 and 8 bytes are told apart by one int or long compare.
            long name8 = keyLength == 8 ? getLong(source, start) : 0;
            if (mark > start && mark < stop - 1 && name8 != NAME_CRC) {
                if (pairs.length < 4 * (pairCount + 1)) {
                    pairs = Arrays.copyOf(pairs, pairs.length * 2);
                }
                int k = 4 * pairCount;
                pairs[k] = start;
                pairs[k + 1] = keyLength;
                pairs[k + 2] = mark + 1;
                pairs[k + 3] = stop - mark - 1;
                if (keyLength == 4) {
                    int name4 = getInt(source, start);
                    if (name4 == NAME_TAGS) {
                        tagsPair = pairCount;
                    } else if (name4 == NAME_KEYS) {
                        keysPair = pairCount;
                    }
                } else if (name8 == NAME_UNIQ) {
                    uniqPair = pairCount;
                }
                pairCount++;
            }
            start = stop + 1;
        }
    }

    private void putValue(Slices.Values v, int row, int pair) {
        if (pair < 0) {
            v.putNull(row);
        } else {
            v.put(row, pairs[4 * pair + 2], pairs[4 * pair + 3]);
        }
    }

    /** The KEYS property split on spaces, empty tokens dropped; empty when there is none. */
    private void putKeys(int row) {
        Slices.Values elements = keyLists.elements;
        int first = elements.appended();
        if (keysPair >= 0) {
            byte[] source = buffer.data;
            int at = pairs[4 * keysPair + 2];
            int end = at + pairs[4 * keysPair + 3];
            int start = at;
            for (int i = at; i <= end; i++) {
                if (i == end || source[i] == ' ') {
                    if (i > start) {
                        elements.append(start, i - start);
                    }
                    start = i + 1;
                }
            }
        }
        keyLists.put(row, first, elements.appended() - first);
    }

    private void putProperties(int row) {
        Slices.Values keys = propertyMaps.keys;
        Slices.Values values = propertyMaps.values;
        int first = keys.appended();
        for (int p = 0; p < pairCount; p++) {
            int k = 4 * p;
            keys.append(pairs[k], pairs[k + 1]);
            values.append(pairs[k + 2], pairs[k + 3]);
        }
        propertyMaps.put(row, first, pairCount);
    }

    /**
     * Topics met so far: whether their bytes are UTF-8 (then a row's topic is a slice of its
     * record), else their repaired text, and whether the options keep them.
     */
    private final class TopicCache {
        byte[][] raw = new byte[8][];
        int[] hashes = new int[8];
        byte[][] text = new byte[8][]; // null when raw is valid UTF-8
        boolean[] keep = new boolean[8];
        int[] textAt = new int[8]; // where text is in the buffer, for batch textGeneration[i]
        int[] textGeneration = new int[8];
        int count;

        int find(byte[] bytes, int at, int length) {
            int hash = length;
            for (int i = at; i < at + length; i++) {
                hash = 31 * hash + bytes[i];
            }
            for (int i = 0; i < count; i++) {
                if (hashes[i] == hash && raw[i].length == length
                        && Arrays.equals(raw[i], 0, length, bytes, at, at + length)) {
                    return i;
                }
            }
            if (count == raw.length) {
                if (count >= 4096) {
                    count = 0; // many topics: start over rather than grow without bound
                } else {
                    raw = Arrays.copyOf(raw, count * 2);
                    hashes = Arrays.copyOf(hashes, count * 2);
                    text = Arrays.copyOf(text, count * 2);
                    keep = Arrays.copyOf(keep, count * 2);
                    textAt = Arrays.copyOf(textAt, count * 2);
                    textGeneration = Arrays.copyOf(textGeneration, count * 2);
                }
            }
            byte[] copy = Arrays.copyOfRange(bytes, at, at + length);
            boolean valid = Text.isUtf8(copy, 0, length);
            byte[] utf8 = valid ? copy : Text.replaced(copy, 0, length);
            raw[count] = copy;
            hashes[count] = hash;
            text[count] = valid ? null : utf8;
            textGeneration[count] = -1;
            keep[count] = keeps(utf8);
            return count++;
        }

        void put(Slices.Values v, int row, int topic, int rawAt) {
            byte[] repaired = text[topic];
            if (repaired == null) {
                v.put(row, rawAt, raw[topic].length);
                return;
            }
            if (textGeneration[topic] != buffer.generation) {
                textAt[topic] = buffer.append(repaired, 0, repaired.length);
                textGeneration[topic] = buffer.generation;
            }
            v.put(row, textAt[topic], repaired.length);
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
            // store.topics.is_system_topic: the set, the rmq_sys_ prefix, <cluster>_REPLY_TOPIC.
            boolean prefixed = topic.length >= systemPrefix.length
                    && Arrays.equals(topic, 0, systemPrefix.length, systemPrefix, 0, systemPrefix.length);
            boolean reply = topic.length >= replySuffix.length && Arrays.equals(topic,
                    topic.length - replySuffix.length, topic.length, replySuffix, 0, replySuffix.length);
            return !(prefixed || reply);
        }
    }

    /** Host text by its stored bytes: one text per run of records from the same host, put in
     * the buffer once per batch. */
    private final class HostCache {
        private boolean v6;
        private long first; // the first 8 stored bytes (an IPv4 address and port)
        private long second; // IPv6: the other 12
        private int third;
        private byte[] text;
        private int at;
        private int generation = -1;

        void put(Slices.Values v, int row, int hostAt, boolean isV6) {
            byte[] rec = buffer.data;
            long a = getLong(rec, hostAt);
            long b = isV6 ? getLong(rec, hostAt + 8) : 0;
            int c = isV6 ? getInt(rec, hostAt + 16) : 0;
            if (text == null || isV6 != v6 || a != first || b != second || c != third) {
                v6 = isV6;
                first = a;
                second = b;
                third = c;
                text = Text.host(rec, hostAt, isV6);
                generation = -1;
            }
            if (generation != buffer.generation) {
                at = buffer.append(text, 0, text.length);
                generation = buffer.generation;
            }
            v.put(row, at, text.length);
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

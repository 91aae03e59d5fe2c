package io.pocketmq.spark;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.zip.CRC32;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import static io.pocketmq.spark.RecordLayout.*;

/**
 * Planning, on the driver, as {@code sparkexport.scan.plan_store}: list commitlog/, fold the
 * state records (through the state topic's consume queue, so only those records are read),
 * read the whole-record CRC range, and cut every segment larger than maxPartitionBytes into
 * equal byte ranges.
 */
final class StorePlan {
    final List<RangePartition> ranges = new ArrayList<>();
    final List<String> foreignFiles = new ArrayList<>();

    private record Segment(long start, Path path, long size) {}

    static StorePlan of(String rootText, ReadOptions options) {
        try {
            return new StorePlan(Paths.get(rootText), options);
        } catch (IOException e) {
            throw new UncheckedIOException("pocketmq: reading " + rootText + ": " + e.getMessage(), e);
        }
    }

    private StorePlan(Path root, ReadOptions options) throws IOException {
        List<Segment> segments = new ArrayList<>();
        if (checkStoreFolder(root)) {
            Path directory = root.resolve(COMMITLOG);
            String[] names;
            try (var listing = Files.list(directory)) {
                names = listing.map(p -> p.getFileName().toString()).sorted().toArray(String[]::new);
            }
            for (String name : names) {
                Path path = directory.resolve(name);
                long start = offsetForFileName(name);
                if (start < 0 || !Files.isRegularFile(path) || Files.size(path) == 0) {
                    foreignFiles.add(path.toString());
                    continue;
                }
                segments.add(new Segment(start, path, Files.size(path)));
            }
        }
        States states = foldStates(root, segments);
        long[] crcRange = recordCrcRange(root);
        for (int i = 0; i < segments.size(); i++) {
            Segment segment = segments.get(i);
            if (segment.size > Integer.MAX_VALUE) {
                throw new IllegalArgumentException("pocketmq: " + segment.path
                        + " is larger than 2 GiB, which one mapping cannot hold");
            }
            for (long[] piece : splitRanges(segment.size, options.maxPartitionBytes)) {
                ranges.add(new RangePartition(segment.path.toString(), segment.start, piece[0], piece[1],
                        i == segments.size() - 1,
                        states.slice(segment.start + piece[0], segment.start + piece[1]),
                        crcRange[0], crcRange[1]));
            }
        }
    }

    /** [0, size) cut into equal pieces of at most maxBytes (one piece if it fits). */
    static List<long[]> splitRanges(long size, long maxBytes) {
        List<long[]> out = new ArrayList<>();
        if (size <= maxBytes) {
            out.add(new long[] {0, size});
            return out;
        }
        long count = (size + maxBytes - 1) / maxBytes;
        long step = (size + count - 1) / count;
        for (long lo = 0; lo < size; lo += step) {
            out.add(new long[] {lo, Math.min(lo + step, size)});
        }
        return out;
    }

    static long offsetForFileName(String name) {
        if (name.length() != FILE_NAME_DIGITS || !name.chars().allMatch(c -> c >= '0' && c <= '9')) {
            return -1;
        }
        try {
            return Long.parseLong(name);
        } catch (NumberFormatException e) {
            return -1;
        }
    }

    /** store.reader.check_store_folder: true with commitlog/, false for a store with none yet. */
    static boolean checkStoreFolder(Path folder) throws IOException {
        if (!Files.exists(folder)) {
            throw new IllegalArgumentException("no such folder: " + folder);
        }
        if (!Files.isDirectory(folder)) {
            throw new IllegalArgumentException(folder + ": not a RocketMQ or pocketmq store (a file, not a folder)");
        }
        if (Files.isDirectory(folder.resolve(COMMITLOG))) {
            return true;
        }
        boolean storeFiles = Files.isRegularFile(folder.resolve(CHECKPOINT))
                || Files.isRegularFile(folder.resolve(ABORT))
                || Files.isDirectory(folder.resolve(CONSUME_QUEUE));
        for (String name : STORE_CONFIG_FILES) {
            storeFiles |= Files.isRegularFile(folder.resolve(CONFIG).resolve(name));
        }
        if (storeFiles) {
            return false;
        }
        try (var listing = Files.list(folder)) {
            if (listing.anyMatch(p -> offsetForFileName(p.getFileName().toString()) >= 0)) {
                throw new IllegalArgumentException(folder + ": not a RocketMQ or pocketmq store"
                        + " (it looks like a commitlog/ folder: give the store folder above it)");
            }
        }
        throw new IllegalArgumentException(folder + ": not a RocketMQ or pocketmq store"
                + " (no commitlog/, consumequeue/, checkpoint, abort or config/*.json in it)");
    }

    /** store.reader.StoreReader.states: the state topic's queue 0, each record it points at. */
    private static States foldStates(Path root, List<Segment> segments) throws IOException {
        States.Table table = new States.Table();
        Path queue = root.resolve(CONSUME_QUEUE).resolve(STATE_TOPIC).resolve("0");
        if (!Files.isDirectory(queue)) {
            return table.snapshot();
        }
        String[] names;
        try (var listing = Files.list(queue)) {
            names = listing.map(p -> p.getFileName().toString()).sorted().toArray(String[]::new);
        }
        List<Long> offsets = new ArrayList<>();
        for (String name : names) {
            if (offsetForFileName(name) < 0) {
                continue;
            }
            ByteBuffer data = ByteBuffer.wrap(Files.readAllBytes(queue.resolve(name)));
            for (int at = 0; at + CQ_ENTRY_SIZE <= data.limit(); at += CQ_ENTRY_SIZE) {
                long physical = data.getLong(at);
                int size = data.getInt(at + 8);
                if (size <= 0) {
                    break;
                }
                if (size != CQ_SIZE_SKIP) {
                    offsets.add(physical);
                }
            }
        }
        RecordParts parts = new RecordParts();
        for (long physical : offsets) {
            Segment segment = null;
            for (Segment s : segments) {
                if (s.start <= physical && physical < s.start + s.size) {
                    segment = s;
                    break;
                }
            }
            if (segment == null) {
                continue;
            }
            byte[] record;
            try (RandomAccessFile file = new RandomAccessFile(segment.path.toFile(), "r")) {
                file.seek(physical - segment.start);
                long left = file.length() - (physical - segment.start);
                if (left < 4) {
                    continue;
                }
                int size = file.readInt();
                if (size < 0 || size > left) {
                    continue; // decode_record refuses it too
                }
                record = new byte[size];
                file.seek(physical - segment.start);
                file.readFully(record);
            }
            ByteBuffer buf = ByteBuffer.wrap(record);
            if (parts.check(buf, 0) != null) {
                continue;
            }
            CRC32 crc = new CRC32();
            crc.update(record, parts.bodyAt, parts.bodyLength);
            if ((crc.getValue() & CRC_MASK) != (buf.getInt(BODY_CRC_AT) & 0xFFFFFFFFL)) {
                continue;
            }
            String topic = Text.strictUtf8(record, parts.topicAt, parts.topicLength);
            if (topic == null || !topic.equals(STATE_TOPIC)
                    || Text.strictUtf8(record, parts.propertiesAt, parts.propertiesLength) == null) {
                continue;
            }
            int body = parts.bodyAt;
            int length = parts.bodyLength;
            if (length < STATE_BODY_FIXED + 1) {
                continue;
            }
            long target = buf.getLong(body);
            int code = record[body + 8] & 0xFF;
            long spanEnd = buf.getLong(body + 9);
            if (target < 0 || (spanEnd != 0 && spanEnd <= target) || ReadOptions.stateCode(label(code)) < 0) {
                continue;
            }
            int groupEnd = STATE_BODY_FIXED + 1 + (record[body + STATE_BODY_FIXED] & 0xFF);
            if (groupEnd > length) {
                continue;
            }
            String reason = new String(record, body + groupEnd, length - groupEnd, StandardCharsets.UTF_8);
            table.apply(target, code, spanEnd, reason);
        }
        return table.snapshot();
    }

    private static String label(int code) {
        for (int i = 0; i < STATE_CODES.length; i++) {
            if (STATE_CODES[i] == code) {
                return STATE_LABELS[i];
            }
        }
        return "";
    }

    /**
     * The physical range written with the whole-record CRC: config/storeFormat.json, else the
     * checkpoint's copy; {-1, -1} for none (store.store_format.StoreFormat.load).
     */
    static long[] recordCrcRange(Path root) {
        Path format = root.resolve(CONFIG).resolve("storeFormat.json");
        try {
            if (Files.isRegularFile(format) && Files.size(format) > 0) {
                JsonNode node = new ObjectMapper().readTree(Files.readAllBytes(format));
                if (node != null && node.isObject()) {
                    JsonNode from = node.get("recordCrcFrom");
                    JsonNode until = node.get("recordCrcUntil");
                    boolean fromOk = from == null || from.isNull() || from.isIntegralNumber();
                    boolean untilOk = until == null || until.isNull() || until.isIntegralNumber();
                    if (fromOk && untilOk) {
                        if (from == null || from.isNull()) {
                            return new long[] {-1, -1};
                        }
                        long end = until == null || until.isNull() ? Long.MAX_VALUE : until.asLong();
                        return new long[] {from.asLong(), end};
                    }
                }
            }
        } catch (IOException e) {
            // unreadable or not JSON: the checkpoint's copy, as in Python
        }
        try {
            Path checkpoint = root.resolve(CHECKPOINT);
            if (!Files.isRegularFile(checkpoint)) {
                return new long[] {-1, -1};
            }
            byte[] data = Files.readAllBytes(checkpoint);
            int at = CHECKPOINT_CRC_RANGE_AT;
            if (data.length < at + CHECKPOINT_CRC_RANGE_SIZE + 4) {
                return new long[] {-1, -1};
            }
            ByteBuffer buf = ByteBuffer.wrap(data);
            byte[] magic = Arrays.copyOfRange(data, at, at + 4);
            CRC32 crc = new CRC32();
            crc.update(data, at, CHECKPOINT_CRC_RANGE_SIZE);
            if (!Arrays.equals(magic, CHECKPOINT_CRC_RANGE_MAGIC.getBytes(StandardCharsets.US_ASCII))
                    || (buf.getInt(at + CHECKPOINT_CRC_RANGE_SIZE) & 0xFFFFFFFFL) != (crc.getValue() & CRC_MASK)) {
                return new long[] {-1, -1};
            }
            long low = buf.getLong(at + 4);
            long high = buf.getLong(at + 12);
            if (low < 0) {
                return new long[] {-1, -1};
            }
            return new long[] {low, high < 0 ? Long.MAX_VALUE : high};
        } catch (IOException e) {
            return new long[] {-1, -1};
        }
    }
}

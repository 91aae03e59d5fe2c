package io.pocketmq.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;

import static io.pocketmq.spark.RecordLayout.*;

/**
 * Walks the records starting in one partition's byte range, as {@code sparkexport.scan.scan_range}
 * does, and reports damage in the same words: a broken record is skipped by resynchronising on
 * the next sound record (its magic code, its PHYSICALOFFSET equal to its own position, its
 * lengths adding up); with none after it, the rest is the end of written data (zero bytes in the
 * last segment), a torn tail (non-zero bytes in the last segment) or a damaged rest of segment.
 */
final class RangeWalker implements AutoCloseable {
    final MappedByteBuffer buf;
    final RangePartition plan;
    final RecordParts parts = new RecordParts();
    private final int end;
    private final int hi;
    private int pos;
    private boolean done;
    int current; // position of the record next() found

    // What the walk found (the report's columns).
    long records;
    long bytes;
    String tornTail;
    long tornTailBytes;
    final List<String> damaged = new ArrayList<>();

    RangeWalker(RangePartition plan) {
        this.plan = plan;
        try (FileChannel channel = FileChannel.open(Paths.get(plan.path), StandardOpenOption.READ)) {
            long size = channel.size();
            if (size > Integer.MAX_VALUE) {
                throw new IllegalArgumentException("pocketmq: " + plan.path + " is larger than 2 GiB");
            }
            buf = channel.map(FileChannel.MapMode.READ_ONLY, 0, size);
        } catch (IOException e) {
            throw new UncheckedIOException("pocketmq: cannot read " + plan.path + ": " + e.getMessage(), e);
        }
        end = buf.limit();
        hi = (int) Math.min(plan.hi, end);
        pos = (int) Math.min(plan.lo, end);
        if (pos > 0) {
            if (magicAt(pos) == BLANK_MAGIC) {
                done = true; // a range starting at the segment's END-OF-FILE filler
            } else {
                int found = findRecord(pos, end);
                if (found < 0) {
                    done = true;
                } else {
                    pos = found;
                }
            }
        }
    }

    /** Moves to the next sound record starting in the range; false at the end. */
    boolean next() {
        while (!done) {
            if (pos >= hi) {
                done = true;
                return false;
            }
            String reason = parts.check(buf, pos);
            if (reason == null) {
                current = pos;
                records++;
                bytes += parts.size;
                pos += parts.size;
                return true;
            }
            if (parts.blank || pos >= end) {
                done = true; // the segment ends here (END-OF-FILE filler)
                return false;
            }
            int resume = afterBreak(pos, reason);
            if (resume < 0) {
                done = true;
                return false;
            }
            pos = resume;
        }
        return false;
    }

    private long magicAt(int position) {
        if (position < 0 || position + 8 > end) {
            return -1;
        }
        return buf.getInt(position + MAGIC_AT);
    }

    private boolean isRecordAt(int position) {
        if (position < 0 || position + PHYSICAL_OFFSET_AT + 8 > end) {
            return false;
        }
        if (buf.getLong(position + PHYSICAL_OFFSET_AT) != plan.segmentStart + position) {
            return false;
        }
        return parts.check(buf, position) == null;
    }

    /** The first position in [start, stop) where a record starts, or -1. */
    private int findRecord(int start, int stop) {
        for (int p = start; p < stop && p + 8 <= end; p++) {
            int magic = buf.getInt(p + MAGIC_AT);
            if ((magic == MAGIC_V1 || magic == MAGIC_V2) && isRecordAt(p)) {
                return p;
            }
        }
        return -1;
    }

    /** How many bytes from position up to the last non-zero byte before stop. */
    private int nonzeroExtent(int position, int stop) {
        int at = stop;
        while (at - 8 >= position && buf.getLong(at - 8) == 0) {
            at -= 8;
        }
        while (at > position && buf.get(at - 1) == 0) {
            at--;
        }
        return at - position;
    }

    /** Classify the bytes at a broken record; where to resume, or -1 (the range ends). */
    private int afterBreak(int position, String reason) {
        String where = plan.path + " at position " + position + " (physical offset "
                + (plan.segmentStart + position) + ")";
        int rest = nonzeroExtent(position, end);
        if (rest == 0) {
            if (!plan.lastSegment) {
                damaged.add(where + ": zero bytes, rest of the segment unreadable");
            }
            return -1; // in the last segment: the end of written data
        }
        int found = findRecord(position + 1, position + rest);
        if (found >= 0) {
            damaged.add(where + ": " + reason + "; " + (found - position) + " bytes skipped");
            return found;
        }
        if (plan.lastSegment) {
            tornTail = where + ": " + reason + ", " + rest + " bytes after it";
            tornTailBytes = rest;
        } else {
            damaged.add(where + ": " + reason + ", rest of the segment unreadable");
        }
        return -1;
    }

    @Override
    public void close() {
        // The mapping is released when the buffer is collected (no public unmap in Java 17).
    }
}

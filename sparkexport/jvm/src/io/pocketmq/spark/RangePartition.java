package io.pocketmq.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** One Spark task: the records starting in [lo, hi) of one segment file. */
final class RangePartition implements InputPartition {
    private static final long serialVersionUID = 1L;
    final String path;
    final long segmentStart; // physical offset of the file's first byte
    final long lo; // positions in the file
    final long hi;
    final boolean lastSegment; // damage at the end of the last segment is a torn tail
    final States states; // the single changes of this range, every span
    final long recordCrcFrom; // physical range written with the whole-record CRC (-1: none)
    final long recordCrcUntil;

    RangePartition(String path, long segmentStart, long lo, long hi, boolean lastSegment,
            States states, long recordCrcFrom, long recordCrcUntil) {
        this.path = path;
        this.segmentStart = segmentStart;
        this.lo = lo;
        this.hi = hi;
        this.lastSegment = lastSegment;
        this.states = states;
        this.recordCrcFrom = recordCrcFrom;
        this.recordCrcUntil = recordCrcUntil;
    }

    @Override
    public String toString() {
        return "RangePartition(" + path + " [" + lo + ", " + hi + "))";
    }
}

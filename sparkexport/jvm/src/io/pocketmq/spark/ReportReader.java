package io.pocketmq.spark;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.zip.CRC32;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.unsafe.types.UTF8String;

/** The report option: one row per partition saying what the walk found (count_range). */
final class ReportReader implements PartitionReader<InternalRow> {
    private final List<InternalRow> rows = new ArrayList<>();
    private int next = -1;

    ReportReader(InputPartition partition) {
        if (partition instanceof ForeignFilesPartition foreign) {
            for (String path : foreign.paths) {
                rows.add(new GenericInternalRow(new Object[] {null, null, null, null, null, null, null,
                        null, new GenericArrayData(new Object[0]), UTF8String.fromString(path)}));
            }
            return;
        }
        RangePartition plan = (RangePartition) partition;
        long badCrc = 0;
        CRC32 crc = new CRC32();
        try (RangeWalker walker = new RangeWalker(plan)) {
            MessageReader.CrcCheck check = new MessageReader.CrcCheck(walker, crc);
            while (walker.next()) {
                if (!check.ok(walker.current)) {
                    badCrc++;
                }
            }
            Object[] damaged = new Object[walker.damaged.size()];
            for (int i = 0; i < damaged.length; i++) {
                damaged[i] = UTF8String.fromString(walker.damaged.get(i));
            }
            rows.add(new GenericInternalRow(new Object[] {
                UTF8String.fromBytes(plan.path.getBytes(StandardCharsets.UTF_8)),
                plan.segmentStart + plan.lo, plan.segmentStart + plan.hi,
                walker.records, walker.bytes, badCrc,
                walker.tornTail == null ? null : UTF8String.fromString(walker.tornTail),
                walker.tornTailBytes, new GenericArrayData(damaged), null}));
        }
    }

    @Override
    public boolean next() {
        return ++next < rows.size();
    }

    @Override
    public InternalRow get() {
        return rows.get(next);
    }

    @Override
    public void close() {}
}

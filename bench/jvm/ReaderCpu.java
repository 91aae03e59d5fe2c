package io.pocketmq.spark;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * bench/spark_reader_cpu.py's harness: reads every partition of a store with MessageReader
 * {@code runs} times and prints the median thread CPU time per record of the runs after the
 * first (a warm-up). Arguments: store, columns (all or a,b,...), runs, rows|batches.
 */
public final class ReaderCpu {
    private ReaderCpu() {}

    public static void main(String[] args) {
        String root = args[0];
        int runs = Integer.parseInt(args[2]);
        boolean project = args[3].equals("rows");
        ReadOptions options = ReadOptions.parse(new HashMap<>());
        StructType schema = Schemas.MESSAGES;
        if (!args[1].equals("all")) {
            Set<String> wanted = new HashSet<>(Arrays.asList(args[1].split(",")));
            List<StructField> kept = new ArrayList<>();
            for (StructField field : schema.fields()) {
                if (wanted.contains(field.name())) {
                    kept.add(field);
                }
            }
            schema = new StructType(kept.toArray(new StructField[0]));
        }
        UnsafeProjection projection = UnsafeProjection.create(schema);
        StorePlan plan = StorePlan.of(root, options);
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        double[] perRecord = new double[runs];
        long sink = 0;
        long rows = 0;
        for (int run = 0; run < runs; run++) {
            long started = threads.getCurrentThreadCpuTime();
            rows = 0;
            for (Object part : plan.ranges) {
                MessageReader reader = new MessageReader((RangePartition) part, options, schema);
                while (reader.next()) {
                    ColumnarBatch batch = reader.get();
                    rows += batch.numRows();
                    if (project) {
                        for (int i = 0; i < batch.numRows(); i++) {
                            sink += projection.apply(batch.getRow(i)).getSizeInBytes();
                        }
                    }
                }
                reader.close();
            }
            perRecord[run] = (threads.getCurrentThreadCpuTime() - started) / 1000.0 / rows;
        }
        double[] warm = Arrays.copyOfRange(perRecord, 1, runs);
        Arrays.sort(warm);
        System.out.printf("%,d records, %.3f us of CPU per record (median of %d warm runs%s)%n",
                rows, warm[warm.length / 2], warm.length, project ? ", rows projected" : "");
        if (sink < 0) {
            System.out.println(sink);
        }
    }
}

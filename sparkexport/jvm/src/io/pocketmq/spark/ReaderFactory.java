package io.pocketmq.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Messages are read in columnar batches; the report (a row per partition) row by row. */
final class ReaderFactory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final ReadOptions options;
    private final StructType schema;

    ReaderFactory(ReadOptions options, StructType schema) {
        this.options = options;
        this.schema = schema;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
        return !options.report;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        if (!options.report) {
            throw new IllegalStateException("pocketmq: messages are read in columnar batches");
        }
        return new ReportReader(partition);
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
        return new MessageReader((RangePartition) partition, options, schema);
    }
}

package io.pocketmq.spark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The scan: the options' filters (topics, store time, system topics, states) run in the reader,
 * as in the Python source, and only the columns the query needs are built (column pruning,
 * which Python data sources do not have).
 */
final class PocketMQScan implements ScanBuilder, SupportsPushDownRequiredColumns, Scan, Batch {
    private final ReadOptions options;
    private final String root;
    private final StructType full;
    private StructType required;

    PocketMQScan(CaseInsensitiveStringMap raw, StructType schema) {
        this.options = ReadOptions.parse(raw);
        this.root = ReadOptions.storePath(raw);
        this.full = options.report ? Schemas.REPORT : Schemas.MESSAGES;
        this.required = schema;
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
        if (!options.report) {
            List<StructField> kept = new ArrayList<>();
            for (StructField field : full.fields()) {
                if (requiredSchema.getFieldIndex(field.name()).isDefined()) {
                    kept.add(field);
                }
            }
            required = new StructType(kept.toArray(new StructField[0]));
        }
    }

    @Override
    public Scan build() {
        return this;
    }

    @Override
    public StructType readSchema() {
        return options.report ? full : required;
    }

    @Override
    public String description() {
        return "pocketmq store " + root;
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
        StorePlan plan = StorePlan.of(root, options);
        List<InputPartition> parts = new ArrayList<>(plan.ranges);
        if (options.report && !plan.foreignFiles.isEmpty()) {
            parts.add(new ForeignFilesPartition(plan.foreignFiles));
        }
        return parts.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new ReaderFactory(options, readSchema());
    }
}

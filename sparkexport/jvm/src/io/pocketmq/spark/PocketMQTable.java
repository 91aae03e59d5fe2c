package io.pocketmq.spark;

import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** One store folder, read in batches. Streaming reads stay with the Python data source. */
final class PocketMQTable implements SupportsRead {
    private final StructType schema;
    private final Map<String, String> properties;

    PocketMQTable(StructType schema, Map<String, String> properties) {
        this.schema = schema;
        this.properties = Map.copyOf(properties);
    }

    @Override
    public String name() {
        return PocketMQSource.SHORT_NAME;
    }

    @Override
    public StructType schema() {
        return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        // A catalog table's options (CREATE TABLE ... OPTIONS) come as the table's properties;
        // a read's own options win over them.
        Map<String, String> merged = new HashMap<>(properties);
        merged.putAll(options.asCaseSensitiveMap());
        return new PocketMQScan(new CaseInsensitiveStringMap(merged), schema);
    }
}

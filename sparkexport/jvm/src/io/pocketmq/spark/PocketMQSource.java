package io.pocketmq.spark;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.read.format("pocketmq").load("/data/store")}: a store's commitlog as a DataFrame
 * (Spark's DataSource V2, batch reads). Same schema, options, damage report and state folding as
 * the Python data source in {@code pocketmq.sparkexport.source}; see docs/spark.md.
 */
public final class PocketMQSource implements TableProvider, DataSourceRegister {
    public static final String SHORT_NAME = "pocketmq";

    @Override
    public String shortName() {
        return SHORT_NAME;
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return ReadOptions.parse(options).report ? Schemas.REPORT : Schemas.MESSAGES;
    }

    @Override
    public Table getTable(
            StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new PocketMQTable(schema, properties);
    }
}

package io.pocketmq.spark;

import org.apache.spark.sql.types.StructType;

/** The two schemas, from the generated DDL (sparkexport.columns is their definition). */
final class Schemas {
    private Schemas() {}

    static final StructType MESSAGES = StructType.fromDDL(RecordLayout.SCHEMA_DDL);
    static final StructType REPORT = StructType.fromDDL(RecordLayout.REPORT_SCHEMA_DDL);
}

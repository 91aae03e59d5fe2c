package io.pocketmq.spark;

import java.util.List;

import org.apache.spark.sql.connector.read.InputPartition;

/** The report rows for files in commitlog/ that are not segments. */
final class ForeignFilesPartition implements InputPartition {
    private static final long serialVersionUID = 1L;
    final List<String> paths;

    ForeignFilesPartition(List<String> paths) {
        this.paths = List.copyOf(paths);
    }
}

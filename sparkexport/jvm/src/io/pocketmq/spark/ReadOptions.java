package io.pocketmq.spark;

import java.io.Serializable;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.spark.sql.connector.catalog.TableCatalog;

/**
 * The options, parsed as {@code sparkexport.scan.ReadOptions.from_options} parses them (same
 * names, defaults and error messages). Spark passes strings; names are case-insensitive.
 */
final class ReadOptions implements Serializable {
    private static final long serialVersionUID = 1L;

    final Set<String> topics; // null: every topic
    final Long startMs;
    final Long endMs;
    final boolean includeSystemTopics;
    final Set<Integer> states; // null: every state
    final long maxPartitionBytes;
    final int batchRows;
    final long batchBytes;
    final boolean report;

    // What a catalog table (CREATE TABLE ... USING pocketmq) adds to the options it passes.
    private static final Set<String> CATALOG_PROPERTIES = Set.of(TableCatalog.PROP_LOCATION,
            TableCatalog.PROP_OWNER, TableCatalog.PROP_PROVIDER, TableCatalog.PROP_COMMENT,
            TableCatalog.PROP_EXTERNAL, TableCatalog.PROP_IS_MANAGED_LOCATION);

    private ReadOptions(Map<String, String> lowered) {
        Set<String> known = new HashSet<>(Arrays.asList(RecordLayout.KNOWN_OPTIONS));
        Set<String> unknown = new TreeSet<>(lowered.keySet());
        unknown.removeAll(known);
        if (!unknown.isEmpty()) {
            throw new IllegalArgumentException(
                    "unknown pocketmq option(s) " + quoted(unknown) + "; known: topics, startTime,"
                            + " endTime, includeSystemTopics, states, maxPartitionBytes, batchRows,"
                            + " report, startingOffsets, maxRecordsPerTrigger");
        }
        topics = lowered.containsKey("topics") ? new HashSet<>(splitList(lowered.get("topics"))) : null;
        if (lowered.containsKey("states")) {
            Set<Integer> codes = new HashSet<>();
            for (String label : splitList(lowered.get("states"))) {
                String key = label.toLowerCase(Locale.ROOT).replace('-', '_').replace(' ', '_');
                int code = stateCode(key);
                if (code < 0) {
                    throw new IllegalArgumentException(
                            "option states: '" + label + "' is not one of "
                                    + quoted(new TreeSet<>(Arrays.asList(RecordLayout.STATE_LABELS))));
                }
                codes.add(code);
            }
            states = codes;
        } else {
            states = null;
        }
        startMs = lowered.containsKey("starttime") ? parseTimeMs("startTime", lowered.get("starttime")) : null;
        endMs = lowered.containsKey("endtime") ? parseTimeMs("endTime", lowered.get("endtime")) : null;
        includeSystemTopics = parseBool("includeSystemTopics", lowered.getOrDefault("includesystemtopics", "false"));
        maxPartitionBytes = parseSize("maxPartitionBytes",
                lowered.getOrDefault("maxpartitionbytes", String.valueOf(RecordLayout.DEFAULT_MAX_PARTITION_BYTES)));
        long rows = parseSize("batchRows", lowered.getOrDefault("batchrows", String.valueOf(RecordLayout.DEFAULT_BATCH_ROWS)));
        batchRows = (int) Math.min(rows, 1 << 20); // a columnar batch holds its rows in memory
        batchBytes = parseSize("batchBytes", lowered.getOrDefault("batchbytes", String.valueOf(RecordLayout.DEFAULT_BATCH_BYTES)));
        report = parseBool("report", lowered.getOrDefault("report", "false"));
    }

    static ReadOptions parse(Map<String, String> options) {
        return new ReadOptions(lowered(options));
    }

    /**
     * Option names in lower case. A catalog table (CREATE TABLE ... USING pocketmq OPTIONS (...))
     * passes its options also as "option.NAME" and adds properties of its own: those are not
     * the reader's options.
     */
    static Map<String, String> lowered(Map<String, String> options) {
        Map<String, String> lowered = new TreeMap<>();
        for (boolean prefixed : new boolean[] {false, true}) {
            for (Map.Entry<String, String> entry : options.entrySet()) {
                String key = entry.getKey().toLowerCase(Locale.ROOT);
                if (key.startsWith(TableCatalog.OPTION_PREFIX) != prefixed || entry.getValue() == null
                        || CATALOG_PROPERTIES.contains(key)) {
                    continue;
                }
                lowered.putIfAbsent(prefixed ? key.substring(TableCatalog.OPTION_PREFIX.length()) : key,
                        entry.getValue());
            }
        }
        return lowered;
    }

    /** The store folder: the "path" option; several paths are refused, as in Python. */
    static String storePath(Map<String, String> options) {
        Map<String, String> raw = options;
        options = lowered(options);
        String paths = get(options, "paths");
        if (paths != null && !paths.isEmpty() && !paths.equals("[]")) {
            throw new IllegalArgumentException(
                    "pocketmq: load one store at a time and union the DataFrames (unionByName)");
        }
        String path = get(options, "path");
        if (path == null || path.isEmpty()) {
            // A catalog table (CREATE TABLE ... OPTIONS (path ...)) keeps the path as its location.
            path = get(raw, TableCatalog.PROP_LOCATION);
        }
        if (path != null && path.startsWith("file:")) { // a catalog qualifies local paths
            path = java.nio.file.Paths.get(java.net.URI.create(path)).toString();
        }
        if (path == null || path.isEmpty()) {
            throw new IllegalArgumentException(
                    "pocketmq: give the store directory, e.g. spark.read.format('pocketmq').load('/data/store')");
        }
        return path;
    }

    private static String get(Map<String, String> options, String name) {
        for (Map.Entry<String, String> entry : options.entrySet()) {
            if (entry.getKey().equalsIgnoreCase(name)) {
                return entry.getValue();
            }
        }
        return null;
    }

    static int stateCode(String label) {
        for (int i = 0; i < RecordLayout.STATE_LABELS.length; i++) {
            if (RecordLayout.STATE_LABELS[i].equals(label)) {
                return RecordLayout.STATE_CODES[i];
            }
        }
        return -1;
    }

    boolean filtersRows() {
        return topics != null || !includeSystemTopics || startMs != null || endMs != null || states != null;
    }

    private static List<String> splitList(String text) {
        List<String> out = new ArrayList<>();
        for (String item : text.split(",", -1)) {
            String stripped = item.strip();
            if (!stripped.isEmpty()) {
                out.add(stripped);
            }
        }
        return out;
    }

    private static String quoted(Set<String> names) {
        StringBuilder text = new StringBuilder("[");
        for (String name : names) {
            if (text.length() > 1) {
                text.append(", ");
            }
            text.append('\'').append(name).append('\'');
        }
        return text.append(']').toString();
    }

    static boolean parseBool(String name, String text) {
        String value = text.strip().toLowerCase(Locale.ROOT);
        if (value.equals("true") || value.equals("1") || value.equals("yes")) {
            return true;
        }
        if (value.equals("false") || value.equals("0") || value.equals("no")) {
            return false;
        }
        throw new IllegalArgumentException("option " + name + ": '" + text + "' is not true or false");
    }

    static long parseSize(String name, String text) {
        String value = text.strip().toLowerCase(Locale.ROOT);
        if (value.endsWith("b")) {
            value = value.substring(0, value.length() - 1);
        }
        long scale = 1;
        if (value.endsWith("k")) {
            scale = 1L << 10;
        } else if (value.endsWith("m")) {
            scale = 1L << 20;
        } else if (value.endsWith("g")) {
            scale = 1L << 30;
        }
        if (scale != 1) {
            value = value.substring(0, value.length() - 1);
        }
        long size;
        try {
            size = Math.multiplyExact(Long.parseLong(value.strip()), scale);
        } catch (NumberFormatException | ArithmeticException e) {
            throw new IllegalArgumentException(
                    "option " + name + ": '" + text + "' is not a size (e.g. 134217728, 128m)");
        }
        if (size <= 0) {
            throw new IllegalArgumentException("option " + name + ": must be positive, got '" + text + "'");
        }
        return size;
    }

    /** Milliseconds since the epoch, or ISO-8601 (UTC unless it names a zone). */
    static long parseTimeMs(String name, String text) {
        String value = text.strip();
        String digits = value.startsWith("-") ? value.substring(1) : value;
        if (!digits.isEmpty() && digits.chars().allMatch(Character::isDigit)) {
            return Long.parseLong(value);
        }
        String iso = value.length() > 10 && value.charAt(10) == ' '
                ? value.substring(0, 10) + "T" + value.substring(11) : value;
        try {
            return OffsetDateTime.parse(iso).toInstant().toEpochMilli();
        } catch (DateTimeParseException e) {
            // no zone: UTC
        }
        try {
            return LocalDateTime.parse(iso).toInstant(ZoneOffset.UTC).toEpochMilli();
        } catch (DateTimeParseException e) {
            // a date alone
        }
        try {
            return LocalDate.parse(iso).atStartOfDay().toInstant(ZoneOffset.UTC).toEpochMilli();
        } catch (DateTimeParseException e) {
            throw new IllegalArgumentException(
                    "option " + name + ": '" + text + "' is neither milliseconds since the epoch nor ISO-8601");
        }
    }
}

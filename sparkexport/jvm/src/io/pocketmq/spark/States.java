package io.pocketmq.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.TreeMap;

/**
 * Current message states, folded from the state records as {@code store.state.StateTable}
 * folds them: single changes by physical offset, span changes (a whole segment at once) sorted
 * by start; a single change newer than a span wins for its message, and the reverse. Absent
 * means available.
 */
final class States implements Serializable {
    private static final long serialVersionUID = 1L;

    // Singles, sorted by offset.
    final long[] offsets;
    final int[] codes;
    final String[] reasons;
    // Spans, sorted by start.
    final long[] spanStarts;
    final long[] spanEnds;
    final int[] spanCodes;
    final String[] spanReasons;

    private States(long[] offsets, int[] codes, String[] reasons, long[] spanStarts,
            long[] spanEnds, int[] spanCodes, String[] spanReasons) {
        this.offsets = offsets;
        this.codes = codes;
        this.reasons = reasons;
        this.spanStarts = spanStarts;
        this.spanEnds = spanEnds;
        this.spanCodes = spanCodes;
        this.spanReasons = spanReasons;
    }

    /** Folds changes in the order they were stored. */
    static final class Table {
        private final TreeMap<Long, Object[]> singles = new TreeMap<>();
        private final List<long[]> spans = new ArrayList<>(); // start, end, code
        private final List<String> spanReasonList = new ArrayList<>();

        void apply(long target, int code, long spanEnd, String reason) {
            if (spanEnd != 0) {
                int index = 0; // bisect_left on the starts
                while (index < spans.size() && spans.get(index)[0] < target) {
                    index++;
                }
                spans.add(index, new long[] {target, spanEnd, code});
                spanReasonList.add(index, reason);
                singles.subMap(target, true, spanEnd, false).clear();
            } else if (code == RecordLayout.STATE_AVAILABLE && spanOf(target) < 0) {
                singles.remove(target);
            } else {
                singles.put(target, new Object[] {code, reason});
            }
        }

        private int spanOf(long offset) {
            int index = -1; // bisect_right - 1
            for (int i = 0; i < spans.size() && spans.get(i)[0] <= offset; i++) {
                index = i;
            }
            return index >= 0 && offset < spans.get(index)[1] ? index : -1;
        }

        States snapshot() {
            int n = singles.size();
            long[] offsets = new long[n];
            int[] codes = new int[n];
            String[] reasons = new String[n];
            int i = 0;
            for (var entry : singles.entrySet()) {
                offsets[i] = entry.getKey();
                codes[i] = (Integer) entry.getValue()[0];
                reasons[i] = (String) entry.getValue()[1];
                i++;
            }
            int m = spans.size();
            long[] starts = new long[m];
            long[] ends = new long[m];
            int[] spanCodes = new int[m];
            for (int k = 0; k < m; k++) {
                starts[k] = spans.get(k)[0];
                ends[k] = spans.get(k)[1];
                spanCodes[k] = (int) spans.get(k)[2];
            }
            return new States(offsets, codes, reasons, starts, ends, spanCodes,
                    spanReasonList.toArray(new String[0]));
        }
    }

    /** Only the single changes for messages starting in [start, end); every span. */
    States slice(long start, long end) {
        int low = lowerBound(offsets, start);
        int high = lowerBound(offsets, end);
        return new States(Arrays.copyOfRange(offsets, low, high), Arrays.copyOfRange(codes, low, high),
                Arrays.copyOfRange(reasons, low, high), spanStarts, spanEnds, spanCodes, spanReasons);
    }

    private static int lowerBound(long[] values, long key) {
        int low = 0;
        int high = values.length;
        while (low < high) {
            int mid = (low + high) >>> 1;
            if (values[mid] < key) {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        return low;
    }

    boolean isEmpty() {
        return offsets.length == 0 && spanStarts.length == 0;
    }

    /**
     * The change of the message at {@code offset}: its index in the singles (>= 0), a span as
     * -2 - index, or -1 when it is available and never changed.
     */
    int changeOf(long offset) {
        if (offsets.length > 0) {
            int at = Arrays.binarySearch(offsets, offset);
            if (at >= 0) {
                return at;
            }
        }
        if (spanStarts.length > 0) {
            int index = lowerBound(spanStarts, offset + 1) - 1; // bisect_right - 1
            if (index >= 0 && offset < spanEnds[index]) {
                return -2 - index;
            }
        }
        return -1;
    }

    int code(int change) {
        return change >= 0 ? codes[change] : change == -1 ? RecordLayout.STATE_AVAILABLE : spanCodes[-2 - change];
    }

    String reason(int change) {
        return change >= 0 ? reasons[change] : change == -1 ? null : spanReasons[-2 - change];
    }
}

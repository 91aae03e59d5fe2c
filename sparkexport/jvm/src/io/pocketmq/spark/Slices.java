package io.pocketmq.spark;

import java.util.Arrays;

import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Column vectors whose values are slices of one batch buffer: the records of a batch are copied
 * into it once, and a string or binary value is (where, how long) in it, so the body, topic,
 * properties, tags and keys are never copied again into the vectors (Spark's own vectors copy
 * every value in). Text the reader makes (hosts, IDs, labels) is appended to the same buffer.
 * Values live until the next batch, as those of Spark's reused vectors do.
 */
final class Slices {
    private Slices() {}

    /** The batch buffer: records and made text, appended; cleared for each batch. */
    static final class Buffer {
        byte[] data;
        int used;
        int generation; // which batch: text cached by position is valid within one

        Buffer(int capacity) {
            data = new byte[capacity];
        }

        void clear() {
            used = 0;
            generation++;
        }

        /** Room for {@code length} more bytes; returns where they go. */
        int reserve(int length) {
            int at = used;
            if (data.length - at < length) {
                data = Arrays.copyOf(data, Math.max(data.length * 2, at + length));
            }
            used = at + length;
            return at;
        }

        int append(byte[] bytes, int from, int length) {
            int at = reserve(length);
            System.arraycopy(bytes, from, data, at, length);
            return at;
        }
    }

    private abstract static class Base extends ColumnVector {
        Base(DataType type) {
            super(type);
        }

        @Override
        public void close() {}

        @Override
        public boolean getBoolean(int row) {
            throw unsupported();
        }

        @Override
        public byte getByte(int row) {
            throw unsupported();
        }

        @Override
        public short getShort(int row) {
            throw unsupported();
        }

        @Override
        public int getInt(int row) {
            throw unsupported();
        }

        @Override
        public long getLong(int row) {
            throw unsupported();
        }

        @Override
        public float getFloat(int row) {
            throw unsupported();
        }

        @Override
        public double getDouble(int row) {
            throw unsupported();
        }

        @Override
        public ColumnarArray getArray(int row) {
            throw unsupported();
        }

        @Override
        public ColumnarMap getMap(int row) {
            throw unsupported();
        }

        @Override
        public Decimal getDecimal(int row, int precision, int scale) {
            throw unsupported();
        }

        @Override
        public UTF8String getUTF8String(int row) {
            throw unsupported();
        }

        @Override
        public byte[] getBinary(int row) {
            throw unsupported();
        }

        @Override
        public ColumnVector getChild(int ordinal) {
            throw unsupported();
        }

        private UnsupportedOperationException unsupported() {
            return new UnsupportedOperationException("pocketmq: no such value in a " + type + " column");
        }
    }

    /** A string or binary column: row i is buffer[at[i], at[i] + length[i]), null if length < 0. */
    static final class Values extends Base {
        private final Buffer buffer;
        private int[] at;
        private int[] length;
        private int nulls;
        private int appended; // as an array's or a map's elements: how many so far

        Values(DataType type, Buffer buffer, int capacity) {
            super(type);
            this.buffer = buffer;
            at = new int[capacity];
            length = new int[capacity];
        }

        void reset() {
            nulls = 0;
            appended = 0;
        }

        void put(int row, int from, int count) {
            at[row] = from;
            length[row] = count;
        }

        void putNull(int row) {
            length[row] = -1;
            nulls++;
        }

        /** As elements: add one at the end, growing as needed. */
        void append(int from, int count) {
            if (appended == at.length) {
                at = Arrays.copyOf(at, appended * 2);
                length = Arrays.copyOf(length, appended * 2);
            }
            at[appended] = from;
            length[appended++] = count;
        }

        int appended() {
            return appended;
        }

        @Override
        public boolean hasNull() {
            return nulls > 0;
        }

        @Override
        public int numNulls() {
            return nulls;
        }

        @Override
        public boolean isNullAt(int row) {
            return length[row] < 0;
        }

        @Override
        public UTF8String getUTF8String(int row) {
            int count = length[row];
            if (count < 0) {
                return null;
            }
            return UTF8String.fromAddress(buffer.data, Platform.BYTE_ARRAY_OFFSET + at[row], count);
        }

        @Override
        public byte[] getBinary(int row) {
            int count = length[row];
            if (count < 0) {
                return null;
            }
            return Arrays.copyOfRange(buffer.data, at[row], at[row] + count);
        }
    }

    /** array&lt;string&gt; (never null): row i is elements[first[i], first[i] + count[i]). */
    static final class Lists extends Base {
        final Values elements;
        private final int[] first;
        private final int[] count;

        Lists(DataType type, Buffer buffer, int capacity) {
            super(type);
            elements = new Values(((org.apache.spark.sql.types.ArrayType) type).elementType(), buffer,
                    4 * capacity);
            first = new int[capacity];
            count = new int[capacity];
        }

        void reset() {
            elements.reset();
        }

        void put(int row, int from, int items) {
            first[row] = from;
            count[row] = items;
        }

        @Override
        public boolean hasNull() {
            return false;
        }

        @Override
        public int numNulls() {
            return 0;
        }

        @Override
        public boolean isNullAt(int row) {
            return false;
        }

        @Override
        public ColumnarArray getArray(int row) {
            return new ColumnarArray(elements, first[row], count[row]);
        }

        @Override
        public ColumnVector getChild(int ordinal) {
            return elements;
        }
    }

    /** map&lt;string,string&gt; (never null): row i is the pairs [first[i], first[i] + count[i]). */
    static final class Maps extends Base {
        final Values keys;
        final Values values;
        private final int[] first;
        private final int[] count;

        Maps(DataType type, Buffer buffer, int capacity) {
            super(type);
            org.apache.spark.sql.types.MapType map = (org.apache.spark.sql.types.MapType) type;
            keys = new Values(map.keyType(), buffer, 8 * capacity);
            values = new Values(map.valueType(), buffer, 8 * capacity);
            first = new int[capacity];
            count = new int[capacity];
        }

        void reset() {
            keys.reset();
            values.reset();
        }

        void put(int row, int from, int pairs) {
            first[row] = from;
            count[row] = pairs;
        }

        @Override
        public boolean hasNull() {
            return false;
        }

        @Override
        public int numNulls() {
            return 0;
        }

        @Override
        public boolean isNullAt(int row) {
            return false;
        }

        @Override
        public ColumnarMap getMap(int row) {
            return new ColumnarMap(keys, values, first[row], count[row]);
        }

        @Override
        public ColumnVector getChild(int ordinal) {
            return ordinal == 0 ? keys : values;
        }
    }
}

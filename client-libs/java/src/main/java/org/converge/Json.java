package org.converge;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * JSON with the reference client's semantics (pure): objects keep key order (a repeated key
 * keeps its first position and its last value), integers are {@link BigInteger}, numbers with
 * a fraction or exponent (and NaN, Infinity) are {@link Double}, strings may hold lone
 * surrogates. {@link #dumps} writes what the reference's default encoder writes (recipe (a) of
 * the legacy signed bytes), {@link #compact} the compact ASCII form, {@link #canonical} the
 * RFC 8785 subset of the extended format.
 */
public final class Json {
    /** Nesting bound of the parser (the reference's recursion limit is near 1000). */
    public static final int MAX_DEPTH = 900;

    private Json() {}

    /** A value that cannot be parsed or encoded. */
    public static final class JsonException extends Exception {
        private static final long serialVersionUID = 1L;

        JsonException(String message) {
            super(message);
        }
    }

    /** Strict UTF-8 decoding (invalid sequences are an error). */
    public static String utf8(byte[] data) throws JsonException {
        try {
            return StandardCharsets.UTF_8
                    .newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(data))
                    .toString();
        } catch (CharacterCodingException e) {
            throw new JsonException("not UTF-8");
        }
    }

    /** Parse bytes: strict UTF-8 (a leading UTF-8 byte order mark is skipped). */
    public static Object parse(byte[] data) throws JsonException {
        int skip =
                data.length >= 3 && (data[0] & 0xff) == 0xef && (data[1] & 0xff) == 0xbb
                                && (data[2] & 0xff) == 0xbf
                        ? 3
                        : 0;
        byte[] d = skip == 0 ? data : java.util.Arrays.copyOfRange(data, skip, data.length);
        return parse(utf8(d));
    }

    public static Object parse(String text) throws JsonException {
        Parser p = new Parser(text);
        p.ws();
        Object v = p.value(0);
        p.ws();
        if (p.i != text.length()) {
            throw new JsonException("extra data at " + p.i);
        }
        return v;
    }

    private static final class Parser {
        final String s;
        int i;

        Parser(String s) {
            this.s = s;
        }

        void ws() {
            while (i < s.length()) {
                char c = s.charAt(i);
                if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
                    i++;
                } else {
                    break;
                }
            }
        }

        JsonException err(String what) {
            return new JsonException(what + " at " + i);
        }

        Object value(int depth) throws JsonException {
            if (depth > MAX_DEPTH) {
                throw err("nested too deeply");
            }
            if (i >= s.length()) {
                throw err("expecting value");
            }
            char c = s.charAt(i);
            switch (c) {
                case '{':
                    return object(depth);
                case '[':
                    return array(depth);
                case '"':
                    return string();
                default:
                    break;
            }
            if (s.startsWith("null", i)) {
                i += 4;
                return null;
            }
            if (s.startsWith("true", i)) {
                i += 4;
                return Boolean.TRUE;
            }
            if (s.startsWith("false", i)) {
                i += 5;
                return Boolean.FALSE;
            }
            if (s.startsWith("NaN", i)) {
                i += 3;
                return Double.NaN;
            }
            if (s.startsWith("Infinity", i)) {
                i += 8;
                return Double.POSITIVE_INFINITY;
            }
            if (s.startsWith("-Infinity", i)) {
                i += 9;
                return Double.NEGATIVE_INFINITY;
            }
            return number();
        }

        Object number() throws JsonException {
            int start = i;
            if (i < s.length() && s.charAt(i) == '-') {
                i++;
            }
            if (i >= s.length()) {
                throw err("expecting value");
            }
            if (s.charAt(i) == '0') {
                i++;
            } else if (s.charAt(i) >= '1' && s.charAt(i) <= '9') {
                while (i < s.length() && isDigit(s.charAt(i))) {
                    i++;
                }
            } else {
                i = start;
                throw err("expecting value");
            }
            int intEnd = i;
            boolean isFloat = false;
            if (i + 1 < s.length() && s.charAt(i) == '.' && isDigit(s.charAt(i + 1))) {
                i += 2;
                while (i < s.length() && isDigit(s.charAt(i))) {
                    i++;
                }
                isFloat = true;
            }
            if (i < s.length() && (s.charAt(i) == 'e' || s.charAt(i) == 'E')) {
                int j = i + 1;
                if (j < s.length() && (s.charAt(j) == '+' || s.charAt(j) == '-')) {
                    j++;
                }
                if (j < s.length() && isDigit(s.charAt(j))) {
                    while (j < s.length() && isDigit(s.charAt(j))) {
                        j++;
                    }
                    i = j;
                    isFloat = true;
                }
            }
            if (!isFloat) {
                return new BigInteger(s.substring(start, intEnd));
            }
            return Double.parseDouble(s.substring(start, i));
        }

        static boolean isDigit(char c) {
            return c >= '0' && c <= '9';
        }

        String string() throws JsonException {
            i++; // opening quote
            StringBuilder b = new StringBuilder();
            while (true) {
                if (i >= s.length()) {
                    throw err("unterminated string");
                }
                char c = s.charAt(i++);
                if (c == '"') {
                    return b.toString();
                }
                if (c < 0x20) {
                    throw err("invalid control character");
                }
                if (c != '\\') {
                    b.append(c);
                    continue;
                }
                if (i >= s.length()) {
                    throw err("unterminated string");
                }
                char e = s.charAt(i++);
                switch (e) {
                    case '"' -> b.append('"');
                    case '\\' -> b.append('\\');
                    case '/' -> b.append('/');
                    case 'b' -> b.append('\b');
                    case 'f' -> b.append('\f');
                    case 'n' -> b.append('\n');
                    case 'r' -> b.append('\r');
                    case 't' -> b.append('\t');
                    case 'u' -> {
                        char u = hex4();
                        if (Character.isHighSurrogate(u)
                                && i + 1 < s.length()
                                && s.charAt(i) == '\\'
                                && s.charAt(i + 1) == 'u') {
                            int save = i;
                            i += 2;
                            char lo = hex4();
                            if (Character.isLowSurrogate(lo)) {
                                b.append(u).append(lo);
                            } else {
                                b.append(u);
                                i = save;
                            }
                        } else {
                            b.append(u);
                        }
                    }
                    default -> throw err("invalid escape");
                }
            }
        }

        char hex4() throws JsonException {
            if (i + 4 > s.length()) {
                throw err("invalid \\u escape");
            }
            int v = 0;
            for (int k = 0; k < 4; k++) {
                int d = Character.digit(s.charAt(i + k), 16);
                if (d < 0 || s.charAt(i + k) > 'f') {
                    throw err("invalid \\u escape");
                }
                v = v * 16 + d;
            }
            i += 4;
            return (char) v;
        }

        Map<String, Object> object(int depth) throws JsonException {
            i++;
            Map<String, Object> m = new LinkedHashMap<>();
            ws();
            if (i < s.length() && s.charAt(i) == '}') {
                i++;
                return m;
            }
            while (true) {
                ws();
                if (i >= s.length() || s.charAt(i) != '"') {
                    throw err("expecting property name");
                }
                String k = string();
                ws();
                if (i >= s.length() || s.charAt(i) != ':') {
                    throw err("expecting ':'");
                }
                i++;
                ws();
                Object v = value(depth + 1);
                m.put(k, v);
                ws();
                if (i < s.length() && s.charAt(i) == ',') {
                    i++;
                    continue;
                }
                if (i < s.length() && s.charAt(i) == '}') {
                    i++;
                    return m;
                }
                throw err("expecting ',' or '}'");
            }
        }

        List<Object> array(int depth) throws JsonException {
            i++;
            List<Object> l = new ArrayList<>();
            ws();
            if (i < s.length() && s.charAt(i) == ']') {
                i++;
                return l;
            }
            while (true) {
                ws();
                l.add(value(depth + 1));
                ws();
                if (i < s.length() && s.charAt(i) == ',') {
                    i++;
                    continue;
                }
                if (i < s.length() && s.charAt(i) == ']') {
                    i++;
                    return l;
                }
                throw err("expecting ',' or ']'");
            }
        }
    }

    // ------------------------------------------------------------------ encoding

    /** The reference's default encoder: {@code ", "} and {@code ": "}, ASCII only. */
    public static String dumps(Object v) {
        StringBuilder b = new StringBuilder();
        write(b, v, ", ", ": ", true, false);
        return b.toString();
    }

    /** Compact ASCII form ({@code ","} and {@code ":"}), key order kept. */
    public static String compact(Object v) {
        StringBuilder b = new StringBuilder();
        write(b, v, ",", ":", true, false);
        return b.toString();
    }

    private static void write(
            StringBuilder b, Object v, String itemSep, String keySep, boolean ascii, boolean sort) {
        if (v == null) {
            b.append("null");
        } else if (v instanceof Boolean bo) {
            b.append(bo ? "true" : "false");
        } else if (v instanceof String str) {
            quote(b, str, ascii);
        } else if (v instanceof BigInteger || v instanceof Integer || v instanceof Long) {
            b.append(v.toString());
        } else if (v instanceof Double d) {
            b.append(floatRepr(d));
        } else if (v instanceof Map<?, ?> m) {
            Map<?, ?> mm = m;
            if (sort) {
                mm = new TreeMap<>(m);
            }
            b.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : mm.entrySet()) {
                if (!first) {
                    b.append(itemSep);
                }
                first = false;
                quote(b, (String) e.getKey(), ascii);
                b.append(keySep);
                write(b, e.getValue(), itemSep, keySep, ascii, sort);
            }
            b.append('}');
        } else if (v instanceof List<?> l) {
            b.append('[');
            boolean first = true;
            for (Object o : l) {
                if (!first) {
                    b.append(itemSep);
                }
                first = false;
                write(b, o, itemSep, keySep, ascii, sort);
            }
            b.append(']');
        } else {
            throw new IllegalArgumentException("cannot encode " + v.getClass());
        }
    }

    private static void quote(StringBuilder b, String s, boolean ascii) {
        b.append('"');
        for (int k = 0; k < s.length(); k++) {
            char c = s.charAt(k);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                case '\b' -> b.append("\\b");
                case '\f' -> b.append("\\f");
                default -> {
                    if (c < 0x20 || (ascii && c > 0x7e)) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        b.append('"');
    }

    /** The reference's float representation (shortest round trip, repr rules). */
    static String floatRepr(double d) {
        if (Double.isNaN(d)) {
            return "NaN";
        }
        if (Double.isInfinite(d)) {
            return d > 0 ? "Infinity" : "-Infinity";
        }
        if (d == 0) {
            return (1 / d < 0) ? "-0.0" : "0.0";
        }
        BigDecimal bd = new BigDecimal(Double.toString(Math.abs(d))).stripTrailingZeros();
        String digits = bd.unscaledValue().toString();
        int exp = digits.length() - bd.scale() - 1; // decimal exponent of the first digit
        StringBuilder out = new StringBuilder(d < 0 ? "-" : "");
        if (exp < -4 || exp >= 16) {
            out.append(digits.charAt(0));
            if (digits.length() > 1) {
                out.append('.').append(digits, 1, digits.length());
            }
            out.append('e').append(exp < 0 ? '-' : '+');
            int a = Math.abs(exp);
            out.append(a < 10 ? "0" + a : Integer.toString(a));
        } else if (exp < 0) {
            out.append("0.").append("0".repeat(-exp - 1)).append(digits);
        } else if (digits.length() <= exp + 1) {
            out.append(digits).append("0".repeat(exp + 1 - digits.length())).append(".0");
        } else {
            out.append(digits, 0, exp + 1).append('.').append(digits, exp + 1, digits.length());
        }
        return out.toString();
    }

    // ------------------------------------------------------------------ canonical (RFC 8785)

    /** Largest integer magnitude of the extended format. */
    public static final BigInteger MAX_SAFE_INT = BigInteger.valueOf((1L << 53) - 1);

    /** A value outside the canonical JSON subset of the extended format. */
    public static final class CanonicalException extends Exception {
        private static final long serialVersionUID = 1L;

        CanonicalException(String message) {
            super(message);
        }
    }

    /** RFC 8785 bytes of {@code v}, counting nesting from {@code depth} (limit 16). */
    public static byte[] canonical(Object v, int depth) throws CanonicalException {
        check(v, depth);
        StringBuilder b = new StringBuilder();
        write(b, v, ",", ":", false, true);
        String s = b.toString();
        for (int k = 0; k < s.length(); k++) {
            char c = s.charAt(k);
            if (Character.isHighSurrogate(c)
                    && k + 1 < s.length()
                    && Character.isLowSurrogate(s.charAt(k + 1))) {
                k++;
            } else if (Character.isSurrogate(c)) {
                throw new CanonicalException("string is not valid Unicode");
            }
        }
        return s.getBytes(StandardCharsets.UTF_8);
    }

    public static byte[] canonical(Object v) throws CanonicalException {
        return canonical(v, 0);
    }

    private static void check(Object v, int depth) throws CanonicalException {
        if (depth > 16) {
            throw new CanonicalException("nested too deeply");
        }
        if (v == null || v instanceof Boolean || v instanceof String) {
            return;
        }
        if (v instanceof BigInteger n) {
            if (n.abs().compareTo(MAX_SAFE_INT) > 0) {
                throw new CanonicalException("integer outside the interoperable range");
            }
            return;
        }
        if (v instanceof List<?> l) {
            for (Object o : l) {
                check(o, depth + 1);
            }
            return;
        }
        if (v instanceof Map<?, ?> m) {
            for (Map.Entry<?, ?> e : m.entrySet()) {
                String k = (String) e.getKey();
                for (int j = 0; j < k.length(); j++) {
                    if (k.charAt(j) > 0x7f) {
                        throw new CanonicalException("keys must be ASCII strings");
                    }
                }
                check(e.getValue(), depth + 1);
            }
            return;
        }
        throw new CanonicalException("the format has no floats");
    }

    // ------------------------------------------------------------------ helpers

    /** Equality as the reference compares decoded values (1 == 1.0 == true). */
    public static boolean pyEquals(Object a, Object b) {
        if (a == null || b == null) {
            return a == b;
        }
        if (isNumber(a) && isNumber(b)) {
            return toDecimal(a).compareTo(toDecimal(b)) == 0;
        }
        if (a instanceof Map<?, ?> || a instanceof List<?> || a instanceof String) {
            return a.equals(b);
        }
        return a.equals(b);
    }

    private static boolean isNumber(Object o) {
        return o instanceof BigInteger
                || o instanceof Boolean
                || o instanceof Integer
                || o instanceof Long
                || (o instanceof Double d && !d.isNaN() && !d.isInfinite());
    }

    private static BigDecimal toDecimal(Object o) {
        if (o instanceof Boolean bo) {
            return bo ? BigDecimal.ONE : BigDecimal.ZERO;
        }
        if (o instanceof Double d) {
            return new BigDecimal(d);
        }
        return new BigDecimal(o.toString());
    }

    /** An integer value (not a boolean, not a float), or null. */
    public static BigInteger asInt(Object o) {
        return o instanceof BigInteger n ? n : null;
    }
}

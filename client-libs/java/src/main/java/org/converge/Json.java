package org.converge;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.json.JsonMapper;
import java.io.IOException;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

/**
 * JSON through Jackson, configured strictly (pure): objects are {@link Map}s (a repeated member
 * name: the last one counts), arrays {@link List}s, integers {@link BigInteger}, other numbers
 * {@link Double}. Refused: invalid UTF-8, NaN and Infinity, comments, trailing commas, single
 * quotes, member names that are not strings, raw control characters in strings, anything after
 * the value, nesting deeper than 64. Notary answers go through {@link #parseVerified}: the
 * bounds scan of docs/wire-format.md first (32 levels, integers of at most 15 digits), then the
 * parser, over exactly the bytes whose signature verified.
 */
public final class Json {
    /** At most this many levels open at once in verified bytes (the top-level object is 1). */
    public static final int MAX_VERIFIED_DEPTH = 32;
    /** The largest integer every client language holds exactly. */
    public static final BigInteger MAX_SAFE_INT = BigInteger.valueOf((1L << 53) - 1);

    private static final ObjectMapper MAPPER = JsonMapper.builder(
                    JsonFactory.builder()
                            .streamReadConstraints(StreamReadConstraints.builder()
                                    .maxNestingDepth(64)
                                    .maxNumberLength(1000)
                                    .maxStringLength(1 << 20)
                                    .build())
                            .build())
            .enable(DeserializationFeature.USE_BIG_INTEGER_FOR_INTS)
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
            .enable(SerializationFeature.ORDER_MAP_ENTRIES_BY_KEYS)
            .build();

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

    /** Parses strict UTF-8 JSON text (a leading byte order mark is skipped). */
    public static Object parse(byte[] data) throws JsonException {
        String text = utf8(data);
        return parse(text.startsWith("\uFEFF") ? text.substring(1) : text);
    }

    /** Parses strict JSON text. */
    public static Object parse(String text) throws JsonException {
        try {
            return MAPPER.readValue(text, Object.class);
        } catch (IOException | RuntimeException e) {
            throw new JsonException("not JSON: " + firstLine(e.getMessage()));
        }
    }

    private static String firstLine(String s) {
        return s == null ? "" : s.lines().findFirst().orElse("");
    }

    /**
     * Verified bytes (a legacy {@code S}, an extended statement {@code T}) to an object: the
     * bounds scan, then the parser.
     */
    @SuppressWarnings("unchecked")
    public static Map<String, Object> parseVerified(byte[] data) throws JsonException {
        if (!scan(data)) {
            throw new JsonException("nesting deeper than " + MAX_VERIFIED_DEPTH
                    + " or a number that is not an integer of at most 15 digits");
        }
        if (!(parse(data) instanceof Map<?, ?> m)) {
            throw new JsonException("not a JSON object");
        }
        return (Map<String, Object>) m;
    }

    /**
     * The bounds scan (the same in every client; it produces no values): outside strings at most
     * 32 levels of {@code [}/{@code {} open at once, and every number token (a maximal run of
     * {@code -+.0-9eE} beginning with {@code -} or a digit) an integer of at most 15 digits.
     */
    public static boolean scan(byte[] t) {
        int depth = 0;
        int i = 0;
        while (i < t.length) {
            byte c = t[i];
            if (c == '"') {
                i++;
                while (i < t.length && t[i] != '"') {
                    i += t[i] == '\\' ? 2 : 1;
                }
                if (i >= t.length) {
                    return false;
                }
                i++;
            } else if (c == '[' || c == '{') {
                if (++depth > MAX_VERIFIED_DEPTH) {
                    return false;
                }
                i++;
            } else if (c == ']' || c == '}') {
                depth--;
                i++;
            } else if (c == '-' || (c >= '0' && c <= '9')) {
                int j = i;
                while (j < t.length && "-+.0123456789eE".indexOf(t[j]) >= 0) {
                    j++;
                }
                String tok = new String(t, i, j - i, StandardCharsets.US_ASCII);
                if (!tok.matches("-?(0|[1-9][0-9]{0,14})")) {
                    return false;
                }
                i = j;
            } else {
                i++;
            }
        }
        return true;
    }

    /** Compact JSON text with object members in key order (output and comparisons). */
    public static String compact(Object v) {
        try {
            return MAPPER.writeValueAsString(v);
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("not a JSON value: " + e.getMessage(), e);
        }
    }

    /** Equality of decoded values, numbers compared by value (443 equals 443.0). */
    public static boolean sameValue(Object a, Object b) {
        if (a == null || b == null) {
            return a == b;
        }
        if (a instanceof Number x && b instanceof Number y) {
            BigDecimal dx = decimal(x);
            BigDecimal dy = decimal(y);
            return dx != null && dy != null && dx.compareTo(dy) == 0;
        }
        return a.equals(b);
    }

    private static BigDecimal decimal(Number n) {
        if (n instanceof Double d) {
            return d.isNaN() || d.isInfinite() ? null : new BigDecimal(d);
        }
        return new BigDecimal(n.toString());
    }

    /** An integer value (not a boolean, not a float), or null. */
    public static BigInteger asInt(Object o) {
        return o instanceof BigInteger n ? n : null;
    }
}

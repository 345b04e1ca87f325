package org.converge;

import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.regex.Pattern;

/**
 * A certificate digest with its algorithm (pure). Accepted text: 40 (SHA-1) or 64 (SHA-256)
 * hex digits, any case, with no separators or a colon between every pair; surrounding ASCII
 * white space ignored; at most {@value #MAX_TEXT} characters. Canonical form: upper-case
 * colon-separated hex.
 */
public final class Fingerprint {
    public static final int MAX_TEXT = 200;
    private static final Pattern COLON = Pattern.compile("[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2})*");
    private static final Pattern PLAIN = Pattern.compile("[0-9A-Fa-f]+");

    private static final char[] HEX = "0123456789ABCDEF".toCharArray();
    private final String algorithm;
    private final byte[] digest;

    private Fingerprint(String algorithm, byte[] digest) {
        this.algorithm = algorithm;
        this.digest = digest.clone();
    }

    /** {@code sha1} or {@code sha256}. */
    public String algorithm() {
        return algorithm;
    }

    public byte[] digest() {
        return digest.clone();
    }

    public String colonHex() {
        char[] out = new char[digest.length * 3 - 1];
        for (int i = 0; i < digest.length; i++) {
            int v = digest[i] & 0xff;
            if (i > 0) {
                out[i * 3 - 1] = ':';
            }
            out[i * 3] = HEX[v >>> 4];
            out[i * 3 + 1] = HEX[v & 0xf];
        }
        return new String(out);
    }

    @Override
    public String toString() {
        return colonHex();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Fingerprint f
                && f.algorithm.equals(algorithm)
                && Arrays.equals(f.digest, digest);
    }

    @Override
    public int hashCode() {
        return Arrays.hashCode(digest);
    }

    private static String stripAscii(String s) {
        int a = 0;
        int b = s.length();
        while (a < b && " \t\r\n".indexOf(s.charAt(a)) >= 0) {
            a++;
        }
        while (b > a && " \t\r\n".indexOf(s.charAt(b - 1)) >= 0) {
            b--;
        }
        return s.substring(a, b);
    }

    public static Fingerprint parse(String text) throws ConvergeException.BadInput {
        if (text == null) {
            throw ConvergeException.bad("fingerprint", "fingerprint must be a string");
        }
        if (text.codePointCount(0, text.length()) > MAX_TEXT) {
            throw ConvergeException.bad(
                    "fingerprint", "fingerprint longer than " + MAX_TEXT + " characters");
        }
        String s = stripAscii(text);
        if (s.isEmpty()) {
            throw ConvergeException.bad("fingerprint", "empty fingerprint");
        }
        String hex;
        if (s.indexOf(':') >= 0) {
            if (!COLON.matcher(s).matches()) {
                throw ConvergeException.bad(
                        "fingerprint", "colon-separated fingerprints need two hex digits per byte");
            }
            hex = s.replace(":", "");
        } else {
            if (!PLAIN.matcher(s).matches()) {
                throw ConvergeException.bad("fingerprint", "fingerprint contains a non-hex character");
            }
            if (s.length() % 2 != 0) {
                throw ConvergeException.bad("fingerprint", "odd number of hex digits");
            }
            hex = s;
        }
        byte[] d = HexFormat.of().parseHex(hex);
        String alg =
                switch (d.length) {
                    case 20 -> "sha1";
                    case 32 -> "sha256";
                    default -> throw ConvergeException.bad(
                            "fingerprint",
                            "a fingerprint has 20 (SHA-1) or 32 (SHA-256) bytes, not " + d.length);
                };
        return new Fingerprint(alg, d);
    }

    /** The fingerprint of a DER certificate. */
    public static Fingerprint of(byte[] der, String algorithm) {
        try {
            String name = algorithm.equals("sha1") ? "SHA-1" : "SHA-256";
            if (!algorithm.equals("sha1") && !algorithm.equals("sha256")) {
                throw new IllegalArgumentException("unknown algorithm " + algorithm);
            }
            return new Fingerprint(algorithm, MessageDigest.getInstance(name).digest(der));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}

package org.converge;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/** IP address literals in the reference's compressed form (pure, no name resolution). */
public final class IpAddress {
    private IpAddress() {}

    /** The compressed form of an IPv4 or IPv6 literal; {@code target} error otherwise. */
    public static String compressed(String ip) throws ConvergeException.BadInput {
        String out = tryCompressed(ip);
        if (out == null) {
            throw ConvergeException.bad("target", "invalid target address " + ip);
        }
        return out;
    }

    /** The compressed form, or null when {@code s} is not an address literal. */
    public static String tryCompressed(String s) {
        if (s == null) {
            return null;
        }
        int[] v4 = parseV4(s);
        if (v4 != null) {
            return v4[0] + "." + v4[1] + "." + v4[2] + "." + v4[3];
        }
        String scope = "";
        int pct = s.indexOf('%');
        String addr = s;
        if (pct >= 0) {
            scope = s.substring(pct);
            addr = s.substring(0, pct);
            if (scope.length() < 2 || scope.indexOf('/') >= 0) {
                return null;
            }
        }
        int[] h = parseV6(addr);
        if (h == null) {
            return null;
        }
        return formatV6(h) + scope;
    }

    static int[] parseV4(String s) {
        String[] parts = s.split("\\.", -1);
        if (parts.length != 4) {
            return null;
        }
        int[] out = new int[4];
        for (int i = 0; i < 4; i++) {
            String p = parts[i];
            if (p.isEmpty() || p.length() > 3 || !p.chars().allMatch(c -> c >= '0' && c <= '9')) {
                return null;
            }
            if (p.length() > 1 && p.charAt(0) == '0') {
                return null;
            }
            int v = Integer.parseInt(p);
            if (v > 255) {
                return null;
            }
            out[i] = v;
        }
        return out;
    }

    static int[] parseV6(String s) {
        if (s.length() < 2 || s.length() > 45) {
            return null;
        }
        List<Integer> head = new ArrayList<>();
        List<Integer> tail = new ArrayList<>();
        int dc = s.indexOf("::");
        if (dc >= 0 && s.indexOf("::", dc + 1) >= 0) {
            return null;
        }
        String left = dc >= 0 ? s.substring(0, dc) : s;
        String right = dc >= 0 ? s.substring(dc + 2) : null;
        if (!groups(left, head, right == null)) {
            return null;
        }
        if (right != null && !groups(right, tail, true)) {
            return null;
        }
        int total = head.size() + tail.size();
        if (dc < 0 && total != 8) {
            return null;
        }
        if (dc >= 0 && total > 7) {
            return null;
        }
        int[] out = new int[8];
        for (int i = 0; i < head.size(); i++) {
            out[i] = head.get(i);
        }
        for (int i = 0; i < tail.size(); i++) {
            out[8 - tail.size() + i] = tail.get(i);
        }
        return out;
    }

    private static boolean groups(String part, List<Integer> out, boolean last) {
        if (part.isEmpty()) {
            return true;
        }
        String[] gs = part.split(":", -1);
        for (int i = 0; i < gs.length; i++) {
            String g = gs[i];
            if (last && i == gs.length - 1 && g.indexOf('.') >= 0) {
                int[] v4 = parseV4(g);
                if (v4 == null) {
                    return false;
                }
                out.add((v4[0] << 8) | v4[1]);
                out.add((v4[2] << 8) | v4[3]);
                continue;
            }
            if (g.isEmpty() || g.length() > 4) {
                return false;
            }
            int v = 0;
            for (char c : g.toCharArray()) {
                int d = Character.digit(c, 16);
                if (d < 0 || c > 'f') {
                    return false;
                }
                v = v * 16 + d;
            }
            out.add(v);
        }
        return true;
    }

    static String formatV6(int[] h) {
        int bestStart = -1;
        int bestLen = 0;
        for (int i = 0; i < 8; ) {
            if (h[i] == 0) {
                int j = i;
                while (j < 8 && h[j] == 0) {
                    j++;
                }
                if (j - i > bestLen) {
                    bestLen = j - i;
                    bestStart = i;
                }
                i = j;
            } else {
                i++;
            }
        }
        if (bestLen < 2) {
            bestStart = -1;
        }
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < 8; i++) {
            if (i == bestStart) {
                b.append(i == 0 ? "::" : ":");
                i += bestLen - 1;
                continue;
            }
            b.append(Integer.toHexString(h[i]).toLowerCase(Locale.ROOT));
            if (i < 7) {
                b.append(':');
            }
        }
        return b.toString();
    }

    /** The host as a notary names it: an address literal compressed, a name lower-cased. */
    public static String expectedHost(String host) {
        String s = host;
        int a = 0;
        int e = s.length();
        while (a < e && (s.charAt(a) == '[' || s.charAt(a) == ']')) {
            a++;
        }
        while (e > a && (s.charAt(e - 1) == '[' || s.charAt(e - 1) == ']')) {
            e--;
        }
        String ip = tryCompressed(s.substring(a, e));
        if (ip != null) {
            return ip;
        }
        String name = host.toLowerCase(Locale.ROOT);
        return name.endsWith(".") ? name.substring(0, name.length() - 1) : name;
    }
}

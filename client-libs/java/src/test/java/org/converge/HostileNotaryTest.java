package org.converge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Function;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * One hostile notary among honest ones never takes a verdict down: a genuine notary and one that
 * answers each hostile form (legacy and extended) over real TLS on 127.0.0.1. Every check
 * returns a verdict in which the genuine notary's vote is intact and the hostile one's is the
 * vote its form deserves; each hostile form has its twin (the same change made harmless).
 */
@Timeout(120)
class HostileNotaryTest extends ServerFixture {
    static final String OTHER = "00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33";

    /** A legacy form: the signed bytes S for the asked fingerprint X, what follows the signature. */
    record Form(String name, Function<String, String> signed, String after, String vote, String kind) {}

    static String withExtra(String x, String extra) {
        return TestServers.listing(x, extra);
    }

    static String nest(int levels) {
        return ", \"deep\": " + "[".repeat(levels - 1) + "]".repeat(levels - 1);
    }

    static final List<Form> LEGACY = List.of(
            new Form("honest", x -> withExtra(x, ""), "", "success", "listed"),
            new Form("splice-twin", x -> withExtra(OTHER, ""), "", "failure", "not-listed"),
            new Form("member-after", x -> withExtra(x, ""), ", \"x\": 1", "failure", "response"),
            new Form("duplicate-last", x -> "{\"fingerprintList\": [" + TestServers.entry(OTHER)
                    + "], \"fingerprintList\": [" + TestServers.entry(x) + "]}", "", "success", "listed"),
            new Form("duplicate-first", x -> "{\"fingerprintList\": [" + TestServers.entry(x)
                    + "], \"fingerprintList\": [" + TestServers.entry(OTHER) + "]}", "", "failure", "not-listed"),
            new Form("bignum", x -> withExtra(x, ", \"n\": " + "7".repeat(5000)), "", "failure", "response"),
            new Form("int15", x -> withExtra(x, ", \"n\": " + "7".repeat(15)), "", "success", "listed"),
            new Form("number-key", x -> withExtra(x, ", 1: 2"), "", "failure", "response"),
            new Form("string-key", x -> withExtra(x, ", \"1\": 2"), "", "success", "listed"),
            new Form("nest33", x -> withExtra(x, nest(33)), "", "failure", "response"),
            new Form("nest32", x -> withExtra(x, nest(32)), "", "success", "listed"),
            new Form("nest100000", x -> withExtra(x, nest(100_000)), "", "failure", "response"),
            new Form("nan", x -> withExtra(x, ", \"n\": NaN"), "", "failure", "response"),
            new Form("null", x -> withExtra(x, ", \"n\": null"), "", "success", "listed"),
            new Form("nul-byte", x -> withExtra(x, ", \"s\": \"a\u0000b\""), "", "failure", "response"),
            new Form("surrogate", x -> withExtra("\\ud800", ""), "", "failure", "response"));

    /**
     * Bodies that are not the signed bytes plus the signature member: a list of the asked
     * fingerprint spliced after the signature of a list without it (its twin: splice-twin above),
     * a newline after the brace, malformed JSON after the signature.
     */
    static final Map<String, String[]> BROKEN = Map.of(
            "splice", new String[] {"failure", "response"},
            "bytes-after", new String[] {"failure", "response"},
            "garbage-after", new String[] {"failure", "response"});

    /** Extended forms: text added inside the signed statement before its final brace. */
    static final Map<String, String[]> EXTENDED = new LinkedHashMap<>();

    static {
        EXTENDED.put("", new String[] {"success", "match"});
        EXTENDED.put(",\"zz\":" + "7".repeat(5000), new String[] {"failure", "malformed"});
        EXTENDED.put(",\"zz\":" + "7".repeat(15), new String[] {"success", "match"});
        EXTENDED.put(",1:2", new String[] {"failure", "malformed"});
        EXTENDED.put(",\"1\":2", new String[] {"success", "match"});
        EXTENDED.put(",\"zz\":" + "[".repeat(32) + "]".repeat(32), new String[] {"failure", "malformed"});
        EXTENDED.put(",\"zz\":" + "[".repeat(31) + "]".repeat(31), new String[] {"success", "match"});
        EXTENDED.put(",\"zz\":NaN", new String[] {"failure", "malformed"});
        EXTENDED.put(",\"zz\":null", new String[] {"success", "match"});
        EXTENDED.put(",\"verdict\":\"mismatch\"", new String[] {"failure", "response"}); // the last counts
    }

    Client client(List<Bundle> bundles) {
        Config c = config(bundles);
        c.db = null;
        c.agreement = Policy.MINORITY; // the genuine notary's success alone trusts the certificate
        c.earlyReturn = false; // every notary's vote is in the verdict
        return client(c);
    }

    TestServers.Server serve(Function<TestServers.Request, byte[]> h) throws Exception {
        return serve(notaryId, h);
    }

    static byte[] legacyBody(TestServers.Request r, Form form, String broken) throws Exception {
        String x = new String(r.body(), StandardCharsets.US_ASCII).replace("fingerprint=", "");
        byte[] honest = notaryId.signedBody(form.signed().apply(x), form.after());
        String h = new String(honest, StandardCharsets.ISO_8859_1);
        String out = switch (broken) {
            case "splice" -> h.substring(0, h.length() - 1) + ", \"fingerprintList\": [" + TestServers.entry(x) + "]}";
            case "bytes-after" -> h + "\n";
            case "garbage-after" -> h + ", \"fingerprintList\": [}";
            default -> h;
        };
        return TestServers.response(200, "application/json", out.getBytes(StandardCharsets.ISO_8859_1));
    }

    /** Checks {@code forms} one by one against a genuine notary and the hostile one. */
    void run(Bundle honest, AtomicReference<Object> form, Map<Object, String[]> forms, String honestKind,
            Bundle hostile) throws Exception {
        try (Client c = client(List.of(honest, hostile))) {
            int i = 0;
            for (Map.Entry<Object, String[]> e : forms.entrySet()) {
                form.set(e.getKey());
                Verdict v = c.check("127.0.0.1", 4433 + i++, genuine);
                assertTrue(v.trusted(), e.getKey().toString());
                Map<String, NotaryResult> by = new LinkedHashMap<>();
                v.results().forEach(r -> by.put(r.name(), r));
                NotaryResult a = by.get("Org A");
                NotaryResult h = by.get("Org H");
                assertEquals(List.of("success", honestKind), List.of(a.vote(), a.kind()), "the genuine notary's vote");
                assertEquals(List.of(e.getValue()), List.of(h.vote(), h.kind()), e.getKey() + ": " + h.detail());
            }
        }
    }

    @Test
    void everyLegacyFormGetsTheRightVotes() throws Exception {
        Bundle honest = TestServers.bundle("Org A", serve(TestServers.legacyNotary(notaryId, genuine)).port(), notaryId,
                null);
        AtomicReference<Object> form = new AtomicReference<>();
        TestServers.Server h = serve(r -> {
            try {
                Object f = form.get();
                return f instanceof Form lf ? legacyBody(r, lf, "")
                        : legacyBody(r, LEGACY.get(f.equals("splice") ? 1 : 0), (String) f);
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        Map<Object, String[]> forms = new LinkedHashMap<>();
        LEGACY.forEach(f -> forms.put(f, new String[] {f.vote(), f.kind()}));
        BROKEN.forEach(forms::put);
        run(honest, form, forms, "listed", TestServers.bundle("Org H", h.port(), notaryId, null));
        assertEquals(forms.size(), h.requests.size());
    }

    @Test
    @SuppressWarnings("unchecked")
    void everyExtendedFormGetsTheRightVotes() throws Exception {
        TestServers.SigningKey ka = new TestServers.SigningKey();
        TestServers.SigningKey kh = new TestServers.SigningKey();
        Bundle honest = TestServers.bundle("Org A",
                serve(TestServers.extendedNotary(ka, genuine, st -> { })).port(), notaryId, ka);
        AtomicReference<Object> form = new AtomicReference<>();
        TestServers.Server h = serve(r -> {
            try {
                Map<String, Object> req = (Map<String, Object>) Json.parse(r.body());
                byte[] plain = kh.answer(req, "match", System.currentTimeMillis() / 1000, st -> { });
                // the statement bytes of the honest answer, the form's text added before their brace
                String text = new String(plain, StandardCharsets.UTF_8);
                String t = text.substring(text.indexOf(",\"statement\":") + 13, text.length() - 1);
                byte[] signed = (t.substring(0, t.length() - 1) + form.get() + "}").getBytes(StandardCharsets.UTF_8);
                return TestServers.response(200, Extended.MEDIA_TYPE, kh.signed(signed));
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        run(honest, form, new LinkedHashMap<>(EXTENDED), "match", TestServers.bundle("Org H", h.port(), notaryId, kh));
        assertEquals(EXTENDED.size(), h.requests.size());
    }

    @Test
    void aHostileVoteTakenForAnHonestOneIsNoticed() throws Exception {
        // the must-fail twin of the comparison: expecting success of a spliced answer fails
        Bundle honest = TestServers.bundle("Org A", serve(TestServers.legacyNotary(notaryId, genuine)).port(), notaryId,
                null);
        AtomicReference<Object> form = new AtomicReference<>();
        TestServers.Server h = serve(r -> {
            try {
                return legacyBody(r, LEGACY.get(1), (String) form.get());
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        Map<Object, String[]> wrong = Map.of("splice", new String[] {"success", "listed"});
        assertThrows(AssertionError.class, () -> run(honest, form, wrong, "listed",
                TestServers.bundle("Org H", h.port(), notaryId, null)));
    }

}

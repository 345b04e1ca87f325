package org.converge;

import java.io.IOException;
import java.io.PrintStream;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The conformance CLI ({@code client-libs/conformance/CLIENT-CLI.md}): {@code info}, {@code
 * check --config-dir DIR HOST PORT FINGERPRINT} (exit 0 trusted, 1 not, 2 error) and {@code
 * vector FILE}; one JSON line per object on stdout.
 */
public final class ConformanceCli {
    public static final String VERSION = "0.1.0";

    private ConformanceCli() {}

    static void emit(PrintStream out, Map<String, Object> obj) {
        out.print(Json.compact(obj) + "\n");
        out.flush();
    }

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    public static int run(String[] args, PrintStream out) {
        if (args.length == 1 && args[0].equals("info")) {
            emit(out, obj("language", "java", "implementation", "converge-java", "version", VERSION,
                    "schemas", new ArrayList<Object>(Vectors.SCHEMAS)));
            return 0;
        }
        if (args.length == 2 && args[0].equals("vector")) {
            Object doc;
            try {
                doc = Json.parse(Files.readAllBytes(Paths.get(args[1])));
            } catch (IOException | Json.JsonException e) {
                emit(out, obj("error", "usage", "message", String.valueOf(e.getMessage())));
                return 2;
            }
            if (!(doc instanceof Map<?, ?> d) || !Vectors.SCHEMAS.contains(d.get("schema"))) {
                emit(out, obj("error", "unsupported-schema"));
                return 2;
            }
            for (Object c : (List<?>) d.get("tests")) {
                try {
                    emit(out, Vectors.runCase(d, (Map<?, ?>) c));
                } catch (Exception e) {
                    emit(out, obj("id", ((Map<?, ?>) c).get("id"), "error", "exception",
                            "message", String.valueOf(e)));
                }
            }
            return 0;
        }
        if (args.length == 6 && args[0].equals("check") && args[1].equals("--config-dir")) {
            String portText = args[4];
            Verdict v;
            try {
                if (portText.isEmpty() || !portText.chars().allMatch(c -> c >= '0' && c <= '9')) {
                    emit(out, obj("error", "usage", "message", "PORT must be decimal"));
                    return 2;
                }
                BigInteger p = new BigInteger(portText);
                // the configuration first, as the reference does; then a port out of range is
                // a target error of the check itself
                Config cfg = Config.load(Paths.get(args[2]), Map.of());
                int port = p.compareTo(BigInteger.valueOf(65535)) > 0 ? -1 : p.intValue();
                try (Client client = new Client(cfg)) {
                    v = client.check(args[3], port, args[5]);
                }
            } catch (ConvergeException e) {
                emit(out, obj("error", e.kind(), "message", String.valueOf(e.getMessage())));
                return 2;
            }
            List<Object> notaries = new ArrayList<>();
            for (NotaryResult r : v.results()) {
                notaries.add(obj("name", r.name(), "outcome", r.vote(), "kind", r.kind(),
                        "status", r.status() == null ? null : BigInteger.valueOf(r.status()),
                        "protocol", r.protocol(), "detail", r.detail()));
            }
            emit(out, obj("verdict", v.trusted(), "cache", v.fromCache(), "relay", v.relay(),
                    "notaries", notaries));
            return v.trusted() ? 0 : 1;
        }
        if (args.length >= 5 && args[0].equals("hook") && args[1].equals("--config-dir")) {
            Integer rc = Hook.run(args[2], List.of(args).subList(3, args.length), out);
            if (rc != null) {
                return rc;
            }
        }
        System.err.print("usage: converge-conformance check --config-dir DIR HOST PORT FINGERPRINT\n"
                + "       converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] [--path P]\n"
                + "           [--follow-redirects] [--first URL] [--unhooked-first] HOST PORT\n"
                + "       converge-conformance vector FILE\n"
                + "       converge-conformance info\n");
        return 2;
    }

    public static void main(String[] args) {
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        int rc = run(args, out);
        out.flush();
        System.exit(rc);
    }
}

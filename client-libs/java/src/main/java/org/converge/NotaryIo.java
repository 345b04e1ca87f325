package org.converge;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.security.PublicKey;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletionService;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorCompletionService;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.DoubleSupplier;
import javax.net.ssl.SSLException;
import javax.net.ssl.SSLSocket;

/**
 * Asking notaries over the network (IO): one TLS connection per physical host, pinned by the
 * bundle's certificate ({@link PinningTrustManager}: the request is never sent to another
 * certificate), one request, the response read until the server closes. A logical notary's
 * hosts are raced; the first definitive answer wins. Optional bounce relay ({@code CONNECT}
 * through another notary's {@code http_port}) and the extended format. Every wait is bounded:
 * {@code connect-timeout} for TCP + TLS, {@code notary-timeout} for the whole notary, {@code
 * max-response-bytes} for the response.
 */
public final class NotaryIo {
    public static final int MAX_RELAY_HEAD = 8192;
    static final Set<String> DEFINITIVE = Set.of("listed", "status-only", "mismatch", "not-listed", "match");

    private static final AtomicInteger THREADS = new AtomicInteger();
    static final ExecutorService POOL = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "converge-io-" + THREADS.incrementAndGet());
        t.setDaemon(true);
        return t;
    });

    private NotaryIo() {}

    /** Sockets of unfinished queries, closed when their answer is no longer wanted. */
    static final class Cancel {
        private final List<Socket> sockets = new ArrayList<>();
        private boolean cancelled;

        synchronized void register(Socket s) throws IOException {
            if (cancelled) {
                s.close();
                throw new IOException("cancelled");
            }
            sockets.add(s);
        }

        synchronized void cancel() {
            cancelled = true;
            for (Socket s : sockets) {
                try {
                    s.close();
                } catch (IOException e) {
                    // already closed
                }
            }
            sockets.clear();
        }
    }

    /** How to ask one notary in the extended format. */
    record ExtQuery(List<Extended.SigningKey> keys, boolean nonce, int maxSkew, boolean fallback,
            DoubleSupplier clock, Transparency.LogPolicy log) {}

    /** Settings of one query. */
    record Settings(double connectTimeout, double notaryTimeout, int maxBytes, Bundle relay,
            int bouncePort, String ip) {}

    record HostAnswer(Legacy.Outcome outcome, String host, String cacheStatus) {}

    private static int severity(String kind) {
        return switch (kind) {
            case "signature", "response", "malformed", "unknown-key", "bad-signature",
                    "wrong-target", "nonce-mismatch", "stale", "log-missing", "log-proof",
                    "log-checkpoint", "log-witness", "log-entry" -> 3;
            case "pin" -> 2;
            default -> 0;
        };
    }

    /** The CONNECT head sent to a bounce relay for one logical notary's hosts (pure). */
    static byte[] connectHead(List<Bundle.Host> dests, int port) {
        String first = dests.get(0).host;
        StringBuilder b = new StringBuilder();
        b.append("CONNECT ").append(first).append(':').append(port).append(" HTTP/1.1\r\n");
        b.append("Host: ").append(first).append("\r\n");
        for (Bundle.Host d : dests.subList(1, dests.size())) {
            b.append("X-Convergence-Notary: ").append(d.host).append('+').append(port).append("\r\n");
        }
        b.append("\r\n");
        return b.toString().getBytes(StandardCharsets.US_ASCII);
    }

    /** Which destination a relay connected to, from its reply head (pure). */
    static Bundle.Host parseConnectReply(String head, List<Bundle.Host> dests) throws IOException {
        String[] lines = head.split("\r\n", -1);
        String[] parts = lines[0].split(" ", 3);
        if (parts.length < 2 || !parts[0].startsWith("HTTP/1.") || !parts[1].equals("200")) {
            throw new IOException("relay refused the tunnel: " + lines[0]);
        }
        String connected = null;
        for (int i = 1; i < lines.length; i++) {
            int c = lines[i].indexOf(':');
            String name = c < 0 ? lines[i] : lines[i].substring(0, c);
            String value = c < 0 ? "" : lines[i].substring(c + 1);
            if (name.strip().toLowerCase(Locale.ROOT).equals("x-convergence-notary")) {
                connected = value.strip().toLowerCase(Locale.ROOT);
            }
        }
        if (connected == null) {
            if (dests.size() == 1) {
                return dests.get(0);
            }
            throw new IOException("relay connected to an unknown notary host");
        }
        String host = connected.split("\\+", -1)[0];
        for (Bundle.Host d : dests) {
            String h = d.host.toLowerCase(Locale.ROOT);
            if (h.equals(host) || h.equals(connected)) {
                return d;
            }
        }
        throw new IOException("relay connected to an unknown notary host " + connected);
    }

    private static final class PinMismatch extends IOException {
        private static final long serialVersionUID = 1L;

        PinMismatch(String m) {
            super(m);
        }
    }

    private static boolean isPin(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof PinningTrustManager.PinException) {
                return true;
            }
        }
        return false;
    }

    private static int millis(double seconds) {
        return (int) Math.max(1, Math.min(Integer.MAX_VALUE, Math.round(seconds * 1000)));
    }

    private record Opened(SSLSocket socket, Bundle.Host host) {}

    private static Opened tls(Socket raw, Bundle.Host nh, int port) throws IOException {
        SSLSocket s = (SSLSocket) nh.sslContext().getSocketFactory().createSocket(raw, nh.host, port, true);
        s.setEnabledProtocols(new String[] {"TLSv1.3", "TLSv1.2"});
        try {
            s.startHandshake();
        } catch (IOException e) {
            if (isPin(e)) {
                throw new PinMismatch("presented a certificate other than the pinned one");
            }
            throw e;
        }
        return new Opened(s, nh);
    }

    private static Opened openDirect(Bundle.Host nh, Settings st, Cancel cancel) throws IOException {
        Socket raw = new Socket();
        raw.setTcpNoDelay(true); // the request follows the handshake's last flight at once
        cancel.register(raw);
        int ms = millis(st.connectTimeout());
        raw.connect(new InetSocketAddress(nh.host, nh.sslPort), ms);
        raw.setSoTimeout(ms);
        return tls(raw, nh, nh.sslPort);
    }

    private static Opened openViaRelay(List<Bundle.Host> dests, Settings st, Cancel cancel) throws IOException {
        IOException last = null;
        int ms = millis(st.connectTimeout());
        for (Bundle.Host rh : st.relay().hosts) {
            Socket raw = new Socket();
            try {
                raw.setTcpNoDelay(true);
                cancel.register(raw);
                raw.connect(new InetSocketAddress(rh.host, rh.httpPort), ms);
                raw.setSoTimeout(ms);
                OutputStream out = raw.getOutputStream();
                out.write(connectHead(dests, st.bouncePort()));
                out.flush();
                InputStream in = raw.getInputStream();
                ByteArrayOutputStream head = new ByteArrayOutputStream();
                while (true) {
                    int c = in.read();
                    if (c < 0) {
                        throw new IOException("relay closed the connection");
                    }
                    head.write(c);
                    if (head.size() > MAX_RELAY_HEAD) {
                        throw new IOException("relay reply head too large");
                    }
                    byte[] h = head.toByteArray();
                    int n = h.length;
                    if (n >= 4 && h[n - 4] == '\r' && h[n - 3] == '\n' && h[n - 2] == '\r' && h[n - 1] == '\n') {
                        break;
                    }
                }
                Bundle.Host nh = parseConnectReply(head.toString(StandardCharsets.ISO_8859_1), dests);
                return tls(raw, nh, st.bouncePort());
            } catch (PinMismatch e) {
                raw.close();
                throw e;
            } catch (IOException e) {
                raw.close();
                last = e;
            }
        }
        throw new IOException("no host of relay " + st.relay().name + " worked: " + last);
    }

    private static byte[] readToEof(InputStream in, int maxBytes) throws IOException, ConvergeException.BadInput {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        byte[] buf = new byte[65536];
        while (true) {
            int n;
            try {
                n = in.read(buf);
            } catch (SSLException e) {
                if (out.size() > 0) {
                    break; // closed without close_notify: keep what was read
                }
                throw e;
            }
            if (n < 0) {
                break;
            }
            if (out.size() + n > maxBytes) {
                throw ConvergeException.bad("response", "response larger than " + maxBytes + " bytes");
            }
            out.write(buf, 0, n);
        }
        return out.toByteArray();
    }

    /** Ask one physical host (or, through a relay, whichever of {@code dests} it reaches). */
    static HostAnswer queryHost(Bundle.Host nh, List<Bundle.Host> dests, String host, int port,
            List<Fingerprint> wanted, ExtQuery ext, Settings st, Cancel cancel) {
        if (ext == null) {
            return query(nh, dests, host, port, wanted, null, st, cancel);
        }
        HostAnswer a = query(nh, dests, host, port, wanted, ext, st, cancel);
        Legacy.Outcome o = a.outcome();
        if (ext.fallback() && o.kind().equals("status") && o.status() != null
                && Extended.NOT_OFFERED.contains(o.status())) {
            return query(nh, dests, host, port, wanted, null, st, cancel);
        }
        return a;
    }

    private static HostAnswer query(Bundle.Host nh0, List<Bundle.Host> dests, String host, int port,
            List<Fingerprint> wanted, ExtQuery ext, Settings st, Cancel cancel) {
        String label = st.relay() == null ? nh0.host + ":" + nh0.sslPort
                : nh0.host + ":" + st.bouncePort() + " via " + st.relay().name;
        String proto = ext == null ? Legacy.FORMAT : Extended.FORMAT;
        Fingerprint asked = wanted.get(0);
        String nonce = null;
        Opened opened = null;
        try {
            byte[] request;
            if (ext == null) {
                request = Legacy.requestBytes(host, port, asked, st.ip());
            } else {
                asked = Extended.requestFingerprint(wanted);
                nonce = ext.nonce() ? Extended.newNonce() : null;
                request = Extended.requestBytes(host, port, asked, nonce, st.ip(), ext.log() != null);
            }
            byte[] raw;
            try {
                opened = st.relay() == null ? openDirect(nh0, st, cancel) : openViaRelay(dests, st, cancel);
                if (st.relay() != null) {
                    label = opened.host().host + ":" + st.bouncePort() + " via " + st.relay().name;
                }
                opened.socket().setSoTimeout(millis(st.notaryTimeout()));
                OutputStream out = opened.socket().getOutputStream();
                out.write(request);
                out.flush();
                raw = readToEof(opened.socket().getInputStream(), st.maxBytes());
            } catch (PinMismatch e) {
                return new HostAnswer(new Legacy.Outcome("failure", "pin", null,
                        label + " presented a certificate other than the pinned one", proto), label, null);
            } catch (IOException e) {
                return new HostAnswer(new Legacy.Outcome("unreachable", "unreachable", null,
                        label + ": " + e.getClass().getSimpleName() + ": " + e.getMessage(), proto), label, null);
            }
            Legacy.HttpResponse r;
            try {
                r = Legacy.parseHttpResponse(raw, st.maxBytes());
            } catch (ConvergeException.BadInput e) {
                return new HostAnswer(new Legacy.Outcome("failure", e.kind(), null, e.getMessage(), proto),
                        label, null);
            } catch (RuntimeException e) {
                // the one parse boundary: whatever the framing raises is this notary's failure
                return new HostAnswer(new Legacy.Outcome("failure", "response", null,
                        "unreadable response: " + e, proto), label, null);
            }
            Legacy.Outcome o;
            if (ext == null) {
                PublicKey key = opened.host().publicKey();
                o = Legacy.evaluate(r.status(), r.body(), wanted, key);
            } else {
                long now = (long) Math.floor(ext.clock().getAsDouble());
                Map<String, PublicKey> keys = Extended.trustedKeys(ext.keys(), now);
                o = Extended.evaluate(r, keys, host, port, asked, nonce, now, ext.maxSkew(), st.ip(), ext.log());
            }
            return new HostAnswer(o, label, r.header("cache-status"));
        } catch (ConvergeException.BadInput e) {
            return new HostAnswer(new Legacy.Outcome("failure", e.kind(), null, e.getMessage(), proto), label, null);
        } finally {
            if (opened != null) {
                try {
                    opened.socket().close();
                } catch (IOException e) {
                    // closing after the answer: nothing to report
                }
            }
        }
    }

    /** Race every physical host of {@code bundle} (or its relay tunnel); never throws. */
    static NotaryResult askNotary(Bundle bundle, String host, int port, List<Fingerprint> wanted,
            ExtQuery ext, Settings st, Cancel cancel) {
        long t0 = System.nanoTime();
        CompletionService<HostAnswer> cs = new ExecutorCompletionService<>(POOL);
        List<Future<HostAnswer>> futures = new ArrayList<>();
        if (st.relay() == null) {
            for (Bundle.Host h : bundle.hosts) {
                futures.add(cs.submit(() -> queryHost(h, List.of(h), host, port, wanted, ext, st, cancel)));
            }
        } else {
            futures.add(cs.submit(() -> queryHost(bundle.hosts.get(0), bundle.hosts, host, port, wanted,
                    ext, st, cancel)));
        }
        List<HostAnswer> answers = new ArrayList<>();
        HostAnswer winner = null;
        long deadline = t0 + (long) (st.notaryTimeout() * 1e9);
        try {
            for (int i = 0; i < futures.size(); i++) {
                long left = deadline - System.nanoTime();
                Future<HostAnswer> f = left > 0 ? cs.poll(left, TimeUnit.NANOSECONDS) : null;
                if (f == null) {
                    break;
                }
                HostAnswer a = f.get();
                answers.add(a);
                if (DEFINITIVE.contains(a.outcome().kind())) {
                    winner = a;
                    break;
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (ExecutionException e) {
            // queryHost reports IO failures as outcomes; an unexpected error counts as no answer
        } finally {
            cancel.cancel();
            for (Future<HostAnswer> f : futures) {
                f.cancel(true);
            }
        }
        double elapsed = (System.nanoTime() - t0) / 1e9;
        if (winner == null && !answers.isEmpty()) {
            winner = answers.get(0);
            for (HostAnswer a : answers) {
                if (severity(a.outcome().kind()) > severity(winner.outcome().kind())) {
                    winner = a;
                }
            }
        }
        if (winner == null) {
            return new NotaryResult(bundle.name, "unreachable", "timeout", null, null,
                    "no answer within " + st.notaryTimeout() + " s", elapsed, null, null);
        }
        Legacy.Outcome o = winner.outcome();
        return new NotaryResult(bundle.name, o.vote(), o.kind(), o.status(), winner.host(), o.detail(),
                elapsed, winner.cacheStatus(), o.protocol());
    }
}

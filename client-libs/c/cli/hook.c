/* The conformance CLI's "hook" command (CLIENT-CLI.md): GET https://HOST:PORT/PATH over OpenSSL
 * with converge_verify_callback deciding on the certificate, directly or through an HTTP
 * CONNECT proxy that this program tunnels through itself (as a C application would).
 *
 * Every connection is one socket and one SSL of a single SSL_CTX, the hooked client object:
 * its client session cache is on and the newest session it got is offered on the next
 * connection (as an application that resumes sessions would), so the hook's refusal to trust
 * a resumed session is exercised. --follow-redirects requests each Location on a new hooked
 * connection (OpenSSL has no HTTP client: the CLI follows them itself, at most 5 hops);
 * --first fetches a URL on that SSL_CTX first; --unhooked-first fetches the target on the same
 * SSL_CTX with CA validation only (SSL_set_verify with no callback, the way code of the same
 * application that does not use the hook would) and keeps that connection open. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "converge.h"
#include "hook.h"
#include "internal.h"

#define HOOK_BODY_MAX 1024
#define HEAD_MAX 8192
#define RESPONSE_MAX (64 * 1024)
#define MAX_REDIRECTS 5
#define WHY_MAX 600

static void emit_line(cv_buf *b) {
    fwrite(b->p, 1, b->len, stdout);
    fputc('\n', stdout);
    cv_buf_free(b);
}

/* {"connected":false,"error":kind,"message":prefix+detail}; exit status 1 */
static int fail(const char *kind, const char *prefix, const char *detail) {
    char msg[WHY_MAX + 40];
    snprintf(msg, sizeof msg, "%s%s", prefix, detail ? detail : "");
    cv_buf b = {0};
    cv_buf_printf(&b, "{\"connected\":false,\"error\":\"%s\",\"message\":", kind);
    cv_json_string(&b, msg, strlen(msg));
    cv_buf_puts(&b, "}");
    emit_line(&b);
    return 1;
}

static int usage_error(const char *kind, const char *msg) {
    cv_buf b = {0};
    cv_buf_printf(&b, "{\"error\":\"%s\",\"message\":", kind);
    cv_json_string(&b, msg, strlen(msg));
    cv_buf_puts(&b, "}");
    emit_line(&b);
    return 2;
}

/* A TCP connection to host:port with send/receive timeouts (seconds). */
static int tcp_connect(const char *host, const char *port, double timeout) {
    struct addrinfo hints, *res, *ai;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res)) return -1;
    int fd = -1;
    struct timeval tv = {(time_t)timeout, (suseconds_t)((timeout - (double)(time_t)timeout) * 1e6)};
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0) continue;
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

/* Send CONNECT host:port and read the proxy's head; 0 when it answered 2xx. */
static int tunnel(int fd, const char *host, int port, char *why, size_t why_len) {
    char req[700];
    const char *l = strchr(host, ':') ? "[" : "", *r = strchr(host, ':') ? "]" : "";
    int n = snprintf(req, sizeof req, "CONNECT %s%s%s:%d HTTP/1.1\r\nHost: %s%s%s:%d\r\n\r\n", l, host, r, port, l,
                     host, r, port);
    if (n <= 0 || (size_t)n >= sizeof req || send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        snprintf(why, why_len, "cannot send CONNECT to the proxy");
        return -1;
    }
    char head[HEAD_MAX + 1];
    size_t got = 0;
    while (got < HEAD_MAX) { /* byte by byte: nothing of the tunnel is read past the head */
        ssize_t k = recv(fd, head + got, 1, 0);
        if (k <= 0) break;
        got++;
        if (got >= 4 && !memcmp(head + got - 4, "\r\n\r\n", 4)) break;
    }
    head[got] = '\0';
    if (got < 12 || strncmp(head, "HTTP/1.", 7) != 0 || head[9] != '2') {
        char *eol = strstr(head, "\r\n");
        if (eol) *eol = '\0';
        snprintf(why, why_len, "the proxy refused the tunnel: %.200s", got ? head : "(no answer)");
        return -1;
    }
    return 0;
}

static int is_ip(const char *host) {
    unsigned char buf[16];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* An origin and a path: https://HOST:PORT/PATH. */
typedef struct {
    char host[256];
    int port;
    char path[1024];
} target;

/* Parse an absolute https:// URL (host, [v6], optional port, optional path); 0 when valid. */
static int parse_https_url(const char *url, target *t) {
    if (strncasecmp(url, "https://", 8) != 0) return -1;
    const char *a = url + 8, *end = a + strcspn(a, "/?#"), *hend, *colon = NULL;
    if (*a == '[') {
        hend = memchr(a, ']', (size_t)(end - a));
        if (!hend) return -1;
        a++;
        colon = hend + 1 < end && hend[1] == ':' ? hend + 1 : NULL;
        if (hend + 1 < end && !colon) return -1;
    } else {
        colon = memchr(a, ':', (size_t)(end - a));
        hend = colon ? colon : end;
    }
    if (hend == a || (size_t)(hend - a) >= sizeof t->host) return -1;
    memcpy(t->host, a, (size_t)(hend - a));
    t->host[hend - a] = '\0';
    t->port = 443;
    if (colon) {
        long p = 0;
        const char *d = colon + 1;
        if (d == end) return -1;
        for (; d < end; d++) {
            if (*d < '0' || *d > '9' || (p = p * 10 + (*d - '0')) > 65535) return -1;
        }
        if (p < 1) return -1;
        t->port = (int)p;
    }
    int n = snprintf(t->path, sizeof t->path, "%s%s", *end == '/' ? "" : "/", end);
    return n > 0 && (size_t)n < sizeof t->path ? 0 : -1;
}

/* The hooked client object: one converge context, one SSL_CTX (with its session cache), one
 * proxy. */
typedef struct {
    converge_ctx *cctx;
    SSL_CTX *sctx;
    const char *proxy;
    char proxy_host[256], proxy_port[8];
    double timeout;
} hook_client;

/* The newest session the SSL_CTX's client cache got (SSL_SESS_CACHE_CLIENT calls this for
 * every new session, TLS 1.3 tickets included): offered on the next connection. */
static SSL_SESSION *g_session;

static int keep_session(SSL *ssl, SSL_SESSION *sess) {
    (void)ssl;
    SSL_SESSION_free(g_session);
    g_session = sess;
    return 1; /* we keep the reference */
}

/* The unhooked connection's verify callback: OpenSSL's own verdict (CA chain and name). */
static int ca_verdict(int preverify_ok, X509_STORE_CTX *store) {
    (void)store;
    return preverify_ok;
}

typedef struct {
    int fd;
    SSL *ssl;
    int clean; /* the exchange completed: the connection is closed with a close_notify */
} conn;

/* The CLI's own writes after the handshake (the request, the close_notify) hold SIGPIPE
 * for this thread, as the library does during SSL_connect: a server that reset the
 * connection makes the write fail, not the process die. */
static void pipe_hold(sigset_t *old) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, old);
}

static void pipe_release(const sigset_t *old) {
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) && !sigismember(old, SIGPIPE)) {
        struct timespec zero = {0, 0};
        sigtimedwait(&set, NULL, &zero); /* raised by our failed write */
    }
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

static void conn_close(conn *k) {
    if (k->ssl) {
        if (k->clean) { /* a cleanly closed session stays resumable */
            sigset_t old;
            pipe_hold(&old);
            SSL_shutdown(k->ssl);
            pipe_release(&old);
        }
        SSL_free(k->ssl);
    }
    if (k->fd >= 0) close(k->fd);
    k->ssl = NULL;
    k->fd = -1;
    k->clean = 0;
}

/* A TLS connection to t's origin (through the proxy, if any): hooked (the notaries decide) or
 * not (CA validation and the name only). 0 when connected; else *kind is "untrusted" (the
 * hook refused) or "io", and why says what happened. */
static int open_conn(hook_client *c, const target *t, int hooked, conn *out, const char **kind, char *why,
                     size_t why_len) {
    char port_text[8];
    snprintf(port_text, sizeof port_text, "%d", t->port);
    *kind = "io";
    out->fd = c->proxy ? tcp_connect(c->proxy_host, c->proxy_port, c->timeout)
                       : tcp_connect(t->host, port_text, c->timeout);
    out->ssl = NULL;
    out->clean = 0;
    if (out->fd < 0) {
        snprintf(why, why_len, "cannot connect to %s", c->proxy ? c->proxy : t->host);
        return -1;
    }
    if (c->proxy && tunnel(out->fd, t->host, t->port, why, why_len) != 0) {
        conn_close(out);
        return -1;
    }
    SSL *ssl = SSL_new(c->sctx);
    if (!ssl) {
        snprintf(why, why_len, "out of memory");
        conn_close(out);
        return -1;
    }
    SSL_set_fd(ssl, out->fd);
    if (!is_ip(t->host)) SSL_set_tlsext_host_name(ssl, t->host);
    int ok;
    if (hooked) {
        ok = converge_ssl_set_target(ssl, c->cctx, t->host, t->port) == 0; /* the origin, not the proxy */
    } else {
        SSL_set_verify(ssl, SSL_VERIFY_PEER, ca_verdict); /* (NULL would keep the SSL_CTX's hook) */
        X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
        ok = is_ip(t->host) ? X509_VERIFY_PARAM_set1_ip_asc(param, t->host) == 1
                            : X509_VERIFY_PARAM_set1_host(param, t->host, 0) == 1;
    }
    if (ok && g_session) SSL_set_session(ssl, g_session); /* as an application resuming would */
    if (!ok) {
        snprintf(why, why_len, "cannot set up the TLS connection");
        SSL_free(ssl);
        conn_close(out);
        return -1;
    }
    ERR_clear_error();
    if (SSL_connect(ssl) != 1) {
        converge_result r;
        int last = hooked ? converge_last_verdict(ssl, &r) : CONVERGE_ERR_NOT_CHECKED;
        long vr = SSL_get_verify_result(ssl);
        if (last == CONVERGE_ERR_NOT_CHECKED) {
            unsigned long e = ERR_peek_last_error();
            snprintf(why, why_len, "TLS handshake with %s:%d failed: %s", t->host, t->port,
                     !hooked && vr != X509_V_OK ? X509_verify_cert_error_string(vr)
                     : e                        ? ERR_reason_error_string(e)
                                                : "connection closed");
        } else {
            *kind = "untrusted";
            snprintf(why, why_len, "converge does not trust %s:%d: %s", t->host, t->port,
                     last == CONVERGE_NOT_TRUSTED ? r.message : converge_strerror(last));
        }
        SSL_free(ssl);
        conn_close(out);
        return -1;
    }
    out->ssl = ssl;
    return 0;
}

typedef struct {
    int status;
    char location[1024]; /* "" when none */
    char *raw;           /* head and body */
    size_t body_off, body_len;
} response;

/* The value of header name in head (NUL-terminated, lines end with \r\n), copied to out. */
static int header(const char *head, const char *name, char *out, size_t out_len) {
    size_t nl = strlen(name);
    for (const char *line = strstr(head, "\r\n"); line && line[2]; line = strstr(line + 2, "\r\n")) {
        const char *l = line + 2;
        if (strncasecmp(l, name, nl) != 0 || l[nl] != ':') continue;
        const char *v = l + nl + 1, *e = strstr(v, "\r\n");
        while (*v == ' ' || *v == '\t') v++;
        size_t n = e ? (size_t)(e - v) : strlen(v);
        while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
        if (n >= out_len) return -1;
        memcpy(out, v, n);
        out[n] = '\0';
        return 0;
    }
    return -1;
}

/* GET t->path on k and read the response: its head, then Content-Length bytes (or up to the
 * end of the connection when there is none), so that a kept-alive connection is not waited
 * on. 0 when a response came. */
static int http_get(conn *k, const target *t, int keep_alive, response *r, char *why, size_t why_len) {
    memset(r, 0, sizeof *r);
    char req[1600];
    const char *l = strchr(t->host, ':') ? "[" : "", *rb = strchr(t->host, ':') ? "]" : "";
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s%s%s:%d\r\nConnection: %s\r\n\r\n", t->path, l,
                     t->host, rb, t->port, keep_alive ? "keep-alive" : "close");
    r->raw = malloc(RESPONSE_MAX + 1);
    int sent = 0;
    if (r->raw && n > 0 && (size_t)n < sizeof req) {
        sigset_t old;
        pipe_hold(&old);
        sent = SSL_write(k->ssl, req, n) == n;
        pipe_release(&old);
    }
    if (!sent) {
        snprintf(why, why_len, "cannot send the request to %s:%d", t->host, t->port);
        return -1;
    }
    size_t got = 0, head_len = 0, want = 0;
    int have_length = 0, m = 0;
    while (got < RESPONSE_MAX && !(head_len && have_length && got >= head_len + want)) {
        m = SSL_read(k->ssl, r->raw + got, (int)(RESPONSE_MAX - got));
        if (m <= 0) break;
        got += (size_t)m;
        r->raw[got] = '\0';
        char *end = head_len ? NULL : strstr(r->raw, "\r\n\r\n");
        if (end) {
            head_len = (size_t)(end - r->raw) + 4;
            char cl[32];
            end[2] = '\0'; /* the head alone, for header() */
            if (header(r->raw, "Content-Length", cl, sizeof cl) == 0) {
                char *e = NULL;
                unsigned long long v = strtoull(cl, &e, 10);
                if (*cl && !*e) have_length = 1, want = v > RESPONSE_MAX ? RESPONSE_MAX : (size_t)v;
            }
            if (header(r->raw, "Location", r->location, sizeof r->location) != 0) r->location[0] = '\0';
            end[2] = '\r';
        } else if (!head_len && got > HEAD_MAX) {
            break;
        }
    }
    /* complete: its length read, or the server's close_notify */
    k->clean = head_len && ((have_length && got >= head_len + want) || SSL_get_error(k->ssl, m) == SSL_ERROR_ZERO_RETURN);
    ERR_clear_error();
    if (got) r->raw[got] = '\0';
    if (!head_len || sscanf(r->raw, "HTTP/%*d.%*d %d", &r->status) != 1) {
        snprintf(why, why_len, "no HTTP response from %s:%d", t->host, t->port);
        return -1;
    }
    r->body_off = head_len;
    r->body_len = got - head_len;
    if (have_length && r->body_len > want) r->body_len = want;
    return 0;
}

/* One request on a new connection, closed afterwards. */
static int fetch(hook_client *c, const target *t, int hooked, response *r, const char **kind, char *why,
                 size_t why_len) {
    conn k;
    memset(r, 0, sizeof *r);
    if (open_conn(c, t, hooked, &k, kind, why, why_len) != 0) return -1;
    *kind = "io";
    int rc = http_get(&k, t, 0, r, why, why_len);
    conn_close(&k);
    return rc;
}

/* Where a redirect from t leads: an absolute https:// URL, or a path on t's origin. */
static int resolve_location(const target *t, const char *location, target *next) {
    if (location[0] == '/' && location[1] != '/') {
        *next = *t;
        int n = snprintf(next->path, sizeof next->path, "%s", location);
        return n > 0 && (size_t)n < sizeof next->path ? 0 : -1;
    }
    return parse_https_url(location, next);
}

static const struct {
    const char *name;
    int takes_value;
} hook_flags[] = {{"--proxy", 1}, {"--ca-file", 1}, {"--path", 1}, {"--first", 1},
                  {"--follow-redirects", 0}, {"--unhooked-first", 0}};

#define HOOK_USAGE                                                                                              \
    "hook --config-dir DIR [--proxy URL] [--ca-file PEM] [--path P] [--follow-redirects] [--first URL] "      \
    "[--unhooked-first] HOST PORT"

static int run(hook_client *c, const target *origin, const char *first, int follow, int unhooked_first) {
    char why[WHY_MAX] = "";
    const char *kind = "io";
    response r = {0};
    conn unhooked = {-1, NULL, 0};
    int rc = 1;
    if (unhooked_first) { /* kept open until the end, as a keep-alive connection is */
        if (open_conn(c, origin, 0, &unhooked, &kind, why, sizeof why) != 0 ||
            (kind = "io", http_get(&unhooked, origin, 1, &r, why, sizeof why)) != 0) {
            fail(kind, "first request: ", why);
            goto out;
        }
        free(r.raw);
        r.raw = NULL;
    }
    if (first) {
        target ft;
        if (parse_https_url(first, &ft) != 0) {
            rc = usage_error("usage", "--first must be an https:// URL");
            goto out;
        }
        if (fetch(c, &ft, 1, &r, &kind, why, sizeof why) != 0) {
            fail(kind, "first request: ", why);
            goto out;
        }
        free(r.raw);
        r.raw = NULL;
    }
    target t = *origin;
    for (int hop = 0;; hop++) {
        if (fetch(c, &t, 1, &r, &kind, why, sizeof why) != 0) {
            fail(kind, "", why);
            goto out;
        }
        if (!follow || r.status < 300 || r.status > 399 || !r.location[0]) break;
        if (hop == MAX_REDIRECTS) {
            snprintf(why, sizeof why, "more than %d redirects", MAX_REDIRECTS);
            fail("io", "", why);
            goto out;
        }
        target next;
        if (resolve_location(&t, r.location, &next) != 0) {
            snprintf(why, sizeof why, "redirect to an unsupported location: %.300s", r.location);
            fail("io", "", why);
            goto out;
        }
        t = next;
        free(r.raw);
        r.raw = NULL;
    }
    size_t bl = r.body_len > HOOK_BODY_MAX ? HOOK_BODY_MAX : r.body_len;
    cv_buf b = {0};
    cv_buf_printf(&b, "{\"connected\":true,\"status\":%d,\"body\":", r.status);
    cv_json_string(&b, r.raw + r.body_off, bl);
    cv_buf_puts(&b, "}");
    emit_line(&b);
    rc = 0;
out:
    free(r.raw);
    conn_close(&unhooked);
    return rc;
}

int cli_hook(const char *dir, int argc, char **argv) {
    const char *opt[6] = {0};
    int i = 0;
    for (;;) {
        size_t f = 0;
        while (f < 6 && (i >= argc || strcmp(argv[i], hook_flags[f].name) != 0)) f++;
        if (f == 6 || i + hook_flags[f].takes_value >= argc) break;
        opt[f] = hook_flags[f].takes_value ? argv[i + 1] : argv[i];
        i += 1 + hook_flags[f].takes_value;
    }
    const char *proxy = opt[0], *ca_file = opt[1], *path = opt[2] ? opt[2] : "/", *first = opt[3];
    if (argc - i != 2) return usage_error("usage", HOOK_USAGE);
    if (path[0] != '/' || strlen(path) >= sizeof ((target *)0)->path || strpbrk(path, " \r\n"))
        return usage_error("usage", "--path must start with / (no spaces)");
    target origin;
    const char *host = argv[i], *port_text = argv[i + 1];
    char *end = NULL;
    long port = strtol(port_text, &end, 10);
    if (!*port_text || *end || port < 1 || port > 65535) return usage_error("usage", "PORT must be 1-65535");
    if (!*host || strlen(host) >= sizeof origin.host) return usage_error("usage", "HOST is empty or too long");
    snprintf(origin.host, sizeof origin.host, "%s", host);
    snprintf(origin.path, sizeof origin.path, "%s", path);
    origin.port = (int)port;
    target probe;
    if (first && parse_https_url(first, &probe) != 0) return usage_error("usage", "--first must be an https:// URL");

    hook_client c = {.proxy = proxy, .timeout = 30.0}; /* raw socket IO; converge bounds the check */
    if (proxy) {
        const char *p = proxy;
        if (!strncmp(p, "http://", 7)) p += 7;
        const char *colon = strrchr(p, ':');
        if (!colon || colon == p || (size_t)(colon - p) >= sizeof c.proxy_host || strlen(colon + 1) >= sizeof c.proxy_port)
            return usage_error("usage", "--proxy must be http://HOST:PORT");
        memcpy(c.proxy_host, p, (size_t)(colon - p));
        snprintf(c.proxy_port, sizeof c.proxy_port, "%s", colon + 1);
        char *slash = strchr(c.proxy_port, '/');
        if (slash) *slash = '\0';
    }

    c.cctx = converge_ctx_new_exact(dir);
    if (!c.cctx) return usage_error("internal", "out of memory");
    if (converge_ctx_error(c.cctx)) {
        int rc = usage_error("config", converge_ctx_error(c.cctx));
        converge_ctx_free(c.cctx);
        return rc;
    }
    c.sctx = SSL_CTX_new(TLS_client_method());
    if (!c.sctx) {
        converge_ctx_free(c.cctx);
        return usage_error("internal", "out of memory");
    }
    SSL_CTX_set_min_proto_version(c.sctx, TLS1_2_VERSION);
    if (ca_file && SSL_CTX_load_verify_locations(c.sctx, ca_file, NULL) != 1) {
        SSL_CTX_free(c.sctx);
        converge_ctx_free(c.cctx);
        return usage_error("usage", "cannot read the CA file");
    }
    SSL_CTX_set_verify(c.sctx, SSL_VERIFY_PEER, converge_verify_callback); /* the hook */
    SSL_CTX_set_session_cache_mode(c.sctx, SSL_SESS_CACHE_CLIENT);        /* sessions kept and offered */
    SSL_CTX_sess_set_new_cb(c.sctx, keep_session);
    int rc = run(&c, &origin, first, opt[4] != NULL, opt[5] != NULL);
    SSL_SESSION_free(g_session);
    g_session = NULL;
    SSL_CTX_free(c.sctx);
    converge_ctx_free(c.cctx);
    return rc;
}

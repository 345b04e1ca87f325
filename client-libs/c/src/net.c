/* Asking one physical notary host (IO): TCP (direct or through a bounce relay's CONNECT
 * tunnel), TLS pinned to the bundle's certificate (SHA-1 of the DER leaf; no CA or host
 * name check), one request, the response read until the server closes. Non-blocking
 * sockets and poll(); every wait is bounded by a deadline and wakes on the cancel fd. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define MAX_RELAY_HEAD 8192

double cv_monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static SSL_CTX *g_ctx;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_ctx(void) {
    SSL_CTX *c = SSL_CTX_new(TLS_client_method());
    if (!c) return;
    SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
    SSL_CTX_set_verify(c, SSL_VERIFY_NONE, NULL); /* the pin replaces CA and host name checks */
    g_ctx = c;
}

int cv_net_init(void) {
    pthread_once(&g_once, init_ctx);
    return g_ctx ? 0 : -1;
}

/* Wait for ev on fd until deadline; 1 ready, 0 timed out, -1 cancelled or error. */
static int wait_fd(int fd, short ev, double deadline, int cancel_fd) {
    while (1) {
        double left = deadline - cv_monotonic();
        if (left <= 0) return 0;
        struct pollfd p[2] = {{fd, ev, 0}, {cancel_fd, POLLIN, 0}};
        int ms = (int)(left * 1000) + 1;
        int r = poll(p, cancel_fd >= 0 ? 2 : 1, ms);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (cancel_fd >= 0 && p[1].revents) return -1;
        if (p[0].revents) return 1;
    }
}

enum { IO_OK = 0, IO_UNREACHABLE, IO_TIMEOUT, IO_CANCEL, IO_PIN, IO_RESPONSE };

typedef struct {
    int io;          /* IO_* */
    char msg[200];
} io_err;

__attribute__((format(printf, 3, 4))) static int io_fail(io_err *e, int io, const char *fmt, ...) {
    e->io = io;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static int tcp_connect(const char *host, int port, double deadline, int cancel_fd, io_err *e) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    char ps[8];
    snprintf(ps, sizeof ps, "%d", port);
    if (getaddrinfo(host, ps, &hints, &res) != 0 || !res) {
        io_fail(e, IO_UNREACHABLE, "cannot resolve %s", host);
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (r != 0 && errno == EINPROGRESS) {
            int w = wait_fd(fd, POLLOUT, deadline, cancel_fd);
            if (w <= 0) {
                close(fd);
                freeaddrinfo(res);
                io_fail(e, w == 0 ? IO_TIMEOUT : IO_CANCEL, "%s: connect timed out", host);
                return -1;
            }
            int err = 0;
            socklen_t l = sizeof err;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
            r = err ? -1 : 0;
            errno = err;
        }
        if (r == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) io_fail(e, IO_UNREACHABLE, "%s: connection refused or failed", host);
    return fd;
}

static int ssl_wait(SSL *ssl, int rc, int fd, double deadline, int cancel_fd, io_err *e, const char *what) {
    int err = SSL_get_error(ssl, rc);
    short ev;
    if (err == SSL_ERROR_WANT_READ) ev = POLLIN;
    else if (err == SSL_ERROR_WANT_WRITE) ev = POLLOUT;
    else return io_fail(e, IO_UNREACHABLE, "TLS error during %s", what);
    int w = wait_fd(fd, ev, deadline, cancel_fd);
    if (w == 0) return io_fail(e, IO_TIMEOUT, "%s timed out", what);
    if (w < 0) return io_fail(e, IO_CANCEL, "%s cancelled", what);
    return 0;
}

static int is_ip_literal(const char *h) {
    unsigned char a[16];
    return inet_pton(AF_INET, h, a) == 1 || inet_pton(AF_INET6, h, a) == 1;
}

/* send all bytes on a plain socket */
static int raw_send(int fd, const char *p, size_t n, double deadline, int cancel_fd, io_err *e) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            int r = wait_fd(fd, POLLOUT, deadline, cancel_fd);
            if (r <= 0) return io_fail(e, r == 0 ? IO_TIMEOUT : IO_CANCEL, "relay write timed out%s", "");
            continue;
        }
        return io_fail(e, IO_UNREACHABLE, "relay write failed%s", "");
    }
    return 0;
}

static int ci_prefix(const char *line, const char *name) {
    return strncasecmp(line, name, strlen(name)) == 0;
}

/* Through a relay: CONNECT, read its head, return the fd and which destination it reached. */
static int open_via_relay(const cv_query *q, const cv_host **dest, io_err *e) {
    const cv_bundle *nb = q->bundle;
    for (size_t r = 0; r < q->relay->nhosts; r++) {
        const cv_host *rh = &q->relay->hosts[r];
        int fd = tcp_connect(rh->host, rh->http_port, q->connect_deadline, q->cancel_fd, e);
        if (fd < 0) {
            if (e->io == IO_CANCEL || e->io == IO_TIMEOUT) return -1;
            continue;
        }
        cv_buf h = {0};
        cv_buf_printf(&h, "CONNECT %s:%d HTTP/1.1\r\nHost: %s\r\n", nb->hosts[0].host, q->bounce_port, nb->hosts[0].host);
        for (size_t i = 1; i < nb->nhosts; i++)
            cv_buf_printf(&h, "X-Convergence-Notary: %s+%d\r\n", nb->hosts[i].host, q->bounce_port);
        cv_buf_puts(&h, "\r\n");
        int rc = h.oom ? io_fail(e, IO_UNREACHABLE, "out of memory%s", "")
                       : raw_send(fd, h.p, h.len, q->connect_deadline, q->cancel_fd, e);
        cv_buf_free(&h);
        char head[MAX_RELAY_HEAD + 1];
        size_t hl = 0;
        while (!rc) {
            if (hl >= 4 && !memcmp(head + hl - 4, "\r\n\r\n", 4)) break;
            if (hl >= MAX_RELAY_HEAD) {
                rc = io_fail(e, IO_UNREACHABLE, "relay reply head too large%s", "");
                break;
            }
            ssize_t got = recv(fd, head + hl, 1, 0); /* byte by byte: TLS follows the head */
            if (got == 1) {
                hl++;
                continue;
            }
            if (got == 0) {
                rc = io_fail(e, IO_UNREACHABLE, "relay closed the connection%s", "");
                break;
            }
            if (errno == EAGAIN || errno == EINTR) {
                int w = wait_fd(fd, POLLIN, q->connect_deadline, q->cancel_fd);
                if (w <= 0) rc = io_fail(e, w == 0 ? IO_TIMEOUT : IO_CANCEL, "relay reply timed out%s", "");
                continue;
            }
            rc = io_fail(e, IO_UNREACHABLE, "relay read failed%s", "");
        }
        if (!rc) {
            head[hl] = '\0';
            /* status line: HTTP/1.x 200 */
            if (strncmp(head, "HTTP/1.", 7) != 0 || !strchr(head, ' ') || strncmp(strchr(head, ' ') + 1, "200", 3) != 0 ||
                (strchr(head, ' ')[4] != ' ' && strchr(head, ' ')[4] != '\r')) {
                rc = io_fail(e, IO_UNREACHABLE, "relay refused the tunnel%s", "");
            } else {
                char connected[300] = "";
                int have = 0;
                for (char *line = strstr(head, "\r\n"); line && line[2]; line = strstr(line + 2, "\r\n")) {
                    char *l = line + 2;
                    while (*l == ' ' || *l == '\t') l++;
                    if (ci_prefix(l, "x-convergence-notary")) {
                        char *v = l + strlen("x-convergence-notary");
                        while (*v == ' ' || *v == '\t') v++;
                        if (*v != ':') continue;
                        v++;
                        while (*v == ' ' || *v == '\t') v++;
                        char *end = strstr(v, "\r\n");
                        size_t n = end ? (size_t)(end - v) : strlen(v);
                        while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
                        if (n >= sizeof connected) n = sizeof connected - 1;
                        for (size_t i = 0; i < n; i++) connected[i] = (char)tolower((unsigned char)v[i]);
                        connected[n] = '\0';
                        have = 1;
                    }
                }
                const cv_host *found = NULL;
                if (!have) {
                    if (nb->nhosts == 1) found = &nb->hosts[0];
                } else {
                    char hostpart[300];
                    snprintf(hostpart, sizeof hostpart, "%s", connected);
                    char *plus = strchr(hostpart, '+');
                    if (plus) *plus = '\0';
                    for (size_t i = 0; i < nb->nhosts && !found; i++)
                        if (!strcasecmp(nb->hosts[i].host, hostpart) || !strcasecmp(nb->hosts[i].host, connected))
                            found = &nb->hosts[i];
                }
                if (!found) rc = io_fail(e, IO_UNREACHABLE, "relay connected to an unknown notary host%s", "");
                else *dest = found;
            }
        }
        if (!rc) return fd;
        close(fd);
        if (e->io == IO_CANCEL || e->io == IO_TIMEOUT) return -1;
    }
    return -1;
}

static void outcome_io(cv_host_answer *out, int vote, const char *kind, const char *msg) {
    out->o.vote = vote;
    out->o.kind = kind;
    out->o.status = 0;
    out->o.protocol = NULL;
    snprintf(out->o.detail, sizeof out->o.detail, "%.190s", msg);
}

/* one request over one connection */
static void query_once(const cv_query *q, int ext, cv_host_answer *out) {
    memset(out, 0, sizeof *out);
    const cv_host *nh = q->host;
    io_err e = {0, {0}};
    char nonce[96] = "";
    const cv_fp *asked = &q->wanted[0];
    size_t reqlen = 0;
    char *req;
    cv_err ce = {{0}, {0}};
    if (!ext) {
        req = cv_legacy_request(q->target_host, q->target_port, asked, NULL, &reqlen, &ce);
    } else {
        for (size_t i = 0; i < q->nwanted; i++)
            if (q->wanted[i].alg == FP_SHA256) {
                asked = &q->wanted[i];
                break;
            }
        if (q->use_nonce) {
            unsigned char rnd[16];
            if (RAND_bytes(rnd, sizeof rnd) != 1) {
                outcome_io(out, V_UNREACHABLE, "unreachable", "no randomness for a nonce");
                return;
            }
            cv_b64url_encode(rnd, sizeof rnd, nonce);
        }
        req = cv_ext_request(q->target_host, q->target_port, asked, q->use_nonce ? nonce : NULL, NULL,
                             q->bundle->log.present, &reqlen, &ce);
    }
    if (!req) {
        outcome_io(out, V_FAILURE, K_TARGET, ce.msg);
        return;
    }
    int fd = -1;
    SSL *ssl = NULL;
    char *raw = NULL;
    size_t rawlen = 0;
    if (q->relay) {
        fd = open_via_relay(q, &nh, &e);
        snprintf(out->host, sizeof out->host, "%.253s:%d via %.200s", nh->host, q->bounce_port, q->relay->name);
    } else {
        snprintf(out->host, sizeof out->host, "%s:%d", nh->host, nh->ssl_port);
        fd = tcp_connect(nh->host, nh->ssl_port, q->connect_deadline, q->cancel_fd, &e);
    }
    if (fd < 0) goto io_failed;
    ssl = SSL_new(g_ctx);
    if (!ssl || SSL_set_fd(ssl, fd) != 1) {
        io_fail(&e, IO_UNREACHABLE, "TLS setup failed%s", "");
        goto io_failed;
    }
    if (!is_ip_literal(nh->host)) SSL_set_tlsext_host_name(ssl, nh->host);
    while (1) {
        int r = SSL_connect(ssl);
        if (r == 1) break;
        if (ssl_wait(ssl, r, fd, q->connect_deadline, q->cancel_fd, &e, "TLS handshake")) goto io_failed;
    }
    {
        X509 *peer = SSL_get1_peer_certificate(ssl);
        unsigned char *der = NULL;
        int dl = peer ? i2d_X509(peer, &der) : -1;
        unsigned char pin[20];
        int ok = dl > 0 && SHA1(der, (size_t)dl, pin) && memcmp(pin, nh->pin, 20) == 0;
        OPENSSL_free(der);
        X509_free(peer);
        if (!ok) {
            io_fail(&e, IO_PIN, "%.150s presented a certificate other than the pinned one", out->host);
            goto io_failed;
        }
    }
    size_t sent = 0;
    while (sent < reqlen) {
        size_t w = 0;
        int r = SSL_write_ex(ssl, req + sent, reqlen - sent, &w);
        if (r == 1) {
            sent += w;
            continue;
        }
        if (ssl_wait(ssl, r, fd, q->deadline, q->cancel_fd, &e, "request")) goto io_failed;
    }
    {
        size_t cap = 16384;
        raw = malloc(cap + 1);
        if (!raw) {
            io_fail(&e, IO_UNREACHABLE, "out of memory%s", "");
            goto io_failed;
        }
        while (1) {
            if (rawlen == cap) {
                size_t ncap = cap * 2;
                if (ncap > q->max_bytes + 1) ncap = q->max_bytes + 1;
                if (ncap <= cap) {
                    e.io = IO_RESPONSE;
                    snprintf(e.msg, sizeof e.msg, "response larger than %zu bytes", q->max_bytes);
                    goto io_failed;
                }
                char *nr = realloc(raw, ncap + 1);
                if (!nr) {
                    io_fail(&e, IO_UNREACHABLE, "out of memory%s", "");
                    goto io_failed;
                }
                raw = nr;
                cap = ncap;
            }
            size_t got = 0;
            int r = SSL_read_ex(ssl, raw + rawlen, cap - rawlen, &got);
            if (r == 1) {
                rawlen += got;
                if (rawlen > q->max_bytes) {
                    e.io = IO_RESPONSE;
                    snprintf(e.msg, sizeof e.msg, "response larger than %zu bytes", q->max_bytes);
                    goto io_failed;
                }
                continue;
            }
            int err = SSL_get_error(ssl, r);
            if (err == SSL_ERROR_ZERO_RETURN) break;
            if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
                if (ssl_wait(ssl, r, fd, q->deadline, q->cancel_fd, &e, "response")) goto io_failed;
                continue;
            }
            /* closed without close_notify: keep what was read */
            if (rawlen > 0) break;
            io_fail(&e, IO_UNREACHABLE, "connection closed without an answer%s", "");
            goto io_failed;
        }
    }
    ERR_clear_error();
    if (!ext) {
        cv_legacy_outcome(raw, rawlen, q->wanted, q->nwanted, nh->key, q->max_bytes, &out->o, &out->cache_status);
    } else {
        int64_t now = q->clock(q->clock_arg);
        cv_expect x = {q->target_host, q->target_port, asked, q->use_nonce ? nonce : NULL, 1, now, q->max_skew, 1, NULL,
                       q->bundle->log.present ? &q->bundle->log : NULL};
        cv_ext_outcome(raw, rawlen, q->bundle->keys, q->bundle->nkeys, &x, q->max_bytes, &out->o, &out->cache_status);
    }
    goto done;
io_failed:
    ERR_clear_error();
    switch (e.io) {
    case IO_PIN: outcome_io(out, V_FAILURE, "pin", e.msg); break;
    case IO_RESPONSE: outcome_io(out, V_FAILURE, K_RESPONSE, e.msg); break;
    case IO_TIMEOUT:
        /* the connect phase has its own bound (an answer: unreachable); the notary's
         * deadline means no answer at all */
        if (cv_monotonic() >= q->deadline) outcome_io(out, 0, "timeout", e.msg);
        else outcome_io(out, V_UNREACHABLE, "unreachable", e.msg);
        break;
    case IO_CANCEL: outcome_io(out, 0, "cancelled", e.msg); break;
    default: outcome_io(out, V_UNREACHABLE, "unreachable", e.msg);
    }
done:
    if (ssl) SSL_free(ssl);
    if (fd >= 0) close(fd);
    free(raw);
    free(req);
}

void cv_query_host(const cv_query *q, cv_host_answer *out) {
    if (cv_net_init()) {
        memset(out, 0, sizeof *out);
        outcome_io(out, V_UNREACHABLE, "unreachable", "TLS unavailable");
        return;
    }
    query_once(q, q->ext, out);
    if (q->ext && q->fallback && out->o.vote == V_UNREACHABLE && out->o.kind && !strcmp(out->o.kind, "status") &&
        (out->o.status == 400 || out->o.status == 404 || out->o.status == 405 || out->o.status == 501)) {
        free(out->cache_status);
        query_once(q, 0, out);
    }
}

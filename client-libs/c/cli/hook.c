/* The conformance CLI's "hook" command (CLIENT-CLI.md): GET https://HOST:PORT/ over OpenSSL
 * with converge_verify_callback deciding on the certificate, directly or through an HTTP
 * CONNECT proxy that this program tunnels through itself (as a C application would). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "converge.h"
#include "hook.h"
#include "internal.h"

#define HOOK_BODY_MAX 1024
#define HEAD_MAX 8192
#define RESPONSE_MAX (64 * 1024)

static void emit_line(cv_buf *b) {
    fwrite(b->p, 1, b->len, stdout);
    fputc('\n', stdout);
    cv_buf_free(b);
}

/* {"connected":false,"error":kind,"message":prefix+detail}; exit status 1 */
static int fail(const char *kind, const char *prefix, const char *detail) {
    char msg[600];
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

int cli_hook(const char *dir, int argc, char **argv) {
    const char *proxy = NULL, *ca_file = NULL;
    int i = 0;
    while (i + 1 < argc && (!strcmp(argv[i], "--proxy") || !strcmp(argv[i], "--ca-file"))) {
        if (!strcmp(argv[i], "--proxy")) proxy = argv[i + 1];
        else ca_file = argv[i + 1];
        i += 2;
    }
    if (argc - i != 2) return usage_error("usage", "hook --config-dir DIR [--proxy URL] [--ca-file PEM] HOST PORT");
    const char *host = argv[i], *port_text = argv[i + 1];
    char *end = NULL;
    long port = strtol(port_text, &end, 10);
    if (!*port_text || *end || port < 1 || port > 65535) return usage_error("usage", "PORT must be 1-65535");
    char proxy_host[256] = "", proxy_port[8] = "";
    if (proxy) {
        const char *p = proxy;
        if (!strncmp(p, "http://", 7)) p += 7;
        const char *colon = strrchr(p, ':');
        if (!colon || colon == p || (size_t)(colon - p) >= sizeof proxy_host || strlen(colon + 1) >= sizeof proxy_port)
            return usage_error("usage", "--proxy must be http://HOST:PORT");
        memcpy(proxy_host, p, (size_t)(colon - p));
        snprintf(proxy_port, sizeof proxy_port, "%s", colon + 1);
        char *slash = strchr(proxy_port, '/');
        if (slash) *slash = '\0';
    }

    converge_ctx *cctx = converge_ctx_new_exact(dir);
    if (!cctx) return usage_error("internal", "out of memory");
    if (converge_ctx_error(cctx)) {
        int rc = usage_error("config", converge_ctx_error(cctx));
        converge_ctx_free(cctx);
        return rc;
    }
    double timeout = 30.0; /* raw socket IO; converge bounds the check by its own timeouts */
    char why[400] = "";
    int fd = proxy ? tcp_connect(proxy_host, proxy_port, timeout) : tcp_connect(host, port_text, timeout);
    if (fd < 0) {
        converge_ctx_free(cctx);
        return fail("io", "cannot connect to ", proxy ? proxy : host);
    }
    if (proxy && tunnel(fd, host, (int)port, why, sizeof why) != 0) {
        close(fd);
        converge_ctx_free(cctx);
        return fail("io", "", why);
    }

    SSL_CTX *sctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(sctx, TLS1_2_VERSION);
    if (ca_file && SSL_CTX_load_verify_locations(sctx, ca_file, NULL) != 1) {
        SSL_CTX_free(sctx);
        close(fd);
        converge_ctx_free(cctx);
        return usage_error("usage", "cannot read the CA file");
    }
    SSL_CTX_set_verify(sctx, SSL_VERIFY_PEER, converge_verify_callback); /* the hook */
    SSL *ssl = SSL_new(sctx);
    SSL_set_fd(ssl, fd);
    if (!is_ip(host)) SSL_set_tlsext_host_name(ssl, host);
    converge_ssl_set_target(ssl, cctx, host, (int)port); /* the origin, not the proxy */
    int rc = 1;
    if (SSL_connect(ssl) != 1) {
        converge_result r;
        int last = converge_last_verdict(ssl, &r);
        if (last == CONVERGE_ERR_NOT_CHECKED) {
            unsigned long e = ERR_peek_last_error();
            fail("io", "TLS handshake failed: ", e ? ERR_reason_error_string(e) : "connection closed");
        } else {
            snprintf(why, sizeof why, "converge does not trust %s:%ld: %s", host, port,
                     last == CONVERGE_NOT_TRUSTED ? r.message : converge_strerror(last));
            fail("untrusted", "", why);
        }
    } else {
        char req[600];
        int n = snprintf(req, sizeof req, "GET / HTTP/1.0\r\nHost: %s:%ld\r\nConnection: close\r\n\r\n", host, port);
        char *resp = malloc(RESPONSE_MAX + 1);
        size_t got = 0;
        if (resp && SSL_write(ssl, req, n) == n) {
            int k;
            while (got < RESPONSE_MAX && (k = SSL_read(ssl, resp + got, (int)(RESPONSE_MAX - got))) > 0) got += (size_t)k;
        }
        if (resp) resp[got] = '\0';
        char *body = resp ? strstr(resp, "\r\n\r\n") : NULL;
        int status = 0;
        if (body && sscanf(resp, "HTTP/%*d.%*d %d", &status) == 1) {
            body += 4;
            size_t bl = got - (size_t)(body - resp);
            if (bl > HOOK_BODY_MAX) bl = HOOK_BODY_MAX;
            cv_buf b = {0};
            cv_buf_printf(&b, "{\"connected\":true,\"status\":%d,\"body\":", status);
            cv_json_string(&b, body, bl);
            cv_buf_puts(&b, "}");
            emit_line(&b);
            rc = 0;
        } else {
            fail("io", "no HTTP response from ", host);
        }
        free(resp);
    }
    SSL_free(ssl);
    close(fd);
    SSL_CTX_free(sctx);
    converge_ctx_free(cctx);
    return rc;
}

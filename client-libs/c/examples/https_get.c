/* An existing OpenSSL client switched to notaries.
 *
 *   example_client HOST PORT [PATH] [--config-dir DIR]
 *
 * The lines that differ from a CA-validating client are marked "converge:". */
#define _GNU_SOURCE
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "converge.h"

static int tcp(const char *host, const char *port) {
    struct addrinfo hints, *res, *ai;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res)) return -1;
    int fd = -1;
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        if (fd >= 0) close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s HOST PORT [PATH] [--config-dir DIR]\n", argv[0]);
        return 2;
    }
    const char *host = argv[1], *port = argv[2], *path = "/", *dir = NULL;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--config-dir") && i + 1 < argc) dir = argv[++i];
        else path = argv[i];
    }
    converge_ctx *cctx = converge_ctx_new(dir);               /* converge: load the notaries */
    if (!cctx || converge_ctx_error(cctx)) {
        fprintf(stderr, "configuration: %s\n", cctx ? converge_ctx_error(cctx) : "out of memory");
        return 2;
    }
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    /* was: SSL_CTX_set_default_verify_paths(ctx); SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL); */
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, converge_verify_callback); /* converge: the hook */
    int fd = tcp(host, port);
    if (fd < 0) {
        fprintf(stderr, "cannot connect to %s:%s\n", host, port);
        return 2;
    }
    SSL *ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    SSL_set_tlsext_host_name(ssl, host);
    converge_ssl_set_target(ssl, cctx, host, atoi(port));    /* converge: who we meant to reach */
    int rc = 1;
    if (SSL_connect(ssl) != 1) {
        long v = SSL_get_verify_result(ssl);
        fprintf(stderr, "TLS failed: %s\n", X509_verify_cert_error_string(v));
        ERR_print_errors_fp(stderr);
    } else {
        char req[512];
        snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host);
        SSL_write(ssl, req, (int)strlen(req));
        char buf[4096];
        int n;
        while ((n = SSL_read(ssl, buf, sizeof buf)) > 0) fwrite(buf, 1, (size_t)n, stdout);
        rc = 0;
    }
    SSL_free(ssl);
    close(fd);
    SSL_CTX_free(ctx);
    converge_ctx_free(cctx);
    return rc;
}

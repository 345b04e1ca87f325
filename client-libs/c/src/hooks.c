/* The OpenSSL drop-in hooks: converge_ssl_set_target, the verify callbacks,
 * converge_ssl_verify and converge_last_verdict (see README.md, "What this hook
 * guarantees"). */
#define _GNU_SOURCE
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"


/* What one connection is for, and the verdict of its handshake: the callbacks run several
 * times per handshake (OpenSSL calls the verify callback again for each problem it finds at
 * depth 0, e.g. "self-signed" and then the final call), but the notaries are asked once per
 * leaf certificate; the verdict is kept for converge_last_verdict().
 *
 * OpenSSL verifies no certificate on a resumed session, so the verify callbacks would never
 * run: the connection's info callback (installed by converge_ssl_set_target, chained to the
 * application's) drops any session offered for resumption when the handshake starts, so
 * every hooked handshake is a full one whose certificate the notaries are asked about for
 * this connection's origin. While SSL_connect runs, SIGPIPE is held for the calling thread:
 * a server that hangs up during the check makes the handshake fail, never the process die. */
typedef struct {
    converge_ctx *ctx;
    char host[256];
    int port;
    int have;                       /* a check was made */
    unsigned char leaf[32];         /* SHA-256 of the certificate it was made for */
    int rc;                         /* its return code */
    converge_result result;
    void (*app_info)(const SSL *, int, int); /* the connection's own info callback */
    int pipe_held;                  /* SIGPIPE blocked by us during this SSL_connect */
    int pipe_was_pending;
    sigset_t pipe_old;
} ssl_target;

static int g_idx = -1;
static pthread_once_t g_idx_once = PTHREAD_ONCE_INIT;

static void target_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp) {
    (void)parent, (void)ad, (void)idx, (void)argl, (void)argp;
    free(ptr);
}

static void init_idx(void) { g_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, target_free); }

static ssl_target *target_of(const SSL *ssl) {
    pthread_once(&g_idx_once, init_idx);
    return ssl && g_idx >= 0 ? SSL_get_ex_data(ssl, g_idx) : NULL;
}

static void hold_pipe(ssl_target *t) {
    if (t->pipe_held) return;
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigpending(&pending);
    t->pipe_was_pending = sigismember(&pending, SIGPIPE);
    t->pipe_held = pthread_sigmask(SIG_BLOCK, &set, &t->pipe_old) == 0;
}

static void release_pipe(ssl_target *t) {
    if (!t->pipe_held) return;
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) && !t->pipe_was_pending && !sigismember(&t->pipe_old, SIGPIPE)) {
        struct timespec zero = {0, 0};
        sigtimedwait(&set, NULL, &zero); /* ours: the write that raised it failed already */
    }
    pthread_sigmask(SIG_SETMASK, &t->pipe_old, NULL);
    t->pipe_held = 0;
}

static void hook_info(const SSL *ssl, int where, int ret) {
    ssl_target *t = target_of(ssl);
    if (t && (where & (SSL_CB_HANDSHAKE_START | SSL_CB_LOOP)) && !SSL_is_server((SSL *)ssl)) hold_pipe(t);
    if (t && (where & SSL_CB_HANDSHAKE_START) && !SSL_is_server((SSL *)ssl)) {
        if (SSL_get_session(ssl)) SSL_set_session((SSL *)ssl, NULL); /* no resumption: a full, checked handshake */
        t->have = 0;
    }
    if (t && (where & SSL_CB_HANDSHAKE_DONE) && !t->have)
        SSL_set_verify_result((SSL *)ssl, X509_V_ERR_APPLICATION_VERIFICATION); /* never "ok" unchecked */
    void (*app)(const SSL *, int, int) = t ? t->app_info : NULL;
    if (!app) app = SSL_CTX_get_info_callback(SSL_get_SSL_CTX(ssl));
    if (app && app != hook_info) app(ssl, where, ret);
    if (t && (where & SSL_CB_EXIT)) release_pipe(t);
}

int converge_ssl_set_target(SSL *ssl, converge_ctx *ctx, const char *host, int port) {
    pthread_once(&g_idx_once, init_idx);
    if (g_idx < 0 || !ssl || !host) return -1;
    ssl_target *t = calloc(1, sizeof *t);
    if (!t) return -1;
    t->ctx = ctx;
    snprintf(t->host, sizeof t->host, "%s", host);
    t->port = port;
    ssl_target *old = SSL_get_ex_data(ssl, g_idx);
    void (*app)(const SSL *, int, int) = SSL_get_info_callback(ssl);
    t->app_info = old ? old->app_info : app == hook_info ? NULL : app;
    if (SSL_set_ex_data(ssl, g_idx, t) != 1) {
        free(t);
        return -1;
    }
    free(old);
    SSL_set_info_callback(ssl, hook_info);
    if (SSL_in_before(ssl) && SSL_get_session(ssl)) SSL_set_session(ssl, NULL);
    return 0;
}

/* The return code of check_common for this certificate, asking at most once per leaf per
 * connection (t may be NULL: then no memo). */
static int check_cert(ssl_target *t, converge_ctx *ctx, const char *host, int port, X509 *cert) {
    unsigned char *der = NULL;
    int dl = cert ? i2d_X509(cert, &der) : -1;
    if (dl <= 0) return CONVERGE_ERR_INTERNAL;
    cv_fp forms[2];
    forms[0].alg = FP_SHA1;
    forms[0].len = 20;
    SHA1(der, (size_t)dl, forms[0].d);
    forms[1].alg = FP_SHA256;
    forms[1].len = 32;
    SHA256(der, (size_t)dl, forms[1].d);
    OPENSSL_free(der);
    if (t && t->have && memcmp(t->leaf, forms[1].d, 32) == 0) return t->rc;
    if (!ctx) ctx = cv_global_ctx();
    converge_result r;
    int rc = ctx ? cv_check_forms(ctx, host, port, forms, 2, &r) : CONVERGE_ERR_INTERNAL;
    if (t) {
        t->have = 1;
        memcpy(t->leaf, forms[1].d, 32);
        t->rc = rc;
        if (ctx) t->result = r;
    }
    return rc;
}

static int store_verdict(X509_STORE_CTX *store) {
    SSL *ssl = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
    ssl_target *t = target_of(ssl);
    if (!t) {
        X509_STORE_CTX_set_error(store, X509_V_ERR_APPLICATION_VERIFICATION);
        return 0;
    }
    X509 *leaf = X509_STORE_CTX_get0_cert(store);
    int rc = check_cert(t, t->ctx, t->host, t->port, leaf);
    if (rc == CONVERGE_TRUSTED) {
        X509_STORE_CTX_set_error(store, X509_V_OK);
        return 1;
    }
    X509_STORE_CTX_set_error(store, rc == CONVERGE_NOT_TRUSTED ? X509_V_ERR_CERT_REJECTED
                                                                : X509_V_ERR_APPLICATION_VERIFICATION);
    return 0;
}

int converge_verify_callback(int preverify_ok, X509_STORE_CTX *store) {
    (void)preverify_ok;
    if (X509_STORE_CTX_get_error_depth(store) > 0) return 1; /* the leaf decides, not the CA chain */
    return store_verdict(store);
}

int converge_cert_verify_callback(X509_STORE_CTX *store, void *arg) {
    (void)arg;
    return store_verdict(store);
}

long converge_ssl_verify(SSL *ssl, const char *host, int port) {
    X509 *peer = ssl ? SSL_get0_peer_certificate(ssl) : NULL;
    if (!peer) return X509_V_ERR_APPLICATION_VERIFICATION;
    ssl_target *t = target_of(ssl);
    if (!t || t->port != port || strcmp(t->host, host) != 0) {
        /* (re)attach this target, keeping the connection's context */
        if (converge_ssl_set_target(ssl, t ? t->ctx : NULL, host, port) != 0)
            return X509_V_ERR_APPLICATION_VERIFICATION;
        t = target_of(ssl);
    }
    int rc = check_cert(t, t->ctx, host, port, peer);
    if (rc == CONVERGE_TRUSTED) return X509_V_OK;
    return rc == CONVERGE_NOT_TRUSTED ? X509_V_ERR_CERT_REJECTED : X509_V_ERR_APPLICATION_VERIFICATION;
}

int converge_last_verdict(const SSL *ssl, converge_result *result) {
    const ssl_target *t = target_of(ssl);
    if (!t || !t->have) return CONVERGE_ERR_NOT_CHECKED;
    if (result) *result = t->result;
    return t->rc;
}

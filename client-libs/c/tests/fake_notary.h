/* Loopback helpers for the tests and the benchmark: RSA keys and self-signed certificates
 * made at run time, a TLS server that answers every request with one fixed response (a
 * stand-in notary), and configuration directories. Real sockets and real TLS on 127.0.0.1. */
#ifndef FAKE_NOTARY_H
#define FAKE_NOTARY_H
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

typedef struct {
    EVP_PKEY *key;
    X509 *cert;
    char pem[4096];
    char sha1[64]; /* colon hex */
} tls_identity;

static void colon_hex(const unsigned char *d, size_t n, char *out) {
    for (size_t i = 0; i < n; i++) sprintf(out + 3 * i, i + 1 < n ? "%02X:" : "%02X", d[i]);
}

/* A self-signed certificate for cn. key_path: a PEM private key to use (the test-only RSA
 * keys in client-libs/vectors/keys/); NULL: a new key, RSA-2048 when rsa, else EC P-256. */
static int make_identity(tls_identity *id, const char *cn, const char *key_path, int rsa) {
    memset(id, 0, sizeof *id);
    if (key_path) {
        FILE *f = fopen(key_path, "r");
        if (!f) return -1;
        id->key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
        fclose(f);
    } else {
        id->key = rsa ? EVP_RSA_gen(2048) : EVP_EC_gen("P-256");
    }
    X509 *x = X509_new();
    if (!id->key || !x) {
        X509_free(x);
        return -1;
    }
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), (long)(rand() & 0x7fffffff) + 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400L * 30);
    X509_set_pubkey(x, id->key);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(x, name);
    if (!X509_sign(x, id->key, EVP_sha256())) return -1;
    id->cert = x;
    BIO *b = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(b, x);
    int n = BIO_read(b, id->pem, sizeof id->pem - 1);
    id->pem[n > 0 ? n : 0] = '\0';
    BIO_free(b);
    unsigned char *der = NULL;
    int dl = i2d_X509(x, &der);
    unsigned char h[20];
    SHA1(der, (size_t)dl, h);
    OPENSSL_free(der);
    colon_hex(h, 20, id->sha1);
    return 0;
}

static void free_identity(tls_identity *id) {
    EVP_PKEY_free(id->key);
    X509_free(id->cert);
}

/* A legacy 200/409 response whose signed bytes are exactly S (malloc'd): S without its final
 * brace, the signature member, after_sig, the brace, then after_body (hostile forms). */
__attribute__((unused)) static char *legacy_signed_response(EVP_PKEY *key, int status, const char *S,
                                                            const char *after_sig, const char *after_body, int corrupt) {
    unsigned char sig[512];
    size_t sl = sizeof sig;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_DigestSignInit(md, NULL, EVP_sha1(), NULL, key);
    EVP_DigestSign(md, sig, &sl, (const unsigned char *)S, strlen(S));
    EVP_MD_CTX_free(md);
    if (corrupt) sig[10] ^= 1;
    char b64[1024];
    EVP_EncodeBlock((unsigned char *)b64, sig, (int)sl);
    cv_buf body = {0}, out = {0};
    cv_buf_printf(&body, "%.*s, \"signature\": \"%s\"%s}%s", (int)strlen(S) - 1, S, b64, after_sig, after_body);
    cv_buf_printf(&out,
                  "HTTP/1.0 %d %s\r\nContent-Type: application/json\r\nCache-Status: converge-notary; hit\r\n"
                  "Content-Length: %zu\r\n\r\n%s",
                  status, status == 200 ? "OK" : "Conflict", body.len, body.p);
    cv_buf_free(&body);
    return out.p;
}

/* one history entry for fp (JSON text) */
#define LEGACY_ENTRY "{\"timestamp\": {\"start\": \"1323389219\", \"finish\": \"1324691510\"}, \"fingerprint\": \"%s\"}"

/* a legacy 200/409 response listing fp, signed with key */
static char *legacy_response(EVP_PKEY *key, int status, const char *fp, int corrupt) {
    char signed_bytes[512];
    snprintf(signed_bytes, sizeof signed_bytes, "{\"fingerprintList\": [" LEGACY_ENTRY "]}", fp);
    return legacy_signed_response(key, status, signed_bytes, "", "", corrupt);
}

/* an Ed25519 signing key of the extended format */
typedef struct {
    EVP_PKEY *key;
    unsigned char pub[32];
    char key_id[17];
    char pub_b64[64];
} ed_key;

__attribute__((unused)) static int make_ed_key(ed_key *k) {
    memset(k, 0, sizeof *k);
    k->key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    size_t n = 32;
    if (!k->key || EVP_PKEY_get_raw_public_key(k->key, k->pub, &n) != 1) return -1;
    unsigned char h[32];
    SHA256(k->pub, 32, h);
    for (int i = 0; i < 8; i++) sprintf(k->key_id + 2 * i, "%02x", h[i]);
    cv_b64url_encode(k->pub, 32, k->pub_b64);
    return 0;
}

static int connect_loopback(int port);

/* how a stand-in answers POST /v2/answer (extended format) */
typedef struct {
    ed_key *key;              /* NULL: no extended answers (404) */
    const char *verdict;      /* "match" or "mismatch" */
    long skew;                /* added to answered_at */
    const char *swap_host;    /* answer about this host instead */
    int wrong_nonce;
    const char *extra;        /* members put first into the statement (hostile forms), or NULL */
} ext_behaviour;

typedef struct {
    int port, lfd;
    SSL_CTX *ctx;
    pthread_t th;
    volatile int stop;
    char *response; /* legacy answer; NULL: handshake only, then close */
    ext_behaviour ext;
    int served;
    int delay_ms;   /* wait this long before answering (a slow notary) */
    int hangup_ms;  /* a handshake not finished within this time is closed (0: 2 s) */
    int rst;        /* with hangup_ms: closed with a reset (RST) instead of a FIN */
    int upstream;   /* > 0: POST /v2/answer is relayed to the notary at 127.0.0.1:upstream */
    void (*rewrite)(cv_buf *response); /* with upstream: what the relay does to the answer */
} fake_server;

/* the request relayed over TLS to 127.0.0.1:port, the response read to EOF (bounded) */
static void relay_answer(int port, const char *req, size_t n, cv_buf *out) {
    int fd = connect_loopback(port);
    struct timeval tv = {15, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL *ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (SSL_connect(ssl) == 1 && SSL_write(ssl, req, (int)n) == (int)n) {
        char buf[4096];
        int r;
        while (out->len < MAX_RESPONSE_BYTES && (r = SSL_read(ssl, buf, sizeof buf)) > 0) cv_buf_put(out, buf, (size_t)r);
    }
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    close(fd);
}

/* a canonical signed answer for the request body req (a JSON object from the client) */
static char *ext_response(const ext_behaviour *b, const char *req) {
    char host[256] = "", fp[120] = "", alg[16] = "", nonce[120] = "";
    int port = 0;
    const char *p;
    if ((p = strstr(req, "\"host\":\""))) sscanf(p + 8, "%255[^\"]", host);
    if ((p = strstr(req, "\"port\":"))) port = atoi(p + 7);
    if ((p = strstr(req, "\"fingerprint\":\""))) sscanf(p + 15, "%119[^\"]", fp);
    if ((p = strstr(req, "\"alg\":\""))) sscanf(p + 7, "%15[^\"]", alg);
    if ((p = strstr(req, "\"nonce\":\""))) sscanf(p + 9, "%119[^\"]", nonce);
    if (b->wrong_nonce) snprintf(nonce, sizeof nonce, "AAAAAAAAAAAAAAAAAAAAAA");
    char nonce_json[140];
    if (nonce[0]) snprintf(nonce_json, sizeof nonce_json, "\"%s\"", nonce);
    else snprintf(nonce_json, sizeof nonce_json, "null");
    cv_buf st = {0};
    cv_buf_printf(&st,
             "{%s\"address\":null,\"answered_at\":%ld,\"cache\":\"hit\",\"detail\":null,\"key_id\":\"%s\","
             "\"observations\":[],\"request\":{\"alg\":\"%s\",\"fingerprint\":\"%s\",\"nonce\":%s},"
             "\"target\":{\"host\":\"%s\",\"ip\":null,\"port\":%d},\"type\":\"converge-answer/1\","
             "\"verdict\":\"%s\"}",
             b->extra ? b->extra : "", (long)time(NULL) + b->skew, b->key->key_id, alg, fp, nonce_json, b->swap_host ? b->swap_host : host, port,
             b->verdict);
    const char *stmt = st.p;
    unsigned char sig[64];
    size_t sl = sizeof sig;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_DigestSignInit(md, NULL, NULL, NULL, b->key->key);
    EVP_DigestSign(md, sig, &sl, (const unsigned char *)stmt, strlen(stmt));
    EVP_MD_CTX_free(md);
    char sb64[100];
    cv_b64url_encode(sig, sl, sb64);
    cv_buf body = {0}, out = {0};
    cv_buf_printf(&body, "{\"signature\":{\"alg\":\"ed25519\",\"key_id\":\"%s\",\"value\":\"%s\"},\"statement\":%s}",
                  b->key->key_id, sb64, stmt);
    int status = !strcmp(b->verdict, "match") ? 200 : 409;
    cv_buf_printf(&out,
                  "HTTP/1.0 %d X\r\nContent-Type: application/vnd.converge.answer+json\r\nContent-Length: %zu\r\n\r\n%s",
                  status, body.len, body.p);
    cv_buf_free(&body);
    cv_buf_free(&st);
    return out.p;
}

static void *fake_loop(void *arg) {
    fake_server *s = arg;
    while (!s->stop) {
        struct pollfd p = {s->lfd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0) continue;
        struct timeval tv = {s->hangup_ms ? 0 : 2, s->hangup_ms * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        SSL *ssl = SSL_new(s->ctx);
        SSL_set_fd(ssl, fd);
        int accepted = SSL_accept(ssl) == 1;
        if (!accepted && s->hangup_ms && s->rst) {
            struct linger rst = {1, 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &rst, sizeof rst);
        }
        if (accepted && s->response) {
            char buf[4096] = "";
            size_t got = 0;
            while (got < sizeof buf - 1) {
                int r = SSL_read(ssl, buf + got, (int)(sizeof buf - 1 - got));
                if (r <= 0) break;
                got += (size_t)r;
                buf[got] = '\0';
                char *end = strstr(buf, "\r\n\r\n");
                char *cl = strcasestr(buf, "content-length:");
                if (end && cl && got >= (size_t)(end + 4 - buf) + (size_t)atoi(cl + 15)) break;
            }
            char *end = strstr(buf, "\r\n\r\n");
            if (s->delay_ms) usleep((useconds_t)s->delay_ms * 1000);
            if (!strncmp(buf, "POST /v2/answer ", 16)) {
                if (s->upstream) {
                    cv_buf up = {0};
                    relay_answer(s->upstream, buf, got, &up);
                    if (s->rewrite && up.p) s->rewrite(&up);
                    if (up.p) SSL_write(ssl, up.p, (int)up.len);
                    cv_buf_free(&up);
                } else if (s->ext.key && end) {
                    char *answer = ext_response(&s->ext, end + 4);
                    SSL_write(ssl, answer, (int)strlen(answer));
                    free(answer);
                } else {
                    const char *nf = "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n";
                    SSL_write(ssl, nf, (int)strlen(nf));
                }
            } else {
                SSL_write(ssl, s->response, (int)strlen(s->response));
            }
            SSL_shutdown(ssl);
        }
        s->served++;
        SSL_free(ssl);
        close(fd);
    }
    return NULL;
}

static int fake_start(fake_server *s, tls_identity *id, char *response) {
    memset(s, 0, sizeof *s);
    s->response = response;
    s->ctx = SSL_CTX_new(TLS_server_method());
    SSL_CTX_use_certificate(s->ctx, id->cert);
    SSL_CTX_use_PrivateKey(s->ctx, id->key);
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(s->lfd, (struct sockaddr *)&a, sizeof a) || listen(s->lfd, 64)) return -1;
    socklen_t l = sizeof a;
    getsockname(s->lfd, (struct sockaddr *)&a, &l);
    s->port = ntohs(a.sin_port);
    return pthread_create(&s->th, NULL, fake_loop, s);
}

static void fake_stop(fake_server *s) {
    s->stop = 1;
    pthread_join(s->th, NULL);
    close(s->lfd);
    SSL_CTX_free(s->ctx);
    free(s->response);
}

/* a TCP connection to 127.0.0.1:port (an fd; connect failures show up on first use) */
__attribute__((unused)) static int connect_loopback(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        fd = socket(AF_INET, SOCK_STREAM, 0); /* unconnected: the caller's I/O fails */
    }
    return fd;
}

/* A stand-in bounce relay: reads a CONNECT head, answers with `reply` and, on a 200, relays
 * bytes to 127.0.0.1:<the CONNECT port> until either side closes. */
typedef struct {
    int port, lfd;
    pthread_t th;
    volatile int stop;
    const char *reply;
    char last_head[1024];
} fake_relay;

static void *relay_loop(void *arg) {
    fake_relay *r = arg;
    while (!r->stop) {
        struct pollfd p = {r->lfd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        int c = accept(r->lfd, NULL, NULL);
        if (c < 0) continue;
        char head[1024];
        size_t n = 0;
        while (n < sizeof head - 1 && recv(c, head + n, 1, 0) == 1) {
            n++;
            if (n >= 4 && !memcmp(head + n - 4, "\r\n\r\n", 4)) break;
        }
        head[n] = '\0';
        snprintf(r->last_head, sizeof r->last_head, "%s", head);
        int dport = 0;
        char *colon = strchr(head, ':');
        if (!strncmp(head, "CONNECT ", 8) && colon) dport = atoi(colon + 1);
        if (send(c, r->reply, strlen(r->reply), MSG_NOSIGNAL) < 0 || strstr(r->reply, " 200 ") == NULL || !dport) {
            close(c);
            continue;
        }
        int u = connect_loopback(dport);
        if (u >= 0) {
            struct pollfd fds[2] = {{c, POLLIN, 0}, {u, POLLIN, 0}};
            char buf[16384];
            int open_ = 1;
            while (open_ && !r->stop && poll(fds, 2, 3000) > 0) {
                for (int i = 0; i < 2 && open_; i++) {
                    if (!fds[i].revents) continue;
                    ssize_t k = recv(fds[i].fd, buf, sizeof buf, 0);
                    if (k <= 0 || send(fds[1 - i].fd, buf, (size_t)k, MSG_NOSIGNAL) != k) open_ = 0;
                }
            }
        }
        close(u);
        close(c);
    }
    return NULL;
}

__attribute__((unused)) static int relay_start(fake_relay *r, const char *reply) {
    memset(r, 0, sizeof *r);
    r->reply = reply;
    r->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(r->lfd, (struct sockaddr *)&a, sizeof a) || listen(r->lfd, 16)) return -1;
    socklen_t l = sizeof a;
    getsockname(r->lfd, (struct sockaddr *)&a, &l);
    r->port = ntohs(a.sin_port);
    return pthread_create(&r->th, NULL, relay_loop, r);
}

__attribute__((unused)) static void relay_stop(fake_relay *r) {
    r->stop = 1;
    pthread_join(r->th, NULL);
    close(r->lfd);
}

/* a port where nothing listens */
__attribute__((unused)) static int dead_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* config dir with one bundle per (name, port, pem); settings is the JSON object body */
static int g_bundle_http_port = 1; /* http_port written into test bundles */

static void make_config_ext(char *dir, size_t n, const char *settings, const char **names, const int *ports,
                            const char **pems, const char **extras, size_t count) {
    char tmpl[] = "/tmp/converge-c-test-XXXXXX";
    snprintf(dir, n, "%s", mkdtemp(tmpl));
    char p[512];
    snprintf(p, sizeof p, "%s/notaries-available", dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/notaries-enabled", dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/converge.config", dir);
    write_text(p, settings);
    for (size_t i = 0; i < count; i++) {
        char esc[8192];
        size_t k = 0;
        for (const char *c = pems[i]; *c && k < sizeof esc - 3; c++) {
            if (*c == '\n') {
                esc[k++] = '\\';
                esc[k++] = 'n';
            } else {
                esc[k++] = *c;
            }
        }
        esc[k] = '\0';
        char bundle[10000];
        snprintf(bundle, sizeof bundle,
                 "{\"version\": 1, \"name\": \"%s\", \"hosts\": [{\"host\": \"127.0.0.1\", \"ssl_port\": %d, "
                 "\"http_port\": %d, \"certificate\": \"%s\"}]%s}",
                 names[i], ports[i], g_bundle_http_port, esc, extras && extras[i] ? extras[i] : "");
        snprintf(p, sizeof p, "%s/notaries-available/%02zu.notary", dir, i);
        write_text(p, bundle);
        char link[512], target[64];
        snprintf(link, sizeof link, "%s/notaries-enabled/%02zu.notary", dir, i);
        snprintf(target, sizeof target, "../notaries-available/%02zu.notary", i);
        if (symlink(target, link)) perror("symlink");
    }
}

static void make_config(char *dir, size_t n, const char *settings, const char **names, const int *ports,
                        const char **pems, size_t count) {
    make_config_ext(dir, n, settings, names, ports, pems, NULL, count);
}

/* the bundle fields that offer the extended format with key k */
__attribute__((unused)) static void ext_fields(const ed_key *k, char *out, size_t n) {
    snprintf(out, n,
             ", \"protocols\": [\"convergence-v1\", \"converge-answer/1\"], \"signing_keys\": [{\"alg\": \"ed25519\", "
             "\"key_id\": \"%s\", \"public_key\": \"%s\", \"status\": \"current\"}]",
             k->key_id, k->pub_b64);
}

static void remove_tree(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {
    }
}
#endif

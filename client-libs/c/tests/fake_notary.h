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
#include <unistd.h>

typedef struct {
    EVP_PKEY *key;
    X509 *cert;
    char pem[4096];
    char sha1[64]; /* colon hex */
} tls_identity;

static void colon_hex(const unsigned char *d, size_t n, char *out) {
    for (size_t i = 0; i < n; i++) sprintf(out + 3 * i, i + 1 < n ? "%02X:" : "%02X", d[i]);
}

static int make_identity(tls_identity *id, const char *cn) {
    memset(id, 0, sizeof *id);
    id->key = EVP_RSA_gen(2048);
    X509 *x = X509_new();
    if (!id->key || !x) return -1;
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

/* a legacy 200/409 response listing fp, signed with key */
static char *legacy_response(EVP_PKEY *key, int status, const char *fp, int corrupt) {
    char signed_bytes[512];
    snprintf(signed_bytes, sizeof signed_bytes,
             "{\"fingerprintList\": [{\"timestamp\": {\"start\": \"1323389219\", \"finish\": \"1324691510\"}, "
             "\"fingerprint\": \"%s\"}]}",
             fp);
    unsigned char sig[512];
    size_t sl = sizeof sig;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_DigestSignInit(md, NULL, EVP_sha1(), NULL, key);
    EVP_DigestSign(md, sig, &sl, (const unsigned char *)signed_bytes, strlen(signed_bytes));
    EVP_MD_CTX_free(md);
    if (corrupt) sig[10] ^= 1;
    char b64[1024];
    EVP_EncodeBlock((unsigned char *)b64, sig, (int)sl);
    char body[2048];
    size_t cut = strlen(signed_bytes) - 1;
    snprintf(body, sizeof body, "%.*s, \"signature\": \"%s\"}", (int)cut, signed_bytes, b64);
    char *out = malloc(4096);
    snprintf(out, 4096,
             "HTTP/1.0 %d %s\r\nContent-Type: application/json\r\nCache-Status: converge-notary; hit\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             status, status == 200 ? "OK" : "Conflict", strlen(body), body);
    return out;
}

typedef struct {
    int port, lfd;
    SSL_CTX *ctx;
    pthread_t th;
    volatile int stop;
    char *response; /* NULL: handshake only, then close */
    int served;
} fake_server;

static void *fake_loop(void *arg) {
    fake_server *s = arg;
    while (!s->stop) {
        struct pollfd p = {s->lfd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0) continue;
        struct timeval tv = {2, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        SSL *ssl = SSL_new(s->ctx);
        SSL_set_fd(ssl, fd);
        if (SSL_accept(ssl) == 1 && s->response) {
            char buf[4096];
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
            SSL_write(ssl, s->response, (int)strlen(s->response));
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
static void make_config(char *dir, size_t n, const char *settings, const char **names, const int *ports,
                        const char **pems, size_t count) {
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
        char bundle[9000];
        snprintf(bundle, sizeof bundle,
                 "{\"version\": 1, \"name\": \"%s\", \"hosts\": [{\"host\": \"127.0.0.1\", \"ssl_port\": %d, "
                 "\"http_port\": 1, \"certificate\": \"%s\"}]}",
                 names[i], ports[i], esc);
        snprintf(p, sizeof p, "%s/notaries-available/%02zu.notary", dir, i);
        write_text(p, bundle);
        char link[512], target[64];
        snprintf(link, sizeof link, "%s/notaries-enabled/%02zu.notary", dir, i);
        snprintf(target, sizeof target, "../notaries-available/%02zu.notary", i);
        if (symlink(target, link)) perror("symlink");
    }
}

static void remove_tree(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {
    }
}
#endif

/* Notary bundles (.notary files, versions 0 and 1): hosts with their pinned certificates,
 * the extended format's signing keys. Parsed with the stock parser (json.c). */
#include <ctype.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static size_t utf8_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) c++;
    return c;
}

static int json_port(const json_t *obj, const char *key, int *out) {
    int64_t v;
    if (!cv_jint(json_object_get(obj, key), &v) || v <= 0 || v >= 65536) return -1;
    *out = (int)v;
    return 0;
}

/* ^\s*-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----\s*$ */
static int pem_re(const char *s, size_t n) {
    static const char B[] = "-----BEGIN CERTIFICATE-----", E[] = "-----END CERTIFICATE-----";
    size_t i = 0;
    while (i < n && isspace((unsigned char)s[i])) i++;
    if (n - i < sizeof B - 1 || memcmp(s + i, B, sizeof B - 1)) return 0;
    i += sizeof B - 1;
    if (i < n && s[i] == '\r') i++;
    if (i >= n || s[i] != '\n') return 0;
    i++;
    size_t start = i;
    while (i < n && (isalnum((unsigned char)s[i]) || strchr("+/=\r\n", s[i]))) i++;
    if (i == start) return 0;
    if (n - i < sizeof E - 1 || memcmp(s + i, E, sizeof E - 1)) return 0;
    i += sizeof E - 1;
    while (i < n && isspace((unsigned char)s[i])) i++;
    return i == n;
}

static int parse_host(const json_t *obj, cv_host *h, cv_err *e) {
    if (!json_is_object(obj)) return cv_fail(e, K_BUNDLE, "a host entry must be an object");
    const json_t *name = json_object_get(obj, "host");
    if (!cv_jcstr(name) || !cv_host_re(json_string_value(name)))
        return cv_fail(e, K_BUNDLE, "host must be a DNS name or an IP address");
    snprintf(h->host, sizeof h->host, "%s", json_string_value(name));
    const json_t *pem = json_object_get(obj, "certificate");
    if (!json_is_string(pem) || !pem_re(json_string_value(pem), json_string_length(pem)))
        return cv_fail(e, K_BUNDLE, "certificate of %s is not one PEM certificate", h->host);
    BIO *bio = BIO_new_mem_buf(json_string_value(pem), (int)json_string_length(pem));
    X509 *cert = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    if (!cert) return cv_fail(e, K_BUNDLE, "certificate of %s does not parse", h->host);
    unsigned char *der = NULL;
    int dl = i2d_X509(cert, &der);
    if (dl <= 0) {
        X509_free(cert);
        return cv_fail(e, K_BUNDLE, "certificate of %s does not encode", h->host);
    }
    SHA1(der, (size_t)dl, h->pin);
    OPENSSL_free(der);
    h->key = X509_get_pubkey(cert);
    X509_free(cert);
    if (json_port(obj, "ssl_port", &h->ssl_port) || json_port(obj, "http_port", &h->http_port)) {
        EVP_PKEY_free(h->key);
        h->key = NULL;
        return cv_fail(e, K_BUNDLE, "ports must be integers 1..65535");
    }
    return 0;
}

void cv_bundle_free(cv_bundle *b) {
    for (size_t i = 0; i < b->nhosts; i++) EVP_PKEY_free(b->hosts[i].key);
    b->nhosts = 0;
}

/* Python's `x == 0` / `x == 1` for a JSON number (bool is neither) */
static int num_is(const json_t *v, int want) {
    if (json_is_integer(v)) return json_integer_value(v) == want;
    return json_is_real(v) && json_real_value(v) == (double)want;
}

/* a string of at most max characters (UTF-8 code points), without NUL */
static int short_str(const json_t *v, size_t max) {
    return cv_jcstr(v) && utf8_chars(json_string_value(v), json_string_length(v)) <= max;
}

/* the members of a version 1 bundle besides hosts; 0 or an error */
static int v1_fields(const json_t *obj, cv_bundle *out, cv_err *e) {
    const json_t *name = json_object_get(obj, "name");
    int blank = 1;
    for (const char *c = cv_jcstr(name) ? json_string_value(name) : ""; *c; c++)
        if (!cv_py_space((unsigned char)*c)) blank = 0;
    if (!short_str(name, 200) || blank) return cv_fail(e, K_BUNDLE, "name must be a non-empty string");
    snprintf(out->name, sizeof out->name, "%s", json_string_value(name));
    const json_t *loc = json_object_get(obj, "bundle_location");
    if (loc && !json_is_null(loc)) {
        size_t l = json_string_length(loc);
        const char *ls = json_string_value(loc);
        if (!short_str(loc, 2048) || l < 8 || memcmp(ls, "https://", 8) || memcmp(ls + l - 7, ".notary", 7))
            return cv_fail(e, K_BUNDLE, "bundle_location must be an https:// URL ending in .notary");
    }
    const json_t *region = json_object_get(obj, "region");
    if (region && !json_is_null(region)) {
        const char *r = json_string_value(region);
        if (!json_is_string(region) || json_string_length(region) != 2 || !isalpha((unsigned char)r[0]) ||
            !isalpha((unsigned char)r[1]))
            return cv_fail(e, K_BUNDLE, "region must be an ISO-3166 alpha-2 code");
    }
    int lists_v2 = 0;
    const json_t *protos = json_object_get(obj, "protocols");
    if (protos && (!json_is_array(protos) || json_array_size(protos) > 16))
        return cv_fail(e, K_BUNDLE, "protocols must be a list of at most 16 strings");
    for (size_t i = 0; i < json_array_size(protos); i++) {
        const json_t *p = json_array_get(protos, i);
        if (!json_is_string(p) || json_string_length(p) == 0 ||
            utf8_chars(json_string_value(p), json_string_length(p)) > 64)
            return cv_fail(e, K_BUNDLE, "protocols must be a list of short strings");
        if (cv_jstr_eq(p, FORMAT_V2)) lists_v2 = 1;
    }
    const json_t *keys = json_object_get(obj, "signing_keys");
    if (keys && cv_parse_signing_keys(keys, out->keys, &out->nkeys, e)) return -1;
    if (lists_v2 && !out->nkeys)
        return cv_fail(e, K_BUNDLE, "protocols lists converge-answer/1 but the bundle has no signing_keys");
    out->offers_extended = lists_v2 && out->nkeys > 0;
    const json_t *log = json_object_get(obj, "transparency");
    if (log && cv_parse_log_policy(log, &out->log, e)) return -1;
    return 0;
}

int cv_parse_bundle(const char *data, size_t n, cv_bundle *out, cv_err *e) {
    memset(out, 0, sizeof *out);
    if (n > MAX_BUNDLE_BYTES) return cv_fail(e, K_BUNDLE, "bundle larger than %d bytes", MAX_BUNDLE_BYTES);
    json_t *obj = cv_json_parse(data, n);
    int rc = -1;
    const json_t *ver = json_object_get(obj, "version"), *hosts = json_object_get(obj, "hosts");
    if (!obj) cv_fail(e, K_BUNDLE, "bundle is not JSON");
    else if (!json_is_object(obj)) cv_fail(e, K_BUNDLE, "bundle is not a JSON object");
    else if (ver && !num_is(ver, 0) && !num_is(ver, 1)) cv_fail(e, K_BUNDLE, "unsupported bundle version");
    else if (!ver || num_is(ver, 0)) { /* version 0: the object is the one host */
        rc = parse_host(obj, &out->hosts[0], e);
        if (!rc) out->nhosts = 1;
        snprintf(out->name, sizeof out->name, "%s", out->hosts[0].host);
    } else if (!(out->version = 1) || v1_fields(obj, out, e)) {
        rc = -1;
    } else if (!json_is_array(hosts) || json_array_size(hosts) == 0) {
        cv_fail(e, K_BUNDLE, "hosts must be a non-empty list");
    } else if (json_array_size(hosts) > MAX_HOSTS) {
        cv_fail(e, K_BUNDLE, "more than %d hosts", MAX_HOSTS);
    } else {
        rc = 0;
        for (size_t i = 0; i < json_array_size(hosts) && !rc; i++)
            if (!(rc = parse_host(json_array_get(hosts, i), &out->hosts[i], e))) out->nhosts++;
    }
    if (rc) cv_bundle_free(out);
    json_decref(obj);
    return rc;
}

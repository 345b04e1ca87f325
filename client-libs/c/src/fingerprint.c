/* Fingerprints (SHA-1 / SHA-256 hex, colons optional), targets (host, port, address) and
 * the host name a notary is expected to answer about. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

int cv_fail(cv_err *e, const char *kind, const char *fmt, ...) {
    if (e) {
        snprintf(e->kind, sizeof e->kind, "%s", kind);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ------------------------------------------------------------------ fingerprints */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int cv_parse_fp(const char *text, size_t n, cv_fp *out, cv_err *e) {
    /* length in code points (the reference counts characters) */
    size_t chars = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)text[i] & 0xC0) != 0x80) chars++;
    if (chars > MAX_FINGERPRINT_TEXT)
        return cv_fail(e, K_FINGERPRINT, "fingerprint longer than %d characters", MAX_FINGERPRINT_TEXT);
    const char *s = text, *end = text + n;
    while (s < end && strchr(" \t\r\n", *s) && *s) s++;
    while (end > s && strchr(" \t\r\n", end[-1]) && end[-1]) end--;
    size_t len = (size_t)(end - s);
    if (!len) return cv_fail(e, K_FINGERPRINT, "empty fingerprint");
    unsigned char d[100];
    size_t nd = 0;
    if (memchr(s, ':', len)) {
        /* [0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2})* */
        size_t i = 0;
        while (1) {
            if (i + 2 > len || hexval(s[i]) < 0 || hexval(s[i + 1]) < 0)
                return cv_fail(e, K_FINGERPRINT, "colon-separated fingerprints need two hex digits per byte");
            if (nd < sizeof d) d[nd] = (unsigned char)(hexval(s[i]) * 16 + hexval(s[i + 1]));
            nd++;
            i += 2;
            if (i == len) break;
            if (s[i] != ':')
                return cv_fail(e, K_FINGERPRINT, "colon-separated fingerprints need two hex digits per byte");
            i++;
        }
    } else {
        for (size_t i = 0; i < len; i++)
            if (hexval(s[i]) < 0) return cv_fail(e, K_FINGERPRINT, "fingerprint contains a non-hex character");
        if (len % 2) return cv_fail(e, K_FINGERPRINT, "odd number of hex digits");
        for (size_t i = 0; i < len; i += 2) {
            if (nd < sizeof d) d[nd] = (unsigned char)(hexval(s[i]) * 16 + hexval(s[i + 1]));
            nd++;
        }
    }
    if (nd != 20 && nd != 32)
        return cv_fail(e, K_FINGERPRINT, "a fingerprint has 20 (SHA-1) or 32 (SHA-256) bytes, not %zu", nd);
    out->alg = nd == 20 ? FP_SHA1 : FP_SHA256;
    out->len = nd;
    memcpy(out->d, d, nd);
    return 0;
}

void cv_fp_colon(const cv_fp *fp, char out[96]) {
    static const char H[] = "0123456789ABCDEF";
    size_t k = 0;
    for (size_t i = 0; i < fp->len; i++) {
        if (i) out[k++] = ':';
        out[k++] = H[fp->d[i] >> 4];
        out[k++] = H[fp->d[i] & 15];
    }
    out[k] = '\0';
}

const char *cv_fp_alg(const cv_fp *fp) { return fp->alg == FP_SHA1 ? "sha1" : "sha256"; }

int cv_fp_eq(const cv_fp *a, const cv_fp *b) {
    return a->alg == b->alg && a->len == b->len && memcmp(a->d, b->d, a->len) == 0;
}

/* ------------------------------------------------------------------ targets */

/* ^[A-Za-z0-9._:-]{1,253}$ with Python's re.match ($ also matches before a final \n) */
int cv_host_re(const char *s) {
    size_t n = strlen(s);
    if (n && s[n - 1] == '\n') n--;
    if (n < 1 || n > 253) return 0;
    for (size_t i = 0; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || strchr("._:-", s[i]))) return 0;
    return 1;
}

int cv_check_target(const char *host, long port, cv_err *e) {
    if (!host || !cv_host_re(host) || host[0] == '.' || host[0] == '-')
        return cv_fail(e, K_TARGET, "invalid target host '%.80s'", host ? host : "");
    if (port <= 0 || port >= 65536) return cv_fail(e, K_TARGET, "invalid target port %ld", port);
    return 0;
}

/* Python's ipaddress compressed form */
static int ip_compressed(const char *ip, char *out, size_t outlen) {
    unsigned char a[16];
    if (inet_pton(AF_INET, ip, a) == 1) {
        snprintf(out, outlen, "%u.%u.%u.%u", a[0], a[1], a[2], a[3]);
        return 0;
    }
    if (!strchr(ip, '%') && inet_pton(AF_INET6, ip, a) == 1) {
        unsigned h[8];
        for (int i = 0; i < 8; i++) h[i] = (unsigned)(a[2 * i] << 8 | a[2 * i + 1]);
        int best = -1, bestlen = 0;
        for (int i = 0; i < 8;) {
            if (h[i] == 0) {
                int j = i;
                while (j < 8 && h[j] == 0) j++;
                if (j - i > bestlen) {
                    best = i;
                    bestlen = j - i;
                }
                i = j;
            } else {
                i++;
            }
        }
        if (bestlen < 2) best = -1;
        size_t k = 0;
        out[0] = '\0';
        for (int i = 0; i < 8; i++) {
            if (i == best) {
                k += (size_t)snprintf(out + k, outlen - k, "%s", i == 0 ? "::" : ":");
                i += bestlen - 1;
                continue;
            }
            k += (size_t)snprintf(out + k, outlen - k, "%x%s", h[i], i < 7 ? ":" : "");
            if (k >= outlen) return -1;
        }
        return 0;
    }
    return -1;
}

int cv_check_ip(const char *ip, char out[64], cv_err *e) {
    if (!ip || ip_compressed(ip, out, 64) != 0)
        return cv_fail(e, K_TARGET, "invalid target address '%.80s'", ip ? ip : "");
    return 0;
}

void cv_expected_host(const char *host, char *out, size_t outlen) {
    const char *s = host, *end = host + strlen(host);
    while (s < end && (*s == '[' || *s == ']')) s++;
    while (end > s && (end[-1] == '[' || end[-1] == ']')) end--;
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%.*s", (int)(end - s), s);
    if (ip_compressed(tmp, out, outlen) == 0) return;
    size_t n = strlen(host);
    if (n && host[n - 1] == '.') n--;
    if (n >= outlen) n = outlen - 1;
    for (size_t i = 0; i < n; i++) out[i] = (char)tolower((unsigned char)host[i]);
    out[n] = '\0';
}

/* The pure rules of the client: fingerprints, targets, requests, HTTP framing, legacy
 * signed lists, extended answers, bundles, consensus and the cache rule. No network, no
 * clock reads: time is an argument. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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
static int host_re(const char *s) {
    size_t n = strlen(s);
    if (n && s[n - 1] == '\n') n--;
    if (n < 1 || n > 253) return 0;
    for (size_t i = 0; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || strchr("._:-", s[i]))) return 0;
    return 1;
}

int cv_check_target(const char *host, long port, cv_err *e) {
    if (!host || !host_re(host) || host[0] == '.' || host[0] == '-')
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

static void lower_into(char *dst, const char *src, size_t cap) {
    size_t i = 0;
    for (; src[i] && i + 1 < cap; i++) dst[i] = (char)tolower((unsigned char)src[i]);
    dst[i] = '\0';
}

char *cv_legacy_request(const char *host, int port, const cv_fp *fp, const char *ip, size_t *n, cv_err *e) {
    if (cv_check_target(host, port, e)) return NULL;
    char ipc[64] = "";
    if (ip && cv_check_ip(ip, ipc, e)) return NULL;
    char colon[96], lh[300];
    cv_fp_colon(fp, colon);
    lower_into(lh, host, sizeof lh);
    cj_buf b = {0};
    cj_buf_printf(&b,
                  "POST /target/%s+%d%s%s HTTP/1.0\r\n"
                  "Content-Type: application/x-www-form-urlencoded\r\n"
                  "Connection: close\r\n"
                  "Content-Length: %zu\r\n"
                  "\r\n"
                  "fingerprint=%s",
                  lh, port, ip ? "/" : "", ipc, strlen("fingerprint=") + strlen(colon), colon);
    if (b.oom) {
        cj_buf_free(&b);
        cv_fail(e, "internal", "out of memory");
        return NULL;
    }
    *n = b.len;
    return b.p;
}

char *cv_ext_request(const char *host, int port, const cv_fp *fp, const char *nonce, const char *ip,
                     size_t *n, cv_err *e) {
    if (cv_check_target(host, port, e)) return NULL;
    char ipc[64] = "";
    if (ip && cv_check_ip(ip, ipc, e)) return NULL;
    char colon[96];
    cv_fp_colon(fp, colon);
    cj_buf body = {0};
    cj_buf_puts(&body, "{\"host\":");
    cj_write_string(&body, host, strlen(host));
    cj_buf_printf(&body, ",\"port\":%d,\"fingerprint\":\"%s\",\"alg\":\"%s\"", port, colon, cv_fp_alg(fp));
    if (ip) cj_buf_printf(&body, ",\"ip\":\"%s\"", ipc);
    if (nonce) cj_buf_printf(&body, ",\"nonce\":\"%s\"", nonce);
    cj_buf_puts(&body, "}");
    cj_buf b = {0};
    cj_buf_printf(&b,
                  "POST /v2/answer HTTP/1.0\r\n"
                  "Content-Type: application/json\r\n"
                  "Accept: " MEDIA_TYPE "\r\n"
                  "Connection: close\r\n"
                  "Content-Length: %zu\r\n"
                  "\r\n",
                  body.len);
    cj_buf_put(&b, body.p, body.len);
    cj_buf_free(&body);
    if (b.oom) {
        cj_buf_free(&b);
        cv_fail(e, "internal", "out of memory");
        return NULL;
    }
    *n = b.len;
    return b.p;
}

/* ------------------------------------------------------------------ HTTP framing */

/* Python's str.isspace() for Latin-1 code points */
static int py_space(unsigned char c) {
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0;
}

static void trim(const char **s, const char **end) {
    while (*s < *end && py_space((unsigned char)**s)) (*s)++;
    while (*end > *s && py_space((unsigned char)(*end)[-1])) (*end)--;
}

void cv_http_free(cv_http *h) {
    free(h->content_type);
    free(h->cache_status);
    h->content_type = h->cache_status = NULL;
}

static char *join_header(char *old, const char *v, size_t n) {
    cj_buf b = {0};
    if (old) {
        cj_buf_puts(&b, old);
        cj_buf_puts(&b, ", ");
        free(old);
    }
    cj_buf_put(&b, v, n);
    if (!b.p) return calloc(1, 1);
    return b.p;
}

int cv_parse_http(const char *raw, size_t n, size_t max_bytes, cv_http *out, cv_err *e) {
    memset(out, 0, sizeof *out);
    if (n > max_bytes) return cv_fail(e, K_RESPONSE, "response larger than %zu bytes", max_bytes);
    const char *sep = memmem(raw, n, "\r\n\r\n", 4);
    size_t sep_len = 4;
    if (!sep) {
        sep = memmem(raw, n, "\n\n", 2);
        sep_len = 2;
    }
    if (!sep) return cv_fail(e, K_RESPONSE, "response has no end of headers");
    if ((size_t)(sep - raw) > MAX_HEADER_BYTES) return cv_fail(e, K_RESPONSE, "response headers too large");
    const char *head_end = sep;
    /* status line */
    const char *line = raw;
    const char *eol = memchr(line, '\n', (size_t)(head_end - line));
    const char *lend = eol ? eol : head_end;
    const char *l2 = lend;
    if (eol && l2 > line && l2[-1] == '\r') l2--; /* "\r\n" -> "\n" */
    size_t ll = (size_t)(l2 - line);
    if (ll < 12 || memcmp(line, "HTTP/1.", 7) != 0 || (line[7] != '0' && line[7] != '1') || line[8] != ' ' ||
        !isdigit((unsigned char)line[9]) || !isdigit((unsigned char)line[10]) || !isdigit((unsigned char)line[11]) ||
        (ll > 12 && line[12] != ' '))
        return cv_fail(e, K_RESPONSE, "bad status line");
    for (size_t i = 12; i < ll; i++)
        if (line[i] == '\n') return cv_fail(e, K_RESPONSE, "bad status line");
    out->status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
    char *te = NULL, *cl = NULL, *ct = NULL, *cs = NULL;
    int rc = 0;
    const char *p = eol ? eol + 1 : head_end;
    while (eol && p <= head_end) {
        const char *q = memchr(p, '\n', (size_t)(head_end - p));
        const char *qe = q ? q : head_end;
        const char *ve = qe;
        if (q && ve > p && ve[-1] == '\r') ve--;
        const char *colon = memchr(p, ':', (size_t)(ve - p));
        if (!colon || colon == p) {
            rc = cv_fail(e, K_RESPONSE, "bad header line");
            break;
        }
        const char *ns = p, *ne = colon;
        trim(&ns, &ne);
        if (ns != p || ne != colon) {
            rc = cv_fail(e, K_RESPONSE, "bad header line");
            break;
        }
        const char *vs = colon + 1, *vend = ve;
        trim(&vs, &vend);
        size_t nl = (size_t)(colon - p);
        char name[64];
        if (nl < sizeof name) {
            for (size_t i = 0; i < nl; i++) name[i] = (char)tolower((unsigned char)p[i]);
            name[nl] = '\0';
            if (!strcmp(name, "transfer-encoding")) te = join_header(te, vs, (size_t)(vend - vs));
            else if (!strcmp(name, "content-length")) cl = join_header(cl, vs, (size_t)(vend - vs));
            else if (!strcmp(name, "content-type")) ct = join_header(ct, vs, (size_t)(vend - vs));
            else if (!strcmp(name, "cache-status")) cs = join_header(cs, vs, (size_t)(vend - vs));
        }
        if (!q) break;
        p = q + 1;
    }
    const char *body = sep + sep_len;
    size_t blen = n - (size_t)(body - raw);
    if (!rc && te) {
        for (char *c = te; *c; c++) *c = (char)tolower((unsigned char)*c);
        if (strstr(te, "chunked")) rc = cv_fail(e, K_RESPONSE, "chunked transfer coding is not allowed");
    }
    if (!rc && cl) {
        int ok = cl[0] != '\0';
        for (char *c = cl; *c; c++)
            if (!isdigit((unsigned char)*c)) ok = 0;
        if (!ok) {
            rc = cv_fail(e, K_RESPONSE, "bad Content-Length");
        } else {
            size_t want = 0;
            int big = 0;
            for (char *c = cl; *c; c++) {
                if (want > (SIZE_MAX - 9) / 10) big = 1;
                else want = want * 10 + (size_t)(*c - '0');
            }
            if (big || want > blen) rc = cv_fail(e, K_RESPONSE, "truncated response body");
            else blen = want;
        }
    }
    free(te);
    free(cl);
    if (rc) {
        free(ct);
        free(cs);
        return rc;
    }
    if (ct) {
        char *semi = strchr(ct, ';');
        if (semi) *semi = '\0';
        const char *s = ct, *en = ct + strlen(ct);
        trim(&s, &en);
        char *t = calloc(1, (size_t)(en - s) + 1);
        if (t) {
            for (size_t i = 0; i < (size_t)(en - s); i++) t[i] = (char)tolower((unsigned char)s[i]);
        }
        free(ct);
        ct = t;
    }
    out->content_type = ct;
    out->cache_status = cs;
    out->body = body;
    out->body_len = blen;
    return 0;
}

const char *cv_vote_name(int vote) {
    switch (vote) {
    case V_SUCCESS: return "success";
    case V_FAILURE: return "failure";
    case V_UNREACHABLE: return "unreachable";
    default: return "skipped";
    }
}

/* ------------------------------------------------------------------ legacy lists */

static const char SIG_MARKER[] = ", \"signature\"";

void cv_signed_list_free(cv_signed_list *s) {
    free(s->fps);
    free(s->sig);
    cj_buf_free(&s->cut);
    cj_buf_free(&s->reser);
    memset(s, 0, sizeof *s);
}

static int b64val(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* base64.b64decode(validate=True) */
static int b64_std_decode(const char *s, size_t n, unsigned char **out, size_t *outlen) {
    size_t c = 0;
    while (c < n && b64val(s[c]) >= 0) c++;
    size_t pads = n - c;
    if (pads > 2) return -1;
    for (size_t i = c; i < n; i++)
        if (s[i] != '=') return -1;
    if (c % 4 == 1) return -1;
    if ((c % 4 == 2 && pads != 2) || (c % 4 == 3 && pads != 1)) return -1;
    unsigned char *d = malloc(c * 3 / 4 + 3);
    if (!d) return -1;
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < c; i++) {
        acc = (acc << 6) | (uint32_t)b64val(s[i]);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            d[k++] = (unsigned char)(acc >> bits);
        }
    }
    *out = d;
    *outlen = k;
    return 0;
}

static int timestamp_ok(const cj_value *v) {
    if (!v) return 0;
    if (v->kind == CJ_STRING) {
        if (v->slen == 0 || v->slen > 12) return 0;
        for (size_t i = 0; i < v->slen; i++)
            if (!isdigit((unsigned char)v->s[i])) return 0;
        return 1;
    }
    int64_t x;
    return cj_int(v, &x) && x >= 0 && x < 1000000000000LL;
}

int cv_parse_signed_list(const char *body, size_t n, size_t max_bytes, cv_signed_list *out, cv_err *e) {
    memset(out, 0, sizeof *out);
    if (n > max_bytes) return cv_fail(e, K_RESPONSE, "body larger than %zu bytes", max_bytes);
    char perr[64];
    /* a str starting with U+FEFF is refused by the reference (no BOM skipping) */
    cj_doc *doc = (n >= 3 && memcmp(body, "\xEF\xBB\xBF", 3) == 0) ? NULL : cj_parse(body, n, perr, sizeof perr);
    if (!doc) return cv_fail(e, K_RESPONSE, "body is not JSON");
    const cj_value *obj = cj_root(doc);
    int rc = 0;
    if (obj->kind != CJ_OBJECT) {
        rc = cv_fail(e, K_RESPONSE, "body is not a JSON object");
        goto done;
    }
    const cj_value *fl = cj_get(obj, "fingerprintList");
    if (!fl || fl->kind != CJ_ARRAY) {
        rc = cv_fail(e, K_RESPONSE, "fingerprintList missing or not a list");
        goto done;
    }
    if (fl->n > MAX_HISTORY_ENTRIES) {
        rc = cv_fail(e, K_RESPONSE, "more than %d history entries", MAX_HISTORY_ENTRIES);
        goto done;
    }
    const cj_value *sig = cj_get(obj, "signature");
    if (!cj_is_str(sig)) {
        rc = cv_fail(e, K_RESPONSE, "signature missing or not a string");
        goto done;
    }
    if (b64_std_decode(sig->s, sig->slen, &out->sig, &out->sig_len)) {
        rc = cv_fail(e, K_RESPONSE, "signature is not base64");
        goto done;
    }
    out->fps = calloc(fl->n ? fl->n : 1, sizeof(cv_fp));
    if (!out->fps) {
        rc = cv_fail(e, K_RESPONSE, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < fl->n; i++) {
        const cj_value *item = fl->items[i];
        if (item->kind != CJ_OBJECT) {
            rc = cv_fail(e, K_RESPONSE, "history entry is not an object");
            goto done;
        }
        const cj_value *ts = cj_get(item, "timestamp");
        if (!ts || ts->kind != CJ_OBJECT) {
            rc = cv_fail(e, K_RESPONSE, "history entry has no timestamp object");
            goto done;
        }
        const cj_value *fp = cj_get(item, "fingerprint");
        if (!cj_is_str(fp)) {
            rc = cv_fail(e, K_RESPONSE, "history entry has no fingerprint");
            goto done;
        }
        if (cv_parse_fp(fp->s, fp->slen, &out->fps[i], NULL)) {
            rc = cv_fail(e, K_RESPONSE, "history entry fingerprint is not one");
            goto done;
        }
        if (!timestamp_ok(cj_get(ts, "start")) || !timestamp_ok(cj_get(ts, "finish"))) {
            rc = cv_fail(e, K_RESPONSE, "timestamp is not a decimal unix time");
            goto done;
        }
        out->n++;
    }
    /* recipe (b): up to the last ', "signature"', then '}' */
    const char *last = NULL;
    for (const char *p = body; (p = memmem(p, n - (size_t)(p - body), SIG_MARKER, sizeof SIG_MARKER - 1));
         p++)
        last = p;
    if (last) {
        out->has_cut = 1;
        cj_buf_put(&out->cut, body, (size_t)(last - body));
        cj_buf_put(&out->cut, "}", 1);
    }
    cj_pydumps(obj, "signature", &out->reser);
    if (out->cut.oom || out->reser.oom) rc = cv_fail(e, K_RESPONSE, "out of memory");
done:
    cj_free(doc);
    if (rc) cv_signed_list_free(out);
    return rc;
}

static int rsa_sha1_verify(EVP_PKEY *key, const unsigned char *sig, size_t sl, const char *msg, size_t ml) {
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md) return 0;
    int ok = EVP_DigestVerifyInit(md, NULL, EVP_sha1(), NULL, key) == 1 &&
             EVP_DigestVerify(md, sig, sl, (const unsigned char *)msg, ml) == 1;
    EVP_MD_CTX_free(md);
    return ok;
}

int cv_verify_signed_list(const cv_signed_list *s, EVP_PKEY *key, cv_err *e) {
    if (!key || EVP_PKEY_base_id(key) != EVP_PKEY_RSA)
        return cv_fail(e, K_SIGNATURE, "the notary certificate does not hold an RSA key");
    if (s->has_cut && rsa_sha1_verify(key, s->sig, s->sig_len, s->cut.p, s->cut.len)) return 0;
    if (rsa_sha1_verify(key, s->sig, s->sig_len, s->reser.p ? s->reser.p : "", s->reser.len)) return 0;
    return cv_fail(e, K_SIGNATURE, "signature does not verify against the notary's certificate");
}

static void set_outcome(cv_outcome *o, int vote, const char *kind, int status, const char *protocol,
                        const char *detail) {
    o->vote = vote;
    o->kind = kind;
    o->status = status;
    o->protocol = protocol;
    snprintf(o->detail, sizeof o->detail, "%.190s", detail ? detail : "");
}

static const char *intern_kind(const char *k) {
    static const char *const kinds[] = {K_RESPONSE, K_SIGNATURE, "malformed", "non-canonical", "unknown-key",
                                        "bad-signature", "wrong-target", "nonce-mismatch", "stale",
                                        K_FINGERPRINT, K_TARGET};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (!strcmp(k, kinds[i])) return kinds[i];
    return "response";
}

void cv_legacy_outcome(const char *raw, size_t n, const cv_fp *wanted, size_t nwanted, EVP_PKEY *key,
                       size_t max_bytes, cv_outcome *o, char **cache_status) {
    cv_http h;
    cv_err e = {{0}, {0}};
    if (cv_parse_http(raw, n, max_bytes, &h, &e)) {
        set_outcome(o, V_FAILURE, intern_kind(e.kind), 0, FORMAT_V1, e.msg);
        return;
    }
    if (cache_status) {
        *cache_status = h.cache_status;
        h.cache_status = NULL;
    }
    int status = h.status;
    if (status == 200 || status == 409) {
        cv_signed_list s;
        int bad = cv_parse_signed_list(h.body, h.body_len, MAX_RESPONSE_BYTES, &s, &e) != 0;
        if (!bad && cv_verify_signed_list(&s, key, &e) != 0) {
            cv_signed_list_free(&s);
            bad = 1;
        }
        if (bad) {
            set_outcome(o, V_FAILURE, intern_kind(e.kind), status, FORMAT_V1, e.msg);
            cv_http_free(&h);
            return;
        }
        if (status == 409) {
            set_outcome(o, V_FAILURE, "mismatch", status, FORMAT_V1, "notary sees another certificate");
        } else {
            int listed = 0, alg_seen = 0;
            for (size_t i = 0; i < s.n; i++)
                for (size_t j = 0; j < nwanted; j++) {
                    if (cv_fp_eq(&s.fps[i], &wanted[j])) listed = 1;
                    if (s.fps[i].alg == wanted[j].alg) alg_seen = 1;
                }
            if (listed) set_outcome(o, V_SUCCESS, "listed", status, FORMAT_V1, "");
            else if (!alg_seen && s.n)
                set_outcome(o, V_SUCCESS, "status-only", status, FORMAT_V1, "list holds no fingerprint of the asked kind");
            else set_outcome(o, V_FAILURE, "not-listed", status, FORMAT_V1, "200 without the fingerprint in the signed list");
        }
        cv_signed_list_free(&s);
    } else if (status == 303) {
        set_outcome(o, V_UNREACHABLE, "inconclusive", status, FORMAT_V1, "notary could not decide");
    } else {
        char d[40];
        snprintf(d, sizeof d, "HTTP status %d", status);
        set_outcome(o, V_UNREACHABLE, "status", status, FORMAT_V1, d);
    }
    cv_http_free(&h);
}

/* ------------------------------------------------------------------ extended */

static int b64url_val(char c) {
    if (c == '-') return 62;
    if (c == '_') return 63;
    if (c == '+' || c == '/') return -1;
    return b64val(c);
}

int cv_b64url_decode(const char *s, size_t n, unsigned char *out, size_t cap, size_t *outlen) {
    if (n % 4 == 1) return -1;
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64url_val(s[i]);
        if (v < 0) return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (k >= cap) return -1;
            out[k++] = (unsigned char)(acc >> bits);
        }
    }
    *outlen = k;
    return 0;
}

void cv_b64url_encode(const unsigned char *d, size_t n, char *out) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        acc = (acc << 8) | d[i];
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            out[k++] = A[(acc >> bits) & 63];
        }
    }
    if (bits) out[k++] = A[(acc << (6 - bits)) & 63];
    out[k] = '\0';
}

static void key_id_of(const unsigned char pub[32], char out[17]) {
    unsigned char h[32];
    SHA256(pub, 32, h);
    for (int i = 0; i < 8; i++) snprintf(out + 2 * i, 3, "%02x", h[i]);
}

static int parse_signing_key(const cj_value *k, cv_key *out, cv_err *e) {
    if (!k || k->kind != CJ_OBJECT) return cv_fail(e, K_BUNDLE, "a signing key entry must be an object");
    static const char *const known[] = {"alg", "key_id", "public_key", "status", "valid_until"};
    for (size_t i = 0; i < k->n; i++) {
        int ok = 0;
        for (size_t j = 0; j < 5; j++)
            if (k->klens[i] == strlen(known[j]) && !memcmp(k->keys[i], known[j], k->klens[i])) ok = 1;
        if (!ok) return cv_fail(e, K_BUNDLE, "unknown signing key fields");
    }
    if (!cj_str_eq(cj_get(k, "alg"), "ed25519")) return cv_fail(e, K_BUNDLE, "signing key alg must be ed25519");
    const cj_value *pk = cj_get(k, "public_key");
    size_t rl = 0;
    if (!cj_is_str(pk) || cv_b64url_decode(pk->s, pk->slen, out->pub, 32, &rl) || rl != 32) {
        /* a longer key overflows cap and fails; shorter is caught by rl */
        return cv_fail(e, K_BUNDLE, "signing key public_key must be unpadded base64url of 32 bytes");
    }
    key_id_of(out->pub, out->key_id);
    if (!cj_str_eq(cj_get(k, "key_id"), out->key_id))
        return cv_fail(e, K_BUNDLE, "signing key id does not match its public key");
    const cj_value *st = cj_get(k, "status"), *until = cj_get(k, "valid_until");
    if (cj_str_eq(st, "current")) {
        if (until && until->kind != CJ_NULL) return cv_fail(e, K_BUNDLE, "a current signing key has no valid_until");
        out->retired = 0;
    } else if (cj_str_eq(st, "retired")) {
        int64_t u;
        if (!cj_int(until, &u) || u <= 0 || u > 9007199254740991LL)
            return cv_fail(e, K_BUNDLE, "a retired signing key needs valid_until (unix seconds)");
        out->retired = 1;
        out->valid_until = u;
    } else {
        return cv_fail(e, K_BUNDLE, "signing key status must be current or retired");
    }
    return 0;
}

int cv_parse_signing_keys(const cj_value *v, cv_key *keys, size_t *n, cv_err *e) {
    if (!v || v->kind != CJ_ARRAY || v->n == 0) return cv_fail(e, K_BUNDLE, "signing_keys must be a non-empty list");
    if (v->n > MAX_SIGNING_KEYS) return cv_fail(e, K_BUNDLE, "more than %d signing keys", MAX_SIGNING_KEYS);
    int current = 0;
    for (size_t i = 0; i < v->n; i++) {
        if (parse_signing_key(v->items[i], &keys[i], e)) return -1;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(keys[i].key_id, keys[j].key_id)) return cv_fail(e, K_BUNDLE, "signing key ids repeat");
        current += !keys[i].retired;
    }
    if (current != 1) return cv_fail(e, K_BUNDLE, "signing_keys must hold exactly one current key");
    *n = v->n;
    return 0;
}

static int ed25519_verify(const unsigned char pub[32], const unsigned char *sig, size_t sl, const char *msg,
                          size_t ml) {
    EVP_PKEY *k = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, 32);
    if (!k) return 0;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int ok = md && EVP_DigestVerifyInit(md, NULL, NULL, NULL, k) == 1 &&
             EVP_DigestVerify(md, sig, sl, (const unsigned char *)msg, ml) == 1;
    EVP_MD_CTX_free(md);
    EVP_PKEY_free(k);
    return ok;
}

static const char *const VERDICTS[] = {"match", "mismatch", "unreachable", "refused"};

/* Python equality of a JSON value with an expected string (NULL = None) */
static int eq_str_or_null(const cj_value *v, const char *s) {
    if (!s) return !v || v->kind == CJ_NULL;
    return cj_str_eq(v, s);
}

#define REJECT(k, ...)                                   \
    do {                                                 \
        *kind = k;                                       \
        if (msg) snprintf(msg, msglen, __VA_ARGS__);     \
        goto rejected;                                   \
    } while (0)

const char *cv_verify_answer(const char *raw, size_t n, const cv_key *keys, size_t nkeys, int64_t now,
                             const cv_expect *x, const char **kind, char *msg, size_t msglen) {
    const char *verdict = NULL;
    cj_doc *doc = NULL;
    cj_buf canon = {0}, scanon = {0};
    if (n > MAX_ANSWER) REJECT("malformed", "answer larger than %d bytes", MAX_ANSWER);
    /* json.loads on bytes skips a UTF-8 BOM; the canonical comparison then refuses it */
    size_t skip = (n >= 3 && memcmp(raw, "\xEF\xBB\xBF", 3) == 0) ? 3 : 0;
    doc = cj_parse(raw + skip, n - skip, NULL, 0);
    if (!doc) REJECT("malformed", "answer is not JSON");
    const cj_value *root = cj_root(doc);
    if (root->kind != CJ_OBJECT || root->n != 2 || !cj_has(root, "statement") || !cj_has(root, "signature"))
        REJECT("malformed", "answer must have exactly statement and signature");
    const cj_value *stmt = cj_get(root, "statement"), *sig = cj_get(root, "signature");
    if (stmt->kind != CJ_OBJECT || sig->kind != CJ_OBJECT)
        REJECT("malformed", "statement and signature must be objects");
    if (cj_canonical(root, &canon)) REJECT("malformed", "answer outside canonical JSON");
    if (canon.len != n || memcmp(canon.p, raw, n) != 0)
        REJECT("non-canonical", "answer bytes are not canonical JSON (RFC 8785)");
    if (!cj_str_eq(cj_get(stmt, "type"), FORMAT_V2) || !cj_str_eq(cj_get(sig, "alg"), "ed25519"))
        REJECT("malformed", "not a converge-answer/1 answer signed with ed25519");
    const cj_value *kid = cj_get(sig, "key_id"), *skid = cj_get(stmt, "key_id");
    if (!cj_is_str(kid) || !cj_is_str(skid) || kid->slen != skid->slen || memcmp(kid->s, skid->s, kid->slen))
        REJECT("malformed", "key ids of statement and signature differ");
    const cv_key *key = NULL;
    for (size_t i = 0; i < nkeys; i++) {
        int trusted = !keys[i].retired || now <= keys[i].valid_until;
        if (trusted && cj_str_eq(kid, keys[i].key_id)) key = &keys[i];
    }
    if (!key) REJECT("unknown-key", "signing key is not trusted by the bundle");
    const cj_value *sv = cj_get(sig, "value");
    unsigned char sigb[128];
    size_t sl = 0;
    if (!cj_is_str(sv) || cv_b64url_decode(sv->s, sv->slen, sigb, sizeof sigb, &sl) || cj_canonical(stmt, &scanon) ||
        !ed25519_verify(key->pub, sigb, sl, scanon.p, scanon.len))
        REJECT("bad-signature", "signature does not verify");
    const cj_value *vd = cj_get(stmt, "verdict"), *target = cj_get(stmt, "target");
    for (size_t i = 0; i < 4; i++)
        if (cj_str_eq(vd, VERDICTS[i])) verdict = VERDICTS[i];
    if (!verdict || !target || target->kind != CJ_OBJECT) REJECT("malformed", "statement lacks a verdict or target");
    if (x->host) {
        char eh[300];
        cv_expected_host(x->host, eh, sizeof eh);
        int64_t tp;
        if (!cj_str_eq(cj_get(target, "host"), eh) || !cj_int(cj_get(target, "port"), &tp) || tp != x->port)
            REJECT("wrong-target", "answer is about another target");
    }
    if (x->bind_ip) {
        char eip[300];
        if (x->ip) cv_expected_host(x->ip, eip, sizeof eip);
        if (!eq_str_or_null(cj_get(target, "ip"), x->ip ? eip : NULL))
            REJECT("wrong-target", "answer is about a probe of another address");
    }
    const cj_value *req = cj_get(stmt, "request");
    if (x->fp) {
        char colon[96];
        cv_fp_colon(x->fp, colon);
        if (!req || req->kind != CJ_OBJECT || !cj_str_eq(cj_get(req, "alg"), cv_fp_alg(x->fp)) ||
            !cj_str_eq(cj_get(req, "fingerprint"), colon))
            REJECT("wrong-target", "answer is about another certificate fingerprint");
    }
    if (x->nonce && (!req || req->kind != CJ_OBJECT || !cj_str_eq(cj_get(req, "nonce"), x->nonce)))
        REJECT("nonce-mismatch", "answer does not echo our nonce");
    int64_t at;
    const cj_value *atv = cj_get(stmt, "answered_at");
    if (!atv || atv->kind != CJ_INT || !cj_int(atv, &at)) REJECT("malformed", "answered_at must be an integer");
    if (x->has_now) {
        int64_t d = x->now - at;
        if (d < 0) d = -d;
        if (d > x->max_skew) REJECT("stale", "answer time is %lld s from now", (long long)(x->now - at));
    }
    *kind = NULL;
    if (msg && msglen) msg[0] = '\0';
    cj_buf_free(&canon);
    cj_buf_free(&scanon);
    cj_free(doc);
    return verdict;
rejected:
    cj_buf_free(&canon);
    cj_buf_free(&scanon);
    cj_free(doc);
    return NULL;
}

void cv_ext_outcome(const char *raw, size_t n, const cv_key *keys, size_t nkeys, const cv_expect *x,
                    size_t max_bytes, cv_outcome *o, char **cache_status) {
    cv_http h;
    cv_err e = {{0}, {0}};
    if (cv_parse_http(raw, n, max_bytes, &h, &e)) {
        set_outcome(o, V_FAILURE, intern_kind(e.kind), 0, FORMAT_V2, e.msg);
        return;
    }
    if (cache_status) {
        *cache_status = h.cache_status;
        h.cache_status = NULL;
    }
    int st = h.status;
    int signed_status = st == 200 || st == 409 || st == 503 || st == 403;
    if (!signed_status || !h.content_type || strcmp(h.content_type, MEDIA_TYPE) != 0) {
        char d[40];
        snprintf(d, sizeof d, "HTTP status %d", st);
        set_outcome(o, V_UNREACHABLE, "status", st, FORMAT_V2, d);
        cv_http_free(&h);
        return;
    }
    const char *kind = NULL;
    char msg[200];
    const char *verdict = cv_verify_answer(h.body, h.body_len, keys, nkeys, x->now, x, &kind, msg, sizeof msg);
    if (!verdict) {
        set_outcome(o, V_FAILURE, kind, st, FORMAT_V2, msg);
    } else {
        int want = !strcmp(verdict, "match") ? 200 : !strcmp(verdict, "mismatch") ? 409
                 : !strcmp(verdict, "unreachable") ? 503 : 403;
        if (want != st) set_outcome(o, V_FAILURE, "response", st, FORMAT_V2, "status does not fit the signed verdict");
        else if (want == 200) set_outcome(o, V_SUCCESS, "match", st, FORMAT_V2, "");
        else if (want == 409) set_outcome(o, V_FAILURE, "mismatch", st, FORMAT_V2, "");
        else if (want == 503) set_outcome(o, V_UNREACHABLE, "target-unreachable", st, FORMAT_V2, "");
        else set_outcome(o, V_UNREACHABLE, "refused", st, FORMAT_V2, "");
    }
    cv_http_free(&h);
}

/* ------------------------------------------------------------------ bundles */

static size_t utf8_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) c++;
    return c;
}

static int json_port(const cj_value *obj, const char *key, int *out) {
    int64_t v;
    if (!cj_int(cj_get(obj, key), &v) || v <= 0 || v >= 65536) return -1;
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

static int parse_host(const cj_value *obj, cv_host *h, cv_err *e) {
    if (!obj || obj->kind != CJ_OBJECT) return cv_fail(e, K_BUNDLE, "a host entry must be an object");
    const cj_value *name = cj_get(obj, "host");
    if (!cj_is_str(name) || strlen(name->s) != name->slen || !host_re(name->s))
        return cv_fail(e, K_BUNDLE, "host must be a DNS name or an IP address");
    snprintf(h->host, sizeof h->host, "%s", name->s);
    const cj_value *pem = cj_get(obj, "certificate");
    if (!cj_is_str(pem) || !pem_re(pem->s, pem->slen))
        return cv_fail(e, K_BUNDLE, "certificate of %s is not one PEM certificate", h->host);
    BIO *bio = BIO_new_mem_buf(pem->s, (int)pem->slen);
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

/* Python's `x == 0` / `x == 1` for a JSON number (bool excluded by the caller) */
static int num_is(const cj_value *v, int want) {
    if (v->kind == CJ_INT) return v->int_ok && v->i == want;
    if (v->kind == CJ_FLOAT) return v->f == (double)want;
    return 0;
}

int cv_parse_bundle(const char *data, size_t n, cv_bundle *out, cv_err *e) {
    memset(out, 0, sizeof *out);
    if (n > MAX_BUNDLE_BYTES) return cv_fail(e, K_BUNDLE, "bundle larger than %d bytes", MAX_BUNDLE_BYTES);
    cj_doc *doc = (n >= 3 && memcmp(data, "\xEF\xBB\xBF", 3) == 0) ? NULL : cj_parse(data, n, NULL, 0);
    if (!doc) return cv_fail(e, K_BUNDLE, "bundle is not JSON");
    const cj_value *obj = cj_root(doc);
    int rc = 0;
    if (obj->kind != CJ_OBJECT) {
        rc = cv_fail(e, K_BUNDLE, "bundle is not a JSON object");
        goto done;
    }
    const cj_value *ver = cj_get(obj, "version");
    int version = 0;
    if (ver) {
        if (num_is(ver, 0)) version = 0;
        else if (num_is(ver, 1)) version = 1;
        else {
            rc = cv_fail(e, K_BUNDLE, "unsupported bundle version");
            goto done;
        }
    }
    if (version == 0) {
        if (parse_host(obj, &out->hosts[0], e)) {
            rc = -1;
            goto done;
        }
        out->nhosts = 1;
        snprintf(out->name, sizeof out->name, "%s", out->hosts[0].host);
        goto done;
    }
    out->version = 1;
    const cj_value *name = cj_get(obj, "name");
    if (!cj_is_str(name) || utf8_chars(name->s, name->slen) > 200 || strlen(name->s) != name->slen) {
        rc = cv_fail(e, K_BUNDLE, "name must be a non-empty string");
        goto done;
    }
    {
        int blank = 1;
        for (size_t i = 0; i < name->slen; i++)
            if (!py_space((unsigned char)name->s[i])) blank = 0;
        if (blank) {
            rc = cv_fail(e, K_BUNDLE, "name must be a non-empty string");
            goto done;
        }
    }
    snprintf(out->name, sizeof out->name, "%s", name->s);
    const cj_value *hosts = cj_get(obj, "hosts");
    if (!hosts || hosts->kind != CJ_ARRAY || hosts->n == 0) {
        rc = cv_fail(e, K_BUNDLE, "hosts must be a non-empty list");
        goto done;
    }
    if (hosts->n > MAX_HOSTS) {
        rc = cv_fail(e, K_BUNDLE, "more than %d hosts", MAX_HOSTS);
        goto done;
    }
    const cj_value *loc = cj_get(obj, "bundle_location");
    if (loc && loc->kind != CJ_NULL) {
        if (!cj_is_str(loc) || loc->slen < 8 || memcmp(loc->s, "https://", 8) || loc->slen < 7 ||
            memcmp(loc->s + loc->slen - 7, ".notary", 7) || utf8_chars(loc->s, loc->slen) > 2048) {
            rc = cv_fail(e, K_BUNDLE, "bundle_location must be an https:// URL ending in .notary");
            goto done;
        }
    }
    const cj_value *region = cj_get(obj, "region");
    if (region && region->kind != CJ_NULL) {
        if (!cj_is_str(region) || region->slen != 2 || !isalpha((unsigned char)region->s[0]) ||
            !isalpha((unsigned char)region->s[1])) {
            rc = cv_fail(e, K_BUNDLE, "region must be an ISO-3166 alpha-2 code");
            goto done;
        }
    }
    int lists_v2 = 0;
    const cj_value *protos = cj_get(obj, "protocols");
    if (protos) {
        if (protos->kind != CJ_ARRAY || protos->n > 16) {
            rc = cv_fail(e, K_BUNDLE, "protocols must be a list of at most 16 strings");
            goto done;
        }
        for (size_t i = 0; i < protos->n; i++) {
            const cj_value *p = protos->items[i];
            if (!cj_is_str(p) || p->slen == 0 || utf8_chars(p->s, p->slen) > 64) {
                rc = cv_fail(e, K_BUNDLE, "protocols must be a list of short strings");
                goto done;
            }
            if (cj_str_eq(p, FORMAT_V2)) lists_v2 = 1;
        }
    }
    if (cj_has(obj, "signing_keys")) {
        if (cv_parse_signing_keys(cj_get(obj, "signing_keys"), out->keys, &out->nkeys, e)) {
            rc = -1;
            goto done;
        }
    }
    if (lists_v2 && !out->nkeys) {
        rc = cv_fail(e, K_BUNDLE, "protocols lists converge-answer/1 but the bundle has no signing_keys");
        goto done;
    }
    out->offers_extended = lists_v2 && out->nkeys > 0;
    for (size_t i = 0; i < hosts->n; i++) {
        if (parse_host(hosts->items[i], &out->hosts[i], e)) {
            rc = -1;
            goto done;
        }
        out->nhosts++;
    }
done:
    if (rc) cv_bundle_free(out);
    cj_free(doc);
    return rc;
}

/* ------------------------------------------------------------------ policy, cache rule */

int cv_parse_policy(const char *s, size_t n) {
    const char *end = s + n;
    trim(&s, &end);
    char t[16];
    size_t l = (size_t)(end - s);
    if (l >= sizeof t) return 0;
    for (size_t i = 0; i < l; i++) t[i] = (char)tolower((unsigned char)s[i]);
    t[l] = '\0';
    if (!strcmp(t, "consensus")) return P_CONSENSUS;
    if (!strcmp(t, "majority")) return P_MAJORITY;
    if (!strcmp(t, "minority")) return P_MINORITY;
    return 0;
}

int cv_decide(int policy, int s, int f, int u, int stand_aside) {
    int counted = s + f + (stand_aside ? 0 : u);
    if (s < 1) return 0;
    if (policy == P_CONSENSUS) return s == counted;
    if (policy == P_MAJORITY) return s >= (counted + 1) / 2;
    return 1;
}

int cv_settled(int policy, int s, int f, int u, int pending, int stand_aside) {
    int seen = -1;
    for (int ps = 0; ps <= pending; ps++)
        for (int pf = 0; pf <= pending - ps; pf++) {
            int v = cv_decide(policy, s + ps, f + pf, u + (pending - ps - pf), stand_aside);
            if (seen < 0) seen = v;
            else if (seen != v) return -1;
        }
    return seen;
}

int cv_cache_decision(int has_ts, int64_t ts, double now, int has_lifetime, double lifetime) {
    if (!has_ts) return C_MISS;
    if (ts > 100000000000LL) ts = ts >= 0 ? ts / 1000 : -((-ts + 999) / 1000);
    double age = now - (double)ts;
    if (age < -300) return C_STALE;
    if (has_lifetime && age > lifetime) return C_STALE;
    return C_HIT;
}

const char *cv_cache_name(int d) { return d == C_HIT ? "hit" : d == C_STALE ? "stale" : "miss"; }

/* The request bytes of both formats, HTTP/1.x response framing, and votes. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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
    cv_buf b = {0};
    cv_buf_printf(&b,
                  "POST /target/%s+%d%s%s HTTP/1.0\r\n"
                  "Content-Type: application/x-www-form-urlencoded\r\n"
                  "Connection: close\r\n"
                  "Content-Length: %zu\r\n"
                  "\r\n"
                  "fingerprint=%s",
                  lh, port, ip ? "/" : "", ipc, strlen("fingerprint=") + strlen(colon), colon);
    if (b.oom) {
        cv_buf_free(&b);
        cv_fail(e, "internal", "out of memory");
        return NULL;
    }
    *n = b.len;
    return b.p;
}

char *cv_ext_request(const char *host, int port, const cv_fp *fp, const char *nonce, const char *ip,
                     int transparency, size_t *n, cv_err *e) {
    if (cv_check_target(host, port, e)) return NULL;
    char ipc[64] = "";
    if (ip && cv_check_ip(ip, ipc, e)) return NULL;
    char colon[96];
    cv_fp_colon(fp, colon);
    cv_buf body = {0};
    cv_buf_puts(&body, "{\"host\":");
    cv_json_string(&body, host, strlen(host));
    cv_buf_printf(&body, ",\"port\":%d,\"fingerprint\":\"%s\",\"alg\":\"%s\"", port, colon, cv_fp_alg(fp));
    if (ip) cv_buf_printf(&body, ",\"ip\":\"%s\"", ipc);
    if (nonce) cv_buf_printf(&body, ",\"nonce\":\"%s\"", nonce);
    if (transparency) cv_buf_puts(&body, ",\"transparency\":true");
    cv_buf_puts(&body, "}");
    cv_buf b = {0};
    cv_buf_printf(&b,
                  "POST /v2/answer HTTP/1.0\r\n"
                  "Content-Type: application/json\r\n"
                  "Accept: " MEDIA_TYPE "\r\n"
                  "Connection: close\r\n"
                  "Content-Length: %zu\r\n"
                  "\r\n",
                  body.len);
    cv_buf_put(&b, body.p, body.len);
    cv_buf_free(&body);
    if (b.oom) {
        cv_buf_free(&b);
        cv_fail(e, "internal", "out of memory");
        return NULL;
    }
    *n = b.len;
    return b.p;
}

/* ------------------------------------------------------------------ HTTP framing */

/* Python's str.isspace() for Latin-1 code points */
int cv_py_space(unsigned char c) {
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0;
}

void cv_trim(const char **s, const char **end) {
    while (*s < *end && cv_py_space((unsigned char)**s)) (*s)++;
    while (*end > *s && cv_py_space((unsigned char)(*end)[-1])) (*end)--;
}

void cv_http_free(cv_http *h) {
    free(h->content_type);
    free(h->cache_status);
    h->content_type = h->cache_status = NULL;
}

static char *join_header(char *old, const char *v, size_t n) {
    cv_buf b = {0};
    if (old) {
        cv_buf_puts(&b, old);
        cv_buf_puts(&b, ", ");
        free(old);
    }
    cv_buf_put(&b, v, n);
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
        cv_trim(&ns, &ne);
        if (ns != p || ne != colon) {
            rc = cv_fail(e, K_RESPONSE, "bad header line");
            break;
        }
        const char *vs = colon + 1, *vend = ve;
        cv_trim(&vs, &vend);
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
        cv_trim(&s, &en);
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

int cv_frame_answer(const char *raw, size_t n, size_t max_bytes, const char *protocol, cv_http *h, cv_outcome *o,
                    char **cache_status) {
    cv_err e = {{0}, {0}};
    if (cv_parse_http(raw, n, max_bytes, h, &e)) {
        cv_set_outcome(o, V_FAILURE, cv_intern_kind(e.kind), 0, protocol, e.msg);
        return -1;
    }
    if (cache_status) {
        *cache_status = h->cache_status;
        h->cache_status = NULL;
    }
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

void cv_set_outcome(cv_outcome *o, int vote, const char *kind, int status, const char *protocol, const char *detail) {
    o->vote = vote;
    o->kind = kind;
    o->status = status;
    o->protocol = protocol;
    snprintf(o->detail, sizeof o->detail, "%.190s", detail ? detail : "");
}

/* an error kind as a static string (any other word becomes "response") */
const char *cv_intern_kind(const char *k) {
    static const char *const kinds[] = {K_RESPONSE, K_SIGNATURE, "malformed", "unknown-key", "bad-signature",
                                        "wrong-target", "nonce-mismatch", "stale", K_FINGERPRINT, K_TARGET};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (!strcmp(k, kinds[i])) return kinds[i];
    return K_RESPONSE;
}

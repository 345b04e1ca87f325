/* Legacy (convergence-v1) answers: verify the bytes, then parse exactly the bytes that were
 * verified (docs/wire-format.md, "Verifying a legacy answer"), and the vote of one response. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* the body ends with this, the signature, then "} */
static const char SIG_MARKER[] = ", \"signature\": \"";

void cv_signed_list_free(cv_signed_list *s) {
    free(s->fps);
    free(s->signed_bytes);
    memset(s, 0, sizeof *s);
}

/* standard base64 of c characters then pads '=' (the shape step checked the alphabet);
 * -1 when the length does not fit */
static int b64_std_decode(const char *s, size_t c, size_t pads, unsigned char **out, size_t *outlen) {
    if (c % 4 == 1 || (c % 4 == 2 && pads != 2) || (c % 4 == 3 && pads != 1) || (c % 4 == 0 && pads)) return -1;
    unsigned char *d = malloc(c * 3 / 4 + 3);
    if (!d) return -1;
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < c; i++) {
        acc = (acc << 6) | (uint32_t)cv_b64_digit(s[i], 0);
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

static int rsa_sha1_verify(EVP_PKEY *key, const unsigned char *sig, size_t sl, const char *msg, size_t ml) {
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md) return 0;
    int ok = EVP_DigestVerifyInit(md, NULL, EVP_sha1(), NULL, key) == 1 &&
             EVP_DigestVerify(md, sig, sl, (const unsigned char *)msg, ml) == 1;
    EVP_MD_CTX_free(md);
    return ok;
}

/* a timestamp: a string of 1..12 decimal digits, or an integer 0 .. 10^12-1 */
static int timestamp_ok(const json_t *v) {
    if (json_is_string(v)) {
        size_t n = json_string_length(v);
        const char *s = json_string_value(v);
        if (n == 0 || n > 12) return 0;
        for (size_t i = 0; i < n; i++)
            if (!isdigit((unsigned char)s[i])) return 0;
        return 1;
    }
    int64_t x;
    return cv_jint(v, &x) && x >= 0 && x < 1000000000000LL;
}

/* step 5: the shape of the parsed S */
static int list_shape(const json_t *obj, cv_signed_list *out, cv_err *e) {
    const json_t *fl = json_object_get(obj, "fingerprintList");
    if (!json_is_array(fl)) return cv_fail(e, K_RESPONSE, "fingerprintList missing or not a list");
    size_t n = json_array_size(fl);
    if (n > MAX_HISTORY_ENTRIES) return cv_fail(e, K_RESPONSE, "more than %d history entries", MAX_HISTORY_ENTRIES);
    out->fps = calloc(n ? n : 1, sizeof(cv_fp));
    if (!out->fps) return cv_fail(e, K_RESPONSE, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *item = json_array_get(fl, i);
        const json_t *ts = json_object_get(item, "timestamp"), *fp = json_object_get(item, "fingerprint");
        if (!json_is_object(item) || !json_is_object(ts))
            return cv_fail(e, K_RESPONSE, "history entry is not an object with a timestamp object");
        if (!json_is_string(fp) || cv_parse_fp(json_string_value(fp), json_string_length(fp), &out->fps[i], NULL) ||
            out->fps[i].alg != FP_SHA1)
            return cv_fail(e, K_RESPONSE, "history entry fingerprint is not a SHA-1 fingerprint");
        if (!timestamp_ok(json_object_get(ts, "start")) || !timestamp_ok(json_object_get(ts, "finish")))
            return cv_fail(e, K_RESPONSE, "timestamp is not a decimal unix time");
        out->n++;
    }
    return 0;
}

int cv_legacy_verify(const char *body, size_t n, EVP_PKEY *key, cv_signed_list *out, cv_err *e) {
    memset(out, 0, sizeof *out);
    if (n > MAX_RESPONSE_BYTES) return cv_fail(e, K_RESPONSE, "body larger than %d bytes", MAX_RESPONSE_BYTES);
    /* 1. the last ', "signature": "', base64, at most two '=', then '"}' as the last bytes */
    const char *last = NULL;
    for (const char *p = body; (p = memmem(p, n - (size_t)(p - body), SIG_MARKER, sizeof SIG_MARKER - 1)); p++)
        last = p;
    if (!last) return cv_fail(e, K_RESPONSE, "body has no signature member");
    const char *sig = last + sizeof SIG_MARKER - 1, *end = body + n;
    size_t c = 0, pads = 0;
    while (sig + c < end && cv_b64_digit(sig[c], 0) >= 0) c++;
    while (pads < 2 && sig + c + pads < end && sig[c + pads] == '=') pads++;
    const char *tail = sig + c + pads;
    if (!c || end - tail != 2 || tail[0] != '"' || tail[1] != '}')
        return cv_fail(e, K_RESPONSE, "the body is not the signed bytes followed by the signature member");
    /* 2. S = the bytes before it, then '}'; RSASSA-PKCS1-v1_5 SHA-1 over S */
    size_t sl = (size_t)(last - body);
    out->signed_bytes = malloc(sl + 2);
    if (!out->signed_bytes) return cv_fail(e, K_RESPONSE, "out of memory");
    memcpy(out->signed_bytes, body, sl);
    memcpy(out->signed_bytes + sl, "}", 2);
    out->signed_len = sl + 1;
    int rc = 0;
    unsigned char *sigb = NULL;
    size_t sigl = 0;
    json_t *obj = NULL;
    if (!key || EVP_PKEY_base_id(key) != EVP_PKEY_RSA)
        rc = cv_fail(e, K_SIGNATURE, "the notary certificate does not hold an RSA key");
    else if (b64_std_decode(sig, c, pads, &sigb, &sigl) ||
             !rsa_sha1_verify(key, sigb, sigl, out->signed_bytes, out->signed_len))
        rc = cv_fail(e, K_SIGNATURE, "signature does not verify against the notary's certificate");
    /* 3, 4. the bounds scan and the stock parser over S alone; 5. its shape */
    else if (!(obj = cv_json_parse_signed(out->signed_bytes, out->signed_len)))
        rc = cv_fail(e, K_RESPONSE, "the signed bytes are not a JSON object within the bounds");
    else rc = list_shape(obj, out, e);
    free(sigb);
    json_decref(obj);
    if (rc) cv_signed_list_free(out);
    return rc;
}

void cv_legacy_outcome(const char *raw, size_t n, const cv_fp *wanted, size_t nwanted, EVP_PKEY *key,
                       size_t max_bytes, cv_outcome *o, char **cache_status) {
    cv_http h;
    if (cv_frame_answer(raw, n, max_bytes, FORMAT_V1, &h, o, cache_status)) return;
    cv_err e = {{0}, {0}};
    int status = h.status;
    if (status == 200 || status == 409) {
        cv_signed_list s;
        if (cv_legacy_verify(h.body, h.body_len, key, &s, &e)) {
            cv_set_outcome(o, V_FAILURE, cv_intern_kind(e.kind), status, FORMAT_V1, e.msg);
            cv_http_free(&h);
            return;
        }
        if (status == 409) {
            cv_set_outcome(o, V_FAILURE, "mismatch", status, FORMAT_V1, "notary sees another certificate");
        } else {
            int listed = 0, alg_seen = 0;
            for (size_t i = 0; i < s.n; i++)
                for (size_t j = 0; j < nwanted; j++) {
                    if (cv_fp_eq(&s.fps[i], &wanted[j])) listed = 1;
                    if (s.fps[i].alg == wanted[j].alg) alg_seen = 1;
                }
            if (listed) cv_set_outcome(o, V_SUCCESS, "listed", status, FORMAT_V1, "");
            else if (!alg_seen && s.n)
                cv_set_outcome(o, V_SUCCESS, "status-only", status, FORMAT_V1, "list holds no fingerprint of the asked kind");
            else cv_set_outcome(o, V_FAILURE, "not-listed", status, FORMAT_V1, "200 without the fingerprint in the signed list");
        }
        cv_signed_list_free(&s);
    } else if (status == 303) {
        cv_set_outcome(o, V_UNREACHABLE, "inconclusive", status, FORMAT_V1, "notary could not decide");
    } else {
        char d[40];
        snprintf(d, sizeof d, "HTTP status %d", status);
        cv_set_outcome(o, V_UNREACHABLE, "status", status, FORMAT_V1, d);
    }
    cv_http_free(&h);
}

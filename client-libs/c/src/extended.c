/* Extended (converge-answer/1) answers: the fixed prefix, Ed25519 over the statement's bytes
 * as received, then the stock parse of exactly those bytes and the bindings
 * (docs/wire-format.md, "Verifying"); the bundle's signing keys; the vote of one response. */
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

int cv_b64_digit(char c, int url) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == (url ? '-' : '+')) return 62;
    if (c == (url ? '_' : '/')) return 63;
    return -1;
}

int cv_b64url_decode(const char *s, size_t n, unsigned char *out, size_t cap, size_t *outlen) {
    return n % 4 == 1 ? -1 : cv_b64_digits(s, n, 1, out, cap, outlen);
}

int cv_b64_digits(const char *s, size_t n, int url, unsigned char *out, size_t cap, size_t *outlen) {
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = cv_b64_digit(s[i], url);
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

/* the y coordinates (little-endian, top bit clear) of the eight points of small order: the
 * identity (1), (0, -1), the two with y = 0 and the four with y = +-y8 */
static const unsigned char SMALL_ORDER_Y[5][32] = {
    {0},
    {1},
    {0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
     0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
    {0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98, 0xf0,
     0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05},
    {0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67, 0x0f,
     0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a},
};

const char *cv_weak_key(const unsigned char raw[32]) {
    unsigned char y[32];
    memcpy(y, raw, 32);
    y[31] &= 0x7f; /* the sign of x */
    int top = y[31] == 0x7f && y[0] >= 0xed; /* y >= p = 2^255 - 19: all bytes between are 0xff */
    for (size_t i = 1; top && i < 31; i++) top = y[i] == 0xff;
    if (top) return "an Ed25519 public key not in canonical form";
    for (size_t i = 0; i < 5; i++)
        if (!memcmp(y, SMALL_ORDER_Y[i], 32)) return "an Ed25519 public key of small order";
    return NULL;
}

static void key_id_of(const unsigned char pub[32], char out[17]) {
    unsigned char h[32];
    SHA256(pub, 32, h);
    for (int i = 0; i < 8; i++) snprintf(out + 2 * i, 3, "%02x", h[i]);
}

static int parse_signing_key(const json_t *k, cv_key *out, cv_err *e) {
    if (!json_is_object(k)) return cv_fail(e, K_BUNDLE, "a signing key entry must be an object");
    static const char *const known[] = {"alg", "key_id", "public_key", "status", "valid_until"};
    const char *name;
    json_t *member;
    json_object_foreach((json_t *)k, name, member) {
        int ok = 0;
        for (size_t j = 0; j < 5; j++)
            if (!strcmp(name, known[j])) ok = 1;
        if (!ok) return cv_fail(e, K_BUNDLE, "unknown signing key fields");
    }
    if (!cv_jstr_eq(json_object_get(k, "alg"), "ed25519")) return cv_fail(e, K_BUNDLE, "signing key alg must be ed25519");
    const json_t *pk = json_object_get(k, "public_key");
    size_t rl = 0;
    if (!json_is_string(pk) || cv_b64url_decode(json_string_value(pk), json_string_length(pk), out->pub, 32, &rl) ||
        rl != 32) {
        /* a longer key overflows cap and fails; shorter is caught by rl */
        return cv_fail(e, K_BUNDLE, "signing key public_key must be unpadded base64url of 32 bytes");
    }
    const char *weak = cv_weak_key(out->pub);
    if (weak) return cv_fail(e, K_BUNDLE, "signing key: %s", weak);
    key_id_of(out->pub, out->key_id);
    if (!cv_jstr_eq(json_object_get(k, "key_id"), out->key_id))
        return cv_fail(e, K_BUNDLE, "signing key id does not match its public key");
    const json_t *st = json_object_get(k, "status"), *until = json_object_get(k, "valid_until");
    if (cv_jstr_eq(st, "current")) {
        if (until && !json_is_null(until)) return cv_fail(e, K_BUNDLE, "a current signing key has no valid_until");
        out->retired = 0;
    } else if (cv_jstr_eq(st, "retired")) {
        int64_t u;
        if (!cv_jint(until, &u) || u <= 0 || u > 9007199254740991LL)
            return cv_fail(e, K_BUNDLE, "a retired signing key needs valid_until (unix seconds)");
        out->retired = 1;
        out->valid_until = u;
    } else {
        return cv_fail(e, K_BUNDLE, "signing key status must be current or retired");
    }
    return 0;
}

int cv_parse_signing_keys(const json_t *v, cv_key *keys, size_t *n, cv_err *e) {
    size_t count = json_array_size(v);
    if (!json_is_array(v) || count == 0) return cv_fail(e, K_BUNDLE, "signing_keys must be a non-empty list");
    if (count > MAX_SIGNING_KEYS) return cv_fail(e, K_BUNDLE, "more than %d signing keys", MAX_SIGNING_KEYS);
    int current = 0;
    for (size_t i = 0; i < count; i++) {
        if (parse_signing_key(json_array_get(v, i), &keys[i], e)) return -1;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(keys[i].key_id, keys[j].key_id)) return cv_fail(e, K_BUNDLE, "signing key ids repeat");
        current += !keys[i].retired;
    }
    if (current != 1) return cv_fail(e, K_BUNDLE, "signing_keys must hold exactly one current key");
    *n = count;
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

/* equality of a JSON value with an expected string (NULL: absent or null) */
static int eq_str_or_null(const json_t *v, const char *s) {
    if (!s) return !v || json_is_null(v);
    return cv_jstr_eq(v, s);
}

/* the body's fixed parts around K and V; T follows the last one */
static const char PREFIX_KEY[] = "{\"signature\":{\"alg\":\"ed25519\",\"key_id\":\"";
static const char PREFIX_VALUE[] = "\",\"value\":\"";
static const char PREFIX_STATEMENT[] = "\"},\"statement\":";
static const char MEMBER[] = ",\"transparency\":";

/* at p: a run of printable ASCII without '"' or '\', then the literal lit; returns the
 * run's length and moves *p past lit, or -1 */
static long run_then(const char **p, const char *end, const char *lit) {
    const char *s = *p;
    while (s < end && *s >= 0x20 && *s <= 0x7E && *s != '"' && *s != '\\') s++;
    size_t ll = strlen(lit);
    if ((size_t)(end - s) < ll || memcmp(s, lit, ll) != 0) return -1;
    long run = (long)(s - *p);
    *p = s + ll;
    return run;
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
    json_t *stmt = NULL;
    /* 1. prefix, K, V, the statement's bytes T and the final '}' */
    const char *p = raw, *end = raw + n;
    if (n > MAX_ANSWER) REJECT("malformed", "answer larger than %d bytes", MAX_ANSWER);
    if (n < sizeof PREFIX_KEY || memcmp(raw, PREFIX_KEY, sizeof PREFIX_KEY - 1) != 0 || raw[n - 1] != '}')
        REJECT("malformed", "answer does not have the fixed shape of a signed answer");
    p += sizeof PREFIX_KEY - 1;
    const char *kid = p;
    long kl = run_then(&p, end - 1, PREFIX_VALUE);
    const char *val = p;
    long vl = kl < 0 ? -1 : run_then(&p, end - 1, PREFIX_STATEMENT);
    if (vl < 0) REJECT("malformed", "answer does not have the fixed shape of a signed answer");
    const char *t = p;
    size_t tl = (size_t)(end - 1 - t);
    /* T ends at the first ,"transparency": (the log's member runs from there to the final '}') */
    const char *member = NULL;
    size_t ml = 0;
    for (size_t i = 0; i + sizeof MEMBER - 1 <= tl; i++)
        if (t[i] == ',' && !memcmp(t + i, MEMBER, sizeof MEMBER - 1)) {
            member = t + i + sizeof MEMBER - 1;
            ml = tl - i - (sizeof MEMBER - 1);
            tl = i;
            break;
        }
    /* 2. a key the bundle trusts now */
    const cv_key *key = NULL;
    for (size_t i = 0; i < nkeys; i++) {
        int trusted = !keys[i].retired || now <= keys[i].valid_until;
        if (trusted && (size_t)kl == strlen(keys[i].key_id) && !memcmp(kid, keys[i].key_id, (size_t)kl)) key = &keys[i];
    }
    if (!key) REJECT("unknown-key", "signing key is not trusted by the bundle");
    /* 3. Ed25519 over T as received */
    unsigned char sigb[64];
    size_t sl = 0;
    if (cv_b64url_decode(val, (size_t)vl, sigb, sizeof sigb, &sl) || sl != 64 || !ed25519_verify(key->pub, sigb, sl, t, tl))
        REJECT("bad-signature", "signature does not verify");
    /* 4. the bounds scan and the stock parser over T alone */
    stmt = cv_json_parse_signed(t, tl);
    if (!stmt) REJECT("malformed", "the statement is not a JSON object within the bounds");
    /* 5. shape */
    const json_t *vd = json_object_get(stmt, "verdict"), *target = json_object_get(stmt, "target"),
                 *skid = json_object_get(stmt, "key_id");
    for (size_t i = 0; i < 4; i++)
        if (cv_jstr_eq(vd, VERDICTS[i])) verdict = VERDICTS[i];
    int64_t at;
    if (!cv_jstr_eq(json_object_get(stmt, "type"), FORMAT_V2) || !json_is_string(skid) ||
        json_string_length(skid) != (size_t)kl || memcmp(json_string_value(skid), kid, (size_t)kl) != 0 || !verdict ||
        !json_is_object(target) || !cv_jint(json_object_get(stmt, "answered_at"), &at)) {
        verdict = NULL;
        REJECT("malformed", "the statement lacks its type, key id, verdict, target or answer time");
    }
    /* 6. bindings */
    if (x->host) {
        char eh[300];
        cv_expected_host(x->host, eh, sizeof eh);
        int64_t tp;
        if (!cv_jstr_eq(json_object_get(target, "host"), eh) || !cv_jint(json_object_get(target, "port"), &tp) ||
            tp != x->port)
            REJECT("wrong-target", "answer is about another target");
    }
    if (x->bind_ip) {
        char eip[300];
        if (x->ip) cv_expected_host(x->ip, eip, sizeof eip);
        if (!eq_str_or_null(json_object_get(target, "ip"), x->ip ? eip : NULL))
            REJECT("wrong-target", "answer is about a probe of another address");
    }
    const json_t *req = json_object_get(stmt, "request");
    if (x->fp) {
        char colon[96];
        cv_fp_colon(x->fp, colon);
        if (!json_is_object(req) || !cv_jstr_eq(json_object_get(req, "alg"), cv_fp_alg(x->fp)) ||
            !cv_jstr_eq(json_object_get(req, "fingerprint"), colon))
            REJECT("wrong-target", "answer is about another certificate fingerprint");
    }
    if (x->nonce && (!json_is_object(req) || !cv_jstr_eq(json_object_get(req, "nonce"), x->nonce)))
        REJECT("nonce-mismatch", "answer does not echo our nonce");
    if (x->has_now) {
        int64_t d = x->now - at;
        if (d < 0) d = -d;
        if (d > x->max_skew) REJECT("stale", "answer time is %lld s from now", (long long)(x->now - at));
    }
    /* the log's proof of a match, after every check of the statement (docs/transparency.md) */
    if (x->log && verdict == VERDICTS[0]) {
        cv_fp asked;
        const json_t *rfp = json_object_get(req, "fingerprint");
        cv_err fe;
        if (!x->fp && (!json_is_string(rfp) ||
                       cv_parse_fp(json_string_value(rfp), json_string_length(rfp), &asked, &fe) ||
                       !cv_jstr_eq(json_object_get(req, "alg"), cv_fp_alg(&asked))))
            REJECT("log-entry", "the statement names no fingerprint");
        char lm[160];
        const char *lk = cv_check_member(member, ml, x->log, target, x->fp ? x->fp : &asked, lm, sizeof lm);
        if (lk) {
            verdict = NULL;
            REJECT(lk, "%s", lm);
        }
    }
    *kind = NULL;
    if (msg && msglen) msg[0] = '\0';
    json_decref(stmt);
    return verdict;
rejected:
    json_decref(stmt);
    return NULL;
}

void cv_ext_outcome(const char *raw, size_t n, const cv_key *keys, size_t nkeys, const cv_expect *x,
                    size_t max_bytes, cv_outcome *o, char **cache_status) {
    cv_http h;
    if (cv_frame_answer(raw, n, max_bytes, FORMAT_V2, &h, o, cache_status)) return;
    int st = h.status;
    int signed_status = st == 200 || st == 409 || st == 503 || st == 403;
    if (!signed_status || !h.content_type || strcmp(h.content_type, MEDIA_TYPE) != 0) {
        char d[40];
        snprintf(d, sizeof d, "HTTP status %d", st);
        cv_set_outcome(o, V_UNREACHABLE, "status", st, FORMAT_V2, d);
        cv_http_free(&h);
        return;
    }
    const char *kind = NULL;
    char msg[200];
    const char *verdict = cv_verify_answer(h.body, h.body_len, keys, nkeys, x->now, x, &kind, msg, sizeof msg);
    if (!verdict) {
        cv_set_outcome(o, V_FAILURE, kind, st, FORMAT_V2, msg);
    } else {
        int want = !strcmp(verdict, "match") ? 200 : !strcmp(verdict, "mismatch") ? 409
                 : !strcmp(verdict, "unreachable") ? 503 : 403;
        if (want != st) cv_set_outcome(o, V_FAILURE, "response", st, FORMAT_V2, "status does not fit the signed verdict");
        else if (want == 200) cv_set_outcome(o, V_SUCCESS, "match", st, FORMAT_V2, "");
        else if (want == 409) cv_set_outcome(o, V_FAILURE, "mismatch", st, FORMAT_V2, "");
        else if (want == 503) cv_set_outcome(o, V_UNREACHABLE, "target-unreachable", st, FORMAT_V2, "");
        else cv_set_outcome(o, V_UNREACHABLE, "refused", st, FORMAT_V2, "");
    }
    cv_http_free(&h);
}

/* The shared JSON test vectors (client-libs/vectors/, one file per schema) run through this library: one
 * output object per case, with the fields of CLIENT-CLI.md. Used by the conformance CLI and
 * by the unit tests. */
#define _GNU_SOURCE
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "vectors.h"

static const char *const SCHEMAS[] = {
    "converge-vectors/fingerprints/1", "converge-vectors/requests/1",  "converge-vectors/legacy-signatures/1",
    "converge-vectors/notary-responses/1", "converge-vectors/bundles/1", "converge-vectors/consensus/1",
    "converge-vectors/cache/1", "converge-vectors/extended-answers/1", "converge-vectors/config/1",
    "converge-vectors/transparency/1",
};

size_t cv_schema_count(void) { return sizeof SCHEMAS / sizeof *SCHEMAS; }
const char *cv_schema(size_t i) { return i < cv_schema_count() ? SCHEMAS[i] : NULL; }

int cv_schema_supported(const json_t *schema) {
    for (size_t i = 0; i < cv_schema_count(); i++)
        if (cv_jstr_eq(schema, SCHEMAS[i])) return 1;
    return 0;
}

/* case bytes: NAME_hex (hex) or NAME (ASCII text); malloc'd */
static char *case_bytes(const json_t *c, const char *name, size_t *n) {
    char hk[64];
    snprintf(hk, sizeof hk, "%s_hex", name);
    const json_t *h = json_object_get(c, hk);
    if (json_is_string(h)) {
        size_t hl = json_string_length(h);
        const char *hs = json_string_value(h);
        if (hl % 2) return NULL;
        char *out = malloc(hl / 2 + 1);
        if (!out) return NULL;
        for (size_t i = 0; i < hl / 2; i++) {
            unsigned v;
            if (sscanf(hs + 2 * i, "%2x", &v) != 1) {
                free(out);
                return NULL;
            }
            out[i] = (char)v;
        }
        *n = hl / 2;
        out[*n] = '\0';
        return out;
    }
    const json_t *v = json_object_get(c, name);
    if (!json_is_string(v)) return NULL;
    *n = json_string_length(v);
    char *out = malloc(*n + 1);
    if (!out) return NULL;
    memcpy(out, json_string_value(v), *n + 1);
    return out;
}

static EVP_PKEY *doc_key(const json_t *doc, const json_t *name) {
    if (!json_is_string(name)) return NULL;
    const json_t *pem = json_object_get(json_object_get(doc, "certificates"), json_string_value(name));
    if (!json_is_string(pem)) return NULL;
    BIO *bio = BIO_new_mem_buf(json_string_value(pem), (int)json_string_length(pem));
    X509 *cert = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    EVP_PKEY *k = cert ? X509_get_pubkey(cert) : NULL;
    X509_free(cert);
    return k;
}

static void field_str(cv_buf *o, const char *k, const char *v) {
    cv_buf_printf(o, ",\"%s\":", k);
    if (v) cv_json_string(o, v, strlen(v));
    else cv_buf_puts(o, "null");
}

static void invalid(cv_buf *o, const char *field, const char *kind) {
    field_str(o, "result", "invalid");
    field_str(o, field, kind);
}

static int fp_of(const json_t *v, cv_fp *fp, cv_err *e) {
    if (!json_is_string(v)) return cv_fail(e, K_FINGERPRINT, "fingerprint must be a string");
    return cv_parse_fp(json_string_value(v), json_string_length(v), fp, e);
}

/* the bundle signing keys named by a case (NULL entries for unknown names) */
static int case_keys(const json_t *doc, const json_t *names, cv_key *keys, size_t *nkeys, cv_err *e) {
    const json_t *sk = json_object_get(doc, "signing_keys");
    json_t *arr = json_array();
    for (size_t i = 0; i < json_array_size(names); i++) {
        json_t *k = json_object_get(sk, json_string_value(json_array_get(names, i)) ? json_string_value(json_array_get(names, i)) : "");
        json_array_append_new(arr, k ? json_incref(k) : json_null());
    }
    int rc = cv_parse_signing_keys(arr, keys, nkeys, e);
    json_decref(arr);
    return rc;
}

static void extended_case(const json_t *doc, const json_t *c, cv_buf *o) {
    const json_t *type = json_object_get(c, "type");
    cv_err e = {{0}, {0}};
    if (cv_jstr_eq(type, "bundle")) {
        size_t n = 0;
        char *b = case_bytes(c, "bundle", &n);
        cv_bundle bd;
        if (!b || cv_parse_bundle(b, n, &bd, &e)) {
            invalid(o, "kind", K_BUNDLE);
        } else {
            field_str(o, "result", "valid");
            cv_buf_printf(o, ",\"extended\":%s", bd.offers_extended ? "true" : "false");
            cv_bundle_free(&bd);
        }
        free(b);
        return;
    }
    const json_t *exp = json_object_get(c, "expect");
    cv_key keys[MAX_SIGNING_KEYS];
    size_t nkeys = 0;
    if (case_keys(doc, json_object_get(c, "bundle_keys"), keys, &nkeys, &e)) {
        invalid(o, "error", K_BUNDLE);
        return;
    }
    cv_expect x;
    memset(&x, 0, sizeof x);
    int64_t now = 0, port = 0, skew = 300;
    cv_jint(json_object_get(exp, "now"), &now);
    const json_t *hv = json_object_get(exp, "host");
    x.host = json_string_value(hv);
    x.port = cv_jint(json_object_get(exp, "port"), &port) ? port : -1;
    cv_fp fp;
    const json_t *fv = json_object_get(exp, "fingerprint");
    if (fv && !json_is_null(fv)) {
        if (fp_of(fv, &fp, &e)) {
            invalid(o, "error", K_FINGERPRINT);
            return;
        }
        x.fp = &fp;
    }
    x.nonce = json_string_value(json_object_get(exp, "nonce"));
    x.has_now = 1;
    x.now = now;
    cv_jint(json_object_get(exp, "max_skew"), &skew);
    x.max_skew = skew;
    x.bind_ip = json_object_get(exp, "ip") != NULL;
    x.ip = json_string_value(json_object_get(exp, "ip"));
    size_t n = 0;
    char *ans = case_bytes(c, "answer", &n);
    const char *kind = NULL;
    const char *verdict = ans ? cv_verify_answer(ans, n, keys, nkeys, now, &x, &kind, NULL, 0) : NULL;
    free(ans);
    if (verdict) {
        field_str(o, "result", "valid");
        field_str(o, "verdict", verdict);
    } else {
        field_str(o, "result", "rejected");
        field_str(o, "kind", kind ? kind : "malformed");
    }
}

/* a list of base64 hashes of 32 bytes (at most 63); the count, or -1 */
static long hashes(const json_t *list, unsigned char (*out)[32]) {
    if (!json_is_array(list) || json_array_size(list) > 63) return -1;
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *h = json_array_get(list, i);
        size_t l = 0;
        if (!json_is_string(h) || cv_b64std_decode(json_string_value(h), json_string_length(h), out[i], 32, &l) ||
            l != 32)
            return -1;
    }
    return (long)json_array_size(list);
}

static uint64_t u64(const json_t *v) {
    int64_t i = -1;
    return cv_jint(v, &i) && i >= 0 ? (uint64_t)i : UINT64_MAX;
}

/* converge-vectors/transparency/1: tree, inclusion, consistency, checkpoint, answer */
static void transparency_case(const json_t *doc, const json_t *c, cv_buf *o) {
    const json_t *type = json_object_get(c, "type");
    unsigned char a[32], b[32], proof[63][32];
    char text[64];
    cv_err e = {{0}, {0}};
    if (cv_jstr_eq(type, "tree")) {
        const json_t *entries = json_object_get(doc, "entries");
        size_t n = (size_t)u64(json_object_get(c, "size"));
        if (n > json_array_size(entries)) n = 0;
        unsigned char (*leaves)[32] = malloc((n ? n : 1) * 32);
        for (size_t i = 0; leaves && i < n; i++) {
            const json_t *en = json_array_get(entries, i);
            size_t l = json_string_length(en), dl = 0;
            unsigned char *d = malloc(l + 1);
            if (d && !cv_b64std_decode(json_string_value(en), l, d, l, &dl)) cv_leaf_hash(d, dl, leaves[i]);
            free(d);
        }
        if (leaves) cv_tree_root((const unsigned char (*)[32])leaves, n, a);
        free(leaves);
        cv_b64std(a, 32, text);
        field_str(o, "result", "valid");
        field_str(o, "root", text);
    } else if (cv_jstr_eq(type, "inclusion") || cv_jstr_eq(type, "consistency")) {
        int incl = cv_jstr_eq(type, "inclusion");
        size_t l1 = 0, l2 = 0;
        const json_t *h1 = json_object_get(c, incl ? "leaf" : "old_root"), *h2 = json_object_get(c, incl ? "root" : "new_root");
        long np = hashes(json_object_get(c, "proof"), proof);
        int ok = np >= 0 && json_is_string(h1) && json_is_string(h2) &&
                 !cv_b64std_decode(json_string_value(h1), json_string_length(h1), a, 32, &l1) && l1 == 32 &&
                 !cv_b64std_decode(json_string_value(h2), json_string_length(h2), b, 32, &l2) && l2 == 32;
        if (ok && incl)
            ok = !cv_verify_inclusion(a, u64(json_object_get(c, "index")), u64(json_object_get(c, "size")),
                                      (const unsigned char (*)[32])proof, (size_t)np, b);
        else if (ok)
            ok = !cv_verify_consistency(u64(json_object_get(c, "old_size")), u64(json_object_get(c, "new_size")), a, b,
                                        (const unsigned char (*)[32])proof, (size_t)np);
        field_str(o, "result", ok ? "valid" : "invalid");
    } else if (cv_jstr_eq(type, "checkpoint")) {
        cv_log_policy *p = calloc(1, sizeof *p);
        const json_t *log = json_object_get(c, "log"), *ws = json_object_get(c, "witnesses"),
                     *ck = json_object_get(c, "checkpoint");
        int64_t m = -1;
        int ok = p && json_is_string(log) && json_is_string(ck) &&
                 !cv_parse_vkey(json_string_value(log), json_string_length(log), 0x01, &p->log, NULL) &&
                 json_array_size(ws) <= CV_MAX_WITNESSES && cv_jint(json_object_get(c, "min_cosignatures"), &m) && m >= 0;
        for (size_t i = 0; ok && i < json_array_size(ws); i++) {
            const json_t *w = json_array_get(ws, i);
            ok = json_is_string(w) && !cv_parse_vkey(json_string_value(w), json_string_length(w), 0x04, &p->witnesses[i], NULL);
            p->nwitnesses = i + 1;
        }
        if (!ok) {
            cv_buf_puts(o, ",\"error\":\"bad-input\"");
        } else {
            p->min_cosignatures = (size_t)m;
            cv_checkpoint ckp;
            const char *kind = cv_open_checkpoint(json_string_value(ck), json_string_length(ck), p, &ckp, NULL, 0);
            if (kind) {
                invalid(o, "kind", kind);
            } else {
                cv_b64std(ckp.root, 32, text);
                field_str(o, "result", "valid");
                cv_buf_printf(o, ",\"size\":%llu", (unsigned long long)ckp.size);
                field_str(o, "root", text);
            }
        }
        free(p);
    } else if (cv_jstr_eq(type, "answer")) {
        const json_t *exp = json_object_get(c, "expect"), *m = json_object_get(c, "transparency");
        const json_t *fpt = json_object_get(exp, "sha256");
        if (!json_is_string(fpt)) fpt = json_object_get(exp, "sha1");
        cv_log_policy *p = malloc(sizeof *p);
        cv_fp fp;
        if (!p || cv_parse_log_policy(json_object_get(c, "bundle"), p, &e) || fp_of(fpt, &fp, &e)) {
            invalid(o, "error", e.kind[0] ? e.kind : "internal");
        } else {
            char *raw = json_is_null(m) || !m ? NULL : json_dumps(m, JSON_ENCODE_ANY | JSON_COMPACT);
            json_t *target = json_pack("{s:O?,s:O?,s:O?}", "host", json_object_get(exp, "host"), "port",
                                       json_object_get(exp, "port"), "ip", json_object_get(exp, "ip"));
            const char *kind = cv_check_member(raw, raw ? strlen(raw) : 0, p, target, &fp, NULL, 0);
            if (kind) {
                field_str(o, "result", "rejected");
                field_str(o, "kind", kind);
            } else {
                field_str(o, "result", "valid");
            }
            json_decref(target);
            free(raw);
        }
        free(p);
    } else {
        cv_buf_puts(o, ",\"error\":\"bad-input\"");
    }
}

static double num(const json_t *v, int *ok) {
    *ok = json_is_number(v);
    return *ok ? json_number_value(v) : 0;
}

/* ---- converge-vectors/config/1: a file tree in a fresh directory, loaded as the configuration */

static int mkdirs_for(const char *path) {
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return 0;
}

static int remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            char sub[4400];
            snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
            remove_tree(sub);
        }
        if (d) closedir(d);
        return rmdir(path);
    }
    return unlink(path);
}

static int write_tree(const char *root, const json_t *map, int links) {
    const char *name;
    json_t *v;
    json_object_foreach((json_t *)map, name, v) {
        if (!json_is_string(v) || strstr(name, "..")) return -1;
        size_t vl = json_string_length(v);
        const char *vs = json_string_value(v);
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", root, name);
        if (mkdirs_for(p)) return -1;
        if (links) {
            char target[4400];
            snprintf(target, sizeof target, "%.*s", (int)vl, vs);
            if (symlink(target, p)) return -1;
        } else {
            FILE *f = fopen(p, "wb");
            if (!f) return -1;
            size_t w = fwrite(vs, 1, vl, f);
            if (fclose(f) || w != vl) return -1;
        }
    }
    return 0;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(((const cv_bundle *)a)->name, ((const cv_bundle *)b)->name);
}

static void config_case(const json_t *c, cv_buf *o) {
    char root[] = "/tmp/converge-vector-XXXXXX";
    if (!mkdtemp(root)) {
        invalid(o, "error", "io");
        return;
    }
    cv_err e = {{0}, {0}};
    cv_config cfg;
    cv_bundle *bs = NULL;
    size_t n = 0;
    if (write_tree(root, json_object_get(c, "files"), 0) || write_tree(root, json_object_get(c, "links"), 1)) {
        invalid(o, "error", "io");
    } else if (cv_load_config(root, &cfg, &e) || cv_enabled_bundles(cfg.notaries_dir, &bs, &n, &e)) {
        invalid(o, "error", e.kind);
    } else {
        qsort(bs, n, sizeof *bs, cmp_names);
        field_str(o, "result", "valid");
        cv_buf_puts(o, ",\"enabled\":[");
        for (size_t i = 0; i < n; i++) {
            if (i) cv_buf_puts(o, ",");
            cv_json_string(o, bs[i].name, strlen(bs[i].name));
            cv_bundle_free(&bs[i]);
        }
        cv_buf_puts(o, "]");
        free(bs);
    }
    remove_tree(root);
}

int cv_run_vector_case(const json_t *doc, const json_t *c, cv_buf *o) {
    const json_t *schema = json_object_get(doc, "schema");
    cv_buf_puts(o, "{\"id\":");
    char *id = json_dumps(json_object_get(c, "id"), JSON_ENCODE_ANY | JSON_COMPACT);
    cv_buf_puts(o, id ? id : "null");
    free(id);
    cv_err e = {{0}, {0}};
    if (cv_jstr_eq(schema, "converge-vectors/fingerprints/1")) {
        cv_fp fp;
        if (fp_of(json_object_get(c, "input"), &fp, &e)) invalid(o, "error", e.kind);
        else {
            char colon[96];
            cv_fp_colon(&fp, colon);
            field_str(o, "result", "valid");
            field_str(o, "algorithm", cv_fp_alg(&fp));
            field_str(o, "canonical", colon);
        }
    } else if (cv_jstr_eq(schema, "converge-vectors/requests/1")) {
        cv_fp fp;
        int64_t port = 0;
        const json_t *host = json_object_get(c, "host");
        size_t n = 0;
        char *req = NULL;
        if (fp_of(json_object_get(c, "fingerprint"), &fp, &e)) invalid(o, "error", e.kind);
        else if (!cv_jcstr(host) || !cv_jint(json_object_get(c, "port"), &port) || port < -1000000 || port > 1000000)
            invalid(o, "error", K_TARGET);
        else if (!(req = cv_legacy_request(json_string_value(host), (int)port, &fp, NULL, &n, &e))) invalid(o, "error", e.kind);
        else {
            field_str(o, "result", "valid");
            cv_buf_puts(o, ",\"request\":");
            cv_json_string(o, req, n);
        }
        free(req);
    } else if (cv_jstr_eq(schema, "converge-vectors/legacy-signatures/1")) {
        size_t n = 0;
        char *body = case_bytes(c, "body", &n);
        EVP_PKEY *key = doc_key(doc, json_object_get(c, "certificate"));
        cv_signed_list s;
        if (!body) invalid(o, "error", K_RESPONSE);
        else if (cv_legacy_verify(body, n, key, &s, &e)) invalid(o, "error", e.kind);
        else {
            field_str(o, "result", "valid");
            cv_buf_puts(o, ",\"signed_bytes\":");
            cv_json_string(o, s.signed_bytes, s.signed_len);
            cv_signed_list_free(&s);
        }
        EVP_PKEY_free(key);
        free(body);
    } else if (cv_jstr_eq(schema, "converge-vectors/notary-responses/1")) {
        const json_t *fl = json_object_get(c, "fingerprints");
        cv_fp wanted[8];
        size_t nw = 0;
        int bad = 0;
        for (size_t i = 0; i < json_array_size(fl) && i < 8 && !bad; i++)
            if (fp_of(json_array_get(fl, i), &wanted[nw++], &e)) bad = 1;
        if (bad) invalid(o, "error", e.kind);
        else {
            size_t n = 0;
            char *raw = case_bytes(c, "raw", &n);
            EVP_PKEY *key = doc_key(doc, json_object_get(c, "certificate"));
            cv_outcome out;
            memset(&out, 0, sizeof out);
            cv_legacy_outcome(raw ? raw : "", raw ? n : 0, wanted, nw, key, MAX_RESPONSE_BYTES, &out, NULL);
            field_str(o, "result", cv_vote_name(out.vote));
            field_str(o, "kind", out.kind);
            EVP_PKEY_free(key);
            free(raw);
        }
    } else if (cv_jstr_eq(schema, "converge-vectors/bundles/1")) {
        size_t n = 0;
        char *b = case_bytes(c, "bundle", &n);
        cv_bundle bd;
        if (!b || cv_parse_bundle(b, n, &bd, &e)) invalid(o, "error", K_BUNDLE);
        else {
            field_str(o, "result", "valid");
            field_str(o, "name", bd.name);
            cv_buf_printf(o, ",\"version\":%d,\"hosts\":[", bd.version);
            for (size_t i = 0; i < bd.nhosts; i++) {
                cv_fp pin = {FP_SHA1, {0}, 20};
                memcpy(pin.d, bd.hosts[i].pin, 20);
                char colon[96];
                cv_fp_colon(&pin, colon);
                cv_buf_printf(o, "%s{\"host\":", i ? "," : "");
                cv_json_string(o, bd.hosts[i].host, strlen(bd.hosts[i].host));
                cv_buf_printf(o, ",\"ssl_port\":%d,\"http_port\":%d,\"pin\":\"%s\"}", bd.hosts[i].ssl_port,
                              bd.hosts[i].http_port, colon);
            }
            cv_buf_puts(o, "]");
            cv_bundle_free(&bd);
        }
        free(b);
    } else if (cv_jstr_eq(schema, "converge-vectors/consensus/1")) {
        const json_t *pv = json_object_get(c, "policy");
        int policy = json_is_string(pv) ? cv_parse_policy(json_string_value(pv), json_string_length(pv)) : 0;
        int64_t pending = 0;
        cv_jint(json_object_get(c, "pending"), &pending);
        int stand = json_is_true(json_object_get(c, "stand_aside"));
        const json_t *votes = json_object_get(c, "votes");
        int s = 0, f = 0, u = 0;
        for (size_t i = 0; i < json_array_size(votes); i++) {
            if (cv_jstr_eq(json_array_get(votes, i), "success")) s++;
            else if (cv_jstr_eq(json_array_get(votes, i), "failure")) f++;
            else u++;
        }
        if (!policy) invalid(o, "error", K_CONFIG);
        else if (pending) {
            int v = cv_settled(policy, s, f, u, (int)pending, stand);
            field_str(o, "result", v < 0 ? "unsettled" : v ? "trusted" : "untrusted");
        } else {
            field_str(o, "result", cv_decide(policy, s, f, u, stand) ? "trusted" : "untrusted");
        }
    } else if (cv_jstr_eq(schema, "converge-vectors/cache/1")) {
        int64_t ts = 0;
        int has_ts = cv_jint(json_object_get(c, "timestamp"), &ts);
        int ok, lok;
        double now = num(json_object_get(c, "now"), &ok);
        double life = num(json_object_get(c, "lifetime"), &lok);
        field_str(o, "result", cv_cache_name(cv_cache_decision(has_ts, ts, now, lok, life)));
    } else if (cv_jstr_eq(schema, "converge-vectors/extended-answers/1")) {
        extended_case(doc, c, o);
    } else if (cv_jstr_eq(schema, "converge-vectors/config/1")) {
        config_case(c, o);
    } else if (cv_jstr_eq(schema, "converge-vectors/transparency/1")) {
        transparency_case(doc, c, o);
    } else {
        cv_buf_puts(o, ",\"error\":\"unsupported-schema\"}");
        return -1;
    }
    cv_buf_puts(o, "}");
    return o->oom ? -1 : 0;
}

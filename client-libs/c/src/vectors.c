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
};

size_t cv_schema_count(void) { return sizeof SCHEMAS / sizeof *SCHEMAS; }
const char *cv_schema(size_t i) { return i < cv_schema_count() ? SCHEMAS[i] : NULL; }

int cv_schema_supported(const cj_value *schema) {
    for (size_t i = 0; i < cv_schema_count(); i++)
        if (cj_str_eq(schema, SCHEMAS[i])) return 1;
    return 0;
}

/* case bytes: NAME_hex (hex) or NAME (ASCII text); malloc'd */
static char *case_bytes(const cj_value *c, const char *name, size_t *n) {
    char hk[64];
    snprintf(hk, sizeof hk, "%s_hex", name);
    const cj_value *h = cj_get(c, hk);
    if (cj_is_str(h)) {
        if (h->slen % 2) return NULL;
        char *out = malloc(h->slen / 2 + 1);
        if (!out) return NULL;
        for (size_t i = 0; i < h->slen / 2; i++) {
            unsigned v;
            if (sscanf(h->s + 2 * i, "%2x", &v) != 1) {
                free(out);
                return NULL;
            }
            out[i] = (char)v;
        }
        *n = h->slen / 2;
        out[*n] = '\0';
        return out;
    }
    const cj_value *v = cj_get(c, name);
    if (!cj_is_str(v)) return NULL;
    char *out = malloc(v->slen + 1);
    if (!out) return NULL;
    memcpy(out, v->s, v->slen);
    out[v->slen] = '\0';
    *n = v->slen;
    return out;
}

static EVP_PKEY *doc_key(const cj_value *doc, const cj_value *name) {
    if (!cj_is_str(name)) return NULL;
    const cj_value *pem = cj_get(cj_get(doc, "certificates"), name->s);
    if (!cj_is_str(pem)) return NULL;
    BIO *bio = BIO_new_mem_buf(pem->s, (int)pem->slen);
    X509 *cert = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    EVP_PKEY *k = cert ? X509_get_pubkey(cert) : NULL;
    X509_free(cert);
    return k;
}

static void field_str(cj_buf *o, const char *k, const char *v) {
    cj_buf_printf(o, ",\"%s\":", k);
    if (v) cj_write_string(o, v, strlen(v));
    else cj_buf_puts(o, "null");
}

static void invalid(cj_buf *o, const char *field, const char *kind) {
    field_str(o, "result", "invalid");
    field_str(o, field, kind);
}

static int fp_of(const cj_value *v, cv_fp *fp, cv_err *e) {
    if (!cj_is_str(v)) return cv_fail(e, K_FINGERPRINT, "fingerprint must be a string");
    return cv_parse_fp(v->s, v->slen, fp, e);
}

static void extended_case(const cj_value *doc, const cj_value *c, cj_buf *o) {
    const cj_value *type = cj_get(c, "type");
    cv_err e = {{0}, {0}};
    if (cj_str_eq(type, "bundle")) {
        size_t n = 0;
        char *b = case_bytes(c, "bundle", &n);
        cv_bundle bd;
        if (!b || cv_parse_bundle(b, n, &bd, &e)) {
            invalid(o, "kind", K_BUNDLE);
        } else {
            field_str(o, "result", "valid");
            cj_buf_printf(o, ",\"extended\":%s", bd.offers_extended ? "true" : "false");
            cv_bundle_free(&bd);
        }
        free(b);
        return;
    }
    if (cj_str_eq(type, "canonical")) {
        const cj_value *in = cj_get(c, "input");
        cj_doc *d = cj_is_str(in) ? cj_parse(in->s, in->slen, NULL, 0) : NULL;
        cj_buf canon = {0};
        if (!d || cj_canonical(cj_root(d), &canon)) {
            invalid(o, "kind", "canonical");
        } else {
            field_str(o, "result", "valid");
            cj_buf_puts(o, ",\"canonical\":");
            cj_write_string(o, canon.p, canon.len);
        }
        cj_buf_free(&canon);
        cj_free(d);
        return;
    }
    const cj_value *exp = cj_get(c, "expect");
    const cj_value *names = cj_get(c, "bundle_keys");
    const cj_value *sk = cj_get(doc, "signing_keys");
    cj_doc *kd = NULL;
    cv_key keys[MAX_SIGNING_KEYS];
    size_t nkeys = 0;
    /* build the list of key objects named by the case */
    cj_buf arr = {0};
    cj_buf_puts(&arr, "[");
    for (size_t i = 0; names && names->kind == CJ_ARRAY && i < names->n; i++) {
        if (i) cj_buf_puts(&arr, ",");
        const cj_value *k = cj_is_str(names->items[i]) ? cj_get(sk, names->items[i]->s) : NULL;
        if (k) cj_pydumps(k, NULL, &arr);
        else cj_buf_puts(&arr, "null");
    }
    cj_buf_puts(&arr, "]");
    kd = cj_parse(arr.p, arr.len, NULL, 0);
    cj_buf_free(&arr);
    if (!kd || cv_parse_signing_keys(cj_root(kd), keys, &nkeys, &e)) {
        cj_free(kd);
        invalid(o, "error", K_BUNDLE);
        return;
    }
    cj_free(kd);
    cv_expect x;
    memset(&x, 0, sizeof x);
    int64_t now = 0, port = 0, skew = 300;
    cj_int(cj_get(exp, "now"), &now);
    const cj_value *hv = cj_get(exp, "host");
    x.host = cj_is_str(hv) ? hv->s : NULL;
    x.port = cj_int(cj_get(exp, "port"), &port) ? port : -1;
    cv_fp fp;
    const cj_value *fv = cj_get(exp, "fingerprint");
    if (fv && fv->kind != CJ_NULL) {
        if (fp_of(fv, &fp, &e)) {
            invalid(o, "error", K_FINGERPRINT);
            return;
        }
        x.fp = &fp;
    }
    const cj_value *nv = cj_get(exp, "nonce");
    x.nonce = cj_is_str(nv) ? nv->s : NULL;
    x.has_now = 1;
    x.now = now;
    cj_int(cj_get(exp, "max_skew"), &skew);
    x.max_skew = skew;
    x.bind_ip = cj_has(exp, "ip");
    const cj_value *iv = cj_get(exp, "ip");
    x.ip = cj_is_str(iv) ? iv->s : NULL;
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

static double num(const cj_value *v, int *ok) {
    *ok = 1;
    if (v && v->kind == CJ_INT && v->int_ok) return (double)v->i;
    if (v && v->kind == CJ_FLOAT) return v->f;
    *ok = 0;
    return 0;
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

static int write_tree(const char *root, const cj_value *map, int links) {
    for (size_t i = 0; map && map->kind == CJ_OBJECT && i < map->n; i++) {
        const cj_value *v = map->items[i];
        if (!cj_is_str(v) || strstr(map->keys[i], "..")) return -1;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", root, map->keys[i]);
        if (mkdirs_for(p)) return -1;
        if (links) {
            char target[4400];
            snprintf(target, sizeof target, "%.*s", (int)v->slen, v->s);
            if (symlink(target, p)) return -1;
        } else {
            FILE *f = fopen(p, "wb");
            if (!f) return -1;
            size_t w = fwrite(v->s, 1, v->slen, f);
            if (fclose(f) || w != v->slen) return -1;
        }
    }
    return 0;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(((const cv_bundle *)a)->name, ((const cv_bundle *)b)->name);
}

static void config_case(const cj_value *c, cj_buf *o) {
    char root[] = "/tmp/converge-vector-XXXXXX";
    if (!mkdtemp(root)) {
        invalid(o, "error", "io");
        return;
    }
    cv_err e = {{0}, {0}};
    cv_config cfg;
    cv_bundle *bs = NULL;
    size_t n = 0;
    if (write_tree(root, cj_get(c, "files"), 0) || write_tree(root, cj_get(c, "links"), 1)) {
        invalid(o, "error", "io");
    } else if (cv_load_config(root, &cfg, &e) || cv_enabled_bundles(cfg.notaries_dir, &bs, &n, &e)) {
        invalid(o, "error", e.kind);
    } else {
        qsort(bs, n, sizeof *bs, cmp_names);
        field_str(o, "result", "valid");
        cj_buf_puts(o, ",\"enabled\":[");
        for (size_t i = 0; i < n; i++) {
            if (i) cj_buf_puts(o, ",");
            cj_write_string(o, bs[i].name, strlen(bs[i].name));
            cv_bundle_free(&bs[i]);
        }
        cj_buf_puts(o, "]");
        free(bs);
    }
    remove_tree(root);
}

int cv_run_vector_case(const cj_value *doc, const cj_value *c, cj_buf *o) {
    const cj_value *schema = cj_get(doc, "schema");
    cj_buf_puts(o, "{\"id\":");
    const cj_value *id = cj_get(c, "id");
    if (id) cj_pydumps(id, NULL, o);
    else cj_buf_puts(o, "null");
    cv_err e = {{0}, {0}};
    if (cj_str_eq(schema, "converge-vectors/fingerprints/1")) {
        cv_fp fp;
        if (fp_of(cj_get(c, "input"), &fp, &e)) invalid(o, "error", e.kind);
        else {
            char colon[96];
            cv_fp_colon(&fp, colon);
            field_str(o, "result", "valid");
            field_str(o, "algorithm", cv_fp_alg(&fp));
            field_str(o, "canonical", colon);
        }
    } else if (cj_str_eq(schema, "converge-vectors/requests/1")) {
        cv_fp fp;
        int64_t port = 0;
        const cj_value *host = cj_get(c, "host");
        size_t n = 0;
        char *req = NULL;
        if (fp_of(cj_get(c, "fingerprint"), &fp, &e)) invalid(o, "error", e.kind);
        else if (!cj_is_str(host) || !cj_int(cj_get(c, "port"), &port) || port < -1000000 || port > 1000000 ||
                 strlen(host->s) != host->slen) invalid(o, "error", K_TARGET);
        else if (!(req = cv_legacy_request(host->s, (int)port, &fp, NULL, &n, &e))) invalid(o, "error", e.kind);
        else {
            field_str(o, "result", "valid");
            cj_buf_puts(o, ",\"request\":");
            cj_write_string(o, req, n);
        }
        free(req);
    } else if (cj_str_eq(schema, "converge-vectors/legacy-signatures/1")) {
        size_t n = 0;
        char *body = case_bytes(c, "body", &n);
        EVP_PKEY *key = doc_key(doc, cj_get(c, "certificate"));
        cv_signed_list s;
        if (!body || cv_parse_signed_list(body, n, MAX_RESPONSE_BYTES, &s, &e)) invalid(o, "error", e.kind[0] ? e.kind : K_RESPONSE);
        else {
            if (cv_verify_signed_list(&s, key, &e)) invalid(o, "error", e.kind);
            else {
                field_str(o, "result", "valid");
                cj_buf_puts(o, ",\"signed_bytes\":");
                if (s.has_cut) cj_write_string(o, s.cut.p, s.cut.len);
                else cj_buf_puts(o, "null");
                cj_buf_puts(o, ",\"signed_bytes_reserialised\":");
                cj_write_string(o, s.reser.p ? s.reser.p : "", s.reser.len);
            }
            cv_signed_list_free(&s);
        }
        EVP_PKEY_free(key);
        free(body);
    } else if (cj_str_eq(schema, "converge-vectors/notary-responses/1")) {
        const cj_value *fl = cj_get(c, "fingerprints");
        cv_fp wanted[8];
        size_t nw = 0;
        int bad = 0;
        for (size_t i = 0; fl && fl->kind == CJ_ARRAY && i < fl->n && i < 8 && !bad; i++)
            if (fp_of(fl->items[i], &wanted[nw++], &e)) bad = 1;
        if (bad) invalid(o, "error", e.kind);
        else {
            size_t n = 0;
            char *raw = case_bytes(c, "raw", &n);
            EVP_PKEY *key = doc_key(doc, cj_get(c, "certificate"));
            cv_outcome out;
            memset(&out, 0, sizeof out);
            cv_legacy_outcome(raw ? raw : "", raw ? n : 0, wanted, nw, key, MAX_RESPONSE_BYTES, &out, NULL);
            field_str(o, "result", cv_vote_name(out.vote));
            field_str(o, "kind", out.kind);
            EVP_PKEY_free(key);
            free(raw);
        }
    } else if (cj_str_eq(schema, "converge-vectors/bundles/1")) {
        size_t n = 0;
        char *b = case_bytes(c, "bundle", &n);
        cv_bundle bd;
        if (!b || cv_parse_bundle(b, n, &bd, &e)) invalid(o, "error", K_BUNDLE);
        else {
            field_str(o, "result", "valid");
            field_str(o, "name", bd.name);
            cj_buf_printf(o, ",\"version\":%d,\"hosts\":[", bd.version);
            for (size_t i = 0; i < bd.nhosts; i++) {
                cv_fp pin = {FP_SHA1, {0}, 20};
                memcpy(pin.d, bd.hosts[i].pin, 20);
                char colon[96];
                cv_fp_colon(&pin, colon);
                cj_buf_printf(o, "%s{\"host\":", i ? "," : "");
                cj_write_string(o, bd.hosts[i].host, strlen(bd.hosts[i].host));
                cj_buf_printf(o, ",\"ssl_port\":%d,\"http_port\":%d,\"pin\":\"%s\"}", bd.hosts[i].ssl_port,
                              bd.hosts[i].http_port, colon);
            }
            cj_buf_puts(o, "]");
            cv_bundle_free(&bd);
        }
        free(b);
    } else if (cj_str_eq(schema, "converge-vectors/consensus/1")) {
        const cj_value *pv = cj_get(c, "policy");
        int policy = cj_is_str(pv) ? cv_parse_policy(pv->s, pv->slen) : 0;
        int64_t pending = 0;
        cj_int(cj_get(c, "pending"), &pending);
        const cj_value *sa = cj_get(c, "stand_aside");
        int stand = sa && sa->kind == CJ_BOOL && sa->b;
        const cj_value *votes = cj_get(c, "votes");
        int s = 0, f = 0, u = 0;
        for (size_t i = 0; votes && votes->kind == CJ_ARRAY && i < votes->n; i++) {
            if (cj_str_eq(votes->items[i], "success")) s++;
            else if (cj_str_eq(votes->items[i], "failure")) f++;
            else u++;
        }
        if (!policy) invalid(o, "error", K_CONFIG);
        else if (pending) {
            int v = cv_settled(policy, s, f, u, (int)pending, stand);
            field_str(o, "result", v < 0 ? "unsettled" : v ? "trusted" : "untrusted");
        } else {
            field_str(o, "result", cv_decide(policy, s, f, u, stand) ? "trusted" : "untrusted");
        }
    } else if (cj_str_eq(schema, "converge-vectors/cache/1")) {
        int64_t ts = 0;
        int has_ts = cj_int(cj_get(c, "timestamp"), &ts);
        int ok, lok;
        double now = num(cj_get(c, "now"), &ok);
        double life = num(cj_get(c, "lifetime"), &lok);
        field_str(o, "result", cv_cache_name(cv_cache_decision(has_ts, ts, now, lok, life)));
    } else if (cj_str_eq(schema, "converge-vectors/extended-answers/1")) {
        extended_case(doc, c, o);
    } else if (cj_str_eq(schema, "converge-vectors/config/1")) {
        config_case(c, o);
    } else {
        cj_buf_puts(o, ",\"error\":\"unsupported-schema\"}");
        return -1;
    }
    cj_buf_puts(o, "}");
    return o->oom ? -1 : 0;
}

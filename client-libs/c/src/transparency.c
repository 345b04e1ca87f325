/* The notary's transparency log, client side (docs/transparency.md, "Clients"): the bundle's
 * `transparency` member, RFC 6962 hashing with RFC 9162 proof verification, signed-note
 * checkpoints (c2sp.org/signed-note, tlog-checkpoint, tlog-cosignature) and the six checks of
 * an answer's member, each failure one of the kinds log-missing, log-proof, log-checkpoint,
 * log-witness, log-entry. Pure: no IO. */
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_PROOF 63
#define MAX_NOTE (64 * 1024)
#define MAX_SIG_LINES 100
#define ENTRY_TYPE "converge-observation/1"
static const char SIG_PREFIX[] = "\xE2\x80\x94 "; /* em dash, space */

/* ------------------------------------------------------------------ base64, names, keys */

int cv_b64std_decode(const char *s, size_t n, unsigned char *out, size_t cap, size_t *outlen) {
    if (n % 4) return -1;
    size_t pad = 0;
    while (pad < 2 && pad < n && s[n - 1 - pad] == '=') pad++;
    if (pad && (n - pad) % 4 + pad != 4) return -1; /* "A===" and the like */
    return cv_b64_digits(s, n - pad, 0, out, cap, outlen);
}

static void b64std_encode(const unsigned char *d, size_t n, char *out) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
        out[k++] = A[v >> 18 & 63];
        out[k++] = A[v >> 12 & 63];
        out[k++] = i + 1 < n ? A[v >> 6 & 63] : '=';
        out[k++] = i + 2 < n ? A[v & 63] : '=';
    }
    out[k] = '\0';
}

/* a key name: non-empty, no '+', no space or control character */
static int valid_name(const char *s, size_t n) {
    if (n == 0 || n > 255) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == 0x7F || c == '+') return 0;
        if (c == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] <= 0xA0) return 0;
    }
    return 1;
}

static void note_key_id(const char *name, size_t nl, int type, const unsigned char pub[32], unsigned char id[4]) {
    unsigned char buf[256 + 34], h[32];
    memcpy(buf, name, nl);
    buf[nl] = '\n';
    buf[nl + 1] = (unsigned char)type;
    memcpy(buf + nl + 2, pub, 32);
    SHA256(buf, nl + 34, h);
    memcpy(id, h, 4);
}

int cv_parse_vkey(const char *s, size_t n, int type, cv_note_key *out, const char **weak) {
    const char *p1 = memchr(s, '+', n);
    if (!p1 || n > 1024) return -1;
    size_t nl = (size_t)(p1 - s);
    const char *hex = p1 + 1, *p2 = memchr(hex, '+', (size_t)(s + n - hex));
    if (!p2 || p2 - hex != 8 || !valid_name(s, nl)) return -1;
    unsigned char raw[33], id[4];
    size_t rl = 0;
    if (cv_b64std_decode(p2 + 1, (size_t)(s + n - p2 - 1), raw, sizeof raw, &rl) || rl != 33 || raw[0] != type)
        return -1;
    const char *why = cv_weak_key(raw + 1);
    if (why) {
        if (weak) *weak = why;
        return -1;
    }
    note_key_id(s, nl, type, raw + 1, id);
    char want[9];
    for (int i = 0; i < 4; i++) snprintf(want + 2 * i, 3, "%02x", id[i]);
    if (memcmp(hex, want, 8)) return -1;
    memcpy(out->name, s, nl);
    out->name[nl] = '\0';
    memcpy(out->id, id, 4);
    memcpy(out->pub, raw + 1, 32);
    return 0;
}

int cv_parse_log_policy(const json_t *v, cv_log_policy *out, cv_err *e) {
    memset(out, 0, sizeof *out);
    if (!json_is_object(v)) return cv_fail(e, K_BUNDLE, "transparency must be an object");
    const char *name;
    json_t *member;
    json_object_foreach((json_t *)v, name, member) {
        if (strcmp(name, "log") && strcmp(name, "url") && strcmp(name, "witnesses") && strcmp(name, "min_cosignatures"))
            return cv_fail(e, K_BUNDLE, "unknown transparency fields");
    }
    const json_t *log = json_object_get(v, "log");
    const char *weak = NULL;
    if (!json_is_string(log) ||
        cv_parse_vkey(json_string_value(log), json_string_length(log), 0x01, &out->log, &weak))
        return weak ? cv_fail(e, K_BUNDLE, "transparency log key: %s", weak)
                    : cv_fail(e, K_BUNDLE,
                              "transparency log key is not <name>+<8 hex>+<base64 of a type 0x01 Ed25519 key>");
    const json_t *url = json_object_get(v, "url");
    if (url && !json_is_null(url) &&
        (!cv_jcstr(url) || json_string_length(url) > 2048 || strncmp(json_string_value(url), "https://", 8)))
        return cv_fail(e, K_BUNDLE, "transparency url must be an https:// URL");
    const json_t *ws = json_object_get(v, "witnesses");
    if (ws && (!json_is_array(ws) || json_array_size(ws) > CV_MAX_WITNESSES))
        return cv_fail(e, K_BUNDLE, "transparency witnesses must be a list of at most %d", CV_MAX_WITNESSES);
    for (size_t i = 0; i < json_array_size(ws); i++) {
        const json_t *w = json_array_get(ws, i), *wn = json_object_get(w, "name"), *wk = json_object_get(w, "vkey");
        cv_note_key *k = &out->witnesses[i];
        if (!json_is_object(w) || json_object_size(w) != 2 || !json_is_string(wn) || !json_is_string(wk))
            return cv_fail(e, K_BUNDLE, "a witness is an object with name and vkey");
        if (cv_parse_vkey(json_string_value(wk), json_string_length(wk), 0x04, k, &weak))
            return weak ? cv_fail(e, K_BUNDLE, "witness key: %s", weak)
                        : cv_fail(e, K_BUNDLE, "witness key is not a type 0x04 verifier key");
        if (!cv_jstr_eq(wn, k->name)) return cv_fail(e, K_BUNDLE, "witness name is not its key's name");
        for (size_t j = 0; j < i; j++)
            if (!strcmp(out->witnesses[j].name, k->name) && !memcmp(out->witnesses[j].id, k->id, 4))
                return cv_fail(e, K_BUNDLE, "a witness is listed twice");
        out->nwitnesses = i + 1;
    }
    /* one key under two names: a cosignature does not sign the witness's name, so one key would
     * count as two witnesses (or the log would cosign its own checkpoints) */
    for (size_t i = 0; i < out->nwitnesses; i++) {
        const unsigned char *pub = out->witnesses[i].pub;
        int same = !memcmp(pub, out->log.pub, 32);
        for (size_t j = 0; j < i && !same; j++) same = !memcmp(pub, out->witnesses[j].pub, 32);
        if (same)
            return cv_fail(e, K_BUNDLE, "transparency names one key twice (two witnesses, or a witness and the log)");
    }
    const json_t *need = json_object_get(v, "min_cosignatures");
    int64_t m = 0;
    if (need && (!cv_jint(need, &m) || m < 0 || (uint64_t)m > out->nwitnesses))
        return cv_fail(e, K_BUNDLE, "min_cosignatures must be an integer from 0 to %zu", out->nwitnesses);
    out->min_cosignatures = (size_t)m;
    out->present = 1;
    return 0;
}

/* ------------------------------------------------------------------ hashing, proofs */

void cv_leaf_hash(const unsigned char *d, size_t n, unsigned char out[32]) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned int ol = 32;
    int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1 && EVP_DigestUpdate(c, "\0", 1) == 1 &&
             EVP_DigestUpdate(c, d, n) == 1 && EVP_DigestFinal_ex(c, out, &ol) == 1;
    EVP_MD_CTX_free(c);
    if (!ok) memset(out, 0, 32); /* out of memory: a hash no proof reaches */
}

static void node_hash(const unsigned char *l, const unsigned char *r, unsigned char out[32]) {
    unsigned char buf[65];
    buf[0] = 1;
    memcpy(buf + 1, l, 32);
    memcpy(buf + 33, r, 32);
    SHA256(buf, sizeof buf, out);
}

void cv_tree_root(const unsigned char (*leaves)[32], size_t n, unsigned char out[32]) {
    if (n == 0) {
        SHA256((const unsigned char *)"", 0, out);
        return;
    }
    if (n == 1) {
        memcpy(out, leaves[0], 32);
        return;
    }
    size_t k = 1;
    while (k * 2 < n) k *= 2;
    unsigned char l[32], r[32];
    cv_tree_root(leaves, k, l);
    cv_tree_root(leaves + k, n - k, r);
    node_hash(l, r, out);
}

int cv_verify_inclusion(const unsigned char leaf[32], uint64_t index, uint64_t size, const unsigned char (*proof)[32],
                        size_t np, const unsigned char root[32]) {
    if (index >= size) return -1;
    uint64_t fn = index, sn = size - 1;
    unsigned char r[32];
    memcpy(r, leaf, 32);
    for (size_t i = 0; i < np; i++) {
        if (sn == 0) return -1;
        if ((fn & 1) || fn == sn) {
            node_hash(proof[i], r, r);
            while (!(fn & 1) && fn) {
                fn >>= 1;
                sn >>= 1;
            }
        } else {
            node_hash(r, proof[i], r);
        }
        fn >>= 1;
        sn >>= 1;
    }
    return sn == 0 && !memcmp(r, root, 32) ? 0 : -1;
}

int cv_verify_consistency(uint64_t old, uint64_t new_, const unsigned char old_root[32],
                          const unsigned char new_root[32], const unsigned char (*proof)[32], size_t np) {
    if (old > new_) return -1;
    if (old == new_ || old == 0) return np == 0 && (old != new_ || !memcmp(old_root, new_root, 32)) ? 0 : -1;
    const unsigned char *first;
    size_t i = 0;
    if (!(old & (old - 1))) first = old_root;
    else if (np == 0) return -1;
    else first = proof[i++];
    uint64_t fn = old - 1, sn = new_ - 1;
    while (fn & 1) {
        fn >>= 1;
        sn >>= 1;
    }
    unsigned char fr[32], sr[32];
    memcpy(fr, first, 32);
    memcpy(sr, first, 32);
    for (; i < np; i++) {
        if (sn == 0) return -1;
        if ((fn & 1) || fn == sn) {
            node_hash(proof[i], fr, fr);
            node_hash(proof[i], sr, sr);
            while (!(fn & 1) && fn) {
                fn >>= 1;
                sn >>= 1;
            }
        } else {
            node_hash(sr, proof[i], sr);
        }
        fn >>= 1;
        sn >>= 1;
    }
    return sn == 0 && !memcmp(fr, old_root, 32) && !memcmp(sr, new_root, 32) ? 0 : -1;
}

/* ------------------------------------------------------------------ checkpoints */

static int ed25519_ok(const unsigned char pub[32], const unsigned char *sig, const unsigned char *msg, size_t ml) {
    EVP_PKEY *k = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, 32);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int ok = k && md && EVP_DigestVerifyInit(md, NULL, NULL, NULL, k) == 1 && EVP_DigestVerify(md, sig, 64, msg, ml) == 1;
    EVP_MD_CTX_free(md);
    EVP_PKEY_free(k);
    return ok;
}

typedef struct {
    const char *name;
    size_t nl;
    unsigned char raw[80]; /* key id, then the signature */
    size_t rl;
} sig_line;

/* 1 when key signed (its first line verifies), 0 when it has no line, -1 when it fails */
static int signed_by(const cv_note_key *key, const sig_line *sigs, size_t ns, const char *text, size_t tl, int cosig) {
    for (size_t i = 0; i < ns; i++) {
        if (sigs[i].nl != strlen(key->name) || memcmp(sigs[i].name, key->name, sigs[i].nl) ||
            memcmp(sigs[i].raw, key->id, 4))
            continue;
        const unsigned char *sig = sigs[i].raw + 4;
        size_t sl = sigs[i].rl - 4;
        if (!cosig) return sl == 64 && ed25519_ok(key->pub, sig, (const unsigned char *)text, tl) ? 1 : -1;
        if (sl != 72) return -1;
        uint64_t t = 0;
        for (int b = 0; b < 8; b++) t = t << 8 | sig[b];
        cv_buf m = {0};
        cv_buf_printf(&m, "cosignature/v1\ntime %llu\n", (unsigned long long)t);
        cv_buf_put(&m, text, tl);
        int ok = !m.oom && ed25519_ok(key->pub, sig + 8, (const unsigned char *)m.p, m.len);
        cv_buf_free(&m);
        return ok ? 1 : -1;
    }
    return 0;
}

#define FAIL(k, ...)                                 \
    do {                                             \
        if (msg) snprintf(msg, msglen, __VA_ARGS__); \
        return k;                                    \
    } while (0)

const char *cv_open_checkpoint(const char *note, size_t n, const cv_log_policy *p, cv_checkpoint *out, char *msg,
                               size_t msglen) {
    memset(out, 0, sizeof *out);
    if (n > MAX_NOTE) FAIL("log-checkpoint", "checkpoint larger than %d bytes", MAX_NOTE);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)note[i];
        if ((c < 0x20 && c != '\n') || c == 0x7F ||
            (c == 0xC2 && i + 1 < n && (unsigned char)note[i + 1] >= 0x80 && (unsigned char)note[i + 1] <= 0x9F))
            FAIL("log-checkpoint", "checkpoint: control character in the note");
    }
    /* the text ends at the last blank line; the note ends with a newline */
    size_t cut = n;
    for (size_t i = 0; i + 1 < n; i++)
        if (note[i] == '\n' && note[i + 1] == '\n') cut = i;
    if (cut == n || note[n - 1] != '\n') FAIL("log-checkpoint", "checkpoint: not a signed note");
    size_t tl = cut + 1, end = n - 1;
    if (cut + 2 > end) FAIL("log-checkpoint", "checkpoint: malformed signature line");
    sig_line sigs[MAX_SIG_LINES];
    size_t ns = 0;
    for (size_t s = cut + 2;;) {
        const char *line = note + s, *nl = s < end ? memchr(line, '\n', end - s) : NULL;
        size_t ll = nl ? (size_t)(nl - line) : end - s;
        if (ns == MAX_SIG_LINES) FAIL("log-checkpoint", "checkpoint: too many signature lines");
        const char *sp = ll > 4 ? memchr(line + 4, ' ', ll - 4) : NULL;
        if (ll < 4 || memcmp(line, SIG_PREFIX, 4) || !sp || !valid_name(line + 4, (size_t)(sp - line - 4)))
            FAIL("log-checkpoint", "checkpoint: malformed signature line");
        sig_line *g = &sigs[ns++];
        g->name = line + 4;
        g->nl = (size_t)(sp - line - 4);
        if (cv_b64std_decode(sp + 1, (size_t)(line + ll - sp - 1), g->raw, sizeof g->raw, &g->rl) || g->rl < 5)
            FAIL("log-checkpoint", "checkpoint: a signature is not base64 of a key id and a signature");
        if (!nl) break;
        s += ll + 1;
    }
    /* the text: origin, size, root, optional extension lines, none empty */
    const char *lines[4];
    size_t lens[4], nlines = 0;
    for (size_t s = 0; s < tl;) {
        const char *e = memchr(note + s, '\n', tl - s);
        if (e == note + s) FAIL("log-checkpoint", "checkpoint: an empty line in the text");
        if (nlines < 4) {
            lines[nlines] = note + s;
            lens[nlines] = (size_t)(e - note - s);
        }
        nlines++;
        s = (size_t)(e - note) + 1;
    }
    if (nlines < 3) FAIL("log-checkpoint", "checkpoint: a checkpoint has origin, size and root lines");
    uint64_t size = 0;
    if (lens[1] == 0 || lens[1] > 20 || (lens[1] > 1 && lines[1][0] == '0'))
        FAIL("log-checkpoint", "checkpoint: size is not a decimal without leading zeros");
    for (size_t i = 0; i < lens[1]; i++) {
        unsigned d = (unsigned)(lines[1][i] - '0');
        if (d > 9 || size > (UINT64_MAX - d) / 10) FAIL("log-checkpoint", "checkpoint: size is not a decimal");
        size = size * 10 + d;
    }
    size_t rl = 0;
    if (cv_b64std_decode(lines[2], lens[2], out->root, 32, &rl) || rl != 32)
        FAIL("log-checkpoint", "checkpoint: root is not 32 bytes in base64");
    if (lens[0] != strlen(p->log.name) || memcmp(lines[0], p->log.name, lens[0]))
        FAIL("log-checkpoint", "checkpoint: origin is not the log's name");
    int r = signed_by(&p->log, sigs, ns, note, tl, 0);
    if (r < 0) FAIL("log-checkpoint", "checkpoint: the log's signature does not verify");
    if (r == 0) FAIL("log-checkpoint", "checkpoint: no signature by the log's key");
    size_t cosigned = 0;
    for (size_t i = 0; i < p->nwitnesses; i++) {
        r = signed_by(&p->witnesses[i], sigs, ns, note, tl, 1);
        if (r < 0) FAIL("log-witness", "checkpoint: the cosignature of %s does not verify", p->witnesses[i].name);
        cosigned += (size_t)r;
    }
    if (cosigned < p->min_cosignatures)
        FAIL("log-witness", "checkpoint cosigned by %zu of the bundle's witnesses, %zu required", cosigned,
             p->min_cosignatures);
    out->size = size;
    out->cosigned = cosigned;
    return NULL;
}

/* ------------------------------------------------------------------ the member */

/* equal JSON values of one type; absent is null */
static int same(const json_t *a, const json_t *b) {
    if (!a || json_is_null(a)) return !b || json_is_null(b);
    return b && json_equal((json_t *)a, (json_t *)b);
}

const char *cv_check_member(const char *member, size_t n, const cv_log_policy *p, const json_t *target,
                            const cv_fp *fp, char *msg, size_t msglen) {
    if (!member) FAIL("log-missing", "the answer carries no proof of inclusion in the log");
    /* 2. shape */
    json_t *obj = cv_json_parse_signed(member, n), *entry = NULL;
    const char *kind = NULL;
    const json_t *ck = json_object_get(obj, "checkpoint"), *en = json_object_get(obj, "entry"),
                 *ix = json_object_get(obj, "index"), *pf = json_object_get(obj, "proof");
    int64_t index = -1;
    int shaped = obj && json_is_string(ck) && json_is_string(en) && cv_jint(ix, &index) && index >= 0 &&
                 json_is_array(pf) && json_array_size(pf) <= MAX_PROOF;
    for (size_t i = 0; shaped && i < json_array_size(pf); i++) shaped = json_is_string(json_array_get(pf, i));
    cv_checkpoint c;
    unsigned char *raw = NULL;
    size_t rl = 0;
    if (!shaped) {
        kind = "log-proof";
        if (msg) snprintf(msg, msglen, "transparency member lacks checkpoint, entry, index or proof");
        goto out;
    }
    /* 3, 4. the checkpoint and its cosignatures */
    if ((kind = cv_open_checkpoint(json_string_value(ck), json_string_length(ck), p, &c, msg, msglen))) goto out;
    /* 5. the entry, bound to the target and the fingerprint asked about */
    raw = malloc(json_string_length(en) + 1);
    if (!raw || cv_b64std_decode(json_string_value(en), json_string_length(en), raw, json_string_length(en), &rl) ||
        !(entry = cv_json_parse_signed((const char *)raw, rl))) {
        kind = "log-entry";
        if (msg) snprintf(msg, msglen, "the logged entry is not base64 of a JSON object");
        goto out;
    }
    char colon[96];
    cv_fp_colon(fp, colon);
    if (!cv_jstr_eq(json_object_get(entry, "type"), ENTRY_TYPE) ||
        !same(json_object_get(entry, "host"), json_object_get(target, "host")) ||
        !same(json_object_get(entry, "port"), json_object_get(target, "port")) ||
        !same(json_object_get(entry, "ip"), json_object_get(target, "ip")) ||
        !cv_jstr_eq(json_object_get(entry, cv_fp_alg(fp)), colon)) {
        kind = "log-entry";
        if (msg) snprintf(msg, msglen, "the logged entry is not this observation of this certificate");
        goto out;
    }
    /* 6. inclusion */
    unsigned char proof[MAX_PROOF][32], leaf[32];
    size_t np = json_array_size(pf);
    for (size_t i = 0; i < np; i++) {
        const json_t *h = json_array_get(pf, i);
        size_t hl = 0;
        if (cv_b64std_decode(json_string_value(h), json_string_length(h), proof[i], 32, &hl) || hl != 32) {
            kind = "log-proof";
            if (msg) snprintf(msg, msglen, "inclusion proof: a hash is not 32 bytes in base64");
            goto out;
        }
    }
    cv_leaf_hash(raw, rl, leaf);
    if (cv_verify_inclusion(leaf, (uint64_t)index, c.size, (const unsigned char (*)[32])proof, np, c.root)) {
        kind = "log-proof";
        if (msg) snprintf(msg, msglen, "inclusion proof does not put the entry at %lld in the tree of %llu",
                          (long long)index, (unsigned long long)c.size);
    }
out:
    free(raw);
    json_decref(entry);
    json_decref(obj);
    return kind;
}

void cv_b64std(const unsigned char *d, size_t n, char *out) { b64std_encode(d, n, out); }

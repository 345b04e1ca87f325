/* Internal interfaces of libconverge. Pure rules, one file per concern: fingerprint.c
 * (fingerprints, targets), http.c (requests, HTTP framing, votes), legacy.c, extended.c,
 * bundle.c, policy.c (consensus, cache rule), json.c (the stock parser, the bounds scan);
 * then cache.c (SQLite), config.c (files), net.c (network) and client.c (orchestration,
 * OpenSSL hooks). */
#ifndef CONVERGE_INTERNAL_H
#define CONVERGE_INTERNAL_H

#include <openssl/evp.h>
#include <openssl/x509.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "converge.h"

/* error kinds (stable words shared with the vectors) */
#define K_FINGERPRINT "fingerprint"
#define K_TARGET "target"
#define K_CONFIG "config"
#define K_BUNDLE "bundle"
#define K_CACHE_IO "cache-io"
#define K_RESPONSE "response"
#define K_SIGNATURE "signature"

/* ---------------------------------------------------------------- JSON (json.c) */
/* the bounds scan over signed bytes: at most CV_MAX_LEVELS open levels, integers of at most
 * CV_MAX_DIGITS digits and no other number; 0 passes */
#define CV_MAX_LEVELS 32
#define CV_MAX_DIGITS 15
int cv_bounds_scan(const char *p, size_t n);
/* jansson, strict (NULL on any error); the caller owns the value (json_decref) */
json_t *cv_json_parse(const char *data, size_t n);
/* the bounds scan, then the parser; an object or NULL */
json_t *cv_json_parse_signed(const char *data, size_t n);
int cv_jstr_eq(const json_t *v, const char *text); /* a string of exactly these bytes */
int cv_jint(const json_t *v, int64_t *out);        /* an integer (not a bool, not a real) */
int cv_jcstr(const json_t *v);                     /* a string without NUL */

/* growable byte buffer */
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} cv_buf;
void cv_buf_put(cv_buf *b, const void *data, size_t n);
void cv_buf_puts(cv_buf *b, const char *s);
void cv_buf_printf(cv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cv_buf_free(cv_buf *b);
/* a JSON string literal of bytes (UTF-8 kept; other bytes as \u00XX) */
void cv_json_string(cv_buf *b, const char *s, size_t n);

typedef struct {
    char kind[24]; /* "" = no error */
    char msg[256];
} cv_err;
int cv_fail(cv_err *e, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---------------------------------------------------------------- fingerprints */
enum { FP_SHA1 = 1, FP_SHA256 = 2 };
typedef struct {
    int alg;
    unsigned char d[32];
    size_t len;
} cv_fp;
#define MAX_FINGERPRINT_TEXT 200
int cv_parse_fp(const char *text, size_t n, cv_fp *out, cv_err *e);
void cv_fp_colon(const cv_fp *fp, char out[96]);
const char *cv_fp_alg(const cv_fp *fp);
int cv_fp_eq(const cv_fp *a, const cv_fp *b);

/* ---------------------------------------------------------------- targets, requests */
int cv_host_re(const char *s);
int cv_check_target(const char *host, long port, cv_err *e);
int cv_check_ip(const char *ip, char out[64], cv_err *e);
void cv_expected_host(const char *host, char *out, size_t outlen);
/* the legacy request; returns malloc'd bytes (len in *n) or NULL */
char *cv_legacy_request(const char *host, int port, const cv_fp *fp, const char *ip, size_t *n, cv_err *e);
char *cv_ext_request(const char *host, int port, const cv_fp *fp, const char *nonce, const char *ip,
                     int transparency, size_t *n, cv_err *e);

/* ---------------------------------------------------------------- HTTP framing */
#define MAX_RESPONSE_BYTES (256 * 1024)
#define MAX_HEADER_BYTES (16 * 1024)
typedef struct {
    int status;
    char *content_type;     /* lower-cased media type without parameters (malloc'd) or NULL */
    char *cache_status;     /* malloc'd or NULL */
    const char *body;       /* points into the raw buffer */
    size_t body_len;
} cv_http;
int cv_parse_http(const char *raw, size_t n, size_t max_bytes, cv_http *out, cv_err *e);
void cv_http_free(cv_http *h);
/* Python's str.strip() bounds for Latin-1 (isspace) */
int cv_py_space(unsigned char c);
void cv_trim(const char **s, const char **end);

/* ---------------------------------------------------------------- votes */
enum { V_SUCCESS = 1, V_FAILURE, V_UNREACHABLE, V_SKIPPED };
const char *cv_vote_name(int vote);
typedef struct {
    int vote;
    const char *kind;
    int status;
    const char *protocol; /* NULL: no answer */
    char detail[200];
} cv_outcome;
void cv_set_outcome(cv_outcome *o, int vote, const char *kind, int status, const char *protocol, const char *detail);
const char *cv_intern_kind(const char *k);
/* frame one notary response: 0 (its Cache-Status handed to *cache_status when not NULL), or
 * -1 with the failure vote set in o */
int cv_frame_answer(const char *raw, size_t n, size_t max_bytes, const char *protocol, cv_http *h, cv_outcome *o,
                    char **cache_status);

/* ---------------------------------------------------------------- legacy signed lists */
#define MAX_HISTORY_ENTRIES 1000
typedef struct {
    cv_fp *fps;     /* the SHA-1 fingerprints of the signed list */
    size_t n;
    char *signed_bytes; /* S: what the signature covers, and all that was parsed */
    size_t signed_len;
} cv_signed_list;
/* docs/wire-format.md, "Verifying a legacy answer": the body's shape, RSA/SHA-1 over S,
 * the bounds scan, the stock parse of S and its shape; errors of kind response/signature */
int cv_legacy_verify(const char *body, size_t n, EVP_PKEY *key, cv_signed_list *out, cv_err *e);
void cv_signed_list_free(cv_signed_list *s);
/* one response (read to EOF) to a vote */
void cv_legacy_outcome(const char *raw, size_t n, const cv_fp *wanted, size_t nwanted, EVP_PKEY *key,
                       size_t max_bytes, cv_outcome *out, char **cache_status);

/* ---------------------------------------------------------------- extended */
#define FORMAT_V2 "converge-answer/1"
#define FORMAT_V1 "convergence-v1"
#define MEDIA_TYPE "application/vnd.converge.answer+json"
#define MAX_ANSWER (64 * 1024)
#define MAX_SIGNING_KEYS 8
typedef struct {
    char key_id[17];
    unsigned char pub[32];
    int retired;
    int64_t valid_until;
} cv_key;
int cv_parse_signing_keys(const json_t *v, cv_key *keys, size_t *n, cv_err *e);
/* why the 32-byte Ed25519 public key must not be trusted, or NULL: its y (the top bit, x's
 * sign, cleared) encoded at or above p = 2^255 - 19, or the y of a point of small order (under
 * which some libraries accept R = identity, S = 0 as a signature of any message); a bundle
 * naming such a key is invalid */
const char *cv_weak_key(const unsigned char raw[32]);
/* the value of a base64 digit (url: the RFC 4648 section 5 alphabet), -1 when not one */
int cv_b64_digit(char c, int url);
int cv_b64url_decode(const char *s, size_t n, unsigned char *out, size_t cap, size_t *outlen);
/* the bytes of a run of base64 digits (no padding, no length check) */
int cv_b64_digits(const char *s, size_t n, int url, unsigned char *out, size_t cap, size_t *outlen);
void cv_b64url_encode(const unsigned char *d, size_t n, char *out);
typedef struct {
    const char *host; /* NULL: not checked */
    long port;
    const cv_fp *fp;  /* NULL: not checked */
    const char *nonce;
    int has_now;
    int64_t now;
    int64_t max_skew;
    int bind_ip;
    const char *ip;   /* with bind_ip: NULL = none named */
    const struct cv_log_policy *log; /* NULL: the bundle names no log; else a match needs its proof */
} cv_expect;
/* verify an answer; returns NULL and sets *kind when rejected; else the verdict string
 * (static) */
const char *cv_verify_answer(const char *raw, size_t n, const cv_key *keys, size_t nkeys, int64_t now,
                             const cv_expect *x, const char **kind, char *msg, size_t msglen);
void cv_ext_outcome(const char *raw, size_t n, const cv_key *keys, size_t nkeys, const cv_expect *x,
                    size_t max_bytes, cv_outcome *out, char **cache_status);

/* ---------------------------------------------------------------- transparency log */
#define CV_MAX_WITNESSES 32
typedef struct {
    char name[256];
    unsigned char id[4];
    unsigned char pub[32];
} cv_note_key;
typedef struct cv_log_policy {
    int present;
    cv_note_key log;
    cv_note_key witnesses[CV_MAX_WITNESSES];
    size_t nwitnesses, min_cosignatures;
} cv_log_policy;
typedef struct {
    uint64_t size;
    unsigned char root[32];
    size_t cosigned;
} cv_checkpoint;
/* standard padded base64, strictly */
int cv_b64std_decode(const char *s, size_t n, unsigned char *out, size_t cap, size_t *outlen);
void cv_b64std(const unsigned char *d, size_t n, char *out);
/* <name>+<8 hex key id>+<base64(type || 32-byte Ed25519 key)>; 0 or -1 (a weak key
 * (cv_weak_key) too, its reason then in *weak when weak is not NULL) */
int cv_parse_vkey(const char *s, size_t n, int type, cv_note_key *out, const char **weak);
int cv_parse_log_policy(const json_t *v, cv_log_policy *out, cv_err *e);
void cv_leaf_hash(const unsigned char *d, size_t n, unsigned char out[32]);
void cv_tree_root(const unsigned char (*leaves)[32], size_t n, unsigned char out[32]);
/* RFC 9162 2.1.3.2 and 2.1.4.2: 0 when the proof verifies */
int cv_verify_inclusion(const unsigned char leaf[32], uint64_t index, uint64_t size, const unsigned char (*proof)[32],
                        size_t np, const unsigned char root[32]);
int cv_verify_consistency(uint64_t old, uint64_t new_, const unsigned char old_root[32],
                          const unsigned char new_root[32], const unsigned char (*proof)[32], size_t np);
/* steps 3 and 4: NULL, or the kind (log-checkpoint, log-witness) */
const char *cv_open_checkpoint(const char *note, size_t n, const cv_log_policy *p, cv_checkpoint *out, char *msg,
                               size_t msglen);
/* the six steps over an answer's member (NULL: absent) for the statement's target and the
 * fingerprint asked about: NULL, or the log-* kind */
const char *cv_check_member(const char *member, size_t n, const cv_log_policy *p, const json_t *target,
                            const cv_fp *fp, char *msg, size_t msglen);

/* ---------------------------------------------------------------- bundles */
#define MAX_BUNDLE_BYTES (64 * 1024)
#define MAX_HOSTS 16
typedef struct {
    char host[254];
    int ssl_port, http_port;
    unsigned char pin[20];
    EVP_PKEY *key;   /* the certificate's public key */
} cv_host;
typedef struct {
    char name[CONVERGE_NAME_MAX];
    int version;
    cv_host hosts[MAX_HOSTS];
    size_t nhosts;
    int offers_extended;
    cv_key keys[MAX_SIGNING_KEYS];
    size_t nkeys;
    cv_log_policy log; /* log.present: the bundle names a transparency log */
} cv_bundle;
int cv_parse_bundle(const char *data, size_t n, cv_bundle *out, cv_err *e);
void cv_bundle_free(cv_bundle *b);

/* ---------------------------------------------------------------- policy, cache rule */
enum { P_CONSENSUS = 1, P_MAJORITY, P_MINORITY };
int cv_parse_policy(const char *s, size_t n);
int cv_decide(int policy, int s, int f, int u, int stand_aside);
/* 1 trusted, 0 untrusted, -1 unsettled */
int cv_settled(int policy, int s, int f, int u, int pending, int stand_aside);
enum { C_MISS = 0, C_HIT, C_STALE };
int cv_cache_decision(int has_ts, int64_t ts, double now, int has_lifetime, double lifetime);
const char *cv_cache_name(int d);

/* ---------------------------------------------------------------- config */
enum { EXT_OFF = 0, EXT_PREFER, EXT_FALLBACK, EXT_REQUIRE };
typedef struct {
    char dir[4096];
    char db[4096];      /* "" = none */
    char userdb[4096];  /* "" = none */
    char notaries_dir[4096];
    int agreement, quorum;
    double connect_timeout, notary_timeout, total_timeout;
    int has_lifetime;
    double cache_lifetime;
    int stand_aside, early_return, bounce, bounce_port;
    long max_response_bytes;
    int extended, extended_nonce;
    int64_t max_skew;
} cv_config;
int cv_discover_dir(const char *explicit_dir, int exact, char *out, size_t outlen, cv_err *e);
int cv_load_config(const char *dir, cv_config *c, cv_err *e);
void cv_config_defaults(cv_config *c);
/* enabled bundles de-duplicated by name, in file-name order; malloc'd array */
int cv_enabled_bundles(const char *notaries_dir, cv_bundle **out, size_t *n, cv_err *e);
int cv_flat_layout(const char *notaries_dir);
void cv_where_notaries(const char *notaries_dir, char *out, size_t size);
int cv_read_file(const char *path, size_t max, char **data, size_t *n);

/* ---------------------------------------------------------------- cache (cache.c) */
typedef struct cv_cache cv_cache;
cv_cache *cv_cache_open(const char *path, int readonly, cv_err *e);
/* 1 found (ts set), 0 none, -1 error */
int cv_cache_lookup(cv_cache *c, const char *location, const char *fp, int64_t *ts, cv_err *e);
int cv_cache_store(cv_cache *c, const char *location, const char *fp, int64_t ts, cv_err *e);
void cv_cache_close(cv_cache *c);

/* ---------------------------------------------------------------- network (net.c) */
typedef struct {
    const cv_bundle *bundle;
    const cv_host *host;          /* the host asked (direct), or the first destination */
    const cv_bundle *relay;       /* NULL: direct */
    int bounce_port;
    const char *target_host;
    int target_port;
    const cv_fp *wanted;
    size_t nwanted;
    int ext;                      /* ask in the extended format */
    int fallback, use_nonce;
    int64_t max_skew;
    int64_t (*clock)(void *);
    void *clock_arg;
    double connect_deadline, deadline; /* monotonic seconds */
    size_t max_bytes;
    int cancel_fd;                /* readable when the query should stop */
} cv_query;
typedef struct {
    cv_outcome o;
    char host[600];
    char *cache_status;
} cv_host_answer;
void cv_query_host(const cv_query *q, cv_host_answer *out);
double cv_monotonic(void);

/* ---------------------------------------------------------------- client.c, for hooks.c */
/* check a certificate given by its fingerprints (the hooks pass SHA-1 and SHA-256) */
int cv_check_forms(converge_ctx *ctx, const char *host, int port, cv_fp *forms, size_t nforms, converge_result *r);
/* the process-wide context of converge() (created on first use; NULL when out of memory) */
converge_ctx *cv_global_ctx(void);
int cv_net_init(void);

#endif

/* libconverge: ask Convergence notaries whether a certificate is the one they see.
 *
 *   int rc = converge("www.example.org", 443, "8F:C0:79:...:EB");
 *   if (rc == CONVERGE_TRUSTED) ...
 *
 * Behaves like the reference client (client-libs/python): same configuration directory,
 * bundles, SQLite cache schema, consensus rules with stand-aside, legacy (convergence-v1)
 * and extended (converge-answer/1) answers. Thread-safe: a converge_ctx may be shared by
 * threads (its cache connection is serialised by a lock).
 */
#ifndef CONVERGE_H
#define CONVERGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CONVERGE_VERSION "0.1.0"

/* The public API: the shared library (built with -fvisibility=hidden) exports these only. */
#if defined(__GNUC__) || defined(__clang__)
#define CONVERGE_API __attribute__((visibility("default")))
#else
#define CONVERGE_API
#endif

/* Return codes of converge() and converge_check(). */
enum {
    CONVERGE_TRUSTED = 0,           /* the notaries (or the local cache) confirm it */
    CONVERGE_NOT_TRUSTED = 1,       /* a verdict: not confirmed */
    CONVERGE_ERR_FINGERPRINT = -1,  /* bad input: the fingerprint */
    CONVERGE_ERR_TARGET = -2,       /* bad input: host or port */
    CONVERGE_ERR_CONFIG = -3,       /* bad or missing configuration, no notary enabled */
    CONVERGE_ERR_BUNDLE = -4,       /* a .notary bundle does not parse */
    CONVERGE_ERR_CACHE_IO = -5,     /* the cache database failed (an IO step) */
    CONVERGE_ERR_INTERNAL = -6,     /* out of memory, thread or socket creation failed */
    CONVERGE_ERR_NOT_CHECKED = -7   /* converge_last_verdict: no check on this connection */
};

#define CONVERGE_MAX_QUORUM 16
#define CONVERGE_NAME_MAX 808

/* One logical notary's part in a verdict. */
typedef struct {
    char name[CONVERGE_NAME_MAX];
    const char *outcome;   /* "success", "failure", "unreachable", "skipped" */
    const char *kind;      /* "listed", "mismatch", "pin", "timeout", "match", ... */
    int status;            /* HTTP status, 0 when none */
    const char *protocol;  /* "convergence-v1", "converge-answer/1" or NULL */
    char host[1200];       /* the physical host that answered ("" when none) */
    char detail[200];
} converge_notary_result;

typedef struct {
    int trusted;
    int from_cache;
    char relay[CONVERGE_NAME_MAX]; /* the bounce relay's name, "" when none */
    size_t count;                  /* entries in notaries, in configuration order */
    converge_notary_result notaries[CONVERGE_MAX_QUORUM];
    double elapsed;                /* seconds */
    const char *error_kind;        /* on an error: "fingerprint", "target", "config", ... */
    char message[300];             /* why (error or verdict) */
} converge_result;

typedef struct converge_ctx converge_ctx;

/* Load a configuration: config_dir, else $CONVERGE_CONFIG_DIR, else ~/.config/converge
 * ($XDG_CONFIG_HOME/converge), else /usr/local/etc/converge. Returns NULL only when out of
 * memory; a configuration error is kept and returned by every converge_check. */
CONVERGE_API converge_ctx *converge_ctx_new(const char *config_dir);
/* As converge_ctx_new, but reads only config_dir (no environment or default paths). */
CONVERGE_API converge_ctx *converge_ctx_new_exact(const char *config_dir);
CONVERGE_API void converge_ctx_free(converge_ctx *ctx);
/* The configuration error (NULL when the configuration loaded). */
CONVERGE_API const char *converge_ctx_error(const converge_ctx *ctx);

/* Setters override converge.config; each returns 0, or -1 for an out-of-range value. Call
 * them before the context is shared between threads. */
CONVERGE_API int converge_ctx_set_agreement(converge_ctx *ctx, const char *policy); /* consensus|majority|minority */
CONVERGE_API int converge_ctx_set_quorum(converge_ctx *ctx, int quorum);             /* 1..16 */
CONVERGE_API int converge_ctx_set_timeouts(converge_ctx *ctx, double connect_s, double notary_s, double total_s);
CONVERGE_API int converge_ctx_set_stand_aside(converge_ctx *ctx, int on);
CONVERGE_API int converge_ctx_set_early_return(converge_ctx *ctx, int on);
CONVERGE_API int converge_ctx_set_cache_lifetime(converge_ctx *ctx, double seconds); /* < 0: forever */
CONVERGE_API int converge_ctx_set_extended(converge_ctx *ctx, const char *mode);     /* off|prefer|fallback|require */
CONVERGE_API int converge_ctx_set_bounce(converge_ctx *ctx, int on, int bounce_port);
/* The clock used for the cache and extended answers (tests); NULL = time(). */
CONVERGE_API int converge_ctx_set_clock(converge_ctx *ctx, int64_t (*clock)(void *), void *arg);

/* Ask. result may be NULL. Returns CONVERGE_TRUSTED, CONVERGE_NOT_TRUSTED or an error. */
CONVERGE_API int converge_check(converge_ctx *ctx, const char *host, int port, const char *fingerprint,
                   converge_result *result);

/* The classic call, with a process-wide context from the discovered configuration. */
CONVERGE_API int converge(const char *host, int port, const char *fingerprint);
/* Release the process-wide context of converge() (optional, e.g. before exit). */
CONVERGE_API void converge_cleanup(void);

/* A short name of a return code ("trusted", "not-trusted", "fingerprint", ...). */
CONVERGE_API const char *converge_strerror(int rc);

/* ------------------------------------------------------------ OpenSSL drop-in
 * Declared with opaque types so that this header does not need OpenSSL's headers.
 *
 *   SSL_CTX_set_verify(ssl_ctx, SSL_VERIFY_PEER, converge_verify_callback);
 *   SSL *ssl = SSL_new(ssl_ctx);
 *   converge_ssl_set_target(ssl, ctx_or_NULL, "www.example.org", 443);
 *   SSL_connect(ssl)  -> fails with a certificate error when the notaries disagree
 *
 * or, after a handshake made without verification:
 *
 *   if (converge_ssl_verify(ssl, "www.example.org", 443) != X509_V_OK) refuse;
 */
struct ssl_st;
struct x509_store_ctx_st;
/* Attach the target (and a context; NULL = the process-wide one) to one connection. */
CONVERGE_API int converge_ssl_set_target(struct ssl_st *ssl, converge_ctx *ctx, const char *host, int port);
/* For SSL_CTX_set_verify: replaces the CA verdict for the leaf with the notaries'. */
CONVERGE_API int converge_verify_callback(int preverify_ok, struct x509_store_ctx_st *store);
/* For SSL_CTX_set_cert_verify_callback (arg unused; target from converge_ssl_set_target). */
CONVERGE_API int converge_cert_verify_callback(struct x509_store_ctx_st *store, void *arg);
/* Replacement for SSL_get_verify_result(): X509_V_OK (0) when trusted, else
 * X509_V_ERR_CERT_REJECTED (or X509_V_ERR_APPLICATION_VERIFICATION on an error). */
CONVERGE_API long converge_ssl_verify(struct ssl_st *ssl, const char *host, int port);
/* The decision of this connection's check: CONVERGE_TRUSTED, CONVERGE_NOT_TRUSTED or an
 * error code (and, when result is not NULL, the whole verdict: each notary's answer, the
 * reason), or CONVERGE_ERR_NOT_CHECKED when no check was made. The notaries are asked once
 * per handshake whatever the number of callback calls; after a failed SSL_connect this says
 * why the certificate was refused. */
CONVERGE_API int converge_last_verdict(const struct ssl_st *ssl, converge_result *result);

#ifdef __cplusplus
}
#endif
#endif

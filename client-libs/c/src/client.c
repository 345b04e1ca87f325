/* converge(): local cache first, then the notaries in parallel (one thread per physical
 * host), consensus with stand-aside and exact early return; the cache is written only after
 * a trusted verdict. The OpenSSL hooks are in hooks.c. */
#define _GNU_SOURCE
#include <ctype.h>
#include <fcntl.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

struct converge_ctx {
    cv_config cfg;
    cv_err load_err;
    int loaded;
    pthread_mutex_t lock;
    int caches_open;
    cv_cache *writer, *reader; /* reader: the shared db read-only when userdb is set */
    int64_t (*clock)(void *);
    void *clock_arg;
};

static int64_t wall_clock(void *arg) {
    (void)arg;
    return (int64_t)time(NULL);
}

static converge_ctx *ctx_new(const char *dir, int exact) {
    converge_ctx *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_mutex_init(&c->lock, NULL);
    c->clock = wall_clock;
    cv_config_defaults(&c->cfg);
    char found[4096];
    if (cv_discover_dir(dir, exact, found, sizeof found, &c->load_err) == 0 &&
        cv_load_config(found, &c->cfg, &c->load_err) == 0)
        c->loaded = 1;
    return c;
}

converge_ctx *converge_ctx_new(const char *config_dir) { return ctx_new(config_dir, 0); }
converge_ctx *converge_ctx_new_exact(const char *config_dir) { return ctx_new(config_dir, 1); }

const char *converge_ctx_error(const converge_ctx *ctx) { return ctx->loaded ? NULL : ctx->load_err.msg; }

void converge_ctx_free(converge_ctx *ctx) {
    if (!ctx) return;
    cv_cache_close(ctx->writer);
    cv_cache_close(ctx->reader);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

int converge_ctx_set_agreement(converge_ctx *ctx, const char *policy) {
    int p = policy ? cv_parse_policy(policy, strlen(policy)) : 0;
    if (!p) return -1;
    ctx->cfg.agreement = p;
    return 0;
}
int converge_ctx_set_quorum(converge_ctx *ctx, int quorum) {
    if (quorum < 1 || quorum > CONVERGE_MAX_QUORUM) return -1;
    ctx->cfg.quorum = quorum;
    return 0;
}
int converge_ctx_set_timeouts(converge_ctx *ctx, double connect_s, double notary_s, double total_s) {
    if (!(connect_s >= 0.01 && connect_s <= 600 && notary_s >= 0.01 && notary_s <= 600 && total_s >= 0.01 &&
          total_s <= 3600))
        return -1;
    ctx->cfg.connect_timeout = connect_s;
    ctx->cfg.notary_timeout = notary_s;
    ctx->cfg.total_timeout = total_s;
    return 0;
}
int converge_ctx_set_stand_aside(converge_ctx *ctx, int on) {
    ctx->cfg.stand_aside = !!on;
    return 0;
}
int converge_ctx_set_early_return(converge_ctx *ctx, int on) {
    ctx->cfg.early_return = !!on;
    return 0;
}
int converge_ctx_set_cache_lifetime(converge_ctx *ctx, double seconds) {
    if (seconds > 10.0 * 365 * 86400) return -1;
    ctx->cfg.has_lifetime = seconds >= 0;
    ctx->cfg.cache_lifetime = seconds;
    return 0;
}
int converge_ctx_set_extended(converge_ctx *ctx, const char *mode) {
    static const char *const m[] = {"off", "prefer", "fallback", "require"};
    for (int i = 0; i < 4; i++)
        if (mode && !strcmp(mode, m[i])) {
            ctx->cfg.extended = i;
            return 0;
        }
    return -1;
}
int converge_ctx_set_bounce(converge_ctx *ctx, int on, int bounce_port) {
    if (bounce_port < 1 || bounce_port > 65535) return -1;
    ctx->cfg.bounce = !!on;
    ctx->cfg.bounce_port = bounce_port;
    return 0;
}
int converge_ctx_set_clock(converge_ctx *ctx, int64_t (*clock)(void *), void *arg) {
    ctx->clock = clock ? clock : wall_clock;
    ctx->clock_arg = arg;
    return 0;
}

const char *converge_strerror(int rc) {
    switch (rc) {
    case CONVERGE_TRUSTED: return "trusted";
    case CONVERGE_NOT_TRUSTED: return "not-trusted";
    case CONVERGE_ERR_FINGERPRINT: return K_FINGERPRINT;
    case CONVERGE_ERR_TARGET: return K_TARGET;
    case CONVERGE_ERR_CONFIG: return K_CONFIG;
    case CONVERGE_ERR_BUNDLE: return K_BUNDLE;
    case CONVERGE_ERR_CACHE_IO: return K_CACHE_IO;
    case CONVERGE_ERR_NOT_CHECKED: return "not-checked";
    default: return "internal";
    }
}

static int rc_of_kind(const char *kind) {
    if (!strcmp(kind, K_FINGERPRINT)) return CONVERGE_ERR_FINGERPRINT;
    if (!strcmp(kind, K_TARGET)) return CONVERGE_ERR_TARGET;
    if (!strcmp(kind, K_CONFIG)) return CONVERGE_ERR_CONFIG;
    if (!strcmp(kind, K_BUNDLE)) return CONVERGE_ERR_BUNDLE;
    if (!strcmp(kind, K_CACHE_IO)) return CONVERGE_ERR_CACHE_IO;
    return CONVERGE_ERR_INTERNAL;
}

static int error_out(converge_result *r, const cv_err *e) {
    int rc = rc_of_kind(e->kind);
    if (r) {
        r->error_kind = converge_strerror(rc);
        snprintf(r->message, sizeof r->message, "%s", e->msg);
    }
    return rc;
}

/* ------------------------------------------------------------------ cache */

static int open_caches(converge_ctx *ctx, cv_err *e) {
    if (ctx->caches_open) return 0;
    const cv_config *c = &ctx->cfg;
    if (c->userdb[0]) {
        if (!(ctx->writer = cv_cache_open(c->userdb, 0, e))) return -1;
        if (c->db[0] && access(c->db, F_OK) == 0) ctx->reader = cv_cache_open(c->db, 1, NULL); /* optional */
    } else if (c->db[0]) {
        if (!(ctx->writer = cv_cache_open(c->db, 0, e))) return -1;
    }
    ctx->caches_open = 1;
    return 0;
}

static int cached(converge_ctx *ctx, const char *loc, const cv_fp *forms, size_t nforms, double now, cv_err *e) {
    pthread_mutex_lock(&ctx->lock);
    int rc = open_caches(ctx, e);
    int hit = 0;
    cv_cache *list[2] = {ctx->writer, ctx->reader};
    for (int i = 0; !rc && !hit && i < 2; i++) {
        if (!list[i]) continue;
        for (size_t j = 0; j < nforms && !hit; j++) {
            char colon[96];
            cv_fp_colon(&forms[j], colon);
            int64_t ts = 0;
            int f = cv_cache_lookup(list[i], loc, colon, &ts, e);
            if (f < 0) {
                rc = -1;
                break;
            }
            if (cv_cache_decision(f == 1, ts, now, ctx->cfg.has_lifetime, ctx->cfg.cache_lifetime) == C_HIT) hit = 1;
        }
    }
    pthread_mutex_unlock(&ctx->lock);
    return rc ? -1 : hit;
}

static int remember(converge_ctx *ctx, const char *loc, const cv_fp *forms, size_t nforms, int64_t now, cv_err *e) {
    pthread_mutex_lock(&ctx->lock);
    int rc = open_caches(ctx, e);
    for (size_t j = 0; !rc && ctx->writer && j < nforms; j++) {
        char colon[96];
        cv_fp_colon(&forms[j], colon);
        rc = cv_cache_store(ctx->writer, loc, colon, now, e);
    }
    pthread_mutex_unlock(&ctx->lock);
    return rc;
}

/* ------------------------------------------------------------------ asking */

typedef struct run run;
typedef struct {
    run *rs;
    int notary;
    cv_query q;
    cv_host_answer ans;
    int done;
    int seq;
    pthread_t th;
    int started;
} task;

struct run {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int seq;
};

static void *task_main(void *arg) {
    task *t = arg;
    /* a notary closing mid-request must not kill the process: SIGPIPE from this thread's
     * writes stays blocked (and a thread-directed pending signal ends with the thread) */
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
    cv_host_answer a;
    cv_query_host(&t->q, &a);
    pthread_mutex_lock(&t->rs->lock);
    t->ans = a;
    t->done = 1;
    t->seq = ++t->rs->seq;
    pthread_cond_broadcast(&t->rs->cond);
    pthread_mutex_unlock(&t->rs->lock);
    return NULL;
}

static int definitive(const char *k) {
    return k && (!strcmp(k, "listed") || !strcmp(k, "status-only") || !strcmp(k, "mismatch") ||
                 !strcmp(k, "not-listed") || !strcmp(k, "match"));
}

static int severity(const char *k) {
    static const char *const three[] = {"signature", "response", "malformed", "non-canonical", "unknown-key",
                                        "bad-signature", "wrong-target", "nonce-mismatch", "stale"};
    if (!k) return -1;
    for (size_t i = 0; i < sizeof three / sizeof *three; i++)
        if (!strcmp(k, three[i])) return 3;
    if (!strcmp(k, "pin")) return 2;
    return 0;
}

static uint32_t rnd_below(uint32_t n) {
    uint32_t x = 0;
    if (RAND_bytes((unsigned char *)&x, sizeof x) != 1) x = (uint32_t)rand();
    return n ? x % n : 0;
}

static void fill_result(converge_notary_result *nr, const char *name, int vote, const char *kind, int status,
                        const char *protocol, const char *host, const char *detail) {
    snprintf(nr->name, sizeof nr->name, "%s", name);
    nr->outcome = cv_vote_name(vote);
    nr->kind = kind;
    nr->status = status;
    nr->protocol = protocol;
    snprintf(nr->host, sizeof nr->host, "%s", host ? host : "");
    snprintf(nr->detail, sizeof nr->detail, "%s", detail ? detail : "");
}

static int check_forms(converge_ctx *ctx, const char *host, int port, const cv_fp *forms, size_t nforms,
                       converge_result *res) {
    double t0 = cv_monotonic();
    converge_result local;
    converge_result *r = res ? res : &local;
    memset(r, 0, sizeof *r);
    cv_err e = {{0}, {0}};
    const cv_config *cfg = &ctx->cfg;
    char loc[320];
    {
        size_t i = 0;
        for (; host[i] && i < 260; i++) loc[i] = (char)tolower((unsigned char)host[i]);
        snprintf(loc + i, sizeof loc - i, ":%d", port);
    }
    int hit = cached(ctx, loc, forms, nforms, (double)ctx->clock(ctx->clock_arg), &e);
    if (hit < 0) return error_out(r, &e);
    if (hit) {
        r->trusted = 1;
        r->from_cache = 1;
        snprintf(r->message, sizeof r->message, "local cache hit");
        r->elapsed = cv_monotonic() - t0;
        return CONVERGE_TRUSTED;
    }
    cv_bundle *all = NULL;
    size_t nall = 0;
    if (cv_enabled_bundles(cfg->notaries_dir, &all, &nall, &e)) return error_out(r, &e);
    int rc = 0;
    task *tasks = NULL;
    size_t ntasks = 0;
    int cancel_fd = -1;
    const cv_bundle *cand[64];
    size_t ncand = 0;
    for (size_t i = 0; i < nall && ncand < 64; i++)
        if (cfg->extended != EXT_REQUIRE || all[i].offers_extended) cand[ncand++] = &all[i];
    if (nall == 0) {
        char where[9000];
        cv_where_notaries(cfg->notaries_dir, where, sizeof where);
        rc = error_out(r, (cv_fail(&e, K_CONFIG, "no notaries enabled (looked in %.200s)", where), &e));
        goto out;
    }
    if (ncand == 0) {
        rc = error_out(r, (cv_fail(&e, K_CONFIG, "extended is require but no enabled notary's bundle offers converge-answer/1"), &e));
        goto out;
    }
    const cv_bundle *relay = NULL;
    if (cfg->bounce) {
        if (ncand < 2) {
            rc = error_out(r, (cv_fail(&e, K_CONFIG, "bounce needs two enabled notaries: one relays, one votes"), &e));
            goto out;
        }
        size_t k = rnd_below((uint32_t)ncand);
        relay = cand[k];
        memmove(&cand[k], &cand[k + 1], (ncand - k - 1) * sizeof *cand);
        ncand--;
        snprintf(r->relay, sizeof r->relay, "%s", relay->name);
    }
    /* pick quorum at random, keep configuration order */
    size_t want = (size_t)cfg->quorum < ncand ? (size_t)cfg->quorum : ncand;
    int picked[64] = {0};
    for (size_t n = 0; n < want;) {
        size_t k = rnd_below((uint32_t)ncand);
        if (!picked[k]) {
            picked[k] = 1;
            n++;
        }
    }
    const cv_bundle *chosen[CONVERGE_MAX_QUORUM];
    size_t nch = 0;
    for (size_t i = 0; i < ncand; i++)
        if (picked[i]) chosen[nch++] = cand[i];
    r->count = nch;
    cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (cancel_fd < 0 || cv_net_init()) {
        rc = error_out(r, (cv_fail(&e, "internal", "cannot set up notary queries"), &e));
        goto out;
    }
    for (size_t i = 0; i < nch; i++) ntasks += relay ? 1 : chosen[i]->nhosts;
    tasks = calloc(ntasks, sizeof *tasks);
    if (!tasks) {
        rc = error_out(r, (cv_fail(&e, "internal", "out of memory"), &e));
        goto out;
    }
    run rs;
    pthread_mutex_init(&rs.lock, NULL);
    pthread_cond_init(&rs.cond, NULL);
    rs.seq = 0;
    double start = cv_monotonic();
    double total_deadline = start + cfg->total_timeout;
    double ndl = start + cfg->notary_timeout;
    double cdl = start + cfg->connect_timeout < ndl ? start + cfg->connect_timeout : ndl;
    size_t ti = 0;
    for (size_t i = 0; i < nch; i++) {
        size_t nh = relay ? 1 : chosen[i]->nhosts;
        for (size_t h = 0; h < nh; h++, ti++) {
            task *t = &tasks[ti];
            t->rs = &rs;
            t->notary = (int)i;
            cv_query *q = &t->q;
            q->bundle = chosen[i];
            q->host = &chosen[i]->hosts[h];
            q->relay = relay;
            q->bounce_port = cfg->bounce_port;
            q->target_host = host;
            q->target_port = port;
            q->wanted = forms;
            q->nwanted = nforms;
            q->ext = cfg->extended != EXT_OFF && chosen[i]->offers_extended;
            q->fallback = cfg->extended == EXT_FALLBACK && !chosen[i]->log.present;
            q->use_nonce = cfg->extended_nonce;
            q->max_skew = cfg->max_skew;
            q->clock = ctx->clock;
            q->clock_arg = ctx->clock_arg;
            q->connect_deadline = cdl;
            q->deadline = ndl;
            q->max_bytes = (size_t)cfg->max_response_bytes;
            q->cancel_fd = cancel_fd;
        }
    }
    for (size_t i = 0; i < ntasks; i++) {
        if (pthread_create(&tasks[i].th, NULL, task_main, &tasks[i]) == 0) {
            tasks[i].started = 1;
        } else {
            pthread_mutex_lock(&rs.lock);
            tasks[i].done = 1;
            tasks[i].seq = ++rs.seq;
            tasks[i].ans.o.vote = V_UNREACHABLE;
            tasks[i].ans.o.kind = "unreachable";
            pthread_mutex_unlock(&rs.lock);
        }
    }
    int finished[CONVERGE_MAX_QUORUM] = {0};
    int s = 0, f = 0, u = 0, settled = -1;
    size_t nfinished = 0;
    pthread_mutex_lock(&rs.lock);
    while (1) {
        double now = cv_monotonic();
        for (size_t i = 0; i < nch; i++) {
            if (finished[i]) continue;
            task *win = NULL, *best = NULL;
            int all_done = 1;
            for (size_t k = 0; k < ntasks; k++) {
                task *t = &tasks[k];
                if (t->notary != (int)i) continue;
                if (!t->done) {
                    all_done = 0;
                    continue;
                }
                if (!t->ans.o.vote) continue; /* no answer in time */
                if (definitive(t->ans.o.kind) && (!win || t->seq < win->seq)) win = t;
                if (!best || severity(t->ans.o.kind) > severity(best->ans.o.kind) ||
                    (severity(t->ans.o.kind) == severity(best->ans.o.kind) && t->seq < best->seq))
                    best = t;
            }
            if (!win && !all_done && now < ndl) continue;
            if (!win) win = best;
            finished[i] = 1;
            nfinished++;
            converge_notary_result *nr = &r->notaries[i];
            if (win) {
                fill_result(nr, chosen[i]->name, win->ans.o.vote, win->ans.o.kind, win->ans.o.status,
                            win->ans.o.protocol, win->ans.host, win->ans.o.detail);
            } else {
                fill_result(nr, chosen[i]->name, V_UNREACHABLE, "timeout", 0, NULL, NULL, "no answer within the notary timeout");
            }
            if (win && win->ans.o.vote == V_SUCCESS) s++;
            else if (win && win->ans.o.vote == V_FAILURE) f++;
            else u++;
        }
        if (nfinished == nch) break;
        if (cfg->early_return) {
            settled = cv_settled(cfg->agreement, s, f, u, (int)(nch - nfinished), cfg->stand_aside);
            if (settled >= 0) {
                for (size_t i = 0; i < nch; i++)
                    if (!finished[i])
                        fill_result(&r->notaries[i], chosen[i]->name, V_SKIPPED, "settled", 0, NULL, NULL,
                                    "verdict settled before this notary answered");
                break;
            }
        }
        if (now >= total_deadline) {
            for (size_t i = 0; i < nch; i++)
                if (!finished[i]) {
                    fill_result(&r->notaries[i], chosen[i]->name, V_UNREACHABLE, "timeout", 0, NULL, NULL,
                                "no answer within the total timeout");
                    u++;
                }
            break;
        }
        double until = ndl < total_deadline ? ndl : total_deadline;
        if (until <= now) until = now + 0.001;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double wait = until - now;
        ts.tv_sec += (time_t)wait;
        ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&rs.cond, &rs.lock, &ts);
    }
    pthread_mutex_unlock(&rs.lock);
    uint64_t one = 1;
    if (write(cancel_fd, &one, sizeof one) < 0) { /* the threads still end at their deadlines */ }
    for (size_t i = 0; i < ntasks; i++)
        if (tasks[i].started) pthread_join(tasks[i].th, NULL);
    for (size_t i = 0; i < ntasks; i++) free(tasks[i].ans.cache_status);
    pthread_mutex_destroy(&rs.lock);
    pthread_cond_destroy(&rs.cond);
    int verdict = settled >= 0 ? settled : cv_decide(cfg->agreement, s, f, u, cfg->stand_aside);
    r->trusted = verdict;
    snprintf(r->message, sizeof r->message, "%d of %zu notaries confirm (%s, %s)", s, nch,
             cfg->agreement == P_CONSENSUS ? "consensus" : cfg->agreement == P_MAJORITY ? "majority" : "minority",
             cfg->stand_aside ? "unreachable stand aside" : "unreachable count as failure");
    if (verdict && remember(ctx, loc, forms, nforms, ctx->clock(ctx->clock_arg), &e)) {
        rc = error_out(r, &e);
        goto out;
    }
    rc = verdict ? CONVERGE_TRUSTED : CONVERGE_NOT_TRUSTED;
out:
    if (cancel_fd >= 0) close(cancel_fd);
    free(tasks);
    for (size_t i = 0; i < nall; i++) cv_bundle_free(&all[i]);
    free(all);
    r->elapsed = cv_monotonic() - t0;
    return rc;
}

int cv_check_forms(converge_ctx *ctx, const char *host, int port, cv_fp *forms, size_t nforms, converge_result *r) {
    if (r) memset(r, 0, sizeof *r);
    cv_err e = {{0}, {0}};
    if (!ctx) return error_out(r, (cv_fail(&e, K_CONFIG, "no context"), &e));
    if (!ctx->loaded) return error_out(r, &ctx->load_err);
    if (cv_check_target(host, port, &e)) return error_out(r, &e);
    return check_forms(ctx, host, port, forms, nforms, r);
}

int converge_check(converge_ctx *ctx, const char *host, int port, const char *fingerprint, converge_result *r) {
    cv_err e = {{0}, {0}};
    if (r) memset(r, 0, sizeof *r);
    if (!ctx) return error_out(r, (cv_fail(&e, K_CONFIG, "no context"), &e));
    if (!ctx->loaded) return error_out(r, &ctx->load_err);
    if (cv_check_target(host, port, &e)) return error_out(r, &e);
    cv_fp fp;
    if (!fingerprint || cv_parse_fp(fingerprint, strlen(fingerprint), &fp, &e)) {
        if (!fingerprint) cv_fail(&e, K_FINGERPRINT, "no fingerprint");
        return error_out(r, &e);
    }
    return check_forms(ctx, host, port, &fp, 1, r);
}

/* ------------------------------------------------------------------ process-wide context */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static converge_ctx *g_ctx;

converge_ctx *cv_global_ctx(void) {
    pthread_mutex_lock(&g_lock);
    if (!g_ctx) g_ctx = converge_ctx_new(NULL);
    converge_ctx *c = g_ctx;
    pthread_mutex_unlock(&g_lock);
    return c;
}

int converge(const char *host, int port, const char *fingerprint) {
    converge_ctx *c = cv_global_ctx();
    if (!c) return CONVERGE_ERR_INTERNAL;
    return converge_check(c, host, port, fingerprint, NULL);
}

void converge_cleanup(void) {
    pthread_mutex_lock(&g_lock);
    converge_ctx_free(g_ctx);
    g_ctx = NULL;
    pthread_mutex_unlock(&g_lock);
}

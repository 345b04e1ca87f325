/* Benchmarks of libconverge (figures, not tests). Prints one JSON object per measurement:
 *   bench_converge cache [N]            cache hit of converge_check() vs a bare indexed SELECT
 *                                       on the same open connection (baseline, same run)
 *   bench_converge standin [N]          round trip to one in-process stand-in notary on loopback
 *   bench_converge real DIR HOST PORT FP [N]
 *                                       round trip to the notaries of DIR (e.g. one real
 *                                       `notary serve`; see bench.sh), cache off in DIR */
#include "../tests/fake_notary.h"

#include <signal.h>

#include "converge.h"
#include "internal.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *name, double *us, int n, int ok) {
    qsort(us, (size_t)n, sizeof *us, cmp_d);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += us[i];
    printf("{\"measurement\":\"%s\",\"n\":%d,\"ok\":%d,\"p50_us\":%.1f,\"p99_us\":%.1f,\"mean_us\":%.1f}\n", name, n,
           ok, us[n / 2], us[(int)(n * 0.99)], sum / n);
    fflush(stdout);
}

static const char *FP = "8F:C0:79:E8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2A:F7:1A:EB";

static int bench_cache(int n) {
    char dir[256];
    const char *none[1] = {NULL};
    int np[1] = {0};
    make_config(dir, sizeof dir, "{\"cache-lifetime\": 3600}", none, np, none, 0);
    char db[400];
    snprintf(db, sizeof db, "%s/cache.sqlite3", dir);
    cv_err e = {{0}, {0}};
    cv_cache *c = cv_cache_open(db, 0, &e);
    cv_cache_store(c, "www.example.org:443", FP, (int64_t)time(NULL), &e);
    double *us = malloc(sizeof(double) * (size_t)n);
    int ok = 0;
    for (int i = 0; i < n; i++) {
        int64_t ts;
        double t0 = cv_monotonic();
        ok += cv_cache_lookup(c, "www.example.org:443", FP, &ts, &e) == 1;
        us[i] = (cv_monotonic() - t0) * 1e6;
    }
    report("baseline: bare indexed SELECT on an open connection", us, n, ok);
    cv_cache_close(c);
    converge_ctx *ctx = converge_ctx_new(dir);
    converge_result r;
    ok = 0;
    for (int i = 0; i < n; i++) {
        double t0 = cv_monotonic();
        ok += converge_check(ctx, "www.example.org", 443, FP, &r) == CONVERGE_TRUSTED && r.from_cache;
        us[i] = (cv_monotonic() - t0) * 1e6;
    }
    report("cache hit, converge_check()", us, n, ok);
    ok = 0;
    for (int i = 0; i < n; i++) {
        double t0 = cv_monotonic();
        ok += converge_check(ctx, "WWW.example.org", 443, "8fc079e814777f688ba4c807d9bd67d62af71aeb", NULL) ==
              CONVERGE_TRUSTED;
        us[i] = (cv_monotonic() - t0) * 1e6;
    }
    report("cache hit, lower-case fingerprint without colons", us, n, ok);
    converge_ctx_free(ctx);
    free(us);
    remove_tree(dir);
    return 0;
}

static void run_rounds(const char *name, const char *dir, const char *host, int port, const char *fp, int n) {
    converge_ctx *ctx = converge_ctx_new(dir);
    if (converge_ctx_error(ctx)) {
        fprintf(stderr, "config: %s\n", converge_ctx_error(ctx));
        converge_ctx_free(ctx);
        return;
    }
    double *us = malloc(sizeof(double) * (size_t)n);
    int ok = 0;
    converge_result r;
    converge_check(ctx, host, port, fp, &r); /* warm-up (the notary probes once) */
    for (int i = 0; i < n; i++) {
        double t0 = cv_monotonic();
        ok += converge_check(ctx, host, port, fp, &r) == CONVERGE_TRUSTED && !r.from_cache;
        us[i] = (cv_monotonic() - t0) * 1e6;
    }
    report(name, us, n, ok);
    free(us);
    converge_ctx_free(ctx);
}

static int bench_standin(int n) {
    tls_identity notary, target;
    make_identity(&notary, "notary.test", NULL, 1);
    make_identity(&target, "target.test", NULL, 0);
    fake_server s;
    fake_start(&s, &notary, legacy_response(notary.key, 200, target.sha1, 0));
    char dir[256];
    const char *names[1] = {"Org A"};
    int ports[1] = {s.port};
    const char *pems[1] = {notary.pem};
    make_config(dir, sizeof dir, "{\"db\": null, \"early-return\": true}", names, ports, pems, 1);
    run_rounds("round trip, 1 in-process stand-in notary (pin + parse + signature)", dir, "127.0.0.1", 443, target.sha1, n);
    remove_tree(dir);
    fake_stop(&s);
    free_identity(&notary);
    free_identity(&target);
    return 0;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 2 && !strcmp(argv[1], "cache")) return bench_cache(argc > 2 ? atoi(argv[2]) : 20000);
    if (argc >= 2 && !strcmp(argv[1], "standin")) return bench_standin(argc > 2 ? atoi(argv[2]) : 300);
    if (argc >= 6 && !strcmp(argv[1], "real")) {
        run_rounds("round trip, 1 real notary serve (pin + parse + signature)", argv[2], argv[3], atoi(argv[4]), argv[5],
                   argc > 6 ? atoi(argv[6]) : 300);
        converge_cleanup();
        return 0;
    }
    fprintf(stderr, "usage: bench_converge cache [N] | standin [N] | real DIR HOST PORT FP [N]\n");
    return 2;
}

/* Consensus policies (the verdict from votes, early decisions) and the cache rule. */
#include <ctype.h>
#include <string.h>

#include "internal.h"

/* ------------------------------------------------------------------ policy, cache rule */

int cv_parse_policy(const char *s, size_t n) {
    const char *end = s + n;
    cv_trim(&s, &end);
    char t[16];
    size_t l = (size_t)(end - s);
    if (l >= sizeof t) return 0;
    for (size_t i = 0; i < l; i++) t[i] = (char)tolower((unsigned char)s[i]);
    t[l] = '\0';
    if (!strcmp(t, "consensus")) return P_CONSENSUS;
    if (!strcmp(t, "majority")) return P_MAJORITY;
    if (!strcmp(t, "minority")) return P_MINORITY;
    return 0;
}

int cv_decide(int policy, int s, int f, int u, int stand_aside) {
    int counted = s + f + (stand_aside ? 0 : u);
    if (s < 1) return 0;
    if (policy == P_CONSENSUS) return s == counted;
    if (policy == P_MAJORITY) return s >= (counted + 1) / 2;
    return 1;
}

int cv_settled(int policy, int s, int f, int u, int pending, int stand_aside) {
    int seen = -1;
    for (int ps = 0; ps <= pending; ps++)
        for (int pf = 0; pf <= pending - ps; pf++) {
            int v = cv_decide(policy, s + ps, f + pf, u + (pending - ps - pf), stand_aside);
            if (seen < 0) seen = v;
            else if (seen != v) return -1;
        }
    return seen;
}

int cv_cache_decision(int has_ts, int64_t ts, double now, int has_lifetime, double lifetime) {
    if (!has_ts) return C_MISS;
    if (ts > 100000000000LL) ts = ts >= 0 ? ts / 1000 : -((-ts + 999) / 1000);
    double age = now - (double)ts;
    if (age < -300) return C_STALE;
    if (has_lifetime && age > lifetime) return C_STALE;
    return C_HIT;
}

const char *cv_cache_name(int d) { return d == C_HIT ? "hit" : d == C_STALE ? "stale" : "miss"; }

/* Configuration directory: discovery, converge.config and the enabled bundles (file IO,
 * rules as in the reference client). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define MAX_CONFIG_BYTES (64 * 1024)
#define MAX_NOTARIES 64

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int cv_discover_dir(const char *explicit_dir, int exact, char *out, size_t outlen, cv_err *e) {
    if (explicit_dir) {
        if (!is_dir(explicit_dir)) return cv_fail(e, K_CONFIG, "configuration directory %s does not exist", explicit_dir);
        snprintf(out, outlen, "%s", explicit_dir);
        return 0;
    }
    if (exact) return cv_fail(e, K_CONFIG, "no configuration directory given");
    const char *env = getenv("CONVERGE_CONFIG_DIR");
    if (env && *env) {
        if (!is_dir(env)) return cv_fail(e, K_CONFIG, "$CONVERGE_CONFIG_DIR=%s is not a directory", env);
        snprintf(out, outlen, "%s", env);
        return 0;
    }
    char user[4096];
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) snprintf(user, sizeof user, "%s/converge", xdg);
    else snprintf(user, sizeof user, "%s/.config/converge", home && *home ? home : "~");
    if (is_dir(user)) {
        snprintf(out, outlen, "%s", user);
        return 0;
    }
    if (is_dir("/usr/local/etc/converge")) {
        snprintf(out, outlen, "%s", "/usr/local/etc/converge");
        return 0;
    }
    return cv_fail(e, K_CONFIG, "no configuration: set $CONVERGE_CONFIG_DIR, or create %s or /usr/local/etc/converge", user);
}

int cv_read_file(const char *path, size_t max, char **data, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char *buf = malloc(max + 2);
    if (!buf) {
        fclose(f);
        return -1;
    }
    size_t got = fread(buf, 1, max + 1, f);
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return -1;
    }
    buf[got] = '\0';
    *data = buf;
    *n = got;
    return got > max ? -2 : 0;
}

void cv_config_defaults(cv_config *c) {
    memset(c, 0, sizeof *c);
    c->agreement = P_MAJORITY;
    c->quorum = 3;
    c->connect_timeout = 3;
    c->notary_timeout = 5;
    c->total_timeout = 10;
    c->has_lifetime = 1;
    c->cache_lifetime = 7 * 24 * 3600;
    c->stand_aside = 1;
    c->early_return = 1;
    c->bounce_port = 4242;
    c->max_response_bytes = 256 * 1024;
    c->extended = EXT_PREFER;
    c->extended_nonce = 1;
    c->max_skew = 300;
}

static const char *const KNOWN[] = {"db", "userdb", "notaries-dir", "notary-agreement", "quorum",
                                    "connect-timeout", "notary-timeout", "total-timeout", "cache-lifetime",
                                    "stand-aside", "early-return", "bounce", "bounce-port",
                                    "max-response-bytes", "extended", "extended-nonce", "max-skew"};

static int number(const json_t *raw, const char *key, double *out, double low, double high, cv_err *e) {
    const json_t *v = json_object_get(raw, key);
    if (!v) return 0;
    double x;
    if (json_is_number(v)) x = json_number_value(v);
    else return cv_fail(e, K_CONFIG, "%s must be a number in [%g, %g]", key, low, high);
    if (!(x >= low && x <= high)) return cv_fail(e, K_CONFIG, "%s must be a number in [%g, %g]", key, low, high);
    *out = x;
    return 0;
}

static int boolean(const json_t *raw, const char *key, int *out, cv_err *e) {
    const json_t *v = json_object_get(raw, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return cv_fail(e, K_CONFIG, "%s must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

static int integer(const json_t *raw, const char *key, int64_t *out, int64_t low, int64_t high, cv_err *e) {
    const json_t *v = json_object_get(raw, key);
    if (!v) return 0;
    int64_t x;
    if (!cv_jint(v, &x) || x < low || x > high)
        return cv_fail(e, K_CONFIG, "%s must be an integer %lld..%lld", key, (long long)low, (long long)high);
    *out = x;
    return 0;
}

static int path(const char *dir, const json_t *raw, const char *key, const char *def, char *out, size_t outlen,
                cv_err *e) {
    const json_t *v = json_object_get(raw, key);
    const char *s = def;
    if (v) {
        if (json_is_null(v)) s = NULL;
        else if (!cv_jcstr(v) || json_string_length(v) == 0) return cv_fail(e, K_CONFIG, "%s must be a path", key);
        else s = json_string_value(v);
    }
    if (!s) {
        out[0] = '\0';
        return 0;
    }
    const char *home = getenv("HOME");
    if (s[0] == '~' && (s[1] == '/' || !s[1]) && home) snprintf(out, outlen, "%s%s", home, s + 1);
    else if (s[0] == '/') snprintf(out, outlen, "%s", s);
    else if (!strcmp(s, ".")) snprintf(out, outlen, "%s", dir);
    else snprintf(out, outlen, "%s/%s", dir, s);
    return 0;
}

int cv_load_config(const char *dir, cv_config *c, cv_err *e) {
    cv_config_defaults(c);
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    char file[4200];
    snprintf(file, sizeof file, "%s/converge.config", dir);
    json_t *raw = NULL;
    struct stat st;
    if (stat(file, &st) == 0) {
        char *data = NULL;
        size_t n = 0;
        int rc = cv_read_file(file, MAX_CONFIG_BYTES, &data, &n);
        if (rc == -1) return cv_fail(e, K_CONFIG, "cannot read %s", file);
        if (rc == -2) {
            free(data);
            return cv_fail(e, K_CONFIG, "%s larger than %d bytes", file, MAX_CONFIG_BYTES);
        }
        raw = cv_json_parse(data, n);
        free(data);
        if (!raw) return cv_fail(e, K_CONFIG, "%s is not JSON", file);
        if (!json_is_object(raw)) {
            json_decref(raw);
            return cv_fail(e, K_CONFIG, "%s must hold a JSON object", file);
        }
    }
    int rc = 0;
    if (raw) {
        const char *name;
        json_t *member;
        json_object_foreach(raw, name, member) {
            int ok = 0;
            for (size_t j = 0; j < sizeof KNOWN / sizeof *KNOWN; j++)
                if (!strcmp(name, KNOWN[j])) ok = 1;
            if (!ok && !rc) rc = cv_fail(e, K_CONFIG, "unknown configuration key %.60s", name);
        }
        int64_t bp = 4242, q = 3, mb = 256 * 1024, skew = 300;
        const json_t *lt = json_object_get(raw, "cache-lifetime");
        if (!rc && json_is_null(lt)) c->has_lifetime = 0;
        else if (!rc) rc = number(raw, "cache-lifetime", &c->cache_lifetime, 0, 10.0 * 365 * 86400, e);
        if (!rc) rc = integer(raw, "bounce-port", &bp, 1, 65535, e);
        if (!rc) rc = integer(raw, "quorum", &q, 1, 16, e);
        if (!rc) rc = integer(raw, "max-response-bytes", &mb, 1024, 16 * 1024 * 1024, e);
        if (!rc) rc = integer(raw, "max-skew", &skew, 0, 86400, e);
        c->bounce_port = (int)bp;
        c->quorum = (int)q;
        c->max_response_bytes = (long)mb;
        c->max_skew = skew;
        const json_t *ext = json_object_get(raw, "extended");
        if (!rc && ext) {
            if (cv_jstr_eq(ext, "off")) c->extended = EXT_OFF;
            else if (cv_jstr_eq(ext, "prefer")) c->extended = EXT_PREFER;
            else if (cv_jstr_eq(ext, "fallback")) c->extended = EXT_FALLBACK;
            else if (cv_jstr_eq(ext, "require")) c->extended = EXT_REQUIRE;
            else rc = cv_fail(e, K_CONFIG, "extended must be one of off, prefer, fallback, require");
        }
        const json_t *ag = json_object_get(raw, "notary-agreement");
        if (!rc && ag) {
            if (!json_is_string(ag)) rc = cv_fail(e, K_CONFIG, "notary-agreement must be a string");
            else if (!(c->agreement = cv_parse_policy(json_string_value(ag), json_string_length(ag))))
                rc = cv_fail(e, K_CONFIG, "notary-agreement must be consensus, majority or minority");
        }
        if (!rc) rc = number(raw, "connect-timeout", &c->connect_timeout, 0.01, 600, e);
        if (!rc) rc = number(raw, "notary-timeout", &c->notary_timeout, 0.01, 600, e);
        if (!rc) rc = number(raw, "total-timeout", &c->total_timeout, 0.01, 3600, e);
        if (!rc) rc = boolean(raw, "stand-aside", &c->stand_aside, e);
        if (!rc) rc = boolean(raw, "early-return", &c->early_return, e);
        if (!rc) rc = boolean(raw, "bounce", &c->bounce, e);
        if (!rc) rc = boolean(raw, "extended-nonce", &c->extended_nonce, e);
    }
    if (!rc) rc = path(dir, raw, "db", "cache.sqlite3", c->db, sizeof c->db, e);
    if (!rc) rc = path(dir, raw, "userdb", NULL, c->userdb, sizeof c->userdb, e);
    if (!rc) rc = path(dir, raw, "notaries-dir", ".", c->notaries_dir, sizeof c->notaries_dir, e);
    json_decref(raw);
    return rc;
}

/* ------------------------------------------------------------------ bundles on disk */

static int ends_with_notary(const char *n) {
    size_t l = strlen(n);
    return n[0] != '.' && l >= 7 && !strcmp(n + l - 7, ".notary");
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int list_dir(const char *dir, char ***names, size_t *n) {
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    size_t cap = 0;
    while ((de = readdir(d))) {
        if (!ends_with_notary(de->d_name)) continue;
        if (*n >= 4 * MAX_NOTARIES) break;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(*names, cap * sizeof *nn);
            if (!nn) break;
            *names = nn;
        }
        char *copy = strdup(de->d_name);
        if (!copy) break;
        (*names)[(*n)++] = copy;
    }
    closedir(d);
    if (*n) qsort(*names, *n, sizeof **names, cmp_str);
    return 0;
}

static void free_names(char **names, size_t n) {
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

static int has_subfolders(const char *notaries_dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/notaries-available", notaries_dir);
    if (is_dir(p)) return 1;
    snprintf(p, sizeof p, "%s/notaries-enabled", notaries_dir);
    return is_dir(p);
}

/* The 2014 libraries' layout: notaries-dir names the enabled folder itself, which holds
 * .notary files and neither notaries-available/ nor notaries-enabled/. */
int cv_flat_layout(const char *notaries_dir) {
    if (has_subfolders(notaries_dir)) return 0;
    char **names = NULL;
    size_t n = 0;
    list_dir(notaries_dir, &names, &n);
    free_names(names, n);
    return n > 0;
}

void cv_where_notaries(const char *notaries_dir, char *out, size_t size) {
    if (!notaries_dir || !*notaries_dir) snprintf(out, size, "no notaries-dir");
    else if (has_subfolders(notaries_dir)) snprintf(out, size, "%s/notaries-enabled/", notaries_dir);
    else snprintf(out, size, "%s/notaries-enabled/ and %s/*.notary", notaries_dir, notaries_dir);
}

int cv_enabled_bundles(const char *notaries_dir, cv_bundle **out, size_t *nout, cv_err *e) {
    char avail[4200], endir[4200];
    /* the 2014 layout: every bundle of the folder itself, links followed (read as files) */
    int flat = cv_flat_layout(notaries_dir);
    snprintf(avail, sizeof avail, "%s/notaries-available", notaries_dir);
    if (flat) snprintf(endir, sizeof endir, "%s", notaries_dir);
    else snprintf(endir, sizeof endir, "%s/notaries-enabled", notaries_dir);
    char **en = NULL, **av = NULL;
    size_t nen = 0, nav = 0;
    list_dir(endir, &en, &nen);
    if (!flat) list_dir(avail, &av, &nav);
    /* resolved targets of enabled symlinks; plain files in notaries-enabled/ count too */
    char **targets = calloc(nen + 1, sizeof *targets);
    char **extra = calloc(nen + 1, sizeof *extra);
    size_t nt = 0, nx = 0;
    int rc = 0;
    cv_bundle *bs = NULL;
    size_t nb = 0;
    size_t nscan = nen;
    if (!targets || !extra) {
        rc = cv_fail(e, "internal", "out of memory");
        nscan = 0;
    }
    for (size_t i = 0; i < nscan; i++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", endir, en[i]);
        struct stat lst, st;
        if (lstat(p, &lst) != 0) continue;
        if (flat && S_ISLNK(lst.st_mode) && stat(p, &st) != 0) continue; /* a dangling link */
        if (S_ISLNK(lst.st_mode) && !flat) {
            char *r = realpath(p, NULL);
            if (r) targets[nt++] = r;
        } else {
            char *copy = strdup(p);
            if (copy) extra[nx++] = copy;
        }
    }
    if (!rc && nav + nx > MAX_NOTARIES) rc = cv_fail(e, K_CONFIG, "more than %d notary bundles", MAX_NOTARIES);
    if (!rc && !(bs = calloc(nav + nx + 1, sizeof *bs))) rc = cv_fail(e, "internal", "out of memory");
    for (size_t i = 0; !rc && i < nav + nx; i++) {
        char p[4400];
        if (i < nav) snprintf(p, sizeof p, "%s/%s", avail, av[i]);
        else snprintf(p, sizeof p, "%s", extra[i - nav]);
        char *data = NULL;
        size_t n = 0;
        int r = cv_read_file(p, MAX_BUNDLE_BYTES, &data, &n);
        if (r == -1) {
            rc = cv_fail(e, K_CONFIG, "cannot read %s", p);
            break;
        }
        cv_bundle b;
        cv_err be = {{0}, {0}};
        if (cv_parse_bundle(data, n, &b, &be)) {
            free(data);
            rc = cv_fail(e, K_BUNDLE, "%.200s: %.200s", p, be.msg);
            break;
        }
        free(data);
        int enabled = i >= nav;
        if (!enabled) {
            char *r2 = realpath(p, NULL);
            for (size_t t = 0; r2 && t < nt; t++)
                if (!strcmp(r2, targets[t])) enabled = 1;
            free(r2);
        }
        int dup = 0;
        for (size_t j = 0; j < nb; j++)
            if (!strcmp(bs[j].name, b.name)) dup = 1;
        if (enabled && !dup) bs[nb++] = b;
        else cv_bundle_free(&b);
    }
    free_names(en, nen);
    free_names(av, nav);
    free_names(targets, nt);
    free_names(extra, nx);
    if (rc) {
        for (size_t j = 0; j < nb; j++) cv_bundle_free(&bs[j]);
        free(bs);
        return -1;
    }
    *out = bs;
    *nout = nb;
    return 0;
}

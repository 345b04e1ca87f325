/* The local fingerprint cache on SQLite, with the 2011 add-on's schema:
 *   fingerprints(id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER)
 *   unique index location_fingerprint on (location, fingerprint)
 * One connection per cache, kept open, WAL, busy timeout; a mutex serialises use. */
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

struct cv_cache {
    sqlite3 *db;
    sqlite3_stmt *lookup, *store;
    int readonly;
    pthread_mutex_t lock;
};

static const char *const SCHEMA[] = {
    "CREATE TABLE IF NOT EXISTS fingerprints (id integer primary key, location TEXT, "
    "fingerprint TEXT, timestamp INTEGER)",
    "CREATE UNIQUE INDEX IF NOT EXISTS location_fingerprint on fingerprints (location, fingerprint)",
};

static void mkdirs_for(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0700);
            *p = '/';
        }
    }
}

cv_cache *cv_cache_open(const char *path, int readonly, cv_err *e) {
    cv_cache *c = calloc(1, sizeof *c);
    if (!c) {
        cv_fail(e, K_CACHE_IO, "out of memory");
        return NULL;
    }
    c->readonly = readonly;
    if (!readonly) mkdirs_for(path);
    int flags = readonly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    flags |= SQLITE_OPEN_FULLMUTEX;
    if (sqlite3_open_v2(path, &c->db, flags, NULL) != SQLITE_OK) goto fail;
    sqlite3_busy_timeout(c->db, 5000);
    if (!readonly) {
        if (sqlite3_exec(c->db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL) != SQLITE_OK) goto fail;
        if (sqlite3_exec(c->db, "PRAGMA synchronous = NORMAL", NULL, NULL, NULL) != SQLITE_OK) goto fail;
        for (size_t i = 0; i < 2; i++)
            if (sqlite3_exec(c->db, SCHEMA[i], NULL, NULL, NULL) != SQLITE_OK) goto fail;
        if (sqlite3_prepare_v2(c->db,
                               "INSERT INTO fingerprints (location, fingerprint, timestamp) VALUES (?, ?, ?) "
                               "ON CONFLICT (location, fingerprint) DO UPDATE SET timestamp = excluded.timestamp",
                               -1, &c->store, NULL) != SQLITE_OK)
            goto fail;
    }
    if (sqlite3_prepare_v2(c->db, "SELECT timestamp FROM fingerprints WHERE location = ? AND fingerprint = ?", -1,
                           &c->lookup, NULL) != SQLITE_OK)
        goto fail;
    pthread_mutex_init(&c->lock, NULL);
    return c;
fail:
    cv_fail(e, K_CACHE_IO, "cannot open cache %s: %s", path, c->db ? sqlite3_errmsg(c->db) : "no memory");
    sqlite3_finalize(c->lookup);
    sqlite3_finalize(c->store);
    sqlite3_close(c->db);
    free(c);
    return NULL;
}

int cv_cache_lookup(cv_cache *c, const char *location, const char *fp, int64_t *ts, cv_err *e) {
    pthread_mutex_lock(&c->lock);
    sqlite3_reset(c->lookup);
    sqlite3_bind_text(c->lookup, 1, location, -1, SQLITE_STATIC);
    sqlite3_bind_text(c->lookup, 2, fp, -1, SQLITE_STATIC);
    int rc = sqlite3_step(c->lookup), out = 0;
    if (rc == SQLITE_ROW) {
        if (sqlite3_column_type(c->lookup, 0) == SQLITE_INTEGER) {
            *ts = sqlite3_column_int64(c->lookup, 0);
            out = 1;
        }
    } else if (rc != SQLITE_DONE) {
        out = cv_fail(e, K_CACHE_IO, "cache lookup failed: %s", sqlite3_errmsg(c->db));
    }
    sqlite3_reset(c->lookup);
    sqlite3_clear_bindings(c->lookup);
    pthread_mutex_unlock(&c->lock);
    return out;
}

int cv_cache_store(cv_cache *c, const char *location, const char *fp, int64_t ts, cv_err *e) {
    if (c->readonly) return cv_fail(e, K_CACHE_IO, "cache opened read-only");
    pthread_mutex_lock(&c->lock);
    sqlite3_reset(c->store);
    sqlite3_bind_text(c->store, 1, location, -1, SQLITE_STATIC);
    sqlite3_bind_text(c->store, 2, fp, -1, SQLITE_STATIC);
    sqlite3_bind_int64(c->store, 3, ts);
    int rc = sqlite3_step(c->store), out = 0;
    if (rc != SQLITE_DONE) out = cv_fail(e, K_CACHE_IO, "cache write failed: %s", sqlite3_errmsg(c->db));
    sqlite3_reset(c->store);
    sqlite3_clear_bindings(c->store);
    pthread_mutex_unlock(&c->lock);
    return out;
}

void cv_cache_close(cv_cache *c) {
    if (!c) return;
    sqlite3_finalize(c->lookup);
    sqlite3_finalize(c->store);
    sqlite3_close(c->db);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

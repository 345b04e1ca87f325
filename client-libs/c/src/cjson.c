/* See cjson.h. */
#include "cjson.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ arena */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    char data[];
} chunk;

struct cj_doc {
    chunk *chunks;
    cj_value *root;
};

static void *arena_alloc(cj_doc *d, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!d->chunks || d->chunks->cap - d->chunks->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        chunk *c = malloc(sizeof(chunk) + cap);
        if (!c) return NULL;
        c->next = d->chunks;
        c->used = 0;
        c->cap = cap;
        d->chunks = c;
    }
    void *p = d->chunks->data + d->chunks->used;
    d->chunks->used += n;
    memset(p, 0, n);
    return p;
}

void cj_free(cj_doc *d) {
    if (!d) return;
    chunk *c = d->chunks;
    while (c) {
        chunk *n = c->next;
        free(c);
        c = n;
    }
    free(d);
}

cj_value *cj_root(cj_doc *d) { return d ? d->root : NULL; }

/* ------------------------------------------------------------------ buffer */

static void buf_grow(cj_buf *b, size_t extra) {
    if (b->oom) return;
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return;
    }
    b->p = p;
    b->cap = cap;
}

void cj_buf_put(cj_buf *b, const void *data, size_t n) {
    buf_grow(b, n);
    if (b->oom) return;
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void cj_buf_puts(cj_buf *b, const char *s) { cj_buf_put(b, s, strlen(s)); }

void cj_buf_printf(cj_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[512];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        cj_buf_put(b, tmp, (size_t)n);
        return;
    }
    buf_grow(b, (size_t)n);
    if (b->oom) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void cj_buf_free(cj_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ------------------------------------------------------------------ UTF-8 */

/* strict UTF-8 (no surrogates, no overlongs, <= U+10FFFF); returns bytes used or 0 */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

static int utf8_valid(const char *s, size_t n) {
    size_t i = 0;
    uint32_t cp;
    while (i < n) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i, &cp);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

/* decode one code point of our internal encoding (UTF-8 plus 3-byte lone surrogates) */
static size_t wtf8_seq(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n >= 3 && s[0] == 0xED && s[1] >= 0xA0 && s[1] <= 0xBF && (s[2] & 0xC0) == 0x80) {
        *cp = 0xD000u | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    return utf8_seq(s, n, cp);
}

static void put_cp(cj_buf *b, uint32_t cp) {
    unsigned char t[4];
    size_t n;
    if (cp < 0x80) { t[0] = (unsigned char)cp; n = 1; }
    else if (cp < 0x800) { t[0] = (unsigned char)(0xC0 | (cp >> 6)); t[1] = (unsigned char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        t[0] = (unsigned char)(0xE0 | (cp >> 12));
        t[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        t[2] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        t[0] = (unsigned char)(0xF0 | (cp >> 18));
        t[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        t[3] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    cj_buf_put(b, t, n);
}

/* ------------------------------------------------------------------ parser */

typedef struct {
    const char *p, *end;
    cj_doc *doc;
    int depth;
    const char *err;
} parser;

static void ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static int lit(parser *ps, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, w, n) == 0) {
        ps->p += n;
        return 1;
    }
    return 0;
}

static cj_value *newv(parser *ps, enum cj_kind k) {
    cj_value *v = arena_alloc(ps->doc, sizeof *v);
    if (!v) {
        ps->err = "out of memory";
        return NULL;
    }
    v->kind = k;
    return v;
}

static char *dupn(parser *ps, const char *s, size_t n) {
    char *p = arena_alloc(ps->doc, n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static int isdig(char c) { return c >= '0' && c <= '9'; }

static cj_value *number(parser *ps) {
    const char *s = ps->p;
    int neg = 0;
    if (ps->p < ps->end && *ps->p == '-') {
        neg = 1;
        ps->p++;
    }
    if (lit(ps, "Infinity")) {
        cj_value *v = newv(ps, CJ_FLOAT);
        if (v) v->f = neg ? -INFINITY : INFINITY;
        return v;
    }
    if (ps->p >= ps->end || !isdig(*ps->p)) {
        ps->err = "bad number";
        return NULL;
    }
    if (*ps->p == '0') ps->p++;
    else while (ps->p < ps->end && isdig(*ps->p)) ps->p++;
    int isfloat = 0;
    if (ps->p < ps->end && *ps->p == '.' && ps->p + 1 < ps->end && isdig(ps->p[1])) {
        isfloat = 1;
        ps->p++;
        while (ps->p < ps->end && isdig(*ps->p)) ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        const char *q = ps->p + 1;
        if (q < ps->end && (*q == '+' || *q == '-')) q++;
        if (q < ps->end && isdig(*q)) {
            isfloat = 1;
            while (q < ps->end && isdig(*q)) q++;
            ps->p = q;
        }
    }
    size_t n = (size_t)(ps->p - s);
    char *text = dupn(ps, s, n);
    if (!text) {
        ps->err = "out of memory";
        return NULL;
    }
    cj_value *v = newv(ps, isfloat ? CJ_FLOAT : CJ_INT);
    if (!v) return NULL;
    if (isfloat) {
        v->f = strtod(text, NULL);
        return v;
    }
    if (strcmp(text, "-0") == 0) text[0] = '0', text[1] = '\0';
    v->num = text;
    /* fits int64? */
    const char *d = text + (text[0] == '-');
    size_t nd = strlen(d);
    if (nd <= 18) {
        int64_t x = 0;
        for (size_t i = 0; i < nd; i++) x = x * 10 + (d[i] - '0');
        v->i = text[0] == '-' ? -x : x;
        v->int_ok = 1;
    }
    return v;
}

static int hex4(const char *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

/* parse a string at ps->p (which is at '"'); result in arena */
static int str(parser *ps, char **out, size_t *outlen) {
    ps->p++; /* opening quote */
    cj_buf b = {0};
    while (1) {
        if (ps->p >= ps->end) {
            ps->err = "unterminated string";
            goto fail;
        }
        unsigned char c = (unsigned char)*ps->p;
        if (c == '"') {
            ps->p++;
            break;
        }
        if (c < 0x20) {
            ps->err = "control character in string";
            goto fail;
        }
        if (c != '\\') {
            const char *q = ps->p;
            while (q < ps->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20) q++;
            cj_buf_put(&b, ps->p, (size_t)(q - ps->p));
            ps->p = q;
            continue;
        }
        if (ps->p + 1 >= ps->end) {
            ps->err = "bad escape";
            goto fail;
        }
        char e = ps->p[1];
        ps->p += 2;
        switch (e) {
        case '"': cj_buf_put(&b, "\"", 1); break;
        case '\\': cj_buf_put(&b, "\\", 1); break;
        case '/': cj_buf_put(&b, "/", 1); break;
        case 'b': cj_buf_put(&b, "\b", 1); break;
        case 'f': cj_buf_put(&b, "\f", 1); break;
        case 'n': cj_buf_put(&b, "\n", 1); break;
        case 'r': cj_buf_put(&b, "\r", 1); break;
        case 't': cj_buf_put(&b, "\t", 1); break;
        case 'u': {
            uint32_t u;
            if (ps->end - ps->p < 4 || !hex4(ps->p, &u)) {
                ps->err = "bad \\u escape";
                goto fail;
            }
            ps->p += 4;
            if (u >= 0xD800 && u <= 0xDBFF && ps->end - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u') {
                uint32_t lo;
                if (hex4(ps->p + 2, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                    ps->p += 6;
                    u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                }
            }
            put_cp(&b, u); /* lone surrogates become 3-byte forms */
            break;
        }
        default:
            ps->err = "bad escape";
            goto fail;
        }
    }
    if (b.oom) {
        ps->err = "out of memory";
        goto fail;
    }
    *out = dupn(ps, b.p ? b.p : "", b.len);
    *outlen = b.len;
    cj_buf_free(&b);
    if (!*out) {
        ps->err = "out of memory";
        return 0;
    }
    return 1;
fail:
    cj_buf_free(&b);
    return 0;
}

static cj_value *value(parser *ps);

typedef struct {
    cj_value **v;
    char **k;
    size_t *kl;
    size_t n, cap;
} members;

static int members_add(members *m, cj_value *v, char *k, size_t kl) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 8;
        cj_value **nv = realloc(m->v, cap * sizeof *nv);
        if (!nv) return 0;
        m->v = nv;
        char **nk = realloc(m->k, cap * sizeof *nk);
        if (!nk) return 0;
        m->k = nk;
        size_t *nl = realloc(m->kl, cap * sizeof *nl);
        if (!nl) return 0;
        m->kl = nl;
        m->cap = cap;
    }
    m->v[m->n] = v;
    m->k[m->n] = k;
    m->kl[m->n] = kl;
    m->n++;
    return 1;
}

static void members_free(members *m) {
    free(m->v);
    free(m->k);
    free(m->kl);
}

static int finish_container(parser *ps, cj_value *v, members *m, int object) {
    v->n = m->n;
    if (m->n) {
        v->items = arena_alloc(ps->doc, m->n * sizeof(cj_value *));
        if (!v->items) return 0;
        memcpy(v->items, m->v, m->n * sizeof(cj_value *));
        if (object) {
            v->keys = arena_alloc(ps->doc, m->n * sizeof(char *));
            v->klens = arena_alloc(ps->doc, m->n * sizeof(size_t));
            if (!v->keys || !v->klens) return 0;
            memcpy(v->keys, m->k, m->n * sizeof(char *));
            memcpy(v->klens, m->kl, m->n * sizeof(size_t));
        }
    }
    return 1;
}

static cj_value *array(parser *ps) {
    if (++ps->depth > CJ_MAX_DEPTH) {
        ps->err = "nested too deeply";
        return NULL;
    }
    ps->p++;
    cj_value *v = newv(ps, CJ_ARRAY);
    if (!v) return NULL;
    members m = {0};
    ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
    } else {
        while (1) {
            ws(ps);
            cj_value *item = value(ps);
            if (!item) goto fail;
            if (!members_add(&m, item, NULL, 0)) {
                ps->err = "out of memory";
                goto fail;
            }
            ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == ']') {
                ps->p++;
                break;
            }
            ps->err = "expected , or ]";
            goto fail;
        }
    }
    if (!finish_container(ps, v, &m, 0)) {
        ps->err = "out of memory";
        goto fail;
    }
    members_free(&m);
    ps->depth--;
    return v;
fail:
    members_free(&m);
    return NULL;
}

static cj_value *object(parser *ps) {
    if (++ps->depth > CJ_MAX_DEPTH) {
        ps->err = "nested too deeply";
        return NULL;
    }
    ps->p++;
    cj_value *v = newv(ps, CJ_OBJECT);
    if (!v) return NULL;
    members m = {0};
    ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
    } else {
        while (1) {
            ws(ps);
            if (ps->p >= ps->end || *ps->p != '"') {
                ps->err = "expected a key";
                goto fail;
            }
            char *k;
            size_t kl;
            if (!str(ps, &k, &kl)) goto fail;
            ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                ps->err = "expected :";
                goto fail;
            }
            ps->p++;
            ws(ps);
            cj_value *item = value(ps);
            if (!item) goto fail;
            size_t i;
            for (i = 0; i < m.n; i++)
                if (m.kl[i] == kl && memcmp(m.k[i], k, kl) == 0) break;
            if (i < m.n) {
                m.v[i] = item; /* first position, last value */
            } else if (!members_add(&m, item, k, kl)) {
                ps->err = "out of memory";
                goto fail;
            }
            ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == '}') {
                ps->p++;
                break;
            }
            ps->err = "expected , or }";
            goto fail;
        }
    }
    if (!finish_container(ps, v, &m, 1)) {
        ps->err = "out of memory";
        goto fail;
    }
    members_free(&m);
    ps->depth--;
    return v;
fail:
    members_free(&m);
    return NULL;
}

static cj_value *value(parser *ps) {
    if (ps->p >= ps->end) {
        ps->err = "unexpected end";
        return NULL;
    }
    char c = *ps->p;
    cj_value *v;
    switch (c) {
    case '{': return object(ps);
    case '[': return array(ps);
    case '"': {
        v = newv(ps, CJ_STRING);
        if (!v || !str(ps, &v->s, &v->slen)) return NULL;
        return v;
    }
    case 'n':
        if (lit(ps, "null")) return newv(ps, CJ_NULL);
        break;
    case 't':
        if (lit(ps, "true")) {
            v = newv(ps, CJ_BOOL);
            if (v) v->b = 1;
            return v;
        }
        break;
    case 'f':
        if (lit(ps, "false")) return newv(ps, CJ_BOOL);
        break;
    case 'N':
        if (lit(ps, "NaN")) {
            v = newv(ps, CJ_FLOAT);
            if (v) v->f = NAN;
            return v;
        }
        break;
    case 'I':
        if (lit(ps, "Infinity")) {
            v = newv(ps, CJ_FLOAT);
            if (v) v->f = INFINITY;
            return v;
        }
        break;
    default:
        if (c == '-' || isdig(c)) return number(ps);
    }
    ps->err = "unexpected character";
    return NULL;
}

cj_doc *cj_parse(const char *data, size_t len, char *err, size_t errlen) {
    const char *msg = NULL;
    if (!utf8_valid(data, len)) {
        msg = "not UTF-8";
        goto fail;
    }
    cj_doc *d = calloc(1, sizeof *d);
    if (!d) {
        msg = "out of memory";
        goto fail;
    }
    parser ps = {data, data + len, d, 0, NULL};
    ws(&ps);
    d->root = value(&ps);
    if (d->root) {
        ws(&ps);
        if (ps.p != ps.end) {
            d->root = NULL;
            ps.err = "extra data";
        }
    }
    if (!d->root) {
        msg = ps.err ? ps.err : "bad JSON";
        cj_free(d);
        goto fail;
    }
    return d;
fail:
    if (err && errlen) snprintf(err, errlen, "%s", msg);
    return NULL;
}

/* ------------------------------------------------------------------ access */

const cj_value *cj_get(const cj_value *obj, const char *key) {
    if (!obj || obj->kind != CJ_OBJECT) return NULL;
    size_t kl = strlen(key);
    for (size_t i = 0; i < obj->n; i++)
        if (obj->klens[i] == kl && memcmp(obj->keys[i], key, kl) == 0) return obj->items[i];
    return NULL;
}

int cj_has(const cj_value *obj, const char *key) { return cj_get(obj, key) != NULL; }

int cj_is_str(const cj_value *v) { return v && v->kind == CJ_STRING; }

int cj_str_eq(const cj_value *v, const char *text) {
    return v && v->kind == CJ_STRING && v->slen == strlen(text) && memcmp(v->s, text, v->slen) == 0;
}

int cj_int(const cj_value *v, int64_t *out) {
    if (!v || v->kind != CJ_INT || !v->int_ok) return 0;
    if (out) *out = v->i;
    return 1;
}

/* ------------------------------------------------------------------ writers */

static const char HEX[] = "0123456789abcdef";

static void u_escape(cj_buf *b, uint32_t u) {
    char t[6] = {'\\', 'u', HEX[(u >> 12) & 15], HEX[(u >> 8) & 15], HEX[(u >> 4) & 15], HEX[u & 15]};
    cj_buf_put(b, t, 6);
}

static int short_escape(cj_buf *b, uint32_t cp) {
    switch (cp) {
    case '"': cj_buf_put(b, "\\\"", 2); return 1;
    case '\\': cj_buf_put(b, "\\\\", 2); return 1;
    case '\b': cj_buf_put(b, "\\b", 2); return 1;
    case '\f': cj_buf_put(b, "\\f", 2); return 1;
    case '\n': cj_buf_put(b, "\\n", 2); return 1;
    case '\r': cj_buf_put(b, "\\r", 2); return 1;
    case '\t': cj_buf_put(b, "\\t", 2); return 1;
    default: return 0;
    }
}

static void py_string(cj_buf *b, const char *s, size_t n) {
    cj_buf_put(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = wtf8_seq((const unsigned char *)s + i, n - i, &cp);
        if (!k) { cp = (unsigned char)s[i]; k = 1; }
        i += k;
        if (short_escape(b, cp)) continue;
        if (cp >= 0x20 && cp <= 0x7E) {
            char c = (char)cp;
            cj_buf_put(b, &c, 1);
        } else if (cp >= 0x10000) {
            uint32_t v = cp - 0x10000;
            u_escape(b, 0xD800 + (v >> 10));
            u_escape(b, 0xDC00 + (v & 0x3FF));
        } else {
            u_escape(b, cp);
        }
    }
    cj_buf_put(b, "\"", 1);
}

/* Python's float repr */
static void py_float(cj_buf *b, double f) {
    if (isnan(f)) { cj_buf_puts(b, "NaN"); return; }
    if (isinf(f)) { cj_buf_puts(b, f > 0 ? "Infinity" : "-Infinity"); return; }
    char t[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(t, sizeof t, "%.*e", prec - 1, f);
        if (strtod(t, NULL) == f) break;
    }
    /* t = d.ddde[+-]XX ; rebuild as repr: digits and exponent */
    char digits[32];
    size_t nd = 0;
    const char *p = t;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    if (neg) cj_buf_put(b, "-", 1);
    if (exp < -4 || exp >= 16) {
        cj_buf_put(b, digits, 1);
        if (nd > 1) {
            cj_buf_put(b, ".", 1);
            cj_buf_put(b, digits + 1, nd - 1);
        }
        cj_buf_printf(b, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        cj_buf_puts(b, "0.");
        for (int i = 0; i < -exp - 1; i++) cj_buf_put(b, "0", 1);
        cj_buf_put(b, digits, nd);
    } else {
        size_t intlen = (size_t)exp + 1;
        for (size_t i = 0; i < intlen; i++) cj_buf_put(b, i < nd ? &digits[i] : "0", 1);
        cj_buf_put(b, ".", 1);
        if (nd > intlen) cj_buf_put(b, digits + intlen, nd - intlen);
        else cj_buf_put(b, "0", 1);
    }
}

static void py_dump(const cj_value *v, const char *skip, cj_buf *b) {
    switch (v->kind) {
    case CJ_NULL: cj_buf_puts(b, "null"); break;
    case CJ_BOOL: cj_buf_puts(b, v->b ? "true" : "false"); break;
    case CJ_INT: cj_buf_puts(b, v->num); break;
    case CJ_FLOAT: py_float(b, v->f); break;
    case CJ_STRING: py_string(b, v->s, v->slen); break;
    case CJ_ARRAY:
        cj_buf_put(b, "[", 1);
        for (size_t i = 0; i < v->n; i++) {
            if (i) cj_buf_put(b, ", ", 2);
            py_dump(v->items[i], NULL, b);
        }
        cj_buf_put(b, "]", 1);
        break;
    case CJ_OBJECT: {
        cj_buf_put(b, "{", 1);
        int first = 1;
        for (size_t i = 0; i < v->n; i++) {
            if (skip && v->klens[i] == strlen(skip) && memcmp(v->keys[i], skip, v->klens[i]) == 0) continue;
            if (!first) cj_buf_put(b, ", ", 2);
            first = 0;
            py_string(b, v->keys[i], v->klens[i]);
            cj_buf_put(b, ": ", 2);
            py_dump(v->items[i], NULL, b);
        }
        cj_buf_put(b, "}", 1);
        break;
    }
    }
}

int cj_pydumps(const cj_value *v, const char *skip_key, cj_buf *out) {
    py_dump(v, skip_key, out);
    return out->oom ? -1 : 0;
}

static int canon_string(cj_buf *b, const char *s, size_t n) {
    cj_buf_put(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = wtf8_seq((const unsigned char *)s + i, n - i, &cp);
        if (!k || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
        if (short_escape(b, cp)) {
        } else if (cp < 0x20) {
            u_escape(b, cp);
        } else {
            cj_buf_put(b, s + i, k);
        }
        i += k;
    }
    cj_buf_put(b, "\"", 1);
    return 0;
}

static int key_cmp(const void *a, const void *b, const cj_value *v) {
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    size_t la = v->klens[i], lb = v->klens[j];
    int c = memcmp(v->keys[i], v->keys[j], la < lb ? la : lb);
    if (c) return c;
    return la < lb ? -1 : la > lb;
}

static int canon(const cj_value *v, cj_buf *b, int depth) {
    if (depth > 16) return -1;
    switch (v->kind) {
    case CJ_NULL: cj_buf_puts(b, "null"); return 0;
    case CJ_BOOL: cj_buf_puts(b, v->b ? "true" : "false"); return 0;
    case CJ_FLOAT: return -1;
    case CJ_INT: {
        const int64_t max = 9007199254740991LL;
        if (!v->int_ok || v->i > max || v->i < -max) return -1;
        cj_buf_printf(b, "%lld", (long long)v->i);
        return 0;
    }
    case CJ_STRING: return canon_string(b, v->s, v->slen);
    case CJ_ARRAY:
        cj_buf_put(b, "[", 1);
        for (size_t i = 0; i < v->n; i++) {
            if (i) cj_buf_put(b, ",", 1);
            if (canon(v->items[i], b, depth + 1)) return -1;
        }
        cj_buf_put(b, "]", 1);
        return 0;
    case CJ_OBJECT: {
        for (size_t i = 0; i < v->n; i++)
            for (size_t k = 0; k < v->klens[i]; k++)
                if ((unsigned char)v->keys[i][k] >= 0x80) return -1;
        size_t *order = malloc((v->n ? v->n : 1) * sizeof *order);
        if (!order) return -1;
        for (size_t i = 0; i < v->n; i++) order[i] = i;
        /* insertion sort: objects are small */
        for (size_t i = 1; i < v->n; i++) {
            size_t x = order[i], j = i;
            while (j > 0 && key_cmp(&order[j - 1], &x, v) > 0) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = x;
        }
        cj_buf_put(b, "{", 1);
        int rc = 0;
        for (size_t i = 0; i < v->n && !rc; i++) {
            if (i) cj_buf_put(b, ",", 1);
            size_t k = order[i];
            rc = canon_string(b, v->keys[k], v->klens[k]);
            cj_buf_put(b, ":", 1);
            if (!rc) rc = canon(v->items[k], b, depth + 1);
        }
        cj_buf_put(b, "}", 1);
        free(order);
        return rc;
    }
    }
    return -1;
}

int cj_canonical(const cj_value *v, cj_buf *out) {
    int rc = canon(v, out, 0);
    return rc || out->oom ? -1 : 0;
}

void cj_write_string(cj_buf *b, const char *s, size_t n) { py_string(b, s, n); }

/* A small, strict, bounded JSON reader and two writers (internal to libconverge).
 *
 * The reader follows the rules of the reference client's parser (Python's json.loads):
 * the whole input must be UTF-8; NaN, Infinity and -Infinity are numbers; raw control
 * characters inside strings are refused; a repeated key keeps its first position and its
 * last value; lone UTF-16 surrogates from \u escapes are kept (stored as 3-byte sequences).
 * Bounds: input size (caller), nesting depth (CJ_MAX_DEPTH).
 *
 * Writers: cj_pydumps (the legacy recipe (a): key order kept, ", " and ": ", ASCII-only
 * output with \uXXXX escapes, Python's float repr) and cj_canonical (RFC 8785 for the
 * extended format's subset: no floats, integers within 2**53-1, ASCII keys, depth <= 16).
 */
#ifndef CONVERGE_CJSON_H
#define CONVERGE_CJSON_H

#include <stddef.h>
#include <stdint.h>

#define CJ_MAX_DEPTH 512

enum cj_kind { CJ_NULL, CJ_BOOL, CJ_INT, CJ_FLOAT, CJ_STRING, CJ_ARRAY, CJ_OBJECT };

typedef struct cj_value cj_value;
struct cj_value {
    enum cj_kind kind;
    int b;
    char *num;         /* CJ_INT: decimal literal ("-0" normalised to "0") */
    int64_t i;         /* CJ_INT: value when it fits (int_ok) */
    int int_ok;
    double f;          /* CJ_FLOAT */
    char *s;           /* CJ_STRING: bytes (UTF-8, lone surrogates as 3-byte forms), NUL-ended */
    size_t slen;
    size_t n;          /* CJ_ARRAY / CJ_OBJECT: members */
    cj_value **items;  /* values */
    char **keys;       /* CJ_OBJECT: keys (same encoding as s) */
    size_t *klens;
};

typedef struct cj_doc cj_doc;

/* Parse; returns NULL on error (message in err, may be NULL). */
cj_doc *cj_parse(const char *data, size_t len, char *err, size_t errlen);
cj_value *cj_root(cj_doc *d);
void cj_free(cj_doc *d);

const cj_value *cj_get(const cj_value *obj, const char *key); /* NULL if absent */
int cj_has(const cj_value *obj, const char *key);
/* string member equal to text (exact bytes)? */
int cj_str_eq(const cj_value *v, const char *text);
int cj_is_str(const cj_value *v);
/* an integer that fits int64 (not bool) */
int cj_int(const cj_value *v, int64_t *out);

/* growable byte buffer */
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} cj_buf;
void cj_buf_put(cj_buf *b, const void *data, size_t n);
void cj_buf_puts(cj_buf *b, const char *s);
void cj_buf_printf(cj_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cj_buf_free(cj_buf *b);

/* Python json.dumps(value) with defaults; skip_key (may be NULL) is left out of the top
 * object. Returns 0 on success. */
int cj_pydumps(const cj_value *v, const char *skip_key, cj_buf *out);
/* RFC 8785 bytes; returns 0 on success, -1 when the value is outside the subset. */
int cj_canonical(const cj_value *v, cj_buf *out);
/* write a JSON string literal of UTF-8 bytes (for the CLI's output) */
void cj_write_string(cj_buf *b, const char *s, size_t n);

#endif

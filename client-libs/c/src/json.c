/* JSON in libconverge: the stock parser (jansson) configured strictly, the bounds scan run
 * over signed bytes before they are parsed (docs/wire-format.md, "The bounds scan"), small
 * typed accessors, a growable byte buffer and the one string writer the CLI and the extended
 * request need. No JSON is re-serialised for verification anywhere. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ------------------------------------------------------------------ bounds scan */

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int number_char(char c) { return is_digit(c) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'; }

int cv_bounds_scan(const char *p, size_t n) {
    int open = 0;
    size_t i = 0;
    while (i < n) {
        char c = p[i];
        if (c == '"') { /* a string: to the next unescaped quote */
            for (i++; i < n && p[i] != '"'; i++)
                if (p[i] == '\\') i++;
            i++;
        } else if (c == '[' || c == '{') {
            if (++open > CV_MAX_LEVELS) return -1;
            i++;
        } else if (c == ']' || c == '}') {
            open--;
            i++;
        } else if (c == '-' || is_digit(c)) { /* -?(0|[1-9][0-9]{0,14}) */
            size_t start = i, digits = start + (c == '-');
            while (i < n && number_char(p[i])) i++;
            if (i == digits || i - digits > CV_MAX_DIGITS || (p[digits] == '0' && i - digits > 1)) return -1;
            for (size_t k = digits; k < i; k++)
                if (!is_digit(p[k])) return -1;
        } else {
            i++;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ parser */

json_t *cv_json_parse(const char *data, size_t n) {
    json_error_t err;
    /* RFC 8259 as jansson reads it: UTF-8 only, no NaN/Infinity, comments, trailing commas or
     * trailing data, lone surrogates refused; a repeated member name keeps the last value;
     * "\u0000" inside a string is allowed (strings are read with their lengths) */
    return json_loadb(data, n, JSON_ALLOW_NUL, &err);
}

json_t *cv_json_parse_signed(const char *data, size_t n) {
    if (cv_bounds_scan(data, n)) return NULL;
    json_t *v = cv_json_parse(data, n);
    if (v && !json_is_object(v)) {
        json_decref(v);
        return NULL;
    }
    return v;
}

int cv_jstr_eq(const json_t *v, const char *text) {
    size_t n = strlen(text);
    return json_is_string(v) && json_string_length(v) == n && memcmp(json_string_value(v), text, n) == 0;
}

int cv_jint(const json_t *v, int64_t *out) {
    if (!json_is_integer(v)) return 0;
    *out = (int64_t)json_integer_value(v);
    return 1;
}

int cv_jcstr(const json_t *v) { return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v); }

/* ------------------------------------------------------------------ byte buffer */

static void buf_grow(cv_buf *b, size_t extra) {
    if (b->oom || b->len + extra + 1 <= b->cap) return;
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

void cv_buf_put(cv_buf *b, const void *data, size_t n) {
    buf_grow(b, n);
    if (b->oom) return;
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void cv_buf_puts(cv_buf *b, const char *s) { cv_buf_put(b, s, strlen(s)); }

void cv_buf_printf(cv_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    buf_grow(b, (size_t)n);
    if (b->oom) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void cv_buf_free(cv_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ------------------------------------------------------------------ string writer */

/* length of the well-formed UTF-8 sequence at s (1..4), 0 when it is not one */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    if (!len || n < len) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] > 0x8F))
        return 0;
    return len;
}

/* a JSON string literal of bytes: UTF-8 kept, control characters escaped, any byte that is
 * not part of well-formed UTF-8 written as the code point of the same number */
void cv_json_string(cv_buf *b, const char *s, size_t n) {
    cv_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = utf8_len((const unsigned char *)s + i, n - i);
        if (c == '"' || c == '\\') {
            char t[2] = {'\\', (char)c};
            cv_buf_put(b, t, 2);
        } else if (c == '\n') cv_buf_puts(b, "\\n");
        else if (c == '\r') cv_buf_puts(b, "\\r");
        else if (c == '\t') cv_buf_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7F || !k) cv_buf_printf(b, "\\u%04x", c);
        else {
            cv_buf_put(b, s + i, k);
            i += k;
            continue;
        }
        i++;
    }
    cv_buf_put(b, "\"", 1);
}

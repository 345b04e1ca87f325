/* The conformance CLI of libconverge (client-libs/conformance/CLIENT-CLI.md):
 *   converge-conformance info
 *   converge-conformance check --config-dir DIR HOST PORT FINGERPRINT
 *   converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] HOST PORT
 *   converge-conformance vector FILE
 * One JSON object per line on stdout; diagnostics on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "converge.h"
#include "hook.h"
#include "internal.h"
#include "vectors.h"

#define MAX_VECTOR_FILE (16 * 1024 * 1024)

static void emit(cj_buf *b) {
    fwrite(b->p, 1, b->len, stdout);
    fputc('\n', stdout);
    cj_buf_free(b);
}

static int info(void) {
    cj_buf b = {0};
    cj_buf_puts(&b, "{\"language\":\"c\",\"implementation\":\"libconverge\",\"version\":\"" CONVERGE_VERSION "\",\"schemas\":[");
    for (size_t i = 0; i < cv_schema_count(); i++) cj_buf_printf(&b, "%s\"%s\"", i ? "," : "", cv_schema(i));
    cj_buf_puts(&b, "]}");
    emit(&b);
    return 0;
}

static int vector(const char *path) {
    char *data = NULL;
    size_t n = 0;
    cj_buf b = {0};
    if (cv_read_file(path, MAX_VECTOR_FILE, &data, &n) != 0) {
        free(data);
        cj_buf_puts(&b, "{\"error\":\"usage\",\"message\":\"cannot read the vector file\"}");
        emit(&b);
        return 2;
    }
    char err[64];
    cj_doc *doc = cj_parse(data, n, err, sizeof err);
    free(data);
    if (!doc || cj_root(doc)->kind != CJ_OBJECT) {
        cj_free(doc);
        cj_buf_puts(&b, "{\"error\":\"usage\",\"message\":\"the vector file is not a JSON object\"}");
        emit(&b);
        return 2;
    }
    const cj_value *root = cj_root(doc);
    if (!cv_schema_supported(cj_get(root, "schema"))) {
        cj_free(doc);
        cj_buf_puts(&b, "{\"error\":\"unsupported-schema\"}");
        emit(&b);
        return 2;
    }
    const cj_value *tests = cj_get(root, "tests");
    for (size_t i = 0; tests && tests->kind == CJ_ARRAY && i < tests->n; i++) {
        cj_buf line = {0};
        cv_run_vector_case(root, tests->items[i], &line);
        emit(&line);
    }
    cj_free(doc);
    return 0;
}

static int check(const char *dir, const char *host, const char *port_text, const char *fp) {
    cj_buf b = {0};
    int port = 0;
    int digits = port_text[0] != '\0';
    for (const char *p = port_text; *p; p++)
        if (*p < '0' || *p > '9') digits = 0;
    if (!digits) {
        cj_buf_puts(&b, "{\"error\":\"usage\",\"message\":\"PORT must be decimal\"}");
        emit(&b);
        return 2;
    }
    port = strlen(port_text) > 6 ? 1000000 : atoi(port_text);
    converge_ctx *ctx = converge_ctx_new_exact(dir);
    if (!ctx) return 2;
    converge_result r;
    int rc = converge_check(ctx, host, port, fp, &r);
    converge_ctx_free(ctx);
    if (rc < 0) {
        cj_buf_printf(&b, "{\"error\":\"%s\",\"message\":", r.error_kind ? r.error_kind : "internal");
        cj_write_string(&b, r.message, strlen(r.message));
        cj_buf_puts(&b, "}");
        emit(&b);
        return 2;
    }
    cj_buf_printf(&b, "{\"verdict\":%s,\"cache\":%s,\"relay\":", r.trusted ? "true" : "false",
                  r.from_cache ? "true" : "false");
    if (r.relay[0]) cj_write_string(&b, r.relay, strlen(r.relay));
    else cj_buf_puts(&b, "null");
    cj_buf_puts(&b, ",\"notaries\":[");
    for (size_t i = 0; i < r.count; i++) {
        const converge_notary_result *n = &r.notaries[i];
        cj_buf_puts(&b, i ? ",{\"name\":" : "{\"name\":");
        cj_write_string(&b, n->name, strlen(n->name));
        cj_buf_printf(&b, ",\"outcome\":\"%s\",\"kind\":\"%s\",\"status\":", n->outcome, n->kind);
        if (n->status) cj_buf_printf(&b, "%d", n->status);
        else cj_buf_puts(&b, "null");
        cj_buf_puts(&b, ",\"protocol\":");
        if (n->protocol) cj_buf_printf(&b, "\"%s\"", n->protocol);
        else cj_buf_puts(&b, "null");
        cj_buf_puts(&b, "}");
        fprintf(stderr, "%s: %s %s %s\n", n->name, n->outcome, n->kind, n->detail);
    }
    cj_buf_puts(&b, "]}");
    emit(&b);
    return rc == CONVERGE_TRUSTED ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "info")) return info();
    if (argc == 3 && !strcmp(argv[1], "vector")) return vector(argv[2]);
    if (argc == 7 && !strcmp(argv[1], "check") && !strcmp(argv[2], "--config-dir"))
        return check(argv[3], argv[4], argv[5], argv[6]);
    if (argc >= 6 && !strcmp(argv[1], "hook") && !strcmp(argv[2], "--config-dir"))
        return cli_hook(argv[3], argc - 4, argv + 4);
    fprintf(stderr,
            "usage: converge-conformance check --config-dir DIR HOST PORT FINGERPRINT\n"
            "       converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] HOST PORT\n"
            "       converge-conformance vector FILE\n"
            "       converge-conformance info\n");
    return 2;
}

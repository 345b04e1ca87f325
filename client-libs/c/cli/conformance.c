/* The conformance CLI of libconverge (client-libs/conformance/CLIENT-CLI.md):
 *   converge-conformance info
 *   converge-conformance check --config-dir DIR HOST PORT FINGERPRINT
 *   converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] [--path P]
 *                        [--follow-redirects] [--first URL] [--unhooked-first] HOST PORT
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

static void emit(cv_buf *b) {
    fwrite(b->p, 1, b->len, stdout);
    fputc('\n', stdout);
    cv_buf_free(b);
}

static int info(void) {
    cv_buf b = {0};
    cv_buf_puts(&b, "{\"language\":\"c\",\"implementation\":\"libconverge\",\"version\":\"" CONVERGE_VERSION "\",\"schemas\":[");
    for (size_t i = 0; i < cv_schema_count(); i++) cv_buf_printf(&b, "%s\"%s\"", i ? "," : "", cv_schema(i));
    cv_buf_puts(&b, "]}");
    emit(&b);
    return 0;
}

static int vector(const char *path) {
    char *data = NULL;
    size_t n = 0;
    cv_buf b = {0};
    if (cv_read_file(path, MAX_VECTOR_FILE, &data, &n) != 0) {
        free(data);
        cv_buf_puts(&b, "{\"error\":\"usage\",\"message\":\"cannot read the vector file\"}");
        emit(&b);
        return 2;
    }
    json_t *root = cv_json_parse(data, n);
    free(data);
    if (!json_is_object(root)) {
        json_decref(root);
        cv_buf_puts(&b, "{\"error\":\"usage\",\"message\":\"the vector file is not a JSON object\"}");
        emit(&b);
        return 2;
    }
    if (!cv_schema_supported(json_object_get(root, "schema"))) {
        json_decref(root);
        cv_buf_puts(&b, "{\"error\":\"unsupported-schema\"}");
        emit(&b);
        return 2;
    }
    const json_t *tests = json_object_get(root, "tests");
    for (size_t i = 0; i < json_array_size(tests); i++) {
        cv_buf line = {0};
        cv_run_vector_case(root, json_array_get(tests, i), &line);
        emit(&line);
    }
    json_decref(root);
    return 0;
}

static int check(const char *dir, const char *host, const char *port_text, const char *fp) {
    cv_buf b = {0};
    int port = 0;
    int digits = port_text[0] != '\0';
    for (const char *p = port_text; *p; p++)
        if (*p < '0' || *p > '9') digits = 0;
    if (!digits) {
        cv_buf_puts(&b, "{\"error\":\"usage\",\"message\":\"PORT must be decimal\"}");
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
        cv_buf_printf(&b, "{\"error\":\"%s\",\"message\":", r.error_kind ? r.error_kind : "internal");
        cv_json_string(&b, r.message, strlen(r.message));
        cv_buf_puts(&b, "}");
        emit(&b);
        return 2;
    }
    cv_buf_printf(&b, "{\"verdict\":%s,\"cache\":%s,\"relay\":", r.trusted ? "true" : "false",
                  r.from_cache ? "true" : "false");
    if (r.relay[0]) cv_json_string(&b, r.relay, strlen(r.relay));
    else cv_buf_puts(&b, "null");
    cv_buf_puts(&b, ",\"notaries\":[");
    for (size_t i = 0; i < r.count; i++) {
        const converge_notary_result *n = &r.notaries[i];
        cv_buf_puts(&b, i ? ",{\"name\":" : "{\"name\":");
        cv_json_string(&b, n->name, strlen(n->name));
        cv_buf_printf(&b, ",\"outcome\":\"%s\",\"kind\":\"%s\",\"status\":", n->outcome, n->kind);
        if (n->status) cv_buf_printf(&b, "%d", n->status);
        else cv_buf_puts(&b, "null");
        cv_buf_puts(&b, ",\"protocol\":");
        if (n->protocol) cv_buf_printf(&b, "\"%s\"", n->protocol);
        else cv_buf_puts(&b, "null");
        cv_buf_puts(&b, "}");
        fprintf(stderr, "%s: %s %s %s\n", n->name, n->outcome, n->kind, n->detail);
    }
    cv_buf_puts(&b, "]}");
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
            "       converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] [--path P]\n"
            "                            [--follow-redirects] [--first URL] [--unhooked-first] HOST PORT\n"
            "       converge-conformance vector FILE\n"
            "       converge-conformance info\n");
    return 2;
}

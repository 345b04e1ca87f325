/* Running the shared test vectors (see vectors.c). */
#ifndef CONVERGE_VECTORS_H
#define CONVERGE_VECTORS_H
#include <jansson.h>

#include "internal.h"
size_t cv_schema_count(void);
const char *cv_schema(size_t i);
int cv_schema_supported(const json_t *schema);
/* append one JSON object (no newline) with this implementation's output for case c */
int cv_run_vector_case(const json_t *doc, const json_t *c, cv_buf *out);
#endif

/* Running the shared test vectors (see vectors.c). */
#ifndef CONVERGE_VECTORS_H
#define CONVERGE_VECTORS_H
#include "cjson.h"
size_t cv_schema_count(void);
const char *cv_schema(size_t i);
int cv_schema_supported(const cj_value *schema);
/* append one JSON object (no newline) with this implementation's output for case c */
int cv_run_vector_case(const cj_value *doc, const cj_value *c, cj_buf *out);
#endif

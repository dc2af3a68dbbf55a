/* libFuzzer harness: the strict JSON reader (formats/json.h). On success the
 * DOM is written back with the JSON writer, which must produce a document
 * the reader accepts and which re-serialises to the same bytes. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "formats/json.h"
#include "fuzz/fuzz_common.h"

static void json_emit(drift_json_buf *b, const drift_json_value *v) {
    switch (v->type) {
    case DRIFT_JSON_NULL: drift_json_buf_add_null(b); break;
    case DRIFT_JSON_BOOL: drift_json_buf_add_bool(b, v->boolean); break;
    case DRIFT_JSON_NUMBER:
        if (v->is_int && !(v->integer == 0 && signbit(v->number))) /* "-0" keeps its sign as a double */
            drift_json_buf_add_int(b, v->integer);
        else
            drift_json_buf_add_number(b, v->number);
        break;
    case DRIFT_JSON_STRING: drift_json_buf_add_string_n(b, v->str, v->str_len); break;
    case DRIFT_JSON_ARRAY:
        drift_json_buf_begin_array(b);
        for (size_t i = 0; i < v->n_items; i++) json_emit(b, &v->items[i]);
        drift_json_buf_end_array(b);
        break;
    case DRIFT_JSON_OBJECT:
        drift_json_buf_begin_object(b);
        for (size_t i = 0; i < v->n_members; i++) {
            drift_json_buf_add_key(b, v->members[i].key);
            json_emit(b, &v->members[i].value);
        }
        drift_json_buf_end_object(b);
        break;
    }
}

static char *json_serialise(const drift_json_value *v, int *status) {
    drift_json_buf b;
    drift_json_buf_init(&b);
    json_emit(&b, v);
    *status = drift_json_buf_status(&b);
    return drift_json_buf_take(&b);
}

/* Keys with an embedded NUL cannot be written back through add_key (a C
 * string); such documents skip the round trip. */
static int json_keys_have_nul(const drift_json_value *v) {
    if (v->type == DRIFT_JSON_ARRAY)
        for (size_t i = 0; i < v->n_items; i++)
            if (json_keys_have_nul(&v->items[i])) return 1;
    if (v->type == DRIFT_JSON_OBJECT)
        for (size_t i = 0; i < v->n_members; i++)
            if (strlen(v->members[i].key) != v->members[i].key_len || json_keys_have_nul(&v->members[i].value)) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    drift_json_value *root = NULL;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_json_parse((const char *)data, size, "fuzz", &root, &err);
    fuzz_report("json", rc, &err);
    FUZZ_CHECK(fuzz_status_ok(rc), "rc %d: %s: %s", rc, err.where, err.msg);
    if (rc != DRIFT_OK) {
        FUZZ_CHECK(root == NULL, "root set on failure");
        FUZZ_CHECK(err.msg[0] != '\0', "failure without a message (rc %d)", rc);
        return 0;
    }
    FUZZ_CHECK(root != NULL, "no root on success");
    char got[64];
    drift_json_describe(root, got, sizeof got);
    if (!json_keys_have_nul(root)) {
        int st1 = 0, st2 = 0;
        char *s1 = json_serialise(root, &st1);
        FUZZ_CHECK(s1 != NULL, "writer failed (status %d) on a document the reader accepted", st1);
        drift_json_value *again = NULL;
        rc = drift_json_parse(s1, strlen(s1), "fuzz-rt", &again, &err);
        FUZZ_CHECK(rc == DRIFT_OK, "reader rejects the writer's output (%s: %s): %.200s", err.where, err.msg, s1);
        char *s2 = json_serialise(again, &st2);
        FUZZ_CHECK(s2 != NULL && strcmp(s1, s2) == 0, "round trip not stable:\n%.300s\n%.300s", s1,
                   s2 ? s2 : "(null)");
        free(s1);
        free(s2);
        drift_json_free(again);
    }
    drift_json_free(root);
    return 0;
}

/* A small strict JSON (RFC 8259) reader with positions, and a JSON writer.
 *
 * Reader: drift_json_parse builds a DOM in which every value (and every
 * object key) records the 1-based line and column where it starts, so that
 * semantic checks in other modules can name "file:line:col". Columns count
 * Unicode code points (a tab counts as one). Objects keep their members in
 * written order. Strictness: no trailing commas, no comments, no NaN or
 * Infinity, no single quotes, no leading zeros, no control characters inside
 * strings, valid UTF-8 only, \uXXXX escapes with surrogate pairs checked,
 * duplicate object keys rejected (naming both positions). A leading UTF-8 BOM
 * is skipped. Limits: DRIFT_JSON_MAX_INPUT bytes, DRIFT_JSON_MAX_DEPTH
 * nesting levels, DRIFT_JSON_MAX_VALUES values. Errors are DRIFT_E_INPUT
 * (malformed, or over a limit, naming it) or DRIFT_E_NOMEM (an allocation), with where =
 * "source:line:col" and a message saying what was expected and what was found.
 *
 * Writer: drift_json_buf builds one JSON document into a growable buffer,
 * inserting commas itself. Errors (allocation failure, a key outside an
 * object, a value where a key is due, unbalanced ends) are sticky: every later
 * call is a no-op and drift_json_buf_take returns NULL. */
#ifndef DRIFT_FORMATS_JSON_H
#define DRIFT_FORMATS_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "formats/err.h"

#define DRIFT_JSON_MAX_INPUT ((size_t)64 << 20) /* bytes (a /graph may be 64 MiB: docs/format.md) */
#define DRIFT_JSON_MAX_DEPTH 64                 /* nested arrays/objects */
#define DRIFT_JSON_MAX_VALUES ((size_t)1 << 22) /* values in one document */

/* ---- reader ------------------------------------------------------------ */

typedef enum drift_json_type {
    DRIFT_JSON_NULL = 0,
    DRIFT_JSON_BOOL = 1,
    DRIFT_JSON_NUMBER = 2,
    DRIFT_JSON_STRING = 3,
    DRIFT_JSON_ARRAY = 4,
    DRIFT_JSON_OBJECT = 5
} drift_json_type;

typedef struct drift_json_member drift_json_member;

/* A DOM node. Read-only for users; everything it points to is owned by the
 * document and freed by drift_json_free on the root. Only the fields of its
 * type are meaningful. */
typedef struct drift_json_value {
    drift_json_type type;
    int line, col;               /* 1-based position of the first character */
    int boolean;                 /* BOOL: 0 or 1 */
    double number;               /* NUMBER: strtod of the literal (finite) */
    int is_int;                  /* NUMBER: written without fraction/exponent and fits int64 */
    int64_t integer;             /* NUMBER: the value when is_int */
    char *str;                   /* STRING: decoded UTF-8, NUL-terminated */
    size_t str_len;              /* STRING: bytes, excluding the NUL (may hold \u0000) */
    struct drift_json_value *items; /* ARRAY: n_items values, in order */
    size_t n_items;
    drift_json_member *members;  /* OBJECT: n_members members, in written order */
    size_t n_members;
} drift_json_value;

struct drift_json_member {
    char *key;                   /* decoded UTF-8, NUL-terminated */
    size_t key_len;              /* bytes, excluding the NUL */
    int line, col;               /* position of the key's opening quote */
    drift_json_value value;
};

/* Parses text[0..len) (need not be NUL-terminated). On success *out is a new
 * document owned by the caller (free with drift_json_free). source_name
 * (NULL: "<json>") prefixes positions in errors. On failure *out is NULL. */
int drift_json_parse(const char *text, size_t len, const char *source_name,
                     drift_json_value **out, drift_err *err);
/* Reads path (at most DRIFT_JSON_MAX_INPUT bytes) and parses it, with path as
 * source name. *out as for drift_json_parse. Unreadable file: DRIFT_E_IO. */
int drift_json_parse_file(const char *path, drift_json_value **out, drift_err *err);
/* Frees a document returned by drift_json_parse (NULL allowed). Only call it
 * on a root, never on a value inside a document. */
void drift_json_free(drift_json_value *root);

/* The member value of obj named key, or NULL (also when obj is NULL or not an
 * object). Borrowed pointer into the document. */
const drift_json_value *drift_json_object_get(const drift_json_value *obj, const char *key);
/* The member of obj named key, or NULL; borrowed. */
const drift_json_member *drift_json_object_member(const drift_json_value *obj, const char *key);
/* "null", "boolean", "number", "string", "array", "object". Static string. */
const char *drift_json_type_name(drift_json_type t);
/* Short description of v for "got ..." messages into buf (always
 * NUL-terminated): a string with quotes (truncated), "number 3",
 * "true", "null", "an array", "an object". Returns buf. */
const char *drift_json_describe(const drift_json_value *v, char *buf, size_t bufsz);

/* 1 if s[0..n) is valid UTF-8 (RFC 3629: no overlongs, no surrogates). */
int drift_json_utf8_valid(const char *s, size_t n);

/* ---- writer ------------------------------------------------------------ */

typedef struct drift_json_buf {
    char *data;                  /* owned; NUL-terminated while len > 0 */
    size_t len, cap;
    int status;                  /* DRIFT_OK, or the first error (sticky) */
    int indent;                  /* 0: compact; n > 0: pretty, n spaces per level */
    int depth;                   /* open containers */
    unsigned char kind[DRIFT_JSON_MAX_DEPTH + 1]; /* per level: 'a' array, 'o' object */
    size_t count[DRIFT_JSON_MAX_DEPTH + 1];       /* per level: values (arrays) or keys (objects) written */
    int want_value;              /* a key was written, its value is due */
    int done;                    /* the top-level value is complete */
} drift_json_buf;

/* Initialises an empty compact writer (owns nothing yet). */
void drift_json_buf_init(drift_json_buf *b);
/* Initialises an empty writer that pretty-prints with indent spaces per level
 * (indent <= 0: compact). */
void drift_json_buf_init_pretty(drift_json_buf *b, int indent);
/* Frees what b owns (NULL allowed); b is left initialised and empty. */
void drift_json_buf_free(drift_json_buf *b);
/* Hands the finished document to the caller: a malloc'd NUL-terminated string
 * the caller frees, or NULL if an error occurred or the document is
 * incomplete (no value, or containers left open). b is left empty either way. */
char *drift_json_buf_take(drift_json_buf *b);
/* DRIFT_OK or the sticky error code. */
int drift_json_buf_status(const drift_json_buf *b);

/* Structure. Each returns the sticky status (DRIFT_OK if all went well). */
int drift_json_buf_begin_object(drift_json_buf *b);
int drift_json_buf_end_object(drift_json_buf *b);
int drift_json_buf_begin_array(drift_json_buf *b);
int drift_json_buf_end_array(drift_json_buf *b);
/* An object key (escaped); only where a key is due. key is borrowed. */
int drift_json_buf_add_key(drift_json_buf *b, const char *key);

/* Values (in an array, after a key, or as the top-level value). Strings are
 * borrowed and escaped (", \, control characters; invalid UTF-8 bytes become
 * U+FFFD); a NULL string writes null. Doubles print with %.17g (round trip);
 * NaN and +-inf print as null. */
int drift_json_buf_add_string(drift_json_buf *b, const char *s);
int drift_json_buf_add_string_n(drift_json_buf *b, const char *s, size_t n);
int drift_json_buf_add_number(drift_json_buf *b, double x);
int drift_json_buf_add_int(drift_json_buf *b, int64_t x);
int drift_json_buf_add_uint(drift_json_buf *b, uint64_t x);
int drift_json_buf_add_bool(drift_json_buf *b, int x);
int drift_json_buf_add_null(drift_json_buf *b);
/* A pre-serialised JSON value, inserted verbatim (the caller vouches that it
 * is one valid JSON value, e.g. from drift_plan_to_json). */
int drift_json_buf_add_raw(drift_json_buf *b, const char *json);
/* A parsed value v (borrowed), written as it is, containers and all. */
int drift_json_buf_add_value(drift_json_buf *b, const drift_json_value *v);

/* Key + value in one call, for objects. */
int drift_json_buf_field_string(drift_json_buf *b, const char *key, const char *s);
int drift_json_buf_field_number(drift_json_buf *b, const char *key, double x);
int drift_json_buf_field_int(drift_json_buf *b, const char *key, int64_t x);
int drift_json_buf_field_bool(drift_json_buf *b, const char *key, int x);
int drift_json_buf_field_null(drift_json_buf *b, const char *key);

#endif

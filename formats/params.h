/* Parameter tables: the model's parameters (root-relative FQN, shape) and its
 * FSDP wrap groups, the input of plan compilation (DESIGN.md s5) and of the
 * trace's /params. Produced by a model family (replay/models) or parsed from a
 * text dump of named_parameters() (--params FILE). */
#ifndef DRIFT_FORMATS_PARAMS_H
#define DRIFT_FORMATS_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "formats/err.h"

#define DRIFT_MAX_DIMS 8
#define DRIFT_MAX_FQN 512

/* Special values of drift_param_table_add's wrap argument. */
#define DRIFT_PARAM_WRAP_AUTO (-1)  /* derive from the wraps' FQNs (first dotted prefix), else root */
#define DRIFT_PARAM_WRAP_ROOT (-2)  /* the root, even if a wrap's FQN is a prefix */
#define DRIFT_PARAM_MAX_WRAPS 1000000

typedef struct drift_param_info {
    char *fqn;                       /* owned; root-relative FQN */
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t numel;                   /* product of shape, checked against overflow */
    int wrap;                        /* index into the table's wraps, or -1 for the root */
} drift_param_info;

typedef struct drift_param_table {
    drift_param_info *params;        /* owned array of n */
    size_t n, cap;
    char **wraps;                    /* owned: module FQNs that get their own fully_shard, */
    size_t n_wraps, cap_wraps;       /* in call order; the root call is implicit and last */
    size_t *slots;                   /* owned: open-addressing index of params by fqn (row + 1, 0 empty), */
    size_t n_slots;                  /* a power of two > 2n; maintained by drift_param_table_add only */
} drift_param_table;

/* Zeroes t. */
void drift_param_table_init(drift_param_table *t);
/* Frees what t owns (NULL allowed); t is left initialised and empty. */
void drift_param_table_free(drift_param_table *t);
/* Appends a wrap module FQN; returns its index in *index. */
int drift_param_table_add_wrap(drift_param_table *t, const char *wrap_fqn, int *index, drift_err *err);
/* Appends a parameter (fqn copied). wrap = -1 (DRIFT_PARAM_WRAP_AUTO) means
 * "derive": the first wrap in call order whose FQN is a dotted prefix of fqn,
 * else the root; DRIFT_PARAM_WRAP_ROOT puts it in the root explicitly; an
 * index >= 0 names the wrap explicitly (it need not be a prefix of fqn; see
 * drift_param_table_local_name). Rejects duplicate FQNs, empty names, names of
 * DRIFT_MAX_FQN bytes or more, names with whitespace/control characters or an
 * empty dotted component, ndim > DRIFT_MAX_DIMS, negative dims and numel
 * overflow (> 2^48 elements). ndim 0 is a scalar (numel 1). */
int drift_param_table_add(drift_param_table *t, const char *fqn, int ndim, const int64_t *shape,
                          int wrap, drift_err *err);
/* Index of fqn or -1 (hashed: O(1) expected). */
long drift_param_table_find(const drift_param_table *t, const char *fqn);
/* The wrap-local FQN of parameter i: fqn without the "<wrap>." prefix; the
 * full fqn for root parameters and for parameters given an explicit wrap that
 * is not a dotted prefix of their fqn. A pointer into the table's storage
 * (NULL if i is out of range). */
const char *drift_param_table_local_name(const drift_param_table *t, size_t i);

/* Parses a named_parameters() dump, one parameter per line:
 *     FQN  SHAPE  [WRAP]
 * SHAPE is "1536", "1,6,1536", "(1, 6, 1536)", "[1, 6, 1536]" or
 * "torch.Size([1, 6, 1536])"; WRAP is the wrap module FQN, or "-"/"root" for
 * the root (omitted: derived from "# wraps:" lines, else root). Blank lines and
 * lines starting with '#' are comments, except "# wraps: A B C" which declares
 * wraps in call order (all such lines are read first, wherever they are). A
 * WRAP column naming an undeclared wrap appends it to the wraps, in order of
 * first appearance, after the declared ones. "(1536,)" and "()" (scalar) are
 * accepted too. t must be empty (initialised); on error it stays empty.
 * Errors name path:line:col and what was expected. */
int drift_param_table_parse_file(drift_param_table *t, const char *path, drift_err *err);
int drift_param_table_parse_text(drift_param_table *t, const char *text, size_t len,
                                 const char *source_name, drift_err *err);

#endif

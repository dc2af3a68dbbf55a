/* Parity per op-registry row (issue 31): the ATen-level cases of
 * tests/data/parity/aten_cases.jsonl (made by tests/parity/aten_cases.py),
 * each a tiny drift-aten-graph document with a "parity" member saying how
 * its inputs are drawn and how close each backend must be. Each case is
 * imported as a replay imports a captured graph and run under an fp32 plan
 * (and a bf16 autocast plan where the case says so) on the ref backend, the
 * fp64 oracle (every op in fp64 on ref) and the other backends given:
 *   - "exact" cases (views, casts, integer and bool ops, indexing,
 *     comparisons, fills): every backend gives the ref backend's bits;
 *   - the others: NMSE against the oracle within the case's bound (0: the
 *     default of the output dtype; a bf16 plan: 1e-4), non-finite values in
 *     the oracle's places.
 * Every backend must give the captured shape. Plain C, no cmocka (the GPU
 * test runs it too). */
#ifndef DRIFT_TESTS_ATEN_PARITY_H
#define DRIFT_TESTS_ATEN_PARITY_H

#include <stdio.h>

#include "formats/err.h"
#include "kernels/backend.h"

typedef struct aten_parity_set aten_parity_set;

/* Loads the cases (one JSON document a line). Caller frees with aten_parity_free. */
int aten_parity_load(const char *path, aten_parity_set **out, drift_err *err);
void aten_parity_free(aten_parity_set *s);
int aten_parity_count(const aten_parity_set *s);

/* The registry rows (of names[0..n)) that no case's graph calls: their count,
 * the names space-separated into buf. A case covers the row of every node
 * target it holds (aten_registry_find). names NULL: the registry's rows. */
int aten_parity_missing_rows(const aten_parity_set *s, const char *const *names, int n, char *buf, size_t cap);

typedef struct aten_parity_backend {
    const char *spec; /* "cpu", "cuda", "cuda:kernels=torch", ... */
    drift_backend *be;
    int device;       /* device NMSE bounds */
} aten_parity_backend;

typedef struct aten_parity_stats {
    long cases, runs, failed;
} aten_parity_stats;

typedef struct aten_parity_opts {
    const char *only; /* run only cases whose name starts with this (NULL: all) */
    FILE *dump;       /* NULL, or: one JSON line per case and plan with the inputs and
                       * the output of backend dump_spec (tests/gpu/aten_parity.py reads it) */
    const char *dump_spec;
    int verbose;      /* a line per case */
} aten_parity_opts;

/* Runs every case on ref, the oracle and bes[0..n); prints a FAIL line per
 * failed check (case, plan, backend, why) to stdout. */
aten_parity_stats aten_parity_run(const aten_parity_set *s, const aten_parity_backend *bes, int n,
                                  const aten_parity_opts *o);

#endif

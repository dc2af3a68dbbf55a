/* The op-parity harness (tests/parity/parity.h) on a GPU: the whole table
 * on ref (the oracle), cpu, and every cuda kernel variant (backend spec
 * options, kernels/cuda/cuda_backend.h): the defaults, 64-bit indexing,
 * norms without shared-memory rows, the unfused and the naive GEMM, small
 * attention scratch budgets (query-row blocks; chunks of 4 heads then a
 * ragged one for the (2,3,17,33,64,64) bf16 case) and the unfused attention
 * path. Each device result must match the cpu bit for bit or within the
 * row's ULPs, and the fp64 oracle within its NMSE bound. Then the fp64
 * table (tests/parity/f64.c) on all of them plus cuda:kernels=torch and
 * ref-cuda: every fp64 op bit for bit against ref. Then the ATen-level
 * cases, one or more per op-registry row (tests/parity/aten_parity.h,
 * tests/data/parity/aten_cases.jsonl), on cuda and cuda:kernels=torch against
 * ref and the fp64 oracle (bitwise where the op is exact, else the case's
 * NMSE bound); ATEN_PARITY_DUMP=FILE writes the torch profile's outputs
 * there for tests/gpu/aten_parity.py. Skips (77) without a GPU.
 * Usage: test_parity [FAMILY-PREFIX | aten [CASE-PREFIX]] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/parity/aten_parity.h"
#include "tests/parity/parity.h"

/* The ATen-level cases on cuda and its torch profile; returns the failures. */
static long run_aten_cases(const char *only) {
    const char *src = getenv("DRIFT_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/parity/aten_cases.jsonl", src ? src : ".");
    drift_err err;
    drift_err_clear(&err);
    aten_parity_set *set = NULL;
    if (aten_parity_load(path, &set, &err)) {
        printf("FAIL aten_parity: %s: %s (DRIFT_SRC)\n", err.where, err.msg);
        return 1;
    }
    static const char *specs[] = {"cuda", "cuda:kernels=torch"};
    aten_parity_backend bes[2];
    int n = 0;
    long failed = 0;
    for (int i = 0; i < 2; i++) {
        drift_err_clear(&err);
        if (drift_backend_create(specs[i], &bes[n].be, &err)) {
            printf("FAIL aten_parity: cannot create backend '%s': %s\n", specs[i], err.msg);
            failed++;
            continue;
        }
        bes[n].spec = specs[i];
        bes[n].device = 1;
        n++;
    }
    const char *dump = getenv("ATEN_PARITY_DUMP");
    aten_parity_opts o = {only, dump && *dump ? fopen(dump, "w") : NULL, "cuda:kernels=torch", getenv("ATEN_PARITY_VERBOSE") != NULL};
    if (dump && *dump && !o.dump) {
        printf("FAIL aten_parity: cannot write %s (ATEN_PARITY_DUMP)\n", dump);
        failed++;
    }
    aten_parity_stats st = aten_parity_run(set, bes, n, &o);
    if (o.dump) fclose(o.dump);
    printf("aten_parity: %ld cases, %ld runs on ref, cpu, cuda, cuda:kernels=torch; %ld cases failed\n", st.cases, st.runs,
           st.failed);
    for (int i = 0; i < n; i++) drift_backend_free(bes[i].be);
    aten_parity_free(set);
    return failed + st.failed + (st.cases == 0);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "aten")) { /* the ATen-level cases alone */
        drift_err err;
        drift_err_clear(&err);
        drift_backend *be = NULL;
        if (drift_backend_create("cuda", &be, &err)) {
            printf("SKIP: test_parity: no CUDA device (%s)\n", err.msg);
            return err.code == DRIFT_E_UNSUPPORTED ? 77 : 1;
        }
        drift_backend_free(be);
        return run_aten_cases(argc > 2 ? argv[2] : NULL) ? 1 : 0;
    }
    static const char *specs[] = {"ref",
                                  "cpu",
                                  "cuda",
                                  "cuda:i64=1",
                                  "cuda:norm_smem=0",
                                  "cuda:gemm=unfused",
                                  "cuda:gemm=naive",
                                  "cuda:attn_scratch=4096",
                                  "cuda:attn_scratch=35037",
                                  "cuda:attention=unfused"};
    enum { N = (int)(sizeof specs / sizeof specs[0]) };
    parity_backend bes[N];
    int n = 0, rc = 0;
    for (int i = 0; i < N; i++) {
        drift_err err;
        drift_err_clear(&err);
        drift_backend *be = NULL;
        if (drift_backend_create(specs[i], &be, &err)) {
            if (i == 2 && err.code == DRIFT_E_UNSUPPORTED) {
                printf("SKIP: test_parity: no CUDA device (%s)\n", err.msg);
                for (int j = 0; j < n; j++) drift_backend_free(bes[j].be);
                return 77;
            }
            fprintf(stderr, "test_parity: cannot create backend '%s': %s\n", specs[i], err.msg);
            rc = 1;
            continue;
        }
        bes[n].spec = specs[i];
        bes[n].be = be;
        bes[n].device = i >= 2;
        n++;
    }
    parity_stats st = parity_run(bes, n, argc > 1 ? argv[1] : NULL);
    if (argc <= 1) { /* the fp64 table, bitwise against ref: these backends plus the torch profile and ref-cuda */
        static const char *extra[] = {"cuda:kernels=torch", "ref-cuda"};
        parity_backend all[N + 2];
        int m = 0;
        for (int i = 0; i < n; i++) all[m++] = bes[i];
        for (int i = 0; i < 2; i++) {
            drift_err err;
            drift_err_clear(&err);
            drift_backend *be = NULL;
            if (drift_backend_create(extra[i], &be, &err)) {
                fprintf(stderr, "test_parity: cannot create backend '%s': %s\n", extra[i], err.msg);
                rc = 1;
                continue;
            }
            all[m].spec = extra[i];
            all[m].be = be;
            all[m].device = 1;
            m++;
        }
        parity_stats s64 = parity_run_f64(all, m);
        st.cases += s64.cases, st.checks += s64.checks, st.failed += s64.failed;
        for (int i = n; i < m; i++) drift_backend_free(all[i].be);
    }
    for (int i = 0; i < n; i++) drift_backend_free(bes[i].be);
    const long aten_failed = argc <= 1 ? run_aten_cases(NULL) : 0; /* failed ATen cases count as failed checks */
    printf("test_parity: %ld passed, %ld failed (%ld cases on %d backends, %ld skipped as unsupported)\n",
           st.checks - st.failed, st.failed + rc + aten_failed, st.cases, n, st.skipped);
    return rc || st.failed || aten_failed || st.cases == 0 ? 1 : 0;
}

/* The op-parity harness (tests/parity/parity.h) over the backends of this
 * machine: ref (the oracle) and cpu always, cuda too when this build has
 * it and a device is present (otherwise it says so and runs without it),
 * and cpu:threads=1 as a second fast backend checked against cpu.
 * tests/gpu/test_parity.c runs the same table over every cuda kernel
 * variant. Plain C (no cmocka). Usage: test_parity [FAMILY-PREFIX] */
#include <stdio.h>

#include "tests/parity/parity.h"

int main(int argc, char **argv) {
    /* cpu:threads=1 runs as a second fast backend: it must match the
       default cpu bit for bit on every op, the GEMMs included (drift's own
       GEMM: its order depends on K alone, kernels/cpu/cpu_gemm.h) */
    static const char *specs[] = {"ref", "cpu", "cpu:threads=1", "cuda"};
    enum { N = (int)(sizeof specs / sizeof specs[0]) };
    parity_backend bes[N];
    int n = 0;
    for (int i = 0; i < N; i++) {
        drift_err err;
        drift_err_clear(&err);
        drift_backend *be = NULL;
        if (drift_backend_create(specs[i], &be, &err)) {
            if (i == 3 && err.code == DRIFT_E_UNSUPPORTED) {
                printf("NOTE: no cuda backend here (%s): tests/gpu/test_parity.c covers it on a GPU\n", err.msg);
                continue;
            }
            fprintf(stderr, "test_parity: cannot create backend '%s': %s\n", specs[i], err.msg);
            return 1;
        }
        bes[n].spec = specs[i];
        bes[n].be = be;
        bes[n].device = i >= 2;
        n++;
    }
    parity_stats st = parity_run(bes, n, argc > 1 ? argv[1] : NULL);
    if (argc <= 1) { /* the fp64 table: every backend bit for bit against ref */
        parity_stats s64 = parity_run_f64(bes, n);
        st.cases += s64.cases, st.checks += s64.checks, st.failed += s64.failed;
    }
    for (int i = 0; i < n; i++) drift_backend_free(bes[i].be);
    printf("test_parity: %ld passed, %ld failed (%ld cases on %d backends, %ld skipped as unsupported)\n",
           st.checks - st.failed, st.failed, st.cases, n, st.skipped);
    return st.failed || st.cases == 0 ? 1 : 0;
}

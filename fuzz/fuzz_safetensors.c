/* libFuzzer harness: .safetensors images (formats/safetensors.h), opened in
 * memory with and without DRIFT_SAFETENSORS_SKIP_UNSUPPORTED; every listed
 * tensor is looked up by name and read (fp32 and raw). */
#include <stddef.h>
#include <stdint.h>

#include "formats/safetensors.h"
#include "fuzz/fuzz_common.h"

static void st_exercise(drift_safetensors *f) {
    drift_err err;
    size_t n = drift_safetensors_n_tensors(f);
    for (size_t i = 0; i < n; i++) {
        drift_safetensors_info info;
        int rc = drift_safetensors_tensor(f, i, &info, &err);
        FUZZ_CHECK(rc == DRIFT_OK, "tensor %zu: rc %d", i, rc);
        FUZZ_CHECK(drift_safetensors_find(f, info.name) == (long)i, "find(%s) != %zu", info.name, i);
        FUZZ_CHECK(info.nbytes == (uint64_t)info.numel * drift_dtype_size(info.dtype), "nbytes");
        float *dst = malloc((size_t)info.numel * sizeof *dst + 1);
        void *raw = malloc((size_t)info.nbytes + 1);
        FUZZ_CHECK(dst && raw, "malloc");
        rc = drift_safetensors_read_f32(f, i, dst, (size_t)info.numel, &err);
        FUZZ_CHECK(rc == DRIFT_OK, "read_f32 %s: %s", info.name, err.msg);
        rc = drift_safetensors_read_raw(f, i, raw, (size_t)info.nbytes, &err);
        FUZZ_CHECK(rc == DRIFT_OK, "read_raw %s: %s", info.name, err.msg);
        if (info.numel > 0) {
            rc = drift_safetensors_read_f32(f, i, dst, (size_t)info.numel - 1, &err);
            FUZZ_CHECK(rc == DRIFT_E_USAGE, "short destination accepted");
        }
        free(dst);
        free(raw);
    }
    for (size_t i = 0; i < drift_safetensors_n_metadata(f); i++) {
        const char *k = NULL, *v = NULL;
        FUZZ_CHECK(drift_safetensors_metadata(f, i, &k, &v) == DRIFT_OK && k && v, "metadata %zu", i);
        FUZZ_CHECK(drift_safetensors_find_metadata(f, k) != NULL, "find_metadata");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const unsigned flags[2] = {0, DRIFT_SAFETENSORS_SKIP_UNSUPPORTED};
    for (int k = 0; k < 2; k++) {
        drift_safetensors *f = NULL;
        drift_err err;
        drift_err_clear(&err);
        int rc = drift_safetensors_open_mem(&f, data, size, "fuzz.safetensors", flags[k], &err);
        fuzz_report("safetensors", rc, &err);
        FUZZ_CHECK(rc == DRIFT_OK || rc == DRIFT_E_INPUT || rc == DRIFT_E_NOMEM, "rc %d: %s: %s", rc, err.where,
                   err.msg);
        if (rc == DRIFT_OK) {
            FUZZ_CHECK(f != NULL, "no handle");
            st_exercise(f);
        } else {
            FUZZ_CHECK(f == NULL && err.msg[0], "failure without a message or with a handle");
        }
        drift_safetensors_close(f);
    }
    return 0;
}

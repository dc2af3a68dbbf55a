/* Parameters by reference through the recorder (recorder.h:
 * drift_recorder_hash64, drift_recorder_set_params_ref). */
#include "recorder/recorder.h"

#include <string.h>

#include "formats/hash64.h"
#include "formats/params_ref.h"
#include "formats/trace.h"
#include "recorder/recorder_internal.h"

#ifdef DRIFT_HAVE_CUDA
int drift_rec_hash64_device(const void *p, size_t n, void *stream, unsigned long long *sum); /* recorder_hash.cu */
#endif

int drift_recorder_hash64(const void *data, size_t nbytes, int on_device, void *stream, uint64_t *out, drift_err *err) {
    if (!out || (!data && nbytes)) return drift_err_set(err, DRIFT_E_USAGE, "hash64", "NULL data or out");
    if (!on_device) {
        *out = drift_hash64(data, nbytes, 8);
        return DRIFT_OK;
    }
#ifdef DRIFT_HAVE_CUDA
    unsigned long long s = 0;
    int e = drift_rec_hash64_device(data, nbytes, stream, &s);
    if (e) return drift_err_set(err, DRIFT_E_IO, "hash64", "drift-sum64 on the device failed (CUDA error %d)", e);
    *out = drift_hash64_finish((uint64_t)s, (uint64_t)nbytes);
    return DRIFT_OK;
#else
    (void)stream;
    return drift_err_set(err, DRIFT_E_UNSUPPORTED, "hash64", "this recorder was built without CUDA: hash on the host");
#endif
}

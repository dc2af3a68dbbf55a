/* torch's CUDA topk order (kernels/topk_order.h). */
#include "kernels/topk_order.h"

#include <math.h>
#include <stdbool.h>

/* GTOp / LTOp<scalar_t, true>: NaN above every number */
static bool beyond(double a, double b, int largest) {
    const bool an = isnan(a), bn = isnan(b);
    return largest ? (an && !bn) || a > b : (bn && !an) || a < b;
}

static bool same_key(double a, double b) { return a == b || (isnan(a) && isnan(b)); }

/* torch's bitonicSort<32> over keys/values/valid, 16 "threads" per stage: a
 * compare-exchange of (pos, pos + stride) exchanges when its swap flag equals the
 * stage's direction (bitonicSwap: swap = (comp(a, b) && valid a) || !valid b). */
static void bitonic32(double *key, int64_t *val, bool *valid, int largest) {
    enum { S = 32 };
    for (unsigned size = 2; size <= S; size *= 2)
        for (unsigned stride = size / 2; stride > 0; stride /= 2)
            for (unsigned t = 0; t < S / 2; t++) {
                const bool dir = size < S && (t & (size / 2)) != 0; /* the final merge runs with false */
                const unsigned a = 2 * t - (t & (stride - 1)), b = a + stride;
                const bool swap = (beyond(key[a], key[b], largest) && valid[a]) || !valid[b];
                if (swap == dir) {
                    const double tk = key[a];
                    const int64_t tv = val[a];
                    const bool tb = valid[a];
                    key[a] = key[b], val[a] = val[b], valid[a] = valid[b];
                    key[b] = tk, val[b] = tv, valid[b] = tb;
                }
            }
}

int drift_topk_torch_order(const double *x, int64_t step, int64_t n, int64_t k, int largest, int sorted,
                           const int64_t *sort_perm, int64_t *idx) {
    if (k <= 0 || n <= 0) return 0;
    const double kth = x[sort_perm[k - 1] * step];
    int64_t m = 0;
    for (int64_t i = 0; i < n && m < k; i++) /* strictly beyond the k-th, index order */
        if (!same_key(x[i * step], kth) && beyond(x[i * step], kth, largest)) idx[m++] = i;
    for (int64_t i = 0; i < n && m < k; i++) /* then equal to it, index order */
        if (same_key(x[i * step], kth)) idx[m++] = i;
    if (!sorted || k == 1) return 0;
    if (k > 32) { /* torch's stable sorts: by value, ties in the gather order = the stable argsort's */
        for (int64_t i = 0; i < k; i++) idx[i] = sort_perm[i];
        return 0;
    }
    double key[32];
    int64_t val[32];
    bool valid[32];
    for (int i = 0; i < 32; i++) {
        valid[i] = i < k;
        key[i] = valid[i] ? x[idx[i] * step] : 0.0;
        val[i] = valid[i] ? idx[i] : 0;
    }
    bitonic32(key, val, valid, largest);
    for (int64_t i = 0; i < k; i++) idx[i] = val[i];
    return 0;
}

/* Shared helpers of the parity harness and the GPU tests (parity_util.h). */
#include "tests/parity/parity_util.h"

#include <math.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

void parity_rng_seed(uint64_t s) { rng_state = s * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull; }

uint64_t parity_rng_u64(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double parity_rng_unif(void) { return (double)(parity_rng_u64() >> 11) * (1.0 / 9007199254740992.0); }

double parity_rng_normal(void) {
    double u1 = parity_rng_unif(), u2 = parity_rng_unif();
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

double parity_ulp(double x, drift_dtype dt) {
    int mant = dt == DRIFT_BF16 ? 7 : dt == DRIFT_F16 ? 10 : 23;
    int emin = dt == DRIFT_F16 ? -14 : -126;
    x = fabs(x);
    int e = emin;
    if (x != 0.0 && isfinite(x)) {
        (void)frexp(x, &e);
        e -= 1; /* x in [2^e, 2^(e+1)) */
        if (e < emin) e = emin;
    }
    return ldexp(1.0, e - mant);
}

int parity_same_bits(float a, float b) { return (isnan(a) && isnan(b)) || drift_f32_bits(a) == drift_f32_bits(b); }

double parity_nmse(const float *x, const double *r, int64_t n, int may_overflow, int64_t *n_parity) {
    double num = 0.0, den = 0.0;
    int64_t parity = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(r[i])) {
            if (!(isnan(r[i]) ? isnan(x[i]) : (double)x[i] == r[i])) parity++;
            continue;
        }
        if (!isfinite(x[i])) {
            if (!(may_overflow && !isnan(x[i]) && fabs(r[i]) >= 6.0e4)) parity++;
            continue;
        }
        const double d = (double)x[i] - r[i];
        num += d * d;
        den += r[i] * r[i];
    }
    if (n_parity) *n_parity = parity;
    return den > 0.0 ? num / den : num;
}

double parity_nmse_default(drift_dtype dt, int device) {
    const int k = dt == DRIFT_BF16 ? 0 : dt == DRIFT_F16 ? 1 : 2;
    static const double host[3] = {1e-4, 1e-6, 1e-11}, dev[3] = {2e-5, 1e-6, 1e-10};
    return device ? dev[k] : host[k];
}

/* Flow-matching SDE step and log-prob in fp32 (DESIGN.md s7). The operation
 * order and precision of every step is stated in replay/analysis/sde.h. Every fp32
 * operation is its own statement so that no compiler contracts a multiply
 * and an add into an FMA (GCC in ISO C mode does not contract; clang's
 * default contracts only within one expression, and the pragma turns even
 * that off). */
#include "replay/analysis/sde.h"

#include <math.h>
#include <stddef.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define DRIFT_SDE_PI 3.14159265358979323846

int drift_sde_coef_compute(float sigma, float sigma_next, float sigma_max, float eta, drift_sde_coef *out,
                           drift_err *err) {
    if (!out) return drift_err_set(err, DRIFT_E_INTERNAL, "sde", "coef_compute: NULL output");
    if (!isfinite(sigma) || !isfinite(sigma_next) || !isfinite(sigma_max) || !isfinite(eta))
        return drift_err_set(err, DRIFT_E_INPUT, "sde",
                             "non-finite step: sigma=%.9g sigma_next=%.9g sigma_max=%.9g eta=%.9g",
                             (double)sigma, (double)sigma_next, (double)sigma_max, (double)eta);
    if (!(sigma > 0.0f && sigma <= 1.0f))
        return drift_err_set(err, DRIFT_E_INPUT, "sde", "sigma = %.9g, expected a value in (0, 1]",
                             (double)sigma);
    if (!(sigma_next >= 0.0f && sigma_next < sigma))
        return drift_err_set(err, DRIFT_E_INPUT, "sde",
                             "sigma_next = %.9g, expected a value in [0, sigma = %.9g) (the step goes down)",
                             (double)sigma_next, (double)sigma);
    if (sigma == 1.0f && !(sigma_max >= 0.0f && sigma_max < 1.0f))
        return drift_err_set(err, DRIFT_E_INPUT, "sde",
                             "sigma_max = %.9g, expected a value in [0, 1) (used for the sigma == 1 step)",
                             (double)sigma_max);
    if (!(eta > 0.0f))
        return drift_err_set(err, DRIFT_E_INPUT, "sde", "eta = %.9g, expected > 0 (the noise level)",
                             (double)eta);

    /* per-sample scalars, fp32, torch's order */
    float dt = sigma_next - sigma;
    float w = (sigma == 1.0f) ? sigma_max : sigma;
    float den = 1.0f - w;
    float q = sigma / den;
    float root = sqrtf(q);
    float std_t = root * eta;
    float a = std_t * std_t;         /* std_dev_t ** 2 */
    float b = 2.0f * sigma;          /* 2 * sigma */
    float ab = a / b;                /* std_dev_t**2 / (2*sigma) */
    float abdt = ab * dt;            /* ... * dt */
    float cx = 1.0f + abdt;          /* 1 + ... */
    float oms = 1.0f - sigma;        /* (1 - sigma) */
    float h = a * oms;               /* std_dev_t**2 * (1-sigma) */
    float hb = h / b;                /* ... / (2*sigma) */
    float cv = 1.0f + hb;            /* 1 + ... */
    float mdt = -dt;                 /* -1 * dt (exact) */
    float sdt = sqrtf(mdt);
    float ns = std_t * sdt;          /* std_dev_t * sqrt(-1*dt) */
    float ns2 = ns * ns;             /* (...)**2 */
    float var2 = 2.0f * ns2;         /* 2 * (...)**2 */
    float lns = logf(ns);
    float two_pi = 2.0f * (float)DRIFT_SDE_PI; /* 2 * torch.as_tensor(math.pi) (fp32) */
    float sq2pi = sqrtf(two_pi);
    float c = logf(sq2pi);

    if (!(isfinite(ns) && ns > 0.0f && isfinite(var2) && var2 > 0.0f && isfinite(lns)))
        return drift_err_set(err, DRIFT_E_INPUT, "sde",
                             "step sigma=%.9g -> %.9g (sigma_max=%.9g, eta=%.9g) gives noise_std = %.9g, "
                             "expected a finite value > 0 whose square is normal",
                             (double)sigma, (double)sigma_next, (double)sigma_max, (double)eta, (double)ns);
    if (!isfinite(cx) || !isfinite(cv))
        return drift_err_set(err, DRIFT_E_INPUT, "sde",
                             "step sigma=%.9g -> %.9g (sigma_max=%.9g, eta=%.9g) gives non-finite mean "
                             "coefficients (%.9g, %.9g)",
                             (double)sigma, (double)sigma_next, (double)sigma_max, (double)eta, (double)cx,
                             (double)cv);

    out->sigma = sigma;
    out->sigma_next = sigma_next;
    out->sigma_max = sigma_max;
    out->eta = eta;
    out->dt = dt;
    out->std_t = std_t;
    out->coef_x = cx;
    out->coef_v = cv;
    out->noise_std = ns;
    out->var2 = var2;
    out->log_noise_std = lns;
    out->log_sqrt_2pi = c;
    return DRIFT_OK;
}

static inline float mean_one(float x, float v, const drift_sde_coef *c) {
    float xs = x * c->coef_x;   /* sample * (1 + ...) */
    float vs = v * c->coef_v;   /* model_output * (1 + ...) */
    float vd = vs * c->dt;      /* ... * dt */
    float mu = xs + vd;
    return mu;
}

void drift_sde_mean_f32(const float *x, const float *v, size_t n, const drift_sde_coef *c, float *mu) {
    for (size_t i = 0; i < n; i++) mu[i] = mean_one(x[i], v[i], c);
}

void drift_sde_sample_f32(const float *x, const float *v, const float *noise, size_t n,
                          const drift_sde_coef *c, float *x_next, float *mu_out) {
    for (size_t i = 0; i < n; i++) {
        float mu = mean_one(x[i], v[i], c);
        float z = noise[i];
        float step = c->noise_std * z;
        if (mu_out) mu_out[i] = mu;
        x_next[i] = mu + step;
    }
}

double drift_sde_log_prob_sample_f32(const float *x, const float *v, const float *x_next, size_t n,
                                     const drift_sde_coef *c) {
    if (n == 0) return NAN;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        float mu = mean_one(x[i], v[i], c);
        float e = x_next[i] - mu;
        float e2 = e * e;
        float ne2 = -e2;
        float t1 = ne2 / c->var2;
        float t2 = t1 - c->log_noise_std;
        float term = t2 - c->log_sqrt_2pi;
        sum += (double)term;
    }
    return sum / (double)n;
}

int drift_sde_log_prob_f32(const float *x, const float *v, const float *x_next, size_t batch,
                           size_t per_sample, const float *sigma, const float *sigma_next, float sigma_max,
                           float eta, float *log_prob, double *log_prob_f64, drift_err *err) {
    if (batch == 0 || per_sample == 0)
        return drift_err_set(err, DRIFT_E_INPUT, "sde",
                             "log-prob of a (%zu, %zu) tensor: expected at least one sample of at least one element",
                             batch, per_sample);
    if (!x || !v || !x_next || !sigma || !sigma_next || !log_prob)
        return drift_err_set(err, DRIFT_E_INTERNAL, "sde", "log_prob: NULL argument");
    for (size_t b = 0; b < batch; b++) {
        drift_sde_coef c;
        int rc = drift_sde_coef_compute(sigma[b], sigma_next[b], sigma_max, eta, &c, err);
        if (rc != DRIFT_OK) {
            drift_err_prefix(err, "sample %zu", b);
            return rc;
        }
        size_t off = b * per_sample;
        double lp = drift_sde_log_prob_sample_f32(x + off, v + off, x_next + off, per_sample, &c);
        log_prob[b] = (float)lp;
        if (log_prob_f64) log_prob_f64[b] = lp;
    }
    return DRIFT_OK;
}

int drift_sde_schedule_sigmas(int n_steps, double shift, float *sigmas, drift_err *err) {
    if (!sigmas) return drift_err_set(err, DRIFT_E_INTERNAL, "sde", "schedule: NULL output");
    if (n_steps < 1)
        return drift_err_set(err, DRIFT_E_INPUT, "sde", "number of steps = %d, expected >= 1", n_steps);
    if (!isfinite(shift) || !(shift > 0.0))
        return drift_err_set(err, DRIFT_E_INPUT, "sde", "shift = %g, expected a finite value > 0", shift);
    double step = -1.0 / (double)n_steps; /* numpy.linspace: (stop - start) / (num - 1) */
    for (int i = 0; i <= n_steps; i++) {
        double sig = (double)i * step + 1.0;
        if (i == n_steps) sig = 0.0; /* linspace sets the endpoint exactly */
        double num = shift * sig;
        double den = 1.0 + (shift - 1.0) * sig;
        sigmas[i] = (float)(num / den);
    }
    return DRIFT_OK;
}

/* Flow-matching SDE step and its log-prob (DESIGN.md s7), in fp32 as the
 * Flow-GRPO `sde_step_with_logprob` computes it in PyTorch, so that a replay
 * of the trainer's or the rollout's log_prob can be compared with the
 * recorded one.
 *
 * For one step from sigma to sigma' with model output v, noise level eta,
 * sigma_max = sigmas[1]:
 *
 *   dt        = sigma' - sigma
 *   std_t     = sqrt(sigma / (1 - (sigma == 1 ? sigma_max : sigma))) * eta
 *   mu        = x * (1 + std_t^2 / (2 sigma) * dt) + v * (1 + std_t^2 (1 - sigma) / (2 sigma)) * dt
 *   noise_std = std_t * sqrt(-dt)
 *   log_prob  = mean over non-batch dims of
 *               [ -(x_next - mu)^2 / (2 noise_std^2) - log(noise_std) - log(sqrt(2 pi)) ]
 *
 * Precision, operation by operation (fp32 = one IEEE binary32 operation,
 * round to nearest even, no FMA contraction; each matches one PyTorch op on
 * an fp32 tensor, in PyTorch's evaluation order):
 *
 *   per sample (scalars; in PyTorch tensors of shape (B, 1, ...)):
 *     dt   = sigma_next - sigma                          fp32
 *     w    = sigma == 1 ? sigma_max : sigma              (select; sigma_max taken as fp32)
 *     q    = sigma / (1 - w)                             fp32 sub, fp32 div
 *     std  = sqrtf(q) * eta                              fp32 sqrt (correctly rounded), fp32 mul;
 *                                                        eta is an fp32 value (torch rounds the
 *                                                        Python float scalar to fp32 as well)
 *     a    = std * std                                   (std ** 2: torch computes x*x) fp32
 *     b    = 2 * sigma                                   fp32 (exact)
 *     cx   = 1 + (a / b) * dt                            fp32 div, mul, add
 *     cv   = 1 + (a * (1 - sigma)) / b                   fp32 sub, mul, div, add
 *     ns   = std * sqrtf(-dt)                            fp32
 *     var2 = 2 * (ns * ns)                               fp32
 *     lns  = logf(ns)                                    C library logf (glibc: < 1 ULP, not
 *                                                        always correctly rounded; torch's log may
 *                                                        differ in the last bit)
 *     c    = logf(sqrtf(2 * (float)pi))                  fp32, as torch.log(torch.sqrt(2 *
 *                                                        torch.as_tensor(math.pi)))
 *   per element:
 *     mu   = x * cx + (v * cv) * dt                      fp32 mul, mul, mul, add
 *     e    = x_next - mu                                 fp32
 *     term = ((-(e * e)) / var2 - lns) - c               fp32 mul, div, sub, sub
 *   per sample:
 *     log_prob = (sum of term in fp64, element order) / n_per_sample in fp64,
 *                rounded once to fp32. PyTorch's mean accumulates in fp32
 *                (pairwise/vectorised), so the fp32 result may differ from
 *                torch's in the last bits; the fp64 mean is also returned.
 *
 *   sampling: x_next = mu + ns * noise                   fp32 mul, add (torch: prev_sample_mean +
 *                                                        std_dev_t * sqrt(-dt) * noise, with
 *                                                        std_dev_t * sqrt(-dt) evaluated first)
 */
#ifndef DRIFT_REPLAY_SDE_H
#define DRIFT_REPLAY_SDE_H

#include <stddef.h>

#include "formats/err.h"

/* Per-sample coefficients of one step, all fp32 as described above. */
typedef struct drift_sde_coef {
    float sigma, sigma_next, sigma_max, eta;
    float dt;            /* sigma_next - sigma (< 0) */
    float std_t;         /* sqrt(sigma / (1 - w)) * eta */
    float coef_x;        /* 1 + std_t^2 / (2 sigma) * dt */
    float coef_v;        /* 1 + std_t^2 (1 - sigma) / (2 sigma)  (dt is applied per element) */
    float noise_std;     /* std_t * sqrt(-dt) (> 0) */
    float var2;          /* 2 * noise_std^2 */
    float log_noise_std; /* logf(noise_std) */
    float log_sqrt_2pi;  /* logf(sqrtf(2 * (float)pi)) */
} drift_sde_coef;

/* Computes the coefficients of one step. Errors (DRIFT_E_INPUT, naming the
 * value): a non-finite argument; sigma outside (0, 1]; sigma_next outside
 * [0, sigma) (the step must go down); sigma == 1 with sigma_max outside
 * [0, 1); eta <= 0; or a noise_std that is not finite and > 0 (the log-prob
 * of a deterministic step is undefined). */
int drift_sde_coef_compute(float sigma, float sigma_next, float sigma_max, float eta, drift_sde_coef *out,
                           drift_err *err);

/* mu[i] = x[i] * coef_x + (v[i] * coef_v) * dt for i < n (fp32). mu may
 * alias x or v. */
void drift_sde_mean_f32(const float *x, const float *v, size_t n, const drift_sde_coef *c, float *mu);

/* x_next[i] = mu[i] + noise_std * noise[i] with mu as drift_sde_mean_f32
 * (fp32). mu_out may be NULL; x_next may alias x, v or noise. */
void drift_sde_sample_f32(const float *x, const float *v, const float *noise, size_t n,
                          const drift_sde_coef *c, float *x_next, float *mu_out);

/* Log-prob of one sample of n > 0 elements: the fp64 mean of the fp32
 * per-element terms (round it to float for torch's dtype). n == 0 gives NaN. */
double drift_sde_log_prob_sample_f32(const float *x, const float *v, const float *x_next, size_t n,
                                     const drift_sde_coef *c);

/* Batched log-prob: x, v, x_next are (batch, per_sample) row-major;
 * sigma[b], sigma_next[b] per sample (Flow-GRPO allows a timestep per
 * sample); sigma_max and eta shared. Writes log_prob[b] (fp32, the rounded
 * fp64 mean) and, if log_prob_f64 is not NULL, the fp64 means. Errors
 * (DRIFT_E_INPUT): batch or per_sample 0, or a step rejected by
 * drift_sde_coef_compute (the message names the sample). */
int drift_sde_log_prob_f32(const float *x, const float *v, const float *x_next, size_t batch,
                           size_t per_sample, const float *sigma, const float *sigma_next, float sigma_max,
                           float eta, float *log_prob, double *log_prob_f64, drift_err *err);

/* Flow-matching sigma schedule for n_steps steps with shift s (writes
 * n_steps + 1 values, sigmas[0] = 1, sigmas[n_steps] = 0):
 *   sig_i = 1 + i * (-1 / n_steps)  in fp64, as numpy.linspace(1, 0, n_steps + 1)
 *           computes it (start + i * step; the last value set to 0 exactly),
 *   sigma_i = s * sig_i / (1 + (s - 1) * sig_i)  in fp64 (the SD3 / Wan
 *           time shift; s = 1 is the identity; 1 and 0 map to themselves),
 * then each rounded once to fp32 (diffusers builds sigmas in numpy fp64 and
 * converts them to a float32 tensor). sigma_max for the SDE is sigmas[1].
 * Errors (DRIFT_E_INPUT): n_steps < 1, s not finite or <= 0, sigmas NULL. */
int drift_sde_schedule_sigmas(int n_steps, double shift, float *sigmas, drift_err *err);

#endif

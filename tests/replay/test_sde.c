/* Tests of replay/sde: the flow-matching SDE log-prob of DESIGN.md s7 in
 * fp32, against values worked out by hand (small cases whose every fp32
 * operation is exact or a stated rounding) and against a step-by-step
 * numpy float32 emulation of the same operation order (realistic cases;
 * logs taken correctly rounded, as glibc's logf gives them). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "replay/analysis/sde.h"

#define ASSERT_EXACT(got, want)                                                                     \
    do {                                                                                            \
        double g_ = (double)(got), w_ = (double)(want);                                             \
        if (!(g_ == w_)) fail_msg("%s = %.17g, expected %.17g (exact)", #got, g_, w_);              \
    } while (0)

#define ASSERT_NEAR(got, want, tol)                                                                 \
    do {                                                                                            \
        double g_ = (double)(got), w_ = (double)(want);                                             \
        if (!(fabs(g_ - w_) <= (tol)))                                                              \
            fail_msg("%s = %.17g, expected %.17g (tolerance %g)", #got, g_, w_, (double)(tol));     \
    } while (0)

/* Constants every case shares (fp32):
 *   log(sqrt(2 pi)): (float)pi = 3.1415927410125732, 2 * that = 6.2831854820251465 (exact),
 *     sqrtf = 2.5066282749176025, logf = 0.91893851757049560546875
 *   logf(0.5) = -0.693147182464599609375 (the fp32 nearest -ln 2) */
#define C_LOG_SQRT_2PI 0.91893851757049560546875
#define LOG_HALF_F32 (-0.693147182464599609375)

/* Case A: sigma = 0.5 -> sigma' = 0.25, eta = 1 (sigma_max = 0.75 unused: sigma != 1)
 *   dt = -0.25; w = sigma = 0.5; 1 - w = 0.5; q = 0.5 / 0.5 = 1; std_t = sqrt(1) * 1 = 1
 *   a = std_t^2 = 1; b = 2 sigma = 1
 *   coef_x = 1 + (1 / 1) * -0.25 = 0.75
 *   coef_v = 1 + (1 * (1 - 0.5)) / 1 = 1.5
 *   noise_std = 1 * sqrt(0.25) = 0.5; var2 = 2 * 0.25 = 0.5; log(noise_std) = logf(0.5)
 * x = {1, 2}, v = {1, -2}:
 *   mu = x * 0.75 + (v * 1.5) * -0.25 = {0.75 - 0.375, 1.5 + 0.75} = {0.375, 2.25}
 * x_next = {0.875, 2.25}: e = {0.5, 0}, -(e^2) / 0.5 = {-0.5, -0}
 *   term0 = (-0.5 - (-0.693147182464599609375)) - 0.91893851757049560546875
 *         = 0.193147182464599609375 - 0.91893851757049560546875
 *         = -0.72579133510589599609375 (exact: -12176758 * 2^-24)
 *   term1 = (0 + 0.693147182464599609375) - 0.91893851757049560546875
 *         = -0.22579133510589599609375 (exact: -3788150 * 2^-24)
 *   log_prob = (term0 + term1) / 2 = -0.47579133510589599609375 (exact in fp64 and fp32) */
static void test_hand_case_a(void **state) {
    (void)state;
    drift_sde_coef c;
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_sde_coef_compute(0.5f, 0.25f, 0.75f, 1.0f, &c, &err), DRIFT_OK);
    ASSERT_EXACT(c.dt, -0.25);
    ASSERT_EXACT(c.std_t, 1.0);
    ASSERT_EXACT(c.coef_x, 0.75);
    ASSERT_EXACT(c.coef_v, 1.5);
    ASSERT_EXACT(c.noise_std, 0.5);
    ASSERT_EXACT(c.var2, 0.5);
    ASSERT_EXACT(c.log_noise_std, LOG_HALF_F32);
    ASSERT_EXACT(c.log_sqrt_2pi, C_LOG_SQRT_2PI);

    const float x[2] = {1.0f, 2.0f}, v[2] = {1.0f, -2.0f}, xn[2] = {0.875f, 2.25f};
    float mu[2];
    drift_sde_mean_f32(x, v, 2, &c, mu);
    ASSERT_EXACT(mu[0], 0.375);
    ASSERT_EXACT(mu[1], 2.25);
    double lp = drift_sde_log_prob_sample_f32(x, v, xn, 2, &c);
    ASSERT_EXACT(lp, -0.47579133510589599609375);

    const float sig = 0.5f, sig_n = 0.25f;
    float lp32;
    double lp64;
    assert_int_equal(drift_sde_log_prob_f32(x, v, xn, 1, 2, &sig, &sig_n, 0.75f, 1.0f, &lp32, &lp64, &err),
                     DRIFT_OK);
    ASSERT_EXACT(lp32, -0.47579133510589599609375);
    ASSERT_EXACT(lp64, -0.47579133510589599609375);
}

/* Case B, the sigma == 1 branch: sigma = 1 -> 0.75, sigma_max = 0.75, eta = 0.5
 *   dt = -0.25; w = sigma_max = 0.75 (not sigma, which would divide by 1 - 1 = 0)
 *   q = 1 / (1 - 0.75) = 4; std_t = sqrt(4) * 0.5 = 1; a = 1; b = 2
 *   coef_x = 1 + (1 / 2) * -0.25 = 0.875; coef_v = 1 + (1 * 0) / 2 = 1
 *   noise_std = 1 * 0.5 = 0.5; var2 = 0.5
 * x = {1, -2}, v = {2, 4}: mu = {0.875 - 0.5, -1.75 - 1} = {0.375, -2.75}
 * sample with noise = {1, -2}: x_next = mu + 0.5 * noise = {0.875, -3.75}
 *   e = {0.5, -1}; -(e^2) / 0.5 = {-0.5, -2}
 *   term0 = -0.72579133510589599609375 (as case A)
 *   term1 = (-2 + 0.693147182464599609375) - 0.91893851757049560546875
 *         = -1.306852817535400390625 - 0.91893851757049560546875
 *         = -2.22579133510589599609375 = -37342581.5 * 2^-24: a tie at the
 *           fp32 spacing 2^-22 of [2, 4), rounds to even: -2.225791454315185546875
 *   mean (fp64) = (-0.72579133510589599609375 - 2.225791454315185546875) / 2
 *               = -1.475791394710540771484375
 *   fp32 result = -1.475791454315185546875 */
static void test_hand_case_b_sigma_one(void **state) {
    (void)state;
    drift_sde_coef c;
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_sde_coef_compute(1.0f, 0.75f, 0.75f, 0.5f, &c, &err), DRIFT_OK);
    ASSERT_EXACT(c.dt, -0.25);
    ASSERT_EXACT(c.std_t, 1.0);
    ASSERT_EXACT(c.coef_x, 0.875);
    ASSERT_EXACT(c.coef_v, 1.0);
    ASSERT_EXACT(c.noise_std, 0.5);
    ASSERT_EXACT(c.var2, 0.5);

    const float x[2] = {1.0f, -2.0f}, v[2] = {2.0f, 4.0f}, noise[2] = {1.0f, -2.0f};
    float xn[2], mu[2];
    drift_sde_sample_f32(x, v, noise, 2, &c, xn, mu);
    ASSERT_EXACT(mu[0], 0.375);
    ASSERT_EXACT(mu[1], -2.75);
    ASSERT_EXACT(xn[0], 0.875);
    ASSERT_EXACT(xn[1], -3.75);
    double lp = drift_sde_log_prob_sample_f32(x, v, xn, 2, &c);
    ASSERT_EXACT(lp, -1.475791394710540771484375);
    ASSERT_EXACT((float)lp, -1.475791454315185546875);

    /* sigma_max is what the branch reads: 0.5 instead gives
     * q = 1 / 0.5 = 2, std_t = sqrtf(2) * 0.5 = 0.70710676908493042 */
    assert_int_equal(drift_sde_coef_compute(1.0f, 0.75f, 0.5f, 0.5f, &c, &err), DRIFT_OK);
    ASSERT_EXACT(c.std_t, sqrtf(2.0f) * 0.5f);
    ASSERT_EXACT(c.std_t, 0.70710676908493042);
    /* and sigma_max is ignored when sigma != 1 */
    drift_sde_coef c1, c2;
    assert_int_equal(drift_sde_coef_compute(0.5f, 0.25f, 0.75f, 1.0f, &c1, &err), DRIFT_OK);
    assert_int_equal(drift_sde_coef_compute(0.5f, 0.25f, 0.1f, 1.0f, &c2, &err), DRIFT_OK);
    ASSERT_EXACT(c1.std_t, c2.std_t);

    /* sampling with zero noise lands on the mean: every term is
     * -log(noise_std) - log(sqrt(2 pi)) = 0.693147182464599609375 - 0.91893851757049560546875
     * = -0.22579133510589599609375 */
    const float zero[2] = {0.0f, 0.0f};
    assert_int_equal(drift_sde_coef_compute(1.0f, 0.75f, 0.75f, 0.5f, &c, &err), DRIFT_OK);
    drift_sde_sample_f32(x, v, zero, 2, &c, xn, NULL);
    ASSERT_EXACT(drift_sde_log_prob_sample_f32(x, v, xn, 2, &c), -0.22579133510589599609375);
}

/* Batched, per-sample sigmas, shared eta = 1 and sigma_max = 0.75:
 *   sample 0: case A (sigma 0.5 -> 0.25): -0.47579133510589599609375
 *   sample 1: sigma 1 -> 0.75 (branch): q = 1 / 0.25 = 4, std_t = 2, a = 4, b = 2,
 *     coef_x = 1 + 2 * -0.25 = 0.5, coef_v = 1, noise_std = 2 * 0.5 = 1, var2 = 2, log 1 = 0
 *     x = {1, -2}, v = {2, 4}: mu = {0.5 - 0.5, -1 - 1} = {0, -2}; x_next = {1, -4}
 *     e = {1, -2}: -(e^2) / 2 = {-0.5, -2}
 *     term0 = -0.5 - 0 - 0.91893851757049560546875 = -1.41893851757049560546875 (exact)
 *     term1 = -2 - 0.91893851757049560546875 = -2.91893851757049560546875 -> fp32
 *             (spacing 2^-22) -2.91893863677978515625
 *     mean = (-1.41893851757049560546875 - 2.91893863677978515625) / 2
 *          = -2.168938577175140380859375 (fp64); fp32 -2.168938636779785 */
static void test_batched(void **state) {
    (void)state;
    const float x[4] = {1.0f, 2.0f, 1.0f, -2.0f}, v[4] = {1.0f, -2.0f, 2.0f, 4.0f};
    const float xn[4] = {0.875f, 2.25f, 1.0f, -4.0f};
    const float sig[2] = {0.5f, 1.0f}, sig_n[2] = {0.25f, 0.75f};
    float lp[2];
    double lp64[2];
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_sde_log_prob_f32(x, v, xn, 2, 2, sig, sig_n, 0.75f, 1.0f, lp, lp64, &err), DRIFT_OK);
    ASSERT_EXACT(lp64[0], -0.47579133510589599609375);
    ASSERT_EXACT(lp[0], -0.47579133510589599609375);
    ASSERT_EXACT(lp64[1], -2.168938577175140380859375);
    ASSERT_EXACT(lp[1], -2.168938636779785);
    /* log_prob_f64 is optional */
    assert_int_equal(drift_sde_log_prob_f32(x, v, xn, 2, 2, sig, sig_n, 0.75f, 1.0f, lp, NULL, &err), DRIFT_OK);
    ASSERT_EXACT(lp[1], -2.168938636779785);

    /* a bad step in sample 1 is named */
    const float bad_n[2] = {0.25f, 1.0f};
    drift_err_clear(&err);
    assert_int_equal(drift_sde_log_prob_f32(x, v, xn, 2, 2, sig, bad_n, 0.75f, 1.0f, lp, NULL, &err),
                     DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "sample 1"));
    assert_non_null(strstr(err.msg, "sigma_next"));
    drift_err_clear(&err);
    assert_int_equal(drift_sde_log_prob_f32(x, v, xn, 2, 0, sig, sig_n, 0.75f, 1.0f, lp, NULL, &err),
                     DRIFT_E_INPUT);
    assert_int_equal(drift_sde_log_prob_f32(x, v, xn, 0, 2, sig, sig_n, 0.75f, 1.0f, lp, NULL, &err),
                     DRIFT_E_INPUT);
}

/* Realistic steps from the shift-3, 10-step schedule (sigmas[1] = 0.96428573131561279 = sigma_max),
 * eta = 0.7 (fp32 0.69999998807907104), values checked with numpy float32 in the
 * operation order of sde.h:
 *   C: sigma = sigmas[2] = 0.92307692766189575 -> sigmas[3] = 0.875
 *      dt = -0.048076927661895752, std_t = 2.4248712062835693, coef_x = 0.84687495231628418,
 *      coef_v = 1.2450000047683716, noise_std = 0.53168821334838867,
 *      var2 = 0.56538468599319458, logf(noise_std) = -0.63169801235198975
 *      terms = {-0.28752005100250244, -0.3506280779838562, -0.6917971968650818,
 *               -0.28754913806915283, -0.2873610854148865, -0.41822612285614014}
 *      mean (fp64) = -0.38718027869860333, fp32 -0.38718026876449585
 *      (a sequential fp32 mean would give -0.38718023896217346: the documented last-bits gap)
 *   D: sigma = 1 -> sigmas[1] (the branch, with the real sigma_max)
 *      dt = -0.035714268684387207, std_t = 3.7040526866912842, coef_x = 0.75499999523162842,
 *      coef_v = 1, noise_std = 0.69999998807907104, var2 = 0.97999995946884155
 *      logf(0.69999998807907104) = -0.35667496919631958 (correctly rounded; numpy's
 *      float32 log gives -0.3566749393939972, one ULP off: exact ln is -0.3566749609686...)
 *      mean (fp64) = -0.69754897554715478, fp32 -0.69754898548126221
 *      Asserted within one fp32 ULP of the log term (6e-8), in case the C library's logf
 *      rounds the other way. */
static const float XR[6] = {0.1f, -1.3f, 2.7f, 0.45f, -0.05f, 1.9f};
static const float VR[6] = {-0.8f, 0.33f, 1.25f, -2.1f, 0.6f, 0.02f};
static const float XNR[6] = {0.12f, -1.31f, 2.69f, 0.52f, -0.07f, 1.88f};

static void test_realistic(void **state) {
    (void)state;
    float sig[11];
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_sde_schedule_sigmas(10, 3.0, sig, &err), DRIFT_OK);
    ASSERT_EXACT(sig[1], 0.96428573131561279);
    ASSERT_EXACT(sig[2], 0.92307692766189575);
    ASSERT_EXACT(sig[3], 0.875);

    drift_sde_coef c;
    assert_int_equal(drift_sde_coef_compute(sig[2], sig[3], sig[1], 0.7f, &c, &err), DRIFT_OK);
    ASSERT_EXACT(c.dt, -0.048076927661895752);
    ASSERT_EXACT(c.std_t, 2.4248712062835693);
    ASSERT_EXACT(c.coef_x, 0.84687495231628418);
    ASSERT_EXACT(c.coef_v, 1.2450000047683716);
    ASSERT_EXACT(c.noise_std, 0.53168821334838867);
    ASSERT_EXACT(c.var2, 0.56538468599319458);
    ASSERT_EXACT(c.log_noise_std, -0.63169801235198975);
    double lp = drift_sde_log_prob_sample_f32(XR, VR, XNR, 6, &c);
    ASSERT_EXACT(lp, -0.38718027869860333);
    ASSERT_EXACT((float)lp, -0.38718026876449585);

    assert_int_equal(drift_sde_coef_compute(1.0f, sig[1], sig[1], 0.7f, &c, &err), DRIFT_OK);
    ASSERT_EXACT(c.dt, -0.035714268684387207);
    ASSERT_EXACT(c.std_t, 3.7040526866912842);
    ASSERT_EXACT(c.coef_x, 0.75499999523162842);
    ASSERT_EXACT(c.coef_v, 1.0);
    ASSERT_EXACT(c.noise_std, 0.69999998807907104);
    ASSERT_EXACT(c.var2, 0.97999995946884155);
    ASSERT_NEAR(c.log_noise_std, -0.35667496919631958, 3e-8);
    lp = drift_sde_log_prob_sample_f32(XR, VR, XNR, 6, &c);
    ASSERT_NEAR(lp, -0.69754897554715478, 6e-8);
}

/* Operation order matters and is PyTorch's: a 16-element sample (numpy
 * default_rng(193) normals, fp32) on the step sigmas[1] -> sigmas[2] of the
 * shift-3, 10-step schedule, eta = 0.7. Expected values from a step-by-step
 * numpy float32 emulation of sde.h's order:
 *   dt = -0.041208803653717041, std_t = 3.6373074054718018,
 *   coef_x = 0.71730750799179077 (computing (a * dt) / b instead of (a / b) * dt
 *   gives a different fp32 value on this step), coef_v = 1.2450000047683716,
 *   noise_std = 0.73837167024612427, var2 = 1.0903854370117188,
 *   logf(noise_std) = -0.30330795049667358
 *   x_next = mu + noise_std * noise (evaluating std_t * (sqrt(-dt) * noise)
 *   instead changes some elements)
 *   log_prob: fp64 mean -1.3078075982630253, fp32 -1.3078075647354126.
 * Reordered variants all land elsewhere: (a * dt) / b, v * (coef_v * dt) and
 * t1 - (log(noise_std) + log(sqrt(2 pi))) each give -1.3078076839447021;
 * a sequential fp32 mean gives -1.307807445526123. */
static void test_operation_order(void **state) {
    (void)state;
    const float x[16] = {-0.122564435f, 0.0150206685f, 0.666997552f, 0.10591387f, -0.475010216f, 0.939995885f,
                         1.2272296f, 2.11641407f, 1.47232616f, 0.386178792f, 0.1842563f, 0.00171595893f,
                         0.243951991f, -0.941126704f, -0.159031123f, -0.679364622f};
    const float v[16] = {-0.142490759f, -0.260380805f, 0.551635444f, -1.2847147f, 0.0824163556f, -1.79418027f,
                         0.694258809f, 0.635113001f, 0.275477022f, -0.118068181f, 1.44657218f, 1.02706921f,
                         -0.891708195f, -1.26181257f, -0.733641684f, 0.501253426f};
    const float z[16] = {-0.473340243f, -0.932590902f, 0.373666346f, -1.03407776f, 1.77081287f, -2.18245411f,
                         -1.21395838f, 0.734514415f, 0.709692359f, 0.254074812f, 0.655798376f, 1.80783749f,
                         -0.792880654f, -2.09380674f, 0.0822326019f, -0.805506408f};
    const float xn_want[16] = {-0.430106938f, -0.664465427f, 0.72604537f, -0.621648669f, 0.96256125f,
                               -0.845145822f, -0.0516703725f, 2.02787995f, 1.56599402f, 0.470668077f,
                               0.542175055f, 1.28339314f, -0.364703f, -2.15634775f, -0.0157165378f,
                               -1.10779321f};
    float sig[11], xn[16];
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_sde_schedule_sigmas(10, 3.0, sig, &err), DRIFT_OK);
    drift_sde_coef c;
    assert_int_equal(drift_sde_coef_compute(sig[1], sig[2], sig[1], 0.7f, &c, &err), DRIFT_OK);
    ASSERT_EXACT(c.dt, -0.041208803653717041);
    ASSERT_EXACT(c.std_t, 3.6373074054718018);
    ASSERT_EXACT(c.coef_x, 0.71730750799179077);
    ASSERT_EXACT(c.coef_v, 1.2450000047683716);
    ASSERT_EXACT(c.noise_std, 0.73837167024612427);
    ASSERT_EXACT(c.var2, 1.0903854370117188);
    ASSERT_EXACT(c.log_noise_std, -0.30330795049667358);
    drift_sde_sample_f32(x, v, z, 16, &c, xn, NULL);
    for (int i = 0; i < 16; i++) ASSERT_EXACT(xn[i], xn_want[i]);
    double lp = drift_sde_log_prob_sample_f32(x, v, xn, 16, &c);
    ASSERT_EXACT(lp, -1.3078075982630253);
    ASSERT_EXACT((float)lp, -1.3078075647354126);
}

/* Schedule: linspace(1, 0, N + 1) in fp64, shift s*x / (1 + (s - 1) x), rounded to fp32.
 *   N = 4, s = 1: {1, 0.75, 0.5, 0.25, 0}
 *   N = 4, s = 3: 0.75 -> 2.25 / 2.5 = 0.9 -> fp32 0.89999997615814209;
 *                 0.5 -> 1.5 / 2 = 0.75; 0.25 -> 0.75 / 1.5 = 0.5 -> {1, 0.9f, 0.75, 0.5, 0}
 *   N = 3, s = 1: linspace gives 1 + 1 * (-1/3) = 0.66666666666666674 and
 *                 1 + 2 * (-1/3) = 0.33333333333333337 -> fp32 0.66666668653488159,
 *                 0.3333333432674408
 *   N = 10, s = 3: {1, 0.9642857313156128, 0.9230769276618958, 0.875, 0.8181818127632141,
 *                   0.75, 0.6666666865348816, 0.5625, 0.4285714328289032, 0.25, 0} */
static void test_schedule(void **state) {
    (void)state;
    float s[11];
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_sde_schedule_sigmas(4, 1.0, s, &err), DRIFT_OK);
    const float e1[5] = {1.0f, 0.75f, 0.5f, 0.25f, 0.0f};
    for (int i = 0; i < 5; i++) ASSERT_EXACT(s[i], e1[i]);

    assert_int_equal(drift_sde_schedule_sigmas(4, 3.0, s, &err), DRIFT_OK);
    const float e3[5] = {1.0f, 0.9f, 0.75f, 0.5f, 0.0f};
    for (int i = 0; i < 5; i++) ASSERT_EXACT(s[i], e3[i]);
    ASSERT_EXACT(s[1], 0.89999997615814209);

    assert_int_equal(drift_sde_schedule_sigmas(3, 1.0, s, &err), DRIFT_OK);
    ASSERT_EXACT(s[0], 1.0);
    ASSERT_EXACT(s[1], 0.66666668653488159);
    ASSERT_EXACT(s[2], 0.3333333432674408);
    ASSERT_EXACT(s[3], 0.0);

    assert_int_equal(drift_sde_schedule_sigmas(10, 3.0, s, &err), DRIFT_OK);
    const double e10[11] = {1.0, 0.9642857313156128, 0.9230769276618958, 0.875, 0.8181818127632141, 0.75,
                            0.6666666865348816, 0.5625, 0.4285714328289032, 0.25, 0.0};
    for (int i = 0; i < 11; i++) ASSERT_EXACT(s[i], e10[i]);

    assert_int_equal(drift_sde_schedule_sigmas(0, 1.0, s, &err), DRIFT_E_INPUT);
    assert_int_equal(drift_sde_schedule_sigmas(4, 0.0, s, &err), DRIFT_E_INPUT);
    assert_int_equal(drift_sde_schedule_sigmas(4, -1.0, s, &err), DRIFT_E_INPUT);
    assert_int_equal(drift_sde_schedule_sigmas(4, NAN, s, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "shift"));
}

/* Rejected steps: the message names the value. */
static void test_bad_steps(void **state) {
    (void)state;
    drift_sde_coef c;
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_sde_coef_compute(0.5f, 0.5f, 0.75f, 0.7f, &c, &err), DRIFT_E_INPUT); /* dt = 0 */
    assert_non_null(strstr(err.msg, "sigma_next"));
    assert_int_equal(drift_sde_coef_compute(0.5f, 0.6f, 0.75f, 0.7f, &c, &err), DRIFT_E_INPUT); /* upward */
    assert_int_equal(drift_sde_coef_compute(0.0f, 0.0f, 0.75f, 0.7f, &c, &err), DRIFT_E_INPUT); /* sigma 0 */
    assert_non_null(strstr(err.msg, "sigma = 0"));
    assert_int_equal(drift_sde_coef_compute(1.5f, 0.5f, 0.75f, 0.7f, &c, &err), DRIFT_E_INPUT); /* > 1 */
    assert_int_equal(drift_sde_coef_compute(0.5f, 0.25f, 0.75f, 0.0f, &c, &err), DRIFT_E_INPUT); /* eta 0 */
    assert_non_null(strstr(err.msg, "eta"));
    assert_int_equal(drift_sde_coef_compute(1.0f, 0.75f, 1.0f, 0.7f, &c, &err), DRIFT_E_INPUT); /* 1/(1-1) */
    assert_non_null(strstr(err.msg, "sigma_max"));
    assert_int_equal(drift_sde_coef_compute(NAN, 0.25f, 0.75f, 0.7f, &c, &err), DRIFT_E_INPUT);
    assert_int_equal(drift_sde_coef_compute(0.5f, 0.25f, 0.75f, INFINITY, &c, &err), DRIFT_E_INPUT);
    /* a tiny step whose noise_std^2 underflows is rejected, not turned into -inf */
    assert_int_equal(drift_sde_coef_compute(1e-30f, 0.0f, 0.75f, 1e-20f, &c, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "noise_std"));
    /* the final step to sigma' = 0 is valid */
    assert_int_equal(drift_sde_coef_compute(0.25f, 0.0f, 0.75f, 0.7f, &c, &err), DRIFT_OK);
    assert_true(isnan(drift_sde_log_prob_sample_f32(NULL, NULL, NULL, 0, &c)));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_case_a),
        cmocka_unit_test(test_hand_case_b_sigma_one),
        cmocka_unit_test(test_batched),
        cmocka_unit_test(test_realistic),
        cmocka_unit_test(test_operation_order),
        cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_bad_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Deterministic seeded parameters, synthetic inputs and the RoPE buffers of
 * the Wan families (DESIGN.md s8: "Parameters come from ... a seed").
 *
 * Randomness: each tensor draws from its own xoshiro256** stream, seeded
 * through splitmix64 from (seed, FNV-1a of the tensor's name), so a
 * parameter's values do not depend on which other parameters exist; normals
 * come from Box-Muller in fp64, rounded once to fp32. Same seed, same bits,
 * on every machine. */
#ifndef DRIFT_REPLAY_PARAMS_INIT_H
#define DRIFT_REPLAY_PARAMS_INIT_H

#include <stdint.h>

#include "formats/err.h"
#include "formats/params.h"
#include "formats/plan.h"
#include "replay/exec/exec.h"
#include "replay/models/family.h"

/* fp32 master values for every parameter of t, into a new set named by root
 * FQN (caller owns *out). Scales, by name and shape, like real inits:
 *   weights with >= 2 dims: N(0, 1/fan_in), fan_in = prod(shape[1:]);
 *   *.bias: N(0, 0.02^2);
 *   other 1-dim *.weight (norm weights): 1 + 0.1 N(0, 1), so rounding them
 *     to bf16 matters;
 *   *scale_shift_table: N(0, 1) / sqrt(last dim);
 *   anything else: N(0, 0.02^2). */
int drift_params_init_seeded(const drift_param_table *t, uint64_t seed, drift_hostset **out, drift_err *err);
/* The same on threads threads (< 1: drift_params_seed_threads()). Each
 * tensor is its own stream, filled by one thread: the values do not depend on
 * the thread count. drift_params_init_seeded uses the default count. */
int drift_params_init_seeded_threads(const drift_param_table *t, uint64_t seed, int threads, drift_hostset **out,
                                     drift_err *err);
/* Parameter p's seeded values (p->numel floats) into dst (caller-owned);
 * thread-safe. The values drift_params_init_seeded gives p. */
void drift_params_init_one(const drift_param_info *p, uint64_t seed, float *dst);
/* DRIFT_SEED_THREADS if set (1..DRIFT_SEED_MAX_THREADS), else the online CPUs (at most 64). */
#define DRIFT_SEED_MAX_THREADS 256
int drift_params_seed_threads(void);

/* Synthetic boundary inputs for cfg, fp32, into a new set (caller owns):
 * "latents" [B, C, F, H, W] ~ N(0, 1), "cond" [B, text_len, text_dim] ~ N(0, 1),
 * "timestep" [B] uniform in [0, 1000) rounded to fp32. */
int drift_params_init_inputs(const drift_family_config *cfg, uint64_t seed, drift_hostset **out, drift_err *err);

/* The Wan RoPE tables (rotary_emb) for cfg's grid, added to dst as
 * "rope.freqs_cos" and "rope.freqs_sin" [tokens, head_dim], fp32, tokens in
 * (f, h, w) order, as WanRotaryPosEmbed computes them: __init__ builds per
 * axis of width d (t = Dh - 4 (Dh // 6), h = w = 2 (Dh // 6) columns) the
 * table whose columns 2j and 2j+1 at row p hold cos/sin(p * theta^(-2j/d))
 * (repeat_interleave_real), concatenated; forward splits those columns by
 * [Dh - 2 (Dh // 3), Dh // 3, Dh // 3] and takes rows f, h and w. The two
 * splits agree when Dh % 6 < 3 (Dh = 128 in Wan checkpoints); otherwise
 * this reproduces diffusers' column mix.
 *   DRIFT_BUF_CPU_FP64: computed in fp64 (diffusers' freqs_dtype=float64 on
 *     the host), rounded once to fp32; the exact fp64 values are kept too
 *     (the oracle uses them);
 *   DRIFT_BUF_DEVICE_FP32: the same formula evaluated in fp32 throughout
 *     (powf, fp32 outer product, cosf/sinf), as on an accelerator;
 *   DRIFT_BUF_RECORDED: DRIFT_E_INPUT (the tables come from a trace). */
int drift_params_build_rope(const drift_family_config *cfg, drift_buffer_prov prov, drift_hostset *dst, drift_err *err);

/* A new set with the buffers the Wan graph needs for provenance prov
 * (caller owns *out). */
int drift_params_init_buffers(const drift_family_config *cfg, drift_buffer_prov prov, drift_hostset **out,
                              drift_err *err);

#endif

/* Model families (DESIGN.md s8): Wan-like DiTs named exactly as diffusers'
 * WanTransformer3DModel, so real plans apply unchanged. "tiny-dit" is the
 * same structure at a small default size; "wan2.2" defaults to the
 * Wan2.2-TI2V-5B widths. Both accept K=V overrides: FAMILY[:K=V,...]. */
#ifndef DRIFT_REPLAY_MODELS_FAMILY_H
#define DRIFT_REPLAY_MODELS_FAMILY_H

#include "formats/err.h"
#include "formats/params.h"

typedef struct drift_family_config {
    char family[32];   /* "tiny-dit" or "wan2.2" */
    int layers;        /* number of blocks */
    int dim;           /* model width */
    int heads;         /* attention heads (dim % heads == 0, head_dim even) */
    int ffn_dim;       /* FFN inner width */
    int in_channels;   /* latent channels in */
    int out_channels;  /* latent channels out */
    int text_dim;      /* text encoder width (cond features) */
    int text_len;      /* text tokens (cond length) */
    int freq_dim;      /* timestep sinusoid width */
    int patch[3];      /* patch size (pf, ph, pw) */
    int frames, height, width; /* latent grid before patchify */
    int batch;         /* samples per forward */
    double eps;        /* norm epsilon (1e-6) */
    double rope_theta; /* RoPE base (10000) */
} drift_family_config;

/* Parses "FAMILY[:K=V,...]" (keys: the field names above, patch=PFxPHxPW).
 * Errors name the key and what was expected; sizes are bounded so that the
 * largest tensor stays below 2^40 elements. */
int drift_family_parse(const char *spec, drift_family_config *cfg, drift_err *err);
/* Writes the canonical spec "family:layers=..,dim=..,..." into buf. */
void drift_family_format(const drift_family_config *cfg, char *buf, unsigned long bufsz);
/* Tokens per sample after patchify. */
long drift_family_tokens(const drift_family_config *cfg);
/* Fills t (initialised, empty) with the parameters in diffusers'
 * named_parameters() order and the wraps blocks.0 .. blocks.{layers-1}. */
int drift_family_param_table(const drift_family_config *cfg, drift_param_table *t, drift_err *err);

#endif

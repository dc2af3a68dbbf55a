/* Semantic graph of diffusers' WanTransformer3DModel.forward (DESIGN.md s4,
 * s8), node for node with the model code's explicit casts, for the families
 * "tiny-dit" and "wan2.2" (replay/models/family.h).
 *
 * Leaves: the boundary inputs latents [B, C, F, H, W], cond [B, text_len,
 * text_dim], timestep [B] (in that order, each followed by its
 * input_dtype_policy cast); the RoPE buffers DRIFT_WAN_ROPE_COS/SIN, the
 * per-token tables rotary_emb holds ([L, head_dim] fp32, token order
 * (f, h, w)); every parameter by its diffusers root FQN, as a fp32 leaf
 * placed right before its first use.
 *
 * Recorded sites, in execution order: input:{latents,cond,timestep}:{pre_cast,
 * post_cast}, patch_embedding:out ([B, dim, F', H', W'] as the Conv3d hook
 * sees it), condition_embedder.time_embedder:out, condition_embedder.time_proj:out,
 * condition_embedder.text_embedder:out, then per block blocks.N.norm1:out,
 * blocks.N.attn1:out, blocks.N.norm2:out, blocks.N.attn2:out, blocks.N.norm3:out,
 * blocks.N.ffn:out, blocks.N:out, then norm_out:out, proj_out:out and
 * output:noise_pred (the graph's output). docs/autocast.md lists the
 * deviations from diffusers. */
#ifndef DRIFT_REPLAY_MODELS_WAN_GRAPH_H
#define DRIFT_REPLAY_MODELS_WAN_GRAPH_H

#include "formats/err.h"
#include "replay/ir/graph.h"
#include "replay/models/family.h"

#define DRIFT_WAN_ROPE_COS "rope.freqs_cos"
#define DRIFT_WAN_ROPE_SIN "rope.freqs_sin"

/* Builds the semantic graph for cfg (validated with drift_family_parse's
 * rules). Caller owns *out (drift_graph_free). */
int drift_wan_graph_build(const drift_family_config *cfg, drift_graph **out, drift_err *err);

#endif

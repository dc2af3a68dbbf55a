/* WanTransformer3DModel.forward as a semantic graph (wan_graph.h).
 * Each helper mirrors one line (or one module) of diffusers' code; the
 * comments quote it. Errors are sticky in the builder: after the first
 * failure every helper returns -1 and the build reports that failure. */
#include "replay/models/wan_graph.h"

#include "formats/alloc.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "formats/plan.h" /* DRIFT_INPUT_* */

typedef struct wb {
    drift_graph *g;
    const drift_family_config *cfg;
    int rc;
    drift_err *err;
} wb;

static int add(wb *b, drift_node_spec *s) {
    if (b->rc) return -1;
    for (int i = 0; i < s->op.n_in; i++)
        if (s->in[i] < 0) return -1;
    int id = -1;
    b->rc = drift_graph_add_node(b->g, s, &id, b->err);
    return b->rc ? -1 : id;
}

static void site(wb *b, int id, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void site(wb *b, int id, const char *fmt, ...) {
    if (b->rc || id < 0) return;
    char name[DRIFT_MAX_FQN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    b->rc = drift_graph_set_site(b->g, id, name, b->err);
}

static int leaf(wb *b, drift_value_kind kind, const char *name, drift_dtype dt, int ndim, int64_t d0, int64_t d1,
                int64_t d2, int64_t d3, int64_t d4) {
    if (b->rc) return -1;
    int64_t s[5] = {d0, d1, d2, d3, d4};
    int id = -1;
    b->rc = drift_graph_add_leaf(b->g, kind, name, dt, ndim, s, &id, b->err);
    return b->rc ? -1 : id;
}

static int param(wb *b, const char *prefix, const char *leafname, int ndim, int64_t d0, int64_t d1, int64_t d2,
                 int64_t d3, int64_t d4) {
    char fqn[DRIFT_MAX_FQN];
    snprintf(fqn, sizeof fqn, "%s%s%s", prefix, prefix[0] ? "." : "", leafname);
    return leaf(b, DRIFT_VAL_PARAM, fqn, DRIFT_F32, ndim, d0, d1, d2, d3, d4);
}

static int node1(wb *b, drift_op_kind k, drift_dtype_rule rule, int x, const char *label) {
    drift_node_spec s;
    drift_node_spec_init(&s, k);
    s.op.n_in = 1;
    s.in[0] = x;
    s.rule = rule;
    s.name = label;
    return add(b, &s);
}

static int node2(wb *b, drift_op_kind k, drift_dtype_rule rule, int x, int y) {
    drift_node_spec s;
    drift_node_spec_init(&s, k);
    s.op.n_in = 2;
    s.in[0] = x;
    s.in[1] = y;
    s.rule = rule;
    return add(b, &s);
}

/* x.float() / x.to(dtype) */
static int cast_to(wb *b, int x, drift_dtype dt) {
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_CAST);
    s.op.n_in = 1;
    s.in[0] = x;
    s.rule = DRIFT_RULE_CAST_TO;
    s.rule_dtype = dt;
    return add(b, &s);
}

/* x.type_as(ref) / x.to(ref.dtype) */
static int type_as(wb *b, int x, int ref) {
    if (ref < 0) return -1;
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_CAST);
    s.op.n_in = 1;
    s.in[0] = x;
    s.rule = DRIFT_RULE_TYPE_AS;
    s.rule_ref = ref;
    return add(b, &s);
}

static int view(wb *b, int x, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t d4) {
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_VIEW);
    s.op.n_in = 1;
    s.in[0] = x;
    s.rule = DRIFT_RULE_LIKE_INPUT0;
    s.ndim = ndim;
    int64_t d[5] = {d0, d1, d2, d3, d4};
    memcpy(s.shape, d, sizeof d);
    return add(b, &s);
}

static int permute(wb *b, int x, int ndim, const int *perm) {
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_PERMUTE);
    s.op.n_in = 1;
    s.in[0] = x;
    for (int i = 0; i < ndim; i++) s.op.perm[i] = perm[i];
    s.rule = DRIFT_RULE_LIKE_INPUT0;
    return add(b, &s);
}

static int narrow(wb *b, int x, int dim, int64_t start, int64_t length) {
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_NARROW);
    s.op.n_in = 1;
    s.in[0] = x;
    s.op.dim = dim;
    s.op.start = start;
    s.op.length = length;
    s.rule = DRIFT_RULE_LIKE_INPUT0;
    return add(b, &s);
}

/* 1 + x (Python scalar first: the tensor's dtype wins) */
static int one_plus(wb *b, int x) {
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_AFFINE);
    s.op.n_in = 1;
    s.in[0] = x;
    s.op.alpha = 1.0f;
    s.op.beta = 1.0f;
    s.rule = DRIFT_RULE_PROMOTE;
    return add(b, &s);
}

/* nn.Linear(prefix) on x: F.linear with the bias fused into the GEMM
 * epilogue (addmm / cublasLt bias epilogue: one rounding), autocast
 * lower-precision list. */
static int linear_p(wb *b, int x, int w, int bias, const char *label) {
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_LINEAR);
    s.op.n_in = bias >= 0 ? 3 : 2;
    s.in[0] = x;
    s.in[1] = w;
    s.in[2] = bias;
    if (bias < 0) s.in[2] = -1;
    s.rule = DRIFT_RULE_AUTOCAST_LOWER;
    s.name = label;
    if (w < 0) return -1;
    return add(b, &s);
}

static int linear(wb *b, int x, const char *prefix, int64_t out_f, int64_t in_f) {
    int w = param(b, prefix, "weight", 2, out_f, in_f, 0, 0, 0);
    int bias = param(b, prefix, "bias", 1, out_f, 0, 0, 0, 0);
    if (bias < 0) return -1;
    return linear_p(b, x, w, bias, prefix);
}

/* FP32LayerNorm.forward(inputs):
 *   origin_dtype = inputs.dtype
 *   F.layer_norm(inputs.float(), shape, weight.float() if weight else None,
 *                bias.float() if bias else None, eps).to(origin_dtype) */
static int fp32_layer_norm(wb *b, int x, const char *prefix, int affine) {
    int xf = cast_to(b, x, DRIFT_F32);
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_LAYER_NORM);
    s.op.n_in = 1;
    s.in[0] = xf;
    if (affine) {
        int64_t dim = b->cfg->dim;
        int w = param(b, prefix, "weight", 1, dim, 0, 0, 0, 0);
        int wf = cast_to(b, w, DRIFT_F32);
        int bias = param(b, prefix, "bias", 1, dim, 0, 0, 0, 0);
        int bf = cast_to(b, bias, DRIFT_F32);
        s.op.n_in = 3;
        s.in[1] = wf;
        s.in[2] = bf;
    }
    s.op.eps = (float)b->cfg->eps;
    s.rule = DRIFT_RULE_AUTOCAST_FP32;
    s.name = prefix;
    int ln = add(b, &s);
    return type_as(b, ln, x);
}

/* torch.nn.RMSNorm(dim, eps, elementwise_affine=True) (torch 2.11's rms_norm:
 * normalise and weight in fp32, one rounding to x's dtype). */
static int rms_norm(wb *b, int x, const char *prefix) {
    int w = param(b, prefix, "weight", 1, b->cfg->dim, 0, 0, 0, 0);
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_RMS_NORM);
    s.op.n_in = 2;
    s.in[0] = x;
    s.in[1] = w;
    s.op.eps = (float)b->cfg->eps;
    s.rule = DRIFT_RULE_RMS_NORM;
    s.name = prefix;
    if (w < 0) return -1;
    return add(b, &s);
}

/* apply_rotary_emb(x, freqs_cos, freqs_sin): out = torch.empty_like(x);
 * out[..., 0::2] = x1 * cos - x2 * sin; out[..., 1::2] = x1 * sin + x2 * cos
 * (fp32 tables, fp32 arithmetic, stored into x's dtype). */
static int rope(wb *b, int x, int cos_t, int sin_t) {
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_ROPE);
    s.op.n_in = 3;
    s.in[0] = x;
    s.in[1] = cos_t;
    s.in[2] = sin_t;
    s.rule = DRIFT_RULE_LIKE_INPUT0;
    return add(b, &s);
}

/* WanAttention with WanAttnProcessor: q/k/v projections, RMSNorm across
 * heads on q and k, unflatten to heads, RoPE (self-attention only), SDPA,
 * flatten, .type_as(query), to_out.0. ctx < 0: self-attention. */
static int attention(wb *b, int x, int ctx, int lq, int lk, const char *prefix, int cos_t, int sin_t) {
    const drift_family_config *c = b->cfg;
    int64_t B = c->batch, dim = c->dim, H = c->heads, Dh = c->dim / c->heads;
    char p[DRIFT_MAX_FQN];
    int self = ctx < 0;
    if (self) ctx = x;
    snprintf(p, sizeof p, "%s.to_q", prefix);
    int q = linear(b, x, p, dim, dim);
    snprintf(p, sizeof p, "%s.to_k", prefix);
    int k = linear(b, ctx, p, dim, dim);
    snprintf(p, sizeof p, "%s.to_v", prefix);
    int v = linear(b, ctx, p, dim, dim);
    snprintf(p, sizeof p, "%s.norm_q", prefix);
    q = rms_norm(b, q, p);
    snprintf(p, sizeof p, "%s.norm_k", prefix);
    k = rms_norm(b, k, p);
    /* query.unflatten(2, (heads, -1)) */
    q = view(b, q, 4, B, lq, H, Dh, 0);
    k = view(b, k, 4, B, lk, H, Dh, 0);
    v = view(b, v, 4, B, lk, H, Dh, 0);
    if (self) {
        q = rope(b, q, cos_t, sin_t);
        k = rope(b, k, cos_t, sin_t);
    }
    /* dispatch_attention_fn (native SDPA) transposes to [B, H, L, Dh] and
     * back; ATTENTION's layout 1 takes [B, L, H, Dh] as it is and returns
     * [B, Lq, H, Dh] (the same math, no PERMUTE nodes; kernels/backend.h) */
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_ATTENTION);
    s.op.n_in = 3;
    s.in[0] = q;
    s.in[1] = k;
    s.in[2] = v;
    s.op.scale = (float)(1.0 / sqrt((double)Dh));
    s.op.layout = 1;
    /* a head dim that is no multiple of 8 is FlashAttention-2 in torch (cuDNN refuses it), as
       the captured graph's importer marks it (replay/capture/aten_lower.c, al_lower_sdpa) */
    if (Dh % 8) s.op.sub = DRIFT_ATTN_ORDER_LAST_FIRST;
    s.rule = DRIFT_RULE_AUTOCAST_LOWER;
    s.name = prefix;
    int o = add(b, &s);
    o = view(b, o, 3, B, lq, dim, 0, 0); /* hidden_states.flatten(2, 3) */
    o = type_as(b, o, q);                /* hidden_states.type_as(query) */
    snprintf(p, sizeof p, "%s.to_out.0", prefix);
    return linear(b, o, p, dim, dim);
}

/* (x(fp32) * (1 + scale) + shift): the modulation of norm1/norm3/norm_out */
static int modulate(wb *b, int normed, int scale, int shift) {
    int m = node2(b, DRIFT_OP_MUL, DRIFT_RULE_PROMOTE, normed, one_plus(b, scale));
    return node2(b, DRIFT_OP_ADD, DRIFT_RULE_PROMOTE, m, shift);
}

/* WanTransformerBlock.forward(hidden_states, encoder_hidden_states, temb, rotary_emb) */
static int block(wb *b, int n, int h, int enc, int temb6, int cos_t, int sin_t) {
    const drift_family_config *c = b->cfg;
    int64_t L = drift_family_tokens(c), T = c->text_len, dim = c->dim;
    char p[32];
    snprintf(p, sizeof p, "blocks.%d", n);
    /* shift_msa, scale_msa, gate_msa, c_shift_msa, c_scale_msa, c_gate_msa =
     *     (self.scale_shift_table + temb.float()).chunk(6, dim=1) */
    int sst = param(b, p, "scale_shift_table", 3, 1, 6, dim, 0, 0);
    int mod = node2(b, DRIFT_OP_ADD, DRIFT_RULE_PROMOTE, sst, cast_to(b, temb6, DRIFT_F32));
    int ch[6];
    for (int i = 0; i < 6; i++) ch[i] = narrow(b, mod, 1, i, 1);
    char q[96];

    /* norm_hidden_states = (self.norm1(hidden_states.float()) * (1 + scale_msa) + shift_msa).type_as(hidden_states) */
    snprintf(q, sizeof q, "%s.norm1", p);
    int n1 = fp32_layer_norm(b, cast_to(b, h, DRIFT_F32), q, 0);
    site(b, n1, "%s.norm1:out", p);
    int nh = type_as(b, modulate(b, n1, ch[1], ch[0]), h);
    /* attn_output = self.attn1(norm_hidden_states, None, None, rotary_emb) */
    snprintf(q, sizeof q, "%s.attn1", p);
    int a1 = attention(b, nh, -1, (int)L, (int)L, q, cos_t, sin_t);
    site(b, a1, "%s.attn1:out", p);
    /* hidden_states = (hidden_states.float() + attn_output * gate_msa).type_as(hidden_states) */
    int hf = cast_to(b, h, DRIFT_F32);
    int g = node2(b, DRIFT_OP_MUL, DRIFT_RULE_PROMOTE, a1, ch[2]);
    h = type_as(b, node2(b, DRIFT_OP_ADD, DRIFT_RULE_PROMOTE, hf, g), h);

    /* norm_hidden_states = self.norm2(hidden_states.float()).type_as(hidden_states) */
    snprintf(q, sizeof q, "%s.norm2", p);
    int n2 = fp32_layer_norm(b, cast_to(b, h, DRIFT_F32), q, 1);
    site(b, n2, "%s.norm2:out", p);
    nh = type_as(b, n2, h);
    /* attn_output = self.attn2(norm_hidden_states, encoder_hidden_states, None, None); hidden_states = hidden_states + attn_output */
    snprintf(q, sizeof q, "%s.attn2", p);
    int a2 = attention(b, nh, enc, (int)L, (int)T, q, -1, -1);
    site(b, a2, "%s.attn2:out", p);
    h = node2(b, DRIFT_OP_ADD, DRIFT_RULE_PROMOTE, h, a2);

    /* norm_hidden_states = (self.norm3(hidden_states.float()) * (1 + c_scale_msa) + c_shift_msa).type_as(hidden_states) */
    snprintf(q, sizeof q, "%s.norm3", p);
    int n3 = fp32_layer_norm(b, cast_to(b, h, DRIFT_F32), q, 0);
    site(b, n3, "%s.norm3:out", p);
    nh = type_as(b, modulate(b, n3, ch[4], ch[3]), h);
    /* ff_output = self.ffn(norm_hidden_states): net.0 = GELU(approximate="tanh") with .proj, net.2 = Linear */
    snprintf(q, sizeof q, "%s.ffn.net.0.proj", p);
    int f = linear(b, nh, q, c->ffn_dim, dim);
    f = node1(b, DRIFT_OP_GELU_TANH, DRIFT_RULE_PROMOTE, f, NULL);
    snprintf(q, sizeof q, "%s.ffn.net.2", p);
    f = linear(b, f, q, dim, c->ffn_dim);
    site(b, f, "%s.ffn:out", p);
    /* hidden_states = (hidden_states.float() + ff_output.float() * c_gate_msa).type_as(hidden_states) */
    hf = cast_to(b, h, DRIFT_F32);
    g = node2(b, DRIFT_OP_MUL, DRIFT_RULE_PROMOTE, cast_to(b, f, DRIFT_F32), ch[5]);
    h = type_as(b, node2(b, DRIFT_OP_ADD, DRIFT_RULE_PROMOTE, hf, g), h);
    site(b, h, "%s:out", p);
    return h;
}

static int input(wb *b, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t d4) {
    int x = leaf(b, DRIFT_VAL_INPUT, name, DRIFT_DTYPE_INVALID, ndim, d0, d1, d2, d3, d4);
    site(b, x, "input:%s:pre_cast", name);
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_CAST);
    s.op.n_in = 1;
    s.in[0] = x;
    s.rule = DRIFT_RULE_INPUT_POLICY;
    s.rule_ref = drift_graph_input_parse(name);
    int y = add(b, &s);
    site(b, y, "input:%s:post_cast", name);
    return y;
}

static void build(wb *b) {
    const drift_family_config *c = b->cfg;
    const int64_t B = c->batch, C = c->in_channels, F = c->frames, H = c->height, W = c->width;
    const int pf = c->patch[0], ph = c->patch[1], pw = c->patch[2];
    const int64_t Fp = F / pf, Hp = H / ph, Wp = W / pw, L = Fp * Hp * Wp, P = (int64_t)pf * ph * pw;
    const int64_t dim = c->dim, Dh = c->dim / c->heads;

    /* The trainer casts the boundary inputs (input_dtype_policy) before the call. */
    int lat = input(b, "latents", 5, B, C, F, H, W);
    int cond = input(b, "cond", 3, B, c->text_len, c->text_dim, 0, 0);
    int ts = input(b, "timestep", 1, B, 0, 0, 0, 0);

    /* rotary_emb = self.rope(hidden_states): fp32 buffers, per token */
    int cos_t = leaf(b, DRIFT_VAL_BUFFER, DRIFT_WAN_ROPE_COS, DRIFT_F32, 2, L, Dh, 0, 0, 0);
    int sin_t = leaf(b, DRIFT_VAL_BUFFER, DRIFT_WAN_ROPE_SIN, DRIFT_F32, 2, L, Dh, 0, 0, 0);

    /* hidden_states = self.patch_embedding(hidden_states): Conv3d(kernel = stride = patch).
     * cuDNN runs the convolution and then output.add_(bias): two roundings,
     * both operands of each under autocast's lower-precision policy. Its
     * convolution is an NHWC implicit GEMM summing K in (pf, ph, pw, c)
     * order (measured, issue 16): channels-last patches, the weight permuted
     * to [dim, pf, ph, pw, C], as the captured graph's lowering does. */
    int w = param(b, "patch_embedding", "weight", 5, dim, C, pf, ph, pw);
    static const int wcl[5] = {0, 2, 3, 4, 1};
    int w2 = view(b, permute(b, w, 5, wcl), 2, dim, C * P, 0, 0, 0);
    int bias = param(b, "patch_embedding", "bias", 1, dim, 0, 0, 0, 0);
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_PATCHIFY);
    s.op.n_in = 1;
    s.in[0] = lat;
    s.op.patch[0] = pf;
    s.op.patch[1] = ph;
    s.op.patch[2] = pw;
    s.op.layout = 1; /* features (pf, ph, pw, c) */
    s.rule = DRIFT_RULE_LIKE_INPUT0;
    int x = add(b, &s);
    int conv = linear_p(b, x, w2, -1, "patch_embedding");
    int h = node2(b, DRIFT_OP_ADD, DRIFT_RULE_AUTOCAST_LOWER, conv, bias);
    /* the module output as its hook sees it: [B, dim, F', H', W'] */
    static const int bdl[3] = {0, 2, 1};
    int pe = view(b, permute(b, h, 3, bdl), 5, B, dim, Fp, Hp, Wp);
    site(b, pe, "patch_embedding:out");
    /* hidden_states = hidden_states.flatten(2).transpose(1, 2): h already is [B, L, dim] */

    /* condition_embedder(timestep, encoder_hidden_states) */
    /* timestep = self.timesteps_proj(timestep): Timesteps(freq_dim, flip_sin_to_cos=True, shift=0) */
    drift_node_spec_init(&s, DRIFT_OP_TIMESTEP_SINUSOID);
    s.op.n_in = 1;
    s.in[0] = cast_to(b, ts, DRIFT_F32); /* timesteps[:, None].float() */
    s.op.dim = c->freq_dim;
    s.op.max_period = 10000.0f;
    s.op.flip_sin_to_cos = 1;
    s.rule = DRIFT_RULE_FIXED;
    s.rule_dtype = DRIFT_F32;
    s.name = "condition_embedder.timesteps_proj";
    int sinus = add(b, &s);
    /* time_embedder_dtype = next(iter(self.time_embedder.parameters())).dtype
     * if timestep.dtype != time_embedder_dtype: timestep = timestep.to(time_embedder_dtype) */
    int w1 = param(b, "condition_embedder.time_embedder.linear_1", "weight", 2, dim, c->freq_dim, 0, 0, 0);
    int b1 = param(b, "condition_embedder.time_embedder.linear_1", "bias", 1, dim, 0, 0, 0, 0);
    int te = type_as(b, sinus, w1);
    /* temb = self.time_embedder(timestep).type_as(encoder_hidden_states) */
    te = linear_p(b, te, w1, b1, "condition_embedder.time_embedder.linear_1");
    te = node1(b, DRIFT_OP_SILU, DRIFT_RULE_PROMOTE, te, NULL);
    te = linear(b, te, "condition_embedder.time_embedder.linear_2", dim, dim);
    site(b, te, "condition_embedder.time_embedder:out");
    int temb = type_as(b, te, cond);
    /* timestep_proj = self.time_proj(self.act_fn(temb)) */
    int tp = linear(b, node1(b, DRIFT_OP_SILU, DRIFT_RULE_PROMOTE, temb, NULL), "condition_embedder.time_proj", 6 * dim,
                    dim);
    site(b, tp, "condition_embedder.time_proj:out");
    /* encoder_hidden_states = self.text_embedder(encoder_hidden_states) (PixArtAlphaTextProjection, gelu_tanh) */
    int enc = linear(b, cond, "condition_embedder.text_embedder.linear_1", dim, c->text_dim);
    enc = node1(b, DRIFT_OP_GELU_TANH, DRIFT_RULE_PROMOTE, enc, NULL);
    enc = linear(b, enc, "condition_embedder.text_embedder.linear_2", dim, dim);
    site(b, enc, "condition_embedder.text_embedder:out");
    /* timestep_proj = timestep_proj.unflatten(1, (6, -1)) */
    int temb6 = view(b, tp, 3, B, 6, dim, 0, 0);

    for (int n = 0; n < c->layers; n++) h = block(b, n, h, enc, temb6, cos_t, sin_t);

    /* shift, scale = (self.scale_shift_table + temb.unsqueeze(1)).chunk(2, dim=1) */
    int sst = param(b, "", "scale_shift_table", 3, 1, 2, dim, 0, 0);
    int mo = node2(b, DRIFT_OP_ADD, DRIFT_RULE_PROMOTE, sst, view(b, temb, 3, B, 1, dim, 0, 0));
    int shift = narrow(b, mo, 1, 0, 1), scale = narrow(b, mo, 1, 1, 1);
    /* hidden_states = (self.norm_out(hidden_states.float()) * (1 + scale) + shift).type_as(hidden_states) */
    int no = fp32_layer_norm(b, cast_to(b, h, DRIFT_F32), "norm_out", 0);
    site(b, no, "norm_out:out");
    h = type_as(b, modulate(b, no, scale, shift), h);
    /* hidden_states = self.proj_out(hidden_states) */
    h = linear(b, h, "proj_out", c->out_channels * P, dim);
    site(b, h, "proj_out:out");
    /* reshape(B, F', H', W', pt, ph, pw, -1).permute(0, 7, 1, 4, 2, 5, 3, 6).flatten(...) */
    drift_node_spec_init(&s, DRIFT_OP_UNPATCHIFY);
    s.op.n_in = 1;
    s.in[0] = h;
    s.op.patch[0] = pf;
    s.op.patch[1] = ph;
    s.op.patch[2] = pw;
    s.rule = DRIFT_RULE_LIKE_INPUT0;
    s.ndim = 5;
    int64_t os[5] = {B, c->out_channels, F, H, W};
    memcpy(s.shape, os, sizeof os);
    int out = add(b, &s);
    site(b, out, "output:noise_pred");
    if (!b->rc) b->rc = drift_graph_set_output(b->g, out, b->err);
}

int drift_wan_graph_build(const drift_family_config *cfg, drift_graph **out, drift_err *err) {
    if (!cfg || !out) return drift_err_set(err, DRIFT_E_INTERNAL, "wan graph", "drift_wan_graph_build: NULL argument");
    *out = NULL;
    if (cfg->heads < 1 || cfg->dim % cfg->heads || (cfg->dim / cfg->heads) % 2 || cfg->freq_dim % 2 || cfg->batch < 1 ||
        cfg->patch[0] < 1 || cfg->patch[1] < 1 || cfg->patch[2] < 1 || cfg->frames % cfg->patch[0] ||
        cfg->height % cfg->patch[1] || cfg->width % cfg->patch[2])
        return drift_err_set(err, DRIFT_E_INPUT, cfg->family,
                             "model config: expected dim divisible by heads with an even head dim, an even freq_dim "
                             "and a latent grid divisible by the patch (see drift_family_parse)");
    drift_err local;
    drift_err_clear(&local);
    wb b = {NULL, cfg, 0, err ? err : &local};
    if ((b.rc = drift_graph_create(0, &b.g, b.err))) return b.rc;
    char spec[1024];
    drift_family_format(cfg, spec, sizeof spec);
    b.rc = drift_graph_set_model(b.g, spec, b.err);
    if (!b.rc) build(&b);
    if (b.rc) {
        drift_err_prefix(b.err, "building the %s graph", cfg->family);
        drift_graph_free(b.g);
        return b.rc;
    }
    *out = b.g;
    return DRIFT_OK;
}

/* Re-batching a captured graph (docs/invariance.md "Captured graphs", issue 33): small
 * hand-written graphs (tests/data/graphs/rebatch: JSON files, each naming the zoo model whose
 * pattern it copies) lowered again at other batch sizes through drift_capture_model_rebatch,
 * as `drift invariance` does:
 *  - a factory that builds a per-sample tensor at the recorded batch (LuminaNext's key mask
 *    ones(B, L)) re-batches, and a factory or an expand whose leading size is the recorded
 *    batch by coincidence (2 heads at batch 2) stays batch-free, and so does a user input
 *    whose dim 0 is 2 heads: the values are checked against the definition;
 *  - a matmul whose batch dims broadcast (Ideogram4's rope at another batch) runs, and the
 *    sample's rows equal the batch-1 program's bit for bit on cpu;
 *  - a loop over the samples unrolled at the recorded batch is unrolled again at each batch
 *    (Mochi's attention picks each sample with a slice, HunyuanVideo-1.5 zips over unbinds),
 *    and so is a split over chunks of the batch's rows (WanAnimate's chunked motion encoder);
 *  - what cannot be re-batched is an error naming the op and its module: a model whose
 *    shapes only work at batch 1 (GlmImage: the batch the
 *    probe lowered at is named, not the recorded one), a model whose output has lost the
 *    batch (the sample's output row is read in dim 0). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include "tests/replay/rebatch_util.h"

#include "formats/plan.h"
#include "kernels/backend.h"
#include "replay/capture/aten_graph.h"
#include "replay/capture/aten_model.h"
#include "replay/exec/exec.h"
#include "replay/ir/assign.h"
#include "tests/fp32_run.h"
#include "tests/slurp.h"

static drift_model *load(const char *name) { return rb_load(name); }

/* base re-batched to B: 0 and *out, or the error code with e filled. */
static int rebatch(drift_model *base, int B, drift_model **out, drift_err *e) {
    drift_err_clear(e);
    *out = NULL;
    return drift_capture_model_rebatch(base, B, out, e);
}

static float xval(int64_t i) { return rb_xval(i); }

/* Runs m on cpu with every input xval(i) over its shape and each parameter and buffer k * 0.25 + 1
 * at element k. */
static void run(const drift_model *m, drift_exec_result *r) { rb_run(m, r); }

/* y[k] of a fixture's output at batch B, k the flat index over [B, dims...]. */
typedef float (*rows_want)(int64_t k, int B);

/* FILE re-batched to B = 1, 2 and 3 (rb > 0: its recorded batch, for a model without latents, as
 * drift invariance sets it; leaf non-NULL: a buffer the re-batched graph must have) runs, its output
 * is [B, dims[0..nd-1]], and y[k] == want(k, B) bit for bit at every element. */
static void rebatches_to(const char *file, int rb, const char *leaf, int nd, const int64_t *dims, rows_want want) {
    drift_model *base = load(file);
    if (rb > 0) base->cfg.batch = rb;
    for (int B = 1; B <= 3; B++) {
        drift_model *m = NULL;
        drift_err e;
        if (rebatch(base, B, &m, &e)) fail_msg("%s at batch %d: %s", file, B, e.msg);
        if (leaf) assert_true(drift_graph_find_leaf(m->sem, DRIFT_VAL_BUFFER, leaf) >= 0);
        drift_exec_result r;
        run(m, &r);
        assert_int_equal(r.ndim, nd + 1);
        assert_int_equal(r.shape[0], B);
        for (int d = 0; d < nd; d++) assert_int_equal(r.shape[d + 1], dims[d]);
        for (int64_t k = 0; k < r.numel; k++)
            if (r.f32[k] != want(k, B))
                fail_msg("%s at batch %d: y[%lld] = %g, want %g", file, B, (long long)k, r.f32[k], want(k, B));
        drift_exec_result_free(&r);
        drift_model_free(m);
    }
    drift_model_free(base);
}

/* factory_mask.json: y = (x + 0.5) * 1 at every batch; the output [B, 2, 8]. */
static void test_factory_mask_rebatches_and_coincident_table_stays(void **state) {
    (void)state;
    drift_model *base = load("factory_mask.json");
    assert_int_equal(base->cfg.batch, 2);
    for (int B = 1; B <= 3; B++) {
        drift_model *m = NULL;
        drift_err e;
        if (rebatch(base, B, &m, &e)) fail_msg("batch %d: %s", B, e.msg);
        drift_exec_result r;
        run(m, &r);
        assert_int_equal(r.ndim, 3);
        assert_int_equal(r.shape[0], B);
        assert_int_equal(r.shape[1], 2);
        assert_int_equal(r.shape[2], 8);
        for (int64_t k = 0; k < r.numel; k++) assert_true(r.f32[k] == xval(k) + 0.5f);
        drift_exec_result_free(&r);
        drift_model_free(m);
    }
    drift_model_free(base);
}

/* expand_heads.json: y = x + w over 2 heads; at batch 3 the expand still gives [2 heads, 8]. */
static void test_expand_by_heads_is_not_the_batch(void **state) {
    (void)state;
    drift_model *base = load("expand_heads.json");
    drift_model *m = NULL;
    drift_err e;
    if (rebatch(base, 3, &m, &e)) fail_msg("%s", e.msg);
    drift_exec_result r;
    run(m, &r);
    assert_int_equal(r.shape[0], 3);
    for (int64_t k = 0; k < r.numel; k++) assert_true(r.f32[k] == xval(k) + (float)(k % 8) * 0.25f + 1.0f);
    drift_exec_result_free(&r);
    drift_model_free(m);
    drift_model_free(base);
}

/* input_heads.json at batch 3: the head table input keeps its 2 rows; y = (x + tbl) * t + c. */
static void test_input_with_heads_in_dim0_is_not_the_batch(void **state) {
    (void)state;
    drift_model *base = load("input_heads.json");
    drift_model *m = NULL;
    drift_err e;
    if (rebatch(base, 3, &m, &e)) fail_msg("%s", e.msg);
    const drift_value *tbl = drift_graph_value(m->sem, drift_graph_find_leaf(m->sem, DRIFT_VAL_BUFFER, "input:head_table"));
    assert_non_null(tbl);
    assert_int_equal(tbl->shape[0], 2);
    drift_exec_result r;
    run(m, &r);
    assert_int_equal(r.shape[0], 3);
    for (int64_t k = 0; k < r.numel; k++) {
        const float a = xval(k) + (float)(k % 16) * 0.25f + 1.0f, b = a * xval(k / 16);
        assert_true(r.f32[k] == b + xval(k));
    }
    drift_exec_result_free(&r);
    drift_model_free(m);
    drift_model_free(base);
}

/* matmul_broadcast.json at batch 2: sample 0's rows are the batch-1 program's, bit for bit (the
 * latents of batch 1 are the first rows of batch 2's: xval over the flat index), and the values
 * are w[i] * x[s, l, c]. */
static void test_matmul_broadcast_batch_dims(void **state) {
    (void)state;
    drift_model *base = load("matmul_broadcast.json");
    drift_model *m1 = NULL, *m2 = NULL;
    drift_err e;
    if (rebatch(base, 1, &m1, &e) || rebatch(base, 2, &m2, &e)) fail_msg("%s", e.msg);
    drift_exec_result r1, r2;
    run(m1, &r1);
    run(m2, &r2);
    assert_int_equal(r2.ndim, 4);
    assert_int_equal(r2.shape[0], 2);
    assert_int_equal(r2.numel, 2 * r1.numel);
    assert_memory_equal(r1.f32, r2.f32, (size_t)r1.numel * sizeof(float));
    for (int s = 0; s < 2; s++) /* y[s, c, i, l] = w[i] * x[s, l, c] */
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < 4; i++)
                for (int l = 0; l < 8; l++)
                    assert_true(r2.f32[((s * 3 + c) * 4 + i) * 8 + l] == ((float)i * 0.25f + 1.0f) * xval((s * 8 + l) * 3 + c));
    drift_exec_result_free(&r1);
    drift_exec_result_free(&r2);
    drift_model_free(m1);
    drift_model_free(m2);
    drift_model_free(base);
}

/* The re-batching of `file` to batch B fails (DRIFT_E_INPUT) with a message holding every one of
 * the NULL-terminated strings. */
static void refused(const char *file, int B, ...) {
    drift_model *base = load(file), *m = NULL;
    drift_err e;
    assert_int_equal(rebatch(base, B, &m, &e), DRIFT_E_INPUT);
    assert_null(m);
    va_list ap;
    va_start(ap, B);
    for (const char *s; (s = va_arg(ap, const char *));)
        if (!strstr(e.msg, s)) fail_msg("%s: expected '%s' in: %s", file, s, e.msg);
    va_end(ap);
    if (strstr(e.msg, ": : ")) fail_msg("%s: an empty prefix in: %s", file, e.msg);
    drift_model_free(base);
}

/* prior_cat.json (PriorTransformer): the cat of the latents, a factory ones(B) and an expand of a
 * parameter by B needs both taken as the batch (each alone fails at the same cat, so the probe
 * kept neither and refused: "an operand of the cat holds 2 rows"); y = [x, 1, w] per row. */
static float prior_cat_want(int64_t k, int B) {
    (void)B;
    const int64_t b = k / 9, j = k % 9;
    return j < 4 ? xval(b * 4 + j) : j == 4 ? 1.0f : (float)(j - 5) * 0.25f + 1.0f;
}

static void test_cat_of_two_shapes_spelling_the_batch(void **state) {
    (void)state;
    rebatches_to("prior_cat.json", 0, NULL, 1, (int64_t[]){9}, prior_cat_want);
}

/* ids_cat_pair.json (HiDream's RoPE ids): the cat of a factory zeros(B, 3) and a repeat of a
 * parameter by B, added to the latents: taking either alone as the batch breaks the cat before the
 * add, so the probe tries the two together (it refused: "an operand of the cat holds 2 rows");
 * y = x + [0, 0, 0, w] per row. */
static float ids_cat_want(int64_t k, int B) {
    (void)B;
    const int64_t j = k % 6;
    return xval(k) + (j < 3 ? 0.0f : (float)(j - 3) * 0.25f + 1.0f);
}

static void test_two_flips_needed_together(void **state) {
    (void)state;
    rebatches_to("ids_cat_pair.json", 0, NULL, 1, (int64_t[]){6}, ids_cat_want);
}

/* split_batch.json (WanAnimate's motion encoder over chunks of 4 of the B*6 frames), recorded at 1
 * (chunks of 4 and 2): at batch 2 three chunks of 4, at 3 four of 4 and one of 2; y = x (it was
 * refused: "it gives 2 tensors at the recorded batch and 3 at batch 2"). */
static void test_split_over_chunks_is_unrolled_at_each_batch(void **state) {
    (void)state;
    drift_model *base = load("split_batch.json");
    for (int B = 1; B <= 3; B++) {
        drift_model *m = NULL;
        drift_err e;
        if (rebatch(base, B, &m, &e)) fail_msg("batch %d: %s", B, e.msg);
        drift_exec_result r;
        run(m, &r);
        assert_int_equal(r.ndim, 3);
        assert_int_equal(r.shape[0], B);
        for (int64_t k = 0; k < r.numel; k++) assert_true(r.f32[k] == xval(k));
        drift_exec_result_free(&r);
        drift_model_free(m);
    }
    drift_model_free(base);
}

static float loop_want(int64_t k, int B) {
    (void)B;
    return xval(k) + 2.0f * xval(k);
}

/* sample_loop.json (Mochi's attention: each sample picked by a slice, the bodies joined by a
 * cat), recorded at 2: unrolled again at 1, 2 and 3 samples, y = x + 2x per row (it was refused:
 * "the batch dim is lost at node 1 's0'"). */
static void test_sample_loop_is_unrolled_at_each_batch(void **state) {
    (void)state;
    rebatches_to("sample_loop.json", 0, NULL, 1, (int64_t[]){4}, loop_want);
}

static float unbind_want(int64_t k, int B) {
    (void)B;
    return xval(k) + (2.0f * xval(k) + xval(k / 4));
}

/* unbind_loop.json (HunyuanVideo-1.5's zip over the batch: an unbind of each per-sample tensor,
 * a body per sample, a stack), recorded at 1: y = x + (2x + t) per row at 1, 2 and 3 samples (it
 * was refused: "it gives 1 tensors at the recorded batch and 2 at batch 2"). */
static void test_unbind_loop_is_unrolled_at_each_batch(void **state) {
    (void)state;
    rebatches_to("unbind_loop.json", 0, NULL, 1, (int64_t[]){4}, unbind_want);
}

static void test_batch1_only_model_names_the_probe_batch(void **state) {
    (void)state;
    refused("batch1_only.json", 1, "the captured graph at batch 1 (recorded at 1): lowered at batch 2 to find each value's batch dim",
            "node 2 'y' (aten.add.Tensor)", "do not broadcast", NULL);
}

static void test_output_without_the_batch_is_named(void **state) {
    (void)state;
    refused("output_without_batch.json", 3, "node 2 'y' (aten.mul.Tensor) in module 'head'",
            "the model's output holds no batch dim",
            "the batch dim is lost at node 1 's' (aten.slice.Tensor) in module 'head'", NULL);
}

static float writes_want(int64_t k, int B) {
    (void)B;
    return xval(k) + 1.0f;
}

/* sample_writes_alike.json (Lumina2's rope tables with samples of one length: each sample's rows
 * written in place with the same ops and values): the writes are unrolled at 1, 2 and 3 samples,
 * every row written, y = x + 1 (it was refused as the unlike sample_writes.json below is). */
static void test_alike_writes_per_sample_are_unrolled(void **state) {
    (void)state;
    rebatches_to("sample_writes_alike.json", 0, NULL, 1, (int64_t[]){4}, writes_want);
}

/* sample_writes.json (Lumina2's rope tables in dispatch mode: a zeros(2, 4) buffer written one
 * sample at a time in place, then added to the latents): refused naming the write and the buffer
 * (it was refused naming only the add, "do not broadcast", and the probe took the buffer's size
 * as the batch, which would leave the rows of the other samples zero). */
static void test_buffer_written_per_sample_is_named(void **state) {
    (void)state;
    refused("sample_writes.json", 1, "node 3 'fill_' (aten.fill_.Scalar) in module 'rope' writes the rows of sample 0 of node 1 'buf'",
            "a loop over the samples that fills a buffer one sample at a time", "where it breaks: node 6 'y' (aten.add.Tensor)",
            NULL);
    refused("sample_writes.json", 3, "node 3 'fill_' (aten.fill_.Scalar)", NULL);
}

/* list_samples.json (WanAnimate2: the samples as a list, hidden_states.0 the one recorded, joined
 * by a cat; y = cat([h.unsqueeze(0) for h in hidden_states]) + t.view(-1, 1, 1)): the list is one
 * input [B, 4, 2] and the per-sample code runs once per sample at 1, 2 and 3 (it was refused
 * naming the list and the join: "a batch of 2 is a list of 2"). y[b] = h[b] + t[b] bit for bit: a
 * copy that picked another sample's element would put that sample's rows in row b. */
static void test_samples_as_a_list_rebatch(void **state) {
    (void)state;
    drift_model *base = load("list_samples.json");
    for (int B = 1; B <= 3; B++) {
        drift_model *m = NULL;
        drift_err e;
        if (rebatch(base, B, &m, &e)) fail_msg("batch %d: %s", B, e.msg);
        assert_true(drift_graph_find_leaf(m->sem, DRIFT_VAL_BUFFER, "input:hidden_states") >= 0);
        assert_true(drift_graph_find_leaf(m->sem, DRIFT_VAL_BUFFER, "input:hidden_states.0") < 0);
        drift_exec_result r;
        run(m, &r);
        assert_int_equal(r.ndim, 3);
        assert_int_equal(r.shape[0], B);
        for (int64_t k = 0; k < r.numel; k++) {
            const float want = ((float)k * 0.25f + 1.0f) + xval(k / 8); /* h (a buffer) + t (an input) */
            if (r.f32[k] != want) fail_msg("batch %d: y[%lld] = %g, want %g", B, (long long)k, r.f32[k], want);
        }
        drift_exec_result_free(&r);
        drift_model_free(m);
    }
    drift_model_free(base);
}

/* list_io.json (WanAnimate2's lists at a recorded batch of 2: per sample cat([h_i, c_i]) * 2, joined;
 * + t per row; unbind; rows 0..1 of each sample * 3, the output a list of per-sample tensors): at 1,
 * 2 and 3 the output is the samples' outputs stacked, [B, 2, 3], each row from its own sample's
 * elements (it was refused: the model takes its samples as lists). */
static void test_list_output_rebatches(void **state) {
    (void)state;
    drift_model *base = load("list_io.json");
    base->cfg.batch = 2; /* no latents: the recorded batch is the lists' length (drift invariance sets it) */
    for (int B = 1; B <= 3; B++) {
        drift_model *m = NULL;
        drift_err e;
        if (rebatch(base, B, &m, &e)) fail_msg("batch %d: %s", B, e.msg);
        drift_exec_result r;
        run(m, &r);
        assert_int_equal(r.ndim, 3);
        assert_int_equal(r.shape[0], B);
        assert_int_equal(r.shape[1], 2);
        assert_int_equal(r.shape[2], 3);
        for (int64_t k = 0; k < r.numel; k++) {
            const float h = (float)k * 0.25f + 1.0f; /* input:hidden_states [B, 2, 3]: element k of row k / 6 */
            const float want = (h * 2.0f + xval(k / 6)) * 3.0f;
            if (r.f32[k] != want) fail_msg("batch %d: y[%lld] = %g, want %g", B, (long long)k, r.f32[k], want);
        }
        drift_exec_result_free(&r);
        drift_model_free(m);
    }
    drift_model_free(base);
}

/* list_unlike_shapes.json / list_unlike_ops.json: the two recorded samples' elements differ in
 * shape (hidden_states.1 one row, padded) or their code in an op's constant (sample 1 scaled by 5):
 * the samples of another batch would run sample 0's code, so both are refused naming why. */
static void test_unlike_list_samples_are_refused(void **state) {
    (void)state;
    const char *files[] = {"list_unlike_shapes.json", "list_unlike_ops.json"};
    const char *want[][3] = {{"the elements of list 'hidden_states' differ", "node 'h0' (hidden_states.0) is [2, 3] float32",
                              "node 'h1' (hidden_states.1) is [1, 3] float32"},
                             {"the per-sample code of sample 1 differs from sample 0's at node 'm1' (aten.mul.Tensor)",
                              "where sample 0 has node 'm0' (aten.mul.Tensor)", "only samples whose code is alike"}};
    for (int f = 0; f < 2; f++) {
        drift_model *base = load(files[f]), *m = NULL;
        base->cfg.batch = 2;
        drift_err e;
        assert_int_equal(rebatch(base, 2, &m, &e), DRIFT_E_INPUT);
        assert_null(m);
        for (int k = 0; k < 3; k++)
            if (!strstr(e.msg, want[f][k])) fail_msg("%s: expected '%s' in: %s", files[f], want[f][k], e.msg);
        drift_model_free(base);
    }
}

/* The probe alone (no list pass: the fuzz harness's path) on list_io.json refuses naming the lists
 * and their join, node 11 'j' (the cat of the samples); it named node 5 'e0', the per-sample cat of
 * hidden_states.0 and condition_latents.0, which also joins 2 tensors along dim 0. */
static void test_probe_names_the_join_of_the_samples(void **state) {
    (void)state;
    char path[1024];
    const char *td = getenv("DRIFT_TESTDATA");
    snprintf(path, sizeof path, "%s/graphs/rebatch/list_io.json", td ? td : "tests/data");
    size_t len = 0;
    char *json = test_slurp(path, &len);
    assert_non_null(json);
    drift_aten_graph *g = NULL;
    drift_err e;
    drift_err_clear(&e);
    assert_int_equal(drift_aten_graph_parse(json, len, path, &g, &e), 0);
    const int n = drift_aten_graph_node_count(g);
    int *dims = calloc((size_t)n + 1, sizeof *dims);
    unsigned char *lead = calloc((size_t)n + 1, 1);
    assert_int_equal(drift_aten_rebatch_probe(g, NULL, 2, dims, lead, &e), DRIFT_E_INPUT);
    if (!strstr(e.msg, "user inputs hidden_states.0, condition_latents.0: one tensor per sample, 2 recorded") ||
        !strstr(e.msg, "node 11 'j' (aten.cat.default) in module '' joins them into a batch"))
        fail_msg("%s", e.msg);
    free(dims);
    free(lead);
    drift_aten_graph_free(g);
    free(json);
}

/* FILE (a model taking its samples as the list x, recorded at batch rb) re-batched to 1, 2 and 3: the
 * output [B, d1, d2] equals want bit for bit at every element (each sample from its own element; x(k)
 * the stacked list's element, a buffer: k * 0.25 + 1 over its own shape; t(b) the timestep). */
static void list_rebatches(const char *file, int rb, int64_t d1, int64_t d2, rows_want want) {
    rebatches_to(file, rb, "input:x", 2, (int64_t[]){d1, d2}, want);
}

static float lx(int64_t k) { return rb_pval(k); }

static float type_as_want(int64_t k, int B) {
    (void)B;
    return lx(k) * 2.0f + xval(k / 6) * 3.0f;
}

/* list_type_as.json (ZImage's `t_embedder(t).type_as(x[0])`, recorded at batch 1): the first element
 * gives the embedding its dtype only, so it is no sample's code: y[b] = 2 x_b + 3 t_b at 1, 2 and 3
 * (the embedding was taken as sample 0's, copied per sample, each copy [B, 1] against one sample:
 * "the output holds ..."/wrong rows). */
static void test_list_type_as_takes_no_sample(void **state) {
    (void)state;
    list_rebatches("list_type_as.json", 1, 2, 3, type_as_want);
}

static float split_sizes_want(int64_t k, int B) {
    (void)B;
    return (lx(k) * 2.0f + 1.0f) * 3.0f;
}

/* list_split_sizes.json (ZImage's `list(x.split(x_seqlens))` of the samples' joined tokens, recorded
 * at 2): split_with_sizes into one piece per sample splits into B pieces at batch B, each piece its
 * sample's: y[b] = (2 x_b + 1) * 3 (it was refused: "split_sizes sum to 4, dim 0 has 6"). */
static void test_list_split_with_sizes_per_sample(void **state) {
    (void)state;
    list_rebatches("list_split_sizes.json", 2, 2, 3, split_sizes_want);
}

static float pad_const_want(int64_t k, int B) {
    (void)B;
    return lx(k) * 2.0f + (float)(k / 3 % 4);
}

/* list_pad_const.json (ZImage's pad mask `torch.cat(inner_pad_mask)`, one constant per sample, at a
 * recorded batch of 1): the cat of the one constant is a join, B copies at batch B, row for row with
 * the samples' tokens: y[b, r] = 2 x[b, r] + r (it was refused: the [4, 1] constant against [4B, 3]). */
static void test_list_per_sample_constant_joined(void **state) {
    (void)state;
    list_rebatches("list_pad_const.json", 1, 4, 3, pad_const_want);
}

/* list_pad_const2.json: the same at a recorded batch of 2, the cat of the two samples' alike
 * constants (arange(4) each) a join of B copies at batch B (it was refused: [12, 3] and [8, 1] do not
 * broadcast); list_pad_const2_unlike.json, whose sample 1 has arange(1, 5), is refused naming the cat
 * and both constants: they differ, so no one of them stands for the rows of another batch (it was
 * refused naming only the add that meets its rows: "do not broadcast"). */
static void test_list_per_sample_constants_joined_at_2(void **state) {
    (void)state;
    list_rebatches("list_pad_const2.json", 2, 4, 3, pad_const_want);
    drift_model *base = load("list_pad_const2_unlike.json"), *m = NULL;
    base->cfg.batch = 2;
    drift_err e;
    assert_int_equal(rebatch(base, 3, &m, &e), DRIFT_E_INPUT);
    assert_null(m);
    if (!strstr(e.msg, "node 8 'm' (aten.cat.default) in module '' joins one constant per recorded sample") ||
        !strstr(e.msg, "node 'ar0' (aten.arange.start) for sample 0, node 'ar1' (aten.arange.start) for another"))
        fail_msg("%s", e.msg);
    drift_model_free(base);
}

static float pad_sequence_want(int64_t k, int B) {
    (void)B;
    const int64_t b = k / 12, r = k / 3 % 4, c = k % 3;
    return r < 3 ? (lx(b * 9 + r * 3 + c) * 2.0f + 1.0f) + 1.0f : 1.0f;
}

/* list_pad_sequence.json (pad_sequence(feats, batch_first=True) as exported: a full([1, 4, 3]) buffer
 * and each sample's 3 rows, split back from the joined tokens, copied into its row, at a recorded
 * batch of 1): the buffer is [B, 4, 3] at batch B and every sample writes its own row: y[b, r] =
 * 2 x[b, r] + 2, r < 3, and 1 in the pad row (it was refused: "select index 1 out of range" on the
 * [1, 4, 3] buffer). */
static void test_list_pad_sequence_writes_each_sample(void **state) {
    (void)state;
    list_rebatches("list_pad_sequence.json", 1, 4, 3, pad_sequence_want);
}

static float packed_want_fn(int64_t k, int B) {
    (void)B;
    return ((lx(k) * 2.0f + 1.0f) + xval(k / 9) * 5.0f) * 3.0f;
}

/* list_packed.json (ZImage's packing at its test configuration, recorded at 1: all of the above in
 * a row, then an unbind over the batch and a list output), and list_packed2.json, the same recorded
 * at 2: y[b] = ((2 x_b + 1) + 5 t_b) * 3. */
static void test_list_packed_samples_rebatch(void **state) {
    (void)state;
    list_rebatches("list_packed.json", 1, 3, 3, packed_want_fn);
    list_rebatches("list_packed2.json", 2, 3, 3, packed_want_fn);
}

/* moe_sorted.json (HiDream's moe_infer, DeepSeek-style): the slices of the sorted expert ids hold
 * the recorded batch's counts per expert (4, 6, 2 at batch 2; no node computes them). At another
 * batch each slice takes its expert's interval at that batch's counts: a forward whose data gives
 * another count stops naming it, and the count is taken for the next lowering, as `drift
 * invariance` does (at batch 3 the scaled guess 6, 9, 3 is wrong: 5, 9, 4). y is checked against
 * the definition at batch 1, 2, 3 (it was refused: "an empty slice", and at a batch whose counts
 * fit the recorded bounds each expert got another expert's tokens). */
static void test_moe_sorted_slices_follow_the_counts(void **state) {
    (void)state;
    drift_model *base = load("moe_sorted.json");
    for (int B = 1; B <= 3; B++) {
        drift_exec_result r;
        drift_err e;
        int recounts = 0, rc;
        drift_capture_model_clear_counts(base);
        for (;;) {
            drift_model *m = NULL;
            if (rebatch(base, B, &m, &e)) fail_msg("batch %d: %s", B, e.msg);
            rc = rb_try_run(m, &r, &e);
            drift_model_free(m);
            char node[64];
            int64_t cnt;
            if (!rc || !drift_capture_nonzero_failure(&e, node, sizeof node, &cnt)) break;
            drift_exec_result_free(&r);
            if (++recounts > 6) fail_msg("batch %d: still %s after 6 re-counts", B, e.msg);
            assert_int_equal(drift_capture_model_set_count(base, node, cnt, &e), DRIFT_OK);
        }
        if (rc) fail_msg("batch %d: %s", B, e.msg);
        if (B == 3) assert_true(recounts >= 1); /* the scaled counts are not the data's there */
        assert_int_equal(r.numel, B * 6);
        for (int t = 0; t < B * 3; t++) {
            const double x[2] = {xval(2 * t), xval(2 * t + 1)};
            double lg[3], sm[3], z = 0.0;
            for (int k = 0; k < 3; k++) lg[k] = x[0] * rb_pval(2 * k) + x[1] * rb_pval(2 * k + 1);
            for (int k = 0; k < 3; k++) z += sm[k] = exp(lg[k]);
            int lo = 0;
            for (int k = 0; k < 3; k++) {
                sm[k] /= z;
                if (lg[k] < lg[lo]) lo = k;
            }
            for (int o = 0; o < 2; o++) {
                double want = xval(t / 3);
                for (int k = 0; k < 3; k++)
                    if (k != lo) want += sm[k] * (k + 1) * (x[0] * rb_pval(2 * o) + x[1] * rb_pval(2 * o + 1));
                const double got = r.f32[t * 2 + o];
                if (fabs(got - want) > 1e-5 * (1.0 + fabs(want)))
                    fail_msg("batch %d: y[token %d, %d] = %.7g, want %.7g", B, t, o, got, want);
            }
        }
        drift_exec_result_free(&r);
    }
    drift_model_free(base);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_factory_mask_rebatches_and_coincident_table_stays),
        cmocka_unit_test(test_expand_by_heads_is_not_the_batch),
        cmocka_unit_test(test_input_with_heads_in_dim0_is_not_the_batch),
        cmocka_unit_test(test_matmul_broadcast_batch_dims),
        cmocka_unit_test(test_cat_of_two_shapes_spelling_the_batch),
        cmocka_unit_test(test_two_flips_needed_together),
        cmocka_unit_test(test_split_over_chunks_is_unrolled_at_each_batch),
        cmocka_unit_test(test_sample_loop_is_unrolled_at_each_batch),
        cmocka_unit_test(test_unbind_loop_is_unrolled_at_each_batch),
        cmocka_unit_test(test_batch1_only_model_names_the_probe_batch),
        cmocka_unit_test(test_output_without_the_batch_is_named),
        cmocka_unit_test(test_buffer_written_per_sample_is_named),
        cmocka_unit_test(test_alike_writes_per_sample_are_unrolled),
        cmocka_unit_test(test_samples_as_a_list_rebatch),
        cmocka_unit_test(test_list_output_rebatches),
        cmocka_unit_test(test_unlike_list_samples_are_refused),
        cmocka_unit_test(test_probe_names_the_join_of_the_samples),
        cmocka_unit_test(test_moe_sorted_slices_follow_the_counts),
        cmocka_unit_test(test_list_type_as_takes_no_sample),
        cmocka_unit_test(test_list_split_with_sizes_per_sample),
        cmocka_unit_test(test_list_per_sample_constant_joined),
        cmocka_unit_test(test_list_per_sample_constants_joined_at_2),
        cmocka_unit_test(test_list_pad_sequence_writes_each_sample),
        cmocka_unit_test(test_list_packed_samples_rebatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Dtype assignment: semantic graph + plan -> assigned graph (assign.h,
 * docs/autocast.md). */
#include "replay/ir/assign.h"

#include "formats/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* dtype enum values 1..4 index the cast cache */
#define N_DT 5

typedef struct actx {
    const drift_graph *sem;
    drift_graph *out;
    const drift_plan *plan;
    drift_side side;
    drift_dtype fwd;        /* the side's forward dtype */
    drift_dtype autocast;   /* bf16/fp16 when autocast is on, else INVALID */
    int oracle;
    int *map;               /* semantic id -> assigned id */
    int (*cache)[N_DT];     /* assigned id -> cast id per target dtype (0 = none; ids stored +1) */
    int cache_cap;
    drift_err *err;
} actx;

void drift_assign_opts_init(drift_assign_opts *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->side = DRIFT_SIDE_TRAINER;
    for (int i = 0; i < DRIFT_INPUT_COUNT; i++) o->handed_over[i] = DRIFT_F32;
}

const char *drift_assign_side_name(drift_side side) {
    switch (side) {
    case DRIFT_SIDE_TRAINER: return "trainer";
    case DRIFT_SIDE_ROLLOUT: return "rollout";
    case DRIFT_SIDE_ORACLE: return "oracle";
    default: return "?";
    }
}

drift_dtype drift_assign_forward_dtype(const drift_plan *plan, drift_side side) {
    if (side == DRIFT_SIDE_ORACLE) return DRIFT_F64;
    if (!plan) return DRIFT_DTYPE_INVALID;
    return side == DRIFT_SIDE_ROLLOUT ? plan->sglang_dit_precision : plan->diffusion_forward_dtype;
}

drift_dtype drift_assign_promote(drift_dtype a, drift_dtype b) {
    if (a == DRIFT_DTYPE_INVALID) return b;
    if (b == DRIFT_DTYPE_INVALID || a == b) return a;
    if (a == DRIFT_F64 || b == DRIFT_F64) return DRIFT_F64;
    return DRIFT_F32; /* fp32 with a 16-bit type, or bf16 with fp16 */
}

static int is_float(drift_dtype d) { return d == DRIFT_F32 || d == DRIFT_BF16 || d == DRIFT_F16 || d == DRIFT_F64; }
static int is_lower(drift_dtype d) { return d == DRIFT_BF16 || d == DRIFT_F16; }

static drift_dtype dtype_of(const actx *c, int assigned_id) { return drift_graph_value(c->out, assigned_id)->dtype; }

static int grow_cache(actx *c) {
    int n = drift_graph_count(c->out);
    if (n <= c->cache_cap) return DRIFT_OK;
    int ncap = c->cache_cap ? c->cache_cap : 256;
    while (ncap < n) ncap *= 2;
    int (*nc)[N_DT] = drift_realloc(c->cache, (size_t)ncap * sizeof *nc);
    if (!nc) return drift_err_set(c->err, DRIFT_E_NOMEM, "assign", "out of memory");
    memset(nc + c->cache_cap, 0, (size_t)(ncap - c->cache_cap) * sizeof *nc);
    c->cache = nc;
    c->cache_cap = ncap;
    return DRIFT_OK;
}

/* The id of src cast to dt (an inserted CAST node, shared by later users). */
static int cast_of(actx *c, int src, drift_dtype dt, drift_node_origin origin, int *id) {
    int rc;
    if (dtype_of(c, src) == dt) {
        *id = src;
        return DRIFT_OK;
    }
    if ((rc = grow_cache(c))) return rc;
    if (c->cache[src][dt]) {
        *id = c->cache[src][dt] - 1;
        return DRIFT_OK;
    }
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_CAST);
    s.op.n_in = 1;
    s.op.compute = dt;
    s.op.out = dt;
    s.in[0] = src;
    s.rule = DRIFT_RULE_CAST_TO;
    s.rule_dtype = dt;
    s.origin = origin;
    s.sem_id = -1;
    const drift_value *sv = drift_graph_value(c->out, src);
    char label[DRIFT_MAX_FQN];
    const char *what = origin == DRIFT_ORIGIN_PARAM_CAST ? "param_cast" : origin == DRIFT_ORIGIN_AUTOCAST ? "autocast" : "promote";
    if (sv->name) {
        snprintf(label, sizeof label, "%.400s:%s:%s", sv->name, what, drift_dtype_name(dt));
        s.name = label;
    }
    if ((rc = drift_graph_add_node(c->out, &s, id, c->err))) return rc;
    if ((rc = grow_cache(c))) return rc;
    c->cache[src][dt] = *id + 1;
    return DRIFT_OK;
}

/* Forward dtype of parameter fqn (see assign.h): the compiled override, else
 * the side's forward dtype. */
static int param_forward_dtype(const actx *c, const drift_compiled_plan *cp, const drift_param_table *table,
                               const char *fqn, drift_dtype *out) {
    if (c->oracle) {
        *out = DRIFT_F64;
        return DRIFT_OK;
    }
    if (!cp || !table) {
        *out = c->fwd;
        return DRIFT_OK;
    }
    long row = drift_param_table_find(table, fqn);
    if (row < 0)
        return drift_err_set(c->err, DRIFT_E_INPUT, fqn,
                             "parameter '%s' of the graph is not in the parameter table the plan was compiled against",
                             fqn);
    if (!cp->param_dtype || cp->n_params != table->n)
        return drift_err_set(c->err, DRIFT_E_INPUT, "assign",
                             "compiled plan covers %zu parameters, the table has %zu (compile the plan against this table)",
                             cp->n_params, table->n);
    drift_dtype d = cp->param_dtype[row];
    /* param_dtype holds the trainer's forward dtype where nothing overrides;
     * on the rollout side those parameters follow the rollout precision. */
    if (d == c->plan->diffusion_forward_dtype) d = c->fwd;
    if (!is_float(d) || d == DRIFT_F64)
        return drift_err_set(c->err, DRIFT_E_INPUT, fqn, "parameter '%s': forward dtype %s is not bf16, fp16 or fp32", fqn,
                             drift_dtype_name(d));
    *out = d;
    return DRIFT_OK;
}

/* Resolves a semantic node's rule: out dtype, compute dtype and the dtype each
 * input must be cast to (INVALID = keep), with the origin of those casts. */
typedef struct resolved {
    drift_dtype out, compute;
    drift_dtype target[DRIFT_OP_MAX_IN];
    drift_node_origin cast_origin;
} resolved;

/* The dtype an integer-valued node keeps whatever the plan (an index, a mask,
 * a count: plans and the oracle move floats only), or INVALID for a float node. */
static drift_dtype int_result(const drift_value *v, const drift_dtype *in_dt) {
    if ((v->rule == DRIFT_RULE_FIXED || v->rule == DRIFT_RULE_CAST_TO) && drift_dtype_is_int(v->rule_dtype))
        return v->rule_dtype;
    if (v->rule == DRIFT_RULE_LIKE_INPUT0 && v->op.n_in > 0 && drift_dtype_is_int(in_dt[0])) return in_dt[0];
    if (v->rule == DRIFT_RULE_PROMOTE && v->op.n_in > 0) { /* integers only: integer arithmetic */
        drift_dtype q = DRIFT_DTYPE_INVALID;
        for (int i = 0; i < v->op.n_in; i++) {
            if (!drift_dtype_is_int(in_dt[i])) return DRIFT_DTYPE_INVALID;
            q = q == DRIFT_DTYPE_INVALID || drift_dtype_size(in_dt[i]) > drift_dtype_size(q) ? in_dt[i] : q;
        }
        return q;
    }
    return DRIFT_DTYPE_INVALID;
}

static int resolve(actx *c, int sem_id, const drift_value *v, const drift_dtype *in_dt, resolved *r) {
    int n = v->op.n_in;
    memset(r, 0, sizeof *r);
    r->cast_origin = DRIFT_ORIGIN_PROMOTE;
    drift_dtype ir = int_result(v, in_dt);
    if (ir == DRIFT_DTYPE_INVALID && v->rule == DRIFT_RULE_TYPE_AS) { /* .type_as(a bool/int tensor): that dtype, oracle too */
        const drift_dtype ref = dtype_of(c, c->map[v->rule_ref]);
        if (drift_dtype_is_int(ref)) ir = ref;
    }
    if (ir != DRIFT_DTYPE_INVALID) { /* no casts: the kernels take mixed operands */
        r->out = ir;
        r->compute = c->oracle ? DRIFT_F64 : DRIFT_F32;
        return DRIFT_OK;
    }
    if (c->oracle) {
        r->out = r->compute = DRIFT_F64;
        for (int i = 0; i < n; i++) r->target[i] = drift_dtype_is_int(in_dt[i]) ? DRIFT_DTYPE_INVALID : DRIFT_F64;
        return DRIFT_OK;
    }
    /* promotion over the floating operands; integer and bool operands are read as they are
     * (torch promotes them to the float type: the kernels convert exactly) */
    drift_dtype p = DRIFT_DTYPE_INVALID;
    const int np = v->op.kind == DRIFT_OP_ATTENTION && n > 3 ? 3 : n; /* ATTENTION's bias does not promote */
    for (int i = 0; i < np; i++)
        if (!drift_dtype_is_int(in_dt[i])) p = drift_assign_promote(p, in_dt[i]);
    drift_dtype opmath = p == DRIFT_F64 ? DRIFT_F64 : DRIFT_F32;
    switch (v->rule) {
    case DRIFT_RULE_AUTOCAST_LOWER:
        /* autocast casts only eligible operands, and fp64 is not (autocast_mode.h is_eligible):
         * an op whose floating operands are all fp64 runs in fp64 under autocast too */
        if (c->autocast && p == DRIFT_F64) {
            int all64 = 1;
            for (int i = 0; i < np; i++) all64 &= drift_dtype_is_int(in_dt[i]) || in_dt[i] == DRIFT_F64;
            if (all64) {
                r->out = r->compute = DRIFT_F64;
                for (int i = 0; i < n; i++) r->target[i] = DRIFT_F64;
                break;
            }
        }
        if (c->autocast) {
            r->out = r->compute = c->autocast;
            r->cast_origin = DRIFT_ORIGIN_AUTOCAST;
        } else {
            r->out = r->compute = p;
        }
        for (int i = 0; i < n; i++) r->target[i] = r->out;
        break;
    case DRIFT_RULE_AUTOCAST_FP32:
        if (c->autocast) {
            drift_dtype q = DRIFT_DTYPE_INVALID;
            for (int i = 0; i < n; i++) {
                r->target[i] = is_lower(in_dt[i]) ? DRIFT_F32 : in_dt[i];
                q = drift_assign_promote(q, r->target[i]);
            }
            /* an fp64 operand next to autocast-widened ones: promotion again */
            for (int i = 0; i < n; i++) r->target[i] = q;
            r->out = q;
            r->cast_origin = DRIFT_ORIGIN_AUTOCAST;
        } else {
            r->out = p;
            for (int i = 0; i < n; i++) r->target[i] = p;
        }
        r->compute = r->out == DRIFT_F64 ? DRIFT_F64 : DRIFT_F32;
        break;
    case DRIFT_RULE_PROMOTE:
        r->out = p;
        r->compute = opmath;
        for (int i = 0; i < n; i++) r->target[i] = p;
        break;
    case DRIFT_RULE_LIKE_INPUT0:
        r->out = in_dt[0];
        r->compute = r->out == DRIFT_F64 ? DRIFT_F64 : DRIFT_F32;
        break;
    case DRIFT_RULE_RMS_NORM: /* torch 2.11: the result has x's dtype whatever the weight's */
        r->out = in_dt[0];
        r->compute = opmath;
        break;
    case DRIFT_RULE_CAST_TO:
    case DRIFT_RULE_FIXED:
        r->out = v->rule_dtype;
        r->compute = v->rule == DRIFT_RULE_CAST_TO ? r->out : (r->out == DRIFT_F64 ? DRIFT_F64 : DRIFT_F32);
        break;
    case DRIFT_RULE_TYPE_AS:
        r->out = r->compute = dtype_of(c, c->map[v->rule_ref]);
        break;
    case DRIFT_RULE_HALF_AS: {
        drift_dtype ref = dtype_of(c, c->map[v->rule_ref]);
        r->out = r->compute = (ref == DRIFT_BF16 || ref == DRIFT_F16) ? ref : in_dt[0];
        break;
    }
    case DRIFT_RULE_INPUT_POLICY: {
        const drift_input_policy *pol = &c->plan->inputs[v->rule_ref];
        if (pol->kind == DRIFT_INPUT_PASSTHROUGH) r->out = in_dt[0];
        else if (pol->kind == DRIFT_INPUT_DEFAULT) r->out = c->fwd;
        else r->out = pol->dtype;
        if (!is_float(r->out))
            return drift_err_set(c->err, DRIFT_E_INPUT, "input_dtype_policy",
                                 "input_dtype_policy.%s: expected default, null or a dtype (fp32, bf16, fp16), got %s",
                                 drift_graph_input_name(v->rule_ref), drift_dtype_name(r->out));
        r->compute = r->out;
        break;
    }
    default:
        return drift_err_set(c->err, DRIFT_E_INPUT, "assign", "value %d (%s): no dtype rule to resolve", sem_id,
                             drift_graph_op_name(v->op.kind));
    }
    /* ATTENTION's additive bias is fp32 whatever the operands' dtype (fp64 beside fp64 operands) */
    if (v->op.kind == DRIFT_OP_ATTENTION && n > 3) r->target[3] = r->compute == DRIFT_F64 ? DRIFT_F64 : DRIFT_F32;
    /* integer operands are read exactly by the kernels, except by a concat (one dtype) */
    for (int i = 0; i < n; i++)
        if (drift_dtype_is_int(in_dt[i]) && v->op.kind != DRIFT_OP_CONCAT) r->target[i] = DRIFT_DTYPE_INVALID;
    if (drift_dtype_is_int(r->out)) { /* e.g. type_as an integer tensor: exact, no opmath */
        r->compute = DRIFT_F32;
        return DRIFT_OK;
    }
    if (!is_float(r->out))
        return drift_err_set(c->err, DRIFT_E_INPUT, "assign", "value %d (%s): inputs have no dtype", sem_id,
                             drift_graph_op_name(v->op.kind));
    return DRIFT_OK;
}

static int add_leaf(actx *c, int sem_id, const drift_value *v, const drift_compiled_plan *cp,
                    const drift_param_table *table, const drift_assign_opts *opts) {
    int rc, id;
    drift_dtype dt = v->dtype;
    if (v->kind == DRIFT_VAL_PARAM) {
        dt = c->oracle ? DRIFT_F64 : c->plan->fsdp_master_dtype;
        if (!c->oracle && (!is_float(dt) || dt == DRIFT_F64))
            return drift_err_set(c->err, DRIFT_E_INPUT, c->plan->source[0] ? c->plan->source : "plan",
                                 "fsdp_master_dtype: expected fp32, bf16 or fp16, got %s", drift_dtype_name(dt));
    } else if (v->kind == DRIFT_VAL_INPUT) {
        int k = drift_graph_input_parse(v->name);
        dt = opts->handed_over[k] == DRIFT_DTYPE_INVALID ? DRIFT_F32 : opts->handed_over[k];
        if (!is_float(dt))
            return drift_err_set(c->err, DRIFT_E_INPUT, "assign", "handed-over dtype of input '%s': expected a float dtype",
                                 v->name);
        if (c->oracle) dt = DRIFT_F64;
    } else if (c->oracle && !drift_dtype_is_int(dt)) { /* integer buffers and constants stay exact */
        dt = DRIFT_F64;
    }
    if ((rc = drift_graph_add_leaf(c->out, v->kind, v->name, dt, v->ndim, v->shape, &id, c->err))) return rc;
    if (v->site && (rc = drift_graph_set_site(c->out, id, v->site, c->err))) return rc;
    c->map[sem_id] = id;
    if (v->kind == DRIFT_VAL_PARAM) {
        drift_dtype fd = DRIFT_DTYPE_INVALID;
        if ((rc = param_forward_dtype(c, cp, table, v->name, &fd))) return rc;
        if ((rc = cast_of(c, id, fd, DRIFT_ORIGIN_PARAM_CAST, &c->map[sem_id]))) return rc;
    }
    return DRIFT_OK;
}

static int add_node(actx *c, int sem_id, const drift_value *v) {
    int rc;
    drift_dtype in_dt[DRIFT_OP_MAX_IN] = {0};
    int ins[DRIFT_OP_MAX_IN] = {-1, -1, -1, -1};
    for (int i = 0; i < v->op.n_in; i++) {
        ins[i] = c->map[v->in[i]];
        in_dt[i] = dtype_of(c, ins[i]);
    }
    resolved r;
    if ((rc = resolve(c, sem_id, v, in_dt, &r))) return rc;
    for (int i = 0; i < v->op.n_in; i++)
        if (r.target[i] != DRIFT_DTYPE_INVALID && r.target[i] != in_dt[i])
            if ((rc = cast_of(c, ins[i], r.target[i], r.cast_origin, &ins[i]))) return rc;
    drift_node_spec s;
    drift_node_spec_init(&s, v->op.kind);
    s.op = v->op;
    s.op.compute = r.compute;
    s.op.out = r.out;
    for (int i = 0; i < v->op.n_in; i++) s.in[i] = ins[i];
    s.rule = v->rule;
    s.rule_dtype = v->rule_dtype;
    s.rule_ref = (v->rule == DRIFT_RULE_TYPE_AS || v->rule == DRIFT_RULE_HALF_AS) ? c->map[v->rule_ref] : v->rule_ref;
    s.origin = DRIFT_ORIGIN_MODEL;
    s.sem_id = sem_id;
    s.name = v->name;
    s.site = v->site;
    if (v->op.kind == DRIFT_OP_VIEW || v->op.kind == DRIFT_OP_UNPATCHIFY || v->op.kind == DRIFT_OP_STRIDED ||
        v->op.kind == DRIFT_OP_FILL || v->op.kind == DRIFT_OP_NONZERO) {
        s.ndim = v->ndim;
        memcpy(s.shape, v->shape, sizeof s.shape);
    }
    return drift_graph_add_node(c->out, &s, &c->map[sem_id], c->err);
}

int drift_assign_dtypes(const drift_graph *sem, const drift_plan *plan, const drift_compiled_plan *compiled,
                        const drift_param_table *table, const drift_assign_opts *opts, drift_graph **out,
                        drift_err *err) {
    if (!sem || !out) return drift_err_set(err, DRIFT_E_INTERNAL, "assign", "drift_assign_dtypes: NULL argument");
    *out = NULL;
    drift_assign_opts dflt;
    if (!opts) {
        drift_assign_opts_init(&dflt);
        opts = &dflt;
    }
    if (drift_graph_is_assigned(sem))
        return drift_err_set(err, DRIFT_E_INPUT, "assign", "the graph is already assigned (expected a semantic graph)");
    if (opts->side != DRIFT_SIDE_TRAINER && opts->side != DRIFT_SIDE_ROLLOUT && opts->side != DRIFT_SIDE_ORACLE)
        return drift_err_set(err, DRIFT_E_INPUT, "assign", "unknown side %d", (int)opts->side);
    drift_plan oracle_plan;
    drift_plan_init(&oracle_plan);
    if (!plan) {
        if (opts->side != DRIFT_SIDE_ORACLE)
            return drift_err_set(err, DRIFT_E_INPUT, "assign", "a plan is required for the %s side",
                                 drift_assign_side_name(opts->side));
        plan = &oracle_plan;
    }
    if ((compiled == NULL) != (table == NULL)) {
        drift_plan_free(&oracle_plan);
        return drift_err_set(err, DRIFT_E_INTERNAL, "assign", "compiled plan and parameter table go together");
    }
    actx c;
    memset(&c, 0, sizeof c);
    c.sem = sem;
    c.plan = plan;
    c.side = opts->side;
    c.oracle = opts->side == DRIFT_SIDE_ORACLE;
    c.fwd = drift_assign_forward_dtype(plan, opts->side);
    c.err = err;
    if (!c.oracle && c.fwd != DRIFT_F32 && c.fwd != DRIFT_BF16 && c.fwd != DRIFT_F16) {
        drift_plan_free(&oracle_plan);
        return drift_err_set(err, DRIFT_E_INPUT, plan->source[0] ? plan->source : "plan",
                             "%s: expected bf16, fp16 or fp32, got %s",
                             opts->side == DRIFT_SIDE_ROLLOUT ? "sglang_dit_precision" : "diffusion_forward_dtype",
                             drift_dtype_name(c.fwd));
    }
    c.autocast = is_lower(c.fwd) ? c.fwd : DRIFT_DTYPE_INVALID;
    int n = drift_graph_count(sem), rc;
    c.map = drift_malloc((size_t)(n ? n : 1) * sizeof *c.map);
    if (!c.map) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, "assign", "out of memory");
        goto done;
    }
    if ((rc = drift_graph_create(1, &c.out, err))) goto done;
    if ((rc = drift_graph_set_model(c.out, drift_graph_model(sem), err))) goto done;
    for (int i = 0; i < n; i++) {
        const drift_value *v = drift_graph_value(sem, i);
        rc = v->kind == DRIFT_VAL_NODE ? add_node(&c, i, v) : add_leaf(&c, i, v, compiled, table, opts);
        if (rc) goto done;
    }
    if (drift_graph_output(sem) >= 0 && (rc = drift_graph_set_output(c.out, c.map[drift_graph_output(sem)], err)))
        goto done;
done:
    drift_plan_free(&oracle_plan);
    drift_free(c.map);
    drift_free(c.cache);
    if (rc) {
        drift_graph_free(c.out);
        return rc;
    }
    *out = c.out;
    return DRIFT_OK;
}

int drift_assign_find(const drift_graph *assigned, const drift_graph *sem, int sem_id) {
    const drift_value *sv = drift_graph_value(sem, sem_id);
    if (!assigned || !sv) return -1;
    if (sv->kind != DRIFT_VAL_NODE) {
        int leaf = drift_graph_find_leaf(assigned, sv->kind, sv->name);
        if (leaf < 0 || sv->kind != DRIFT_VAL_PARAM) return leaf;
        const drift_value *next = drift_graph_value(assigned, leaf + 1);
        if (next && next->kind == DRIFT_VAL_NODE && next->origin == DRIFT_ORIGIN_PARAM_CAST && next->in[0] == leaf)
            return leaf + 1;
        return leaf;
    }
    for (int i = 0; i < drift_graph_count(assigned); i++) {
        const drift_value *v = drift_graph_value(assigned, i);
        if (v->kind == DRIFT_VAL_NODE && v->sem_id == sem_id) return i;
    }
    return -1;
}

/* Dtype assignment (DESIGN.md s4, s5): resolves a semantic graph's dtype
 * rules under a plan into an assigned graph in which every dtype is explicit
 * and every cast is a CAST node. The executor then knows no autocast rules.
 *
 * The rules (docs/autocast.md has the table and the reasons):
 *  - parameters: the FSDP master (plan fsdp_master_dtype, fp32 by default)
 *    is a leaf; a PARAM_CAST node casts it to its forward dtype: the side's
 *    forward dtype unless a param_dtype_patterns override keeps it otherwise;
 *  - boundary inputs: leaves in the dtype the rollout handed over; the
 *    model's INPUT_POLICY cast applies input_dtype_policy (default = forward
 *    dtype, explicit dtype, null = passthrough);
 *  - interior: PyTorch CUDA autocast with the autocast dtype = the side's
 *    forward dtype when that is bf16 or fp16 (an fp32 forward has no
 *    autocast): lower-precision ops cast every operand to it; fp32-list ops
 *    cast lower-precision operands to fp32; everything else follows type
 *    promotion; explicit model casts are honoured as written;
 *  - oracle: every value and every op in fp64, casts become identities.
 * Operand casts are deduplicated per (value, dtype), as autocast's cast
 * cache does for parameters; every inserted node records its origin. */
#ifndef DRIFT_REPLAY_ASSIGN_H
#define DRIFT_REPLAY_ASSIGN_H

#include "formats/dtype.h"
#include "formats/err.h"
#include "formats/params.h"
#include "formats/plan.h"
#include "replay/ir/graph.h"

typedef enum drift_side {
    DRIFT_SIDE_TRAINER = 0, /* forward dtype = plan diffusion_forward_dtype */
    DRIFT_SIDE_ROLLOUT = 1, /* forward dtype = plan sglang_dit_precision */
    DRIFT_SIDE_ORACLE = 2   /* everything fp64 (run on the ref backend) */
} drift_side;

typedef struct drift_assign_opts {
    drift_side side;
    /* Dtypes the rollout handed over for latents, cond, timestep
     * (DRIFT_INPUT_*); DRIFT_DTYPE_INVALID means fp32 (the synthetic default). */
    drift_dtype handed_over[DRIFT_INPUT_COUNT];
} drift_assign_opts;

/* Trainer side, every input handed over in fp32. */
void drift_assign_opts_init(drift_assign_opts *o);

/* Assigns dtypes. sem: a semantic graph (not modified). plan: required unless
 * side is DRIFT_SIDE_ORACLE (NULL allowed there). compiled + table: the
 * compiled plan (drift_plan_compile of plan against table) giving each
 * parameter's forward dtype; both NULL means no override (every parameter in
 * the side's forward dtype). Every parameter of sem must be in table.
 * Caller owns *out (drift_graph_free). Errors: DRIFT_E_INPUT naming the
 * field (a parameter missing from the table, a forward dtype that is not
 * bf16/fp16/fp32, a handed-over dtype that is not a float dtype, ...). */
int drift_assign_dtypes(const drift_graph *sem, const drift_plan *plan, const drift_compiled_plan *compiled,
                        const drift_param_table *table, const drift_assign_opts *opts, drift_graph **out,
                        drift_err *err);

/* The forward dtype of side under plan (fp64 for the oracle). */
drift_dtype drift_assign_forward_dtype(const drift_plan *plan, drift_side side);
/* PyTorch type promotion of two floating dtypes (INVALID operands ignored):
 * equal -> same; fp64 wins; fp32 beats bf16/fp16; bf16 + fp16 -> fp32. */
drift_dtype drift_assign_promote(drift_dtype a, drift_dtype b);
/* "trainer", "rollout", "oracle". */
const char *drift_assign_side_name(drift_side side);

/* The id in `assigned` (made from `sem`) of semantic value sem_id, or -1:
 * for a node the assigned node carrying it (sem_id), for a leaf the leaf of
 * the same kind and name, for a parameter its forward-dtype value (the
 * PARAM_CAST node, or the master leaf when no cast was needed). Nodes:
 * linear scan. */
int drift_assign_find(const drift_graph *assigned, const drift_graph *sem, int sem_id);

#endif

/* drift weights: a diffusers-layout sharded safetensors checkpoint of a
 * family model's seeded parameters (the fixture of parameters by reference). */
#include <dirent.h>
#include <errno.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "formats/checkpoint.h"
#include "formats/json.h"
#include "replay/exec/forward.h"
#include "replay/exec/params_init.h"

static const char *const HELP =
    "usage: drift weights --model FAMILY[:K=V,...] -o DIR [--seed S] [--dtype bf16|fp32|fp16]\n"
    "                     [--shard-size BYTES] [--force] [--json]\n"
    "\n"
    "Writes the model's seeded parameters (the values `drift record --synthetic\n"
    "FAMILY --seed S` uses, rounded to --dtype) as a diffusers sharded safetensors\n"
    "checkpoint: DIR/diffusion_pytorch_model-0000k-of-0000N.safetensors and\n"
    "DIR/diffusion_pytorch_model.safetensors.index.json, under diffusers'\n"
    "WanTransformer3DModel names. `drift record --synthetic FAMILY --params-ref DIR`\n"
    "then records with parameters by reference to it.\n"
    "\n"
    "  --model SPEC       tiny-dit, wan2.2:layers=40,dim=5120,heads=40,ffn=13824, ...\n"
    "  -o DIR             output directory (created if absent). The checkpoint is written\n"
    "                     into a temporary folder beside DIR and swapped in whole; a\n"
    "                     second writer of DIR fails at once (DIR.lock)\n"
    "  --force            replace the checkpoint DIR holds (a folder holding anything\n"
    "                     but a drift checkpoint's files is never replaced)\n"
    "  --seed S           seed (default 0)\n"
    "  --dtype D          stored dtype (default bf16, as diffusers' Wan checkpoints)\n"
    "  --shard-size BYTES at most this many bytes of tensors per shard (suffixes K, M, G;\n"
    "                     default 5G; 0: one shard)\n"
    "  --json             print the summary as one JSON document\n"
    "  DRIFT_SEED_THREADS=N  threads that seed and hash (default: the online CPUs)\n"
    "\n"
    "example: drift weights --model wan2.2:layers=2 -o ckpt\n"
    "exit: 0 written, 2 bad usage or bad input\n";

typedef struct fill_ctx {
    const drift_param_table *t;
    uint64_t seed;
} fill_ctx;

static int fill(size_t i, float *dst, void *user, drift_err *err) {
    (void)err;
    const fill_ctx *c = user;
    drift_params_init_one(&c->t->params[i], c->seed, dst);
    return DRIFT_OK;
}

static int parse_size(const char *s, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    uint64_t mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1ull << 10, end++;
    else if (*end == 'M' || *end == 'm') mul = 1ull << 20, end++;
    else if (*end == 'G' || *end == 'g') mul = 1ull << 30, end++;
    if (*end || v > (UINT64_MAX >> 30)) return -1;
    *out = (uint64_t)v * mul;
    return 0;
}

/* 1 if dir exists and holds an entry (an existing checkpoint is replaced only with --force) */
static int dir_has_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return access(dir, F_OK) == 0; /* a file: drift_ckpt_write says what it is */
    struct dirent *e;
    int any = 0;
    while (!any && (e = readdir(d))) any = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return any;
}

int drift_cmd_weights(int argc, char **argv) {
    const char *model = NULL, *out = NULL, *seed_s = NULL, *dtype_s = "bf16", *shard_s = NULL;
    int json = 0, force = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(HELP, stdout);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--force") == 0) {
            force = 1;
        } else if ((m = drift_cli_opt(argc, argv, &i, "--model", &v)) != 0) {
            if (m < 0) return drift_cli_usage_error("weights", "--model needs a value");
            model = v;
        } else if ((m = drift_cli_opt(argc, argv, &i, "-o", &v)) != 0 || (m = drift_cli_opt(argc, argv, &i, "--out", &v)) != 0) {
            if (m < 0) return drift_cli_usage_error("weights", "-o needs a directory");
            out = v;
        } else if ((m = drift_cli_opt(argc, argv, &i, "--seed", &v)) != 0) {
            if (m < 0) return drift_cli_usage_error("weights", "--seed needs a value");
            seed_s = v;
        } else if ((m = drift_cli_opt(argc, argv, &i, "--dtype", &v)) != 0) {
            if (m < 0) return drift_cli_usage_error("weights", "--dtype needs a value");
            dtype_s = v;
        } else if ((m = drift_cli_opt(argc, argv, &i, "--shard-size", &v)) != 0) {
            if (m < 0) return drift_cli_usage_error("weights", "--shard-size needs a value");
            shard_s = v;
        } else {
            return drift_cli_usage_error("weights", "unexpected argument '%s'", argv[i]);
        }
    }
    if (!model || !out) return drift_cli_usage_error("weights", "--model and -o are required");
    if (!force && dir_has_files(out))
        return drift_cli_usage_error_field("weights", "-o", "-o: %s exists and is not empty; give --force to replace the checkpoint in it", out);
    uint64_t seed = 0, shard = 5ull << 30;
    if (seed_s) {
        char *end = NULL;
        errno = 0;
        seed = strtoull(seed_s, &end, 0);
        if (errno || !end || *end) return drift_cli_usage_error("weights", "--seed: expected an integer, got '%s'", seed_s);
    }
    if (shard_s && parse_size(shard_s, &shard))
        return drift_cli_usage_error("weights", "--shard-size: expected a byte count like 5G, 512M or 0, got '%s'", shard_s);
    drift_dtype dt = drift_dtype_parse(dtype_s);
    if (dt != DRIFT_BF16 && dt != DRIFT_F32 && dt != DRIFT_F16)
        return drift_cli_usage_error("weights", "--dtype: expected bf16, fp32 or fp16, got '%s'", dtype_s);

    drift_err err;
    drift_err_clear(&err);
    drift_model *m = NULL;
    drift_params_ref ref;
    drift_params_ref_init(&ref);
    drift_ckpt_spec *specs = NULL;
    int rc = drift_model_create(model, &m, &err);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!rc && !(specs = calloc(m->table.n ? m->table.n : 1, sizeof *specs)))
        rc = drift_err_set(&err, DRIFT_E_NOMEM, "weights", "out of memory");
    uint64_t total = 0;
    for (size_t i = 0; !rc && i < m->table.n; i++) {
        const drift_param_info *p = &m->table.params[i];
        specs[i] = (drift_ckpt_spec){.name = p->fqn, .dtype = dt, .ndim = p->ndim, .shape = p->shape};
        total += (uint64_t)p->numel * drift_dtype_size(dt);
    }
    fill_ctx fc = {m ? &m->table : NULL, seed};
    if (!rc) rc = drift_ckpt_write(out, specs, m->table.n, shard, fill, &fc, drift_params_seed_threads(), &ref, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    int code = 0;
    if (rc) {
        code = drift_cli_report("weights", &err);
    } else {
        size_t shards = 0;
        for (size_t i = 0; i < ref.n; i++)
            if (i == 0 || strcmp(ref.t[i].file, ref.t[i - 1].file) != 0) shards++;
        if (json) {
            drift_json_buf b;
            drift_json_buf_init(&b);
            drift_json_buf_begin_object(&b);
            drift_json_buf_field_string(&b, "dir", ref.weights_root);
            drift_json_buf_field_string(&b, "index", ref.index);
            drift_json_buf_field_string(&b, "model", m->spec);
            drift_json_buf_field_string(&b, "dtype", drift_dtype_name(dt));
            drift_json_buf_field_int(&b, "tensors", (int64_t)ref.n);
            drift_json_buf_field_int(&b, "shards", (int64_t)shards);
            drift_json_buf_field_int(&b, "bytes", (int64_t)total);
            drift_json_buf_field_number(&b, "seconds", secs);
            drift_json_buf_end_object(&b);
            char *s = drift_json_buf_take(&b);
            if (s) printf("%s\n", s);
            free(s);
            drift_json_buf_free(&b);
        } else {
            printf("drift weights: wrote %s: %zu tensors of %s in %zu shard%s, %.3f GB %s, in %.2f s (seeded, hashed, written)\n",
                   ref.weights_root, ref.n, m->spec, shards, shards == 1 ? "" : "s", (double)total / 1e9, drift_dtype_name(dt),
                   secs);
        }
    }
    free(specs);
    drift_params_ref_free(&ref);
    drift_model_free(m);
    return code;
}

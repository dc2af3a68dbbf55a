/* The memory plan of a replay (memplan.h). */
#include "replay/exec/memplan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#if defined(DRIFT_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif

#define MIB ((int64_t)1 << 20)

const char *drift_memplan_bytes(int64_t b, char *buf, unsigned long bufsz) {
    if (b >= ((int64_t)1 << 30)) snprintf(buf, bufsz, "%.1f GiB", (double)b / (double)((int64_t)1 << 30));
    else if (b >= MIB) snprintf(buf, bufsz, "%.0f MiB", (double)b / (double)MIB);
    else snprintf(buf, bufsz, "%lld KiB", (long long)((b + 1023) / 1024));
    return buf;
}

const char *drift_oracle_backend(const char *backend, int on_host, char *buf, unsigned long bufsz) {
    if (backend && strncmp(backend, "cuda", 4) == 0 && !on_host) {
        /* the device number only: the cuda kernel options of the spec ("cuda:1:gemm=naive") are not ref-cuda's */
        int dev = backend[4] == ':' && backend[5] >= '0' && backend[5] <= '9' ? atoi(backend + 5) : 0;
        snprintf(buf, bufsz, "ref-cuda:%d", dev);
    } else
        snprintf(buf, bufsz, "ref");
    return buf;
}

static int64_t env_bytes(const char *name) {
    const char *s = getenv(name);
    if (!s || !*s) return -1;
    char *end = NULL;
    double v = strtod(s, &end);
    if (!end || end == s || v < 0) return -1;
    double mul = 1;
    switch (*end) {
    case 'K': case 'k': mul = 1024.0; end++; break;
    case 'M': case 'm': mul = 1048576.0; end++; break;
    case 'G': case 'g': mul = 1073741824.0; end++; break;
    case 'T': case 't': mul = 1099511627776.0; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b') end++;
    return *end ? -1 : (int64_t)(v * mul);
}

static int64_t host_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}

/* Storage bytes per element of dtype dt on the backend kind. */
static int64_t elem_bytes(int kind, drift_dtype dt) {
    if (kind == 2) return 8;               /* ref: fp64 */
    if (kind == 1) return dt == DRIFT_F64 ? 8 : 4; /* cpu: fp32, fp64 as doubles */
    return (int64_t)drift_dtype_size(dt);  /* cuda: native */
}

/* Peak of the per-run values and the bytes of the resident (parameter-only)
 * ones, simulating the executor's liveness and releases. */
static int simulate(const drift_graph *g, int kind, int resident, int sites, int64_t *peak_out, int64_t *resident_out,
                    int64_t *site_bytes_out, drift_err *err) {
    int n = drift_graph_count(g), output = drift_graph_output(g);
    size_t nn = (size_t)(n ? n : 1);
    unsigned char *live = drift_calloc(nn, 1), *fixed = drift_calloc(nn, 1), *alias = drift_calloc(nn, 1);
    int *uses = drift_calloc(nn, sizeof *uses);
    int64_t *bytes = drift_calloc(nn, sizeof *bytes);
    if (!live || !fixed || !alias || !uses || !bytes) {
        drift_free(live); drift_free(fixed); drift_free(alias); drift_free(uses); drift_free(bytes);
        return drift_err_set(err, DRIFT_E_NOMEM, "memplan", "out of memory");
    }
    if (output >= 0) live[output] = 1;
    int64_t site_bytes = 0;
    for (int i = n - 1; i >= 0; i--) {
        const drift_value *v = drift_graph_value(g, i);
        if (v->site && sites) live[i] = 1;
        if (live[i] && ((sites && v->site) || i == output)) site_bytes += v->numel * 4; /* kept widened to fp32 on the host */
        if (!live[i] || v->kind != DRIFT_VAL_NODE) continue;
        for (int k = 0; k < v->op.n_in; k++) {
            live[v->in[k]] = 1;
            uses[v->in[k]]++;
        }
    }
    if (output >= 0) uses[output]++;
    int64_t cur = 0, peak = 0, res = 0;
    for (int i = 0; i < n; i++) {
        const drift_value *v = drift_graph_value(g, i);
        if (v->kind == DRIFT_VAL_PARAM || v->kind == DRIFT_VAL_BUFFER) fixed[i] = 1;
        else if (v->kind == DRIFT_VAL_NODE) {
            int all = 1;
            for (int k = 0; k < v->op.n_in; k++) all &= fixed[v->in[k]];
            fixed[i] = (unsigned char)all;
        }
        if (!live[i]) continue;
        const drift_value *src = v->kind == DRIFT_VAL_NODE && v->op.n_in ? drift_graph_value(g, v->in[0]) : NULL;
        alias[i] = v->kind == DRIFT_VAL_NODE &&
                   (v->op.kind == DRIFT_OP_VIEW || (v->op.kind == DRIFT_OP_CAST && src && src->dtype == v->dtype));
        bytes[i] = alias[i] ? 0 : v->numel * elem_bytes(kind, v->dtype);
        if (resident && fixed[i]) {
            res += bytes[i];
            continue;
        }
        cur += bytes[i];
        if (cur > peak) peak = cur;
        if (v->kind != DRIFT_VAL_NODE) continue;
        for (int k = 0; k < v->op.n_in; k++) {
            int in = v->in[k];
            if (--uses[in] == 0 && !(resident && fixed[in])) cur -= bytes[in];
        }
    }
    *peak_out = peak;
    *resident_out = res;
    *site_bytes_out = site_bytes;
    drift_free(live); drift_free(fixed); drift_free(alias); drift_free(uses); drift_free(bytes);
    return DRIFT_OK;
}

int drift_memplan_estimate(const drift_model *m, const drift_forward *f, const drift_forward *oracle, int oracle_on_host,
                           const char *backend, int resident, int sites, drift_mem_estimate *e, drift_err *err) {
    memset(e, 0, sizeof *e);
    e->gpu_limit = e->host_limit = -1;
    if (!backend) backend = "cpu";
    int kind = strncmp(backend, "cuda", 4) == 0 ? 0 : strcmp(backend, "ref") == 0 ? 2 : 1;
    e->on_gpu = kind == 0;
    for (size_t i = 0; i < m->table.n; i++) e->host_masters += m->table.params[i].numel * 4;
    int64_t peak = 0, res = 0, site_bytes = 0;
    int rc = simulate(f->assigned, kind, resident, sites, &peak, &res, &site_bytes, err);
    if (rc) return rc;
    if (kind == 0) {
        int64_t biggest = 0; /* an fp32 master is staged on the device while it is uploaded and cast */
        for (size_t i = 0; i < m->table.n; i++)
            if (m->table.params[i].numel > biggest) biggest = m->table.params[i].numel;
        e->gpu_resident = res;
        e->gpu_activations = peak + biggest * 4;
        e->gpu_workspace = 256 * MIB;
        e->gpu_total = e->gpu_resident + e->gpu_activations + e->gpu_workspace;
    } else {
        e->host_backend = res + peak;
    }
    if (oracle) {
        int64_t opeak = 0, ores = 0, osites = 0;
        char ob[64];
        const int on_host = strcmp(drift_oracle_backend(backend, oracle_on_host, ob, sizeof ob), "ref") == 0;
        /* on a GPU the oracle keeps its fp64 parameters resident between steps */
        if ((rc = simulate(oracle->assigned, 2, !on_host, sites, &opeak, &ores, &osites, err))) return rc;
        if (on_host) {
            e->host_oracle = opeak + ores;
        } else {
            e->gpu_oracle = opeak + ores;
            e->gpu_total += e->gpu_oracle;
        }
        e->host_sites += osites;
    }
    e->host_sites += site_bytes;
    e->host_total = e->host_masters + e->host_backend + e->host_oracle + e->host_sites + 64 * MIB;
    e->host_limit = env_bytes("DRIFT_MEM_LIMIT_HOST");
    if (e->host_limit < 0) e->host_limit = host_available();
    if (kind == 0) {
        e->gpu_limit = env_bytes("DRIFT_MEM_LIMIT_GPU");
#if defined(DRIFT_HAVE_CUDA)
        if (e->gpu_limit < 0) {
            int dev = backend[4] == ':' ? atoi(backend + 5) : 0;
            size_t fr = 0, tot = 0;
            if (drift_cuda_mem_info(dev, &fr, &tot) == 0) e->gpu_limit = (int64_t)fr;
        }
#endif
    }
    return DRIFT_OK;
}

int drift_memplan_check(const drift_mem_estimate *e, const char *what, drift_err *err) {
    const char *off = getenv("DRIFT_MEM_PLAN");
    if (off && strcmp(off, "0") == 0) return DRIFT_OK;
    char a[32], b[32], c[32], d[32], x[32], y[32];
    if (e->on_gpu && e->gpu_limit >= 0 && e->gpu_total > e->gpu_limit)
        return drift_err_set(err, DRIFT_E_NOMEM, what,
                             "the replay needs about %s of GPU memory (parameters and their casts %s, activations %s, "
                             "workspace %s, fp64 oracle %s) but the device has %s free (DRIFT_MEM_LIMIT_GPU overrides; "
                             "--output-only keeps fewer values)",
                             drift_memplan_bytes(e->gpu_total, a, sizeof a), drift_memplan_bytes(e->gpu_resident, b, sizeof b),
                             drift_memplan_bytes(e->gpu_activations, c, sizeof c),
                             drift_memplan_bytes(e->gpu_workspace, d, sizeof d), drift_memplan_bytes(e->gpu_oracle, y, sizeof y),
                             drift_memplan_bytes(e->gpu_limit, x, sizeof x));
    if (e->host_limit >= 0 && e->host_total > e->host_limit) {
        char z[32];
        return drift_err_set(err, DRIFT_E_NOMEM, what,
                             "the replay needs about %s of host memory (fp32 masters %s, backend values %s, fp64 oracle %s, "
                             "kept site values %s) but %s is available (DRIFT_MEM_LIMIT_HOST overrides; --output-only keeps "
                             "fewer values)",
                             drift_memplan_bytes(e->host_total, a, sizeof a), drift_memplan_bytes(e->host_masters, b, sizeof b),
                             drift_memplan_bytes(e->host_backend, c, sizeof c), drift_memplan_bytes(e->host_oracle, d, sizeof d),
                             drift_memplan_bytes(e->host_sites, y, sizeof y), drift_memplan_bytes(e->host_limit, z, sizeof z));
    }
    (void)x;
    return DRIFT_OK;
}

/* Node values written for drift_recorder.node_parity (node_dump.h). */
#include "replay/drive/node_dump.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/dtype.h"

const char *drift_node_dump_dir(void) {
    const char *d = getenv("DRIFT_NODE_DUMP");
    return d && *d ? d : NULL;
}

int drift_node_dump_write(const char *site, const drift_tensor *t, const float *v, int64_t step, drift_err *err) {
    const char *dir = drift_node_dump_dir();
    if (!dir || strncmp(site, "fx:", 3) != 0) return DRIFT_OK;
    const char *name = site + 3;
    if (strchr(name, '/') || strstr(name, "..")) return DRIFT_OK; /* not a file name: skipped */
    char path[4096];
    snprintf(path, sizeof path, "%s/step%lld", dir, (long long)step);
    if (mkdir(dir, 0777) && errno != EEXIST)
        return drift_err_set(err, DRIFT_E_IO, dir, "cannot create the node dump folder: %s", strerror(errno));
    if (mkdir(path, 0777) && errno != EEXIST)
        return drift_err_set(err, DRIFT_E_IO, path, "cannot create the node dump folder: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/step%lld/%s.f32", dir, (long long)step, name);
    FILE *f = fopen(path, "wb");
    if (!f) return drift_err_set(err, DRIFT_E_IO, path, "cannot write: %s", strerror(errno));
    size_t n = (size_t)t->numel, w = fwrite(v, sizeof *v, n, f);
    if (fclose(f) || w != n) return drift_err_set(err, DRIFT_E_IO, path, "short write");
    snprintf(path, sizeof path, "%s/step%lld/index.tsv", dir, (long long)step);
    if (!(f = fopen(path, "a"))) return drift_err_set(err, DRIFT_E_IO, path, "cannot append: %s", strerror(errno));
    fprintf(f, "%s\t%s\t", name, drift_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++) fprintf(f, d ? ",%lld" : "%lld", (long long)t->shape[d]);
    fputc('\n', f);
    if (fclose(f)) return drift_err_set(err, DRIFT_E_IO, path, "cannot append");
    return DRIFT_OK;
}

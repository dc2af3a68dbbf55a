/* Strided views (aten_views.h). */
#include "replay/capture/aten_views.h"

#include <string.h>

int64_t aten_view_numel(const aten_view *v) {
    int64_t n = 1;
    for (int i = 0; i < v->nd; i++) n *= v->size[i];
    return n;
}

void aten_view_contig(aten_view *v, int root, int nd, const int64_t *size) {
    memset(v, 0, sizeof *v);
    v->root = root;
    v->nd = nd;
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        v->size[i] = size[i];
        v->stride[i] = s;
        s *= size[i];
    }
}

int aten_view_is_contig(const aten_view *v) {
    int64_t s = 1;
    for (int i = v->nd - 1; i >= 0; i--) {
        if (v->size[i] != 1 && v->stride[i] != s) return 0;
        s *= v->size[i];
    }
    return 1;
}

int aten_view_reshape(const aten_view *v, int nd, const int64_t *size, aten_view *out) {
    aten_view o;
    memset(&o, 0, sizeof o);
    o.root = v->root;
    o.off = v->off;
    o.nd = nd;
    for (int i = 0; i < nd; i++) o.size[i] = size[i];
    if (v->nd == 0) { /* a scalar views as any all-ones shape */
        for (int i = 0; i < nd; i++) {
            if (size[i] != 1) return 0;
            o.stride[i] = 1;
        }
        *out = o;
        return 1;
    }
    /* Walk the old dims from the innermost, grouping dims whose strides chain
     * (stride[d-1] == stride[d] * size[d]); each group must be covered by a run of
     * new dims with the same element count, which get strides from the group's base. */
    int vd = nd - 1;
    int64_t base = v->stride[v->nd - 1], tn = 1, vn = 1;
    for (int d = v->nd - 1; d >= 0; d--) {
        tn *= v->size[d];
        if (d == 0 || (v->size[d - 1] != 1 && v->stride[d - 1] != tn * base)) {
            while (vd >= 0 && (vn < tn || o.size[vd] == 1)) {
                o.stride[vd] = vn * base;
                vn *= o.size[vd];
                vd--;
            }
            if (vn != tn) return 0;
            if (d > 0) {
                base = v->stride[d - 1];
                tn = 1;
                vn = 1;
            }
        }
    }
    if (vd != -1) return 0;
    *out = o;
    return 1;
}

int aten_view_infer_size(int64_t numel, int nd, int64_t *size) {
    int neg = -1;
    int64_t p = 1;
    for (int i = 0; i < nd; i++) {
        if (size[i] == -1) {
            if (neg >= 0) return 0;
            neg = i;
        } else if (size[i] < 0) {
            return 0;
        } else {
            p *= size[i];
            if (p > ((int64_t)1 << 48)) return 0;
        }
    }
    if (neg >= 0) {
        if (p == 0 || numel % p) return 0;
        size[neg] = numel / p;
        p *= size[neg];
    }
    return p == numel;
}

int aten_view_dim(int64_t dim, int nd) {
    int n = nd > 0 ? nd : 1;
    if (dim < -n || dim >= n) return -1;
    return (int)(dim < 0 ? dim + n : dim);
}

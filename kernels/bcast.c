/* The numpy broadcast plan of binary ops, shared by every backend
 * (kernels/backend_impl.h). */
#include "kernels/backend_impl.h"

void drift_bcast_plan(const drift_tensor *a, const drift_tensor *b, drift_bcast *bc) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    int64_t shp[DRIFT_MAX_DIMS], sa[DRIFT_MAX_DIMS], sb[DRIFT_MAX_DIMS];
    int64_t ca = 1, cb = 1;
    /* full (uncollapsed) strides, right-aligned, innermost first */
    for (int i = nd - 1; i >= 0; i--) {
        int ia = a->ndim - nd + i, ib = b->ndim - nd + i;
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        shp[i] = da == 1 ? db : da;
        sa[i] = da == 1 ? 0 : ca;
        sb[i] = db == 1 ? 0 : cb;
        ca *= da;
        cb *= db;
    }
    /* drop size-1 dims, then merge neighbours whose strides chain */
    int m = 0;
    int64_t numel = 1;
    for (int i = 0; i < nd; i++) {
        numel *= shp[i];
        if (shp[i] == 1) continue;
        if (m > 0 && bc->sa[m - 1] == sa[i] * shp[i] && bc->sb[m - 1] == sb[i] * shp[i]) {
            bc->shape[m - 1] *= shp[i];
            bc->sa[m - 1] = sa[i];
            bc->sb[m - 1] = sb[i];
            continue;
        }
        bc->shape[m] = shp[i];
        bc->sa[m] = sa[i];
        bc->sb[m] = sb[i];
        m++;
    }
    if (m == 0) {
        bc->shape[0] = 1;
        bc->sa[0] = 0;
        bc->sb[0] = 0;
        m = 1;
    }
    bc->nd = m;
    bc->numel = numel;
}

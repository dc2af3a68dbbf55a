/* Private to replay/capture: strided views over a contiguous root value,
 * with torch's rules for which reshapes are views (aten_views.c). */
#ifndef DRIFT_REPLAY_CAPTURE_ATEN_VIEWS_H
#define DRIFT_REPLAY_CAPTURE_ATEN_VIEWS_H

#include <stdint.h>

#include "formats/params.h" /* DRIFT_MAX_DIMS */

/* A view: element (i0, .., i{nd-1}) is flat element off + sum i_k stride[k]
 * of its root's contiguous storage. */
typedef struct aten_view {
    int root;
    int nd;
    int64_t size[DRIFT_MAX_DIMS], stride[DRIFT_MAX_DIMS], off;
} aten_view;

int64_t aten_view_numel(const aten_view *v);
/* Contiguous view of root with shape (nd, size). */
void aten_view_contig(aten_view *v, int root, int nd, const int64_t *size);
/* 1 if v is row-major contiguous (dims of size 1 ignored). */
int aten_view_is_contig(const aten_view *v);
/* Strides for viewing v as (nd, size) without a copy, torch's rule (chunks
 * of mergeable dims must each map onto whole groups of new dims). 1 and
 * *out set on success, 0 when a copy is needed. */
int aten_view_reshape(const aten_view *v, int nd, const int64_t *size, aten_view *out);
/* Resolves one -1 in size against numel; 0 on a bad size list. */
int aten_view_infer_size(int64_t numel, int nd, int64_t *size);
/* Normalises dim against nd (dim in [-nd, nd)); -1 if out of range. */
int aten_view_dim(int64_t dim, int nd);

#endif

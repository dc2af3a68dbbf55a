/* drift top's selection checks (top_select.h); built with the dashboard only. */
#ifdef DRIFT_HAVE_TUI
#include "cli/top_select.h"

int drift_cli_top_check_selection(const drift_top_data *d, const char *trace, const char *filter, const char *variant,
                                  drift_err *err) {
    size_t nl = drift_top_data_n_layers(d), ns = drift_top_data_n_steps(d);
    if (filter && *filter) {
        size_t hit = 0;
        for (size_t l = 0; l < nl && !hit; l++) hit = (size_t)drift_top_filter_match(filter, drift_top_data_layer_name(d, l));
        if (!hit)
            return drift_err_set(err, DRIFT_E_USAGE, "--filter", "'%s' matches no layer of %s%s%s%s", filter, trace,
                                 nl ? " (layers are named like '" : " (it has no layers)", nl ? drift_top_data_layer_name(d, 0) : "",
                                 nl ? "')" : "");
    }
    if (variant) {
        int any = 0;
        for (size_t l = 0; l < nl && !any; l++)
            for (size_t c = 0; c < ns && !any; c++) {
                const drift_top_cell *cell = drift_top_data_cell(d, l, c);
                any = cell && cell->present;
            }
        if (!any)
            return drift_err_set(err, DRIFT_E_USAGE, "--variant",
                                 "'%s' matches no metric row of %s in the kept steps", variant, trace);
    }
    return DRIFT_OK;
}
#else
typedef int drift_cli_top_select_unused; /* ISO C: a translation unit is not empty */
#endif

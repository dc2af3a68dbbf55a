/* The run line of `drift top` (tui/header.c): at 80, 120 and 160 columns
 * (less the status badge) it holds the writer's state (with --against both
 * writers') and the steps per second whatever the paths' length, never more
 * cells than it is given, and paths are cut to their tail behind an
 * ellipsis. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tui/header.h"

static void joined(const drift_top_segs *s, char *out, size_t sz) {
    out[0] = 0;
    for (int i = 0; i < s->n; i++) strncat(out, s->s[i].text, sz - strlen(out) - 1);
}

static drift_top_header header(const char *pa, const char *wa, const char *pb, const char *wb) {
    drift_top_header h;
    memset(&h, 0, sizeof h);
    h.path = pa;
    h.against = pb;
    h.writer = wa;
    h.against_writer = wb;
    h.run_id = "run-1";
    h.family = "tiny-dit:layers=2,dim=64,heads=4,ffn_dim=128";
    h.side = "trainer";
    h.steps_committed = 147;
    h.first_step = 0;
    h.last_step = 146;
    h.steps_per_s = 103.4;
    h.guidance_scale = 4.5;
    return h;
}

static void test_fit_path(void **state) {
    (void)state;
    char out[64];
    assert_int_equal(drift_top_fit_path("run.h5", 10, 1, out, sizeof out), 6);
    assert_string_equal(out, "run.h5");
    assert_int_equal(drift_top_fit_path("/tmp/a/b/run.rollout.h5", 12, 1, out, sizeof out), 12);
    assert_string_equal(out, "\xe2\x80\xa6" ".rollout.h5");
    assert_int_equal(drift_top_fit_path("/tmp/a/b/run.rollout.h5", 12, 0, out, sizeof out), 12);
    assert_string_equal(out, "...ollout.h5");
    assert_int_equal(drift_top_fit_path("/tmp/x", 1, 1, out, sizeof out), 0);
    assert_string_equal(out, "");
}

/* Every width of interest, short and long paths, every pair of states. */
static void test_both_states_and_rate(void **state) {
    (void)state;
    static const char *const states[] = {"recording", "finished", "failed: disk full after step 41",
                                         "stopped without closing"};
    static const char *const shrt[] = {"recording", "finished", "failed", "stopped"};
    const char *longp = "/scratch/user/experiments/2026-12-01/wan22-grpo/run-0042/trace-trainer.rank0.h5";
    const char *longq = "/scratch/user/experiments/2026-12-01/wan22-grpo/run-0042/trace-rollout.h5";
    static const int widths[] = {80 - 11, 120 - 11, 160 - 11, 80 - 21}; /* less the badge: " IDLE 34s " or " FAILED " */
    int checked = 0;
    for (int pl = 0; pl < 2; pl++)
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++)
                for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
                    drift_top_header h = header(pl ? longp : "run.h5", states[a], pl ? longq : "run.rollout.h5",
                                                states[b]);
                    drift_top_segs s;
                    drift_top_header_run_segs(&h, widths[wi], 1, &s);
                    char line[4096];
                    joined(&s, line, sizeof line);
                    assert_true(drift_top_cells(line) == s.cells);
                    assert_true(s.cells <= widths[wi]);
                    assert_non_null(strstr(line, "103 steps/s"));
                    /* A's state, then B's, whole or in their short form */
                    const char *vs = strstr(line, "vs ");
                    assert_non_null(vs);
                    char *pa = strstr(line, shrt[a]), *pb = strstr(vs, shrt[b]);
                    assert_non_null(pa);
                    assert_true(pa < vs);
                    assert_non_null(pb);
                    checked++;
                }
    assert_int_equal(checked, 2 * 4 * 4 * 4);
}

/* At 160 columns the whole words and both file names fit, and a long path is
 * cut to its tail (the file name) behind an ellipsis. */
static void test_wide_keeps_words_and_names(void **state) {
    (void)state;
    drift_top_header h = header("/scratch/user/experiments/2026-12-01/wan22-grpo/run-0042/trace-trainer.rank0.h5",
                                "stopped without closing",
                                "/scratch/user/experiments/2026-12-01/wan22-grpo/run-0042/trace-rollout.h5", "recording");
    drift_top_segs s;
    drift_top_header_run_segs(&h, 149, 1, &s);
    char line[4096];
    joined(&s, line, sizeof line);
    assert_non_null(strstr(line, "stopped without closing"));
    assert_non_null(strstr(line, "trace-trainer.rank0.h5 stopped without closing"));
    assert_non_null(strstr(line, "trace-rollout.h5 recording"));
    assert_non_null(strstr(line, "\xe2\x80\xa6"));
    int bad = 0;
    for (int i = 0; i < s.n; i++)
        if (s.s[i].kind == DRIFT_TOP_SEG_BAD) {
            bad++;
            assert_non_null(strstr(s.s[i].text, "stopped"));
        }
    assert_int_equal(bad, 1); /* the stopped writer is marked, the recording one is not */
}

/* One trace (no --against): its writer's state and the rate at every width, no "vs". */
static void test_single_trace(void **state) {
    (void)state;
    static const char *const states[] = {"recording", "finished", "failed: disk full after step 41",
                                         "stopped without closing"};
    static const char *const shrt[] = {"recording", "finished", "failed", "stopped"};
    for (int a = 0; a < 4; a++)
        for (int w = 69; w <= 149; w += 40) {
            drift_top_header h = header("run.h5", states[a], "", "");
            h.run_id = "synthetic-0000000000000000";
            drift_top_segs s;
            drift_top_header_run_segs(&h, w, 1, &s);
            char line[4096];
            joined(&s, line, sizeof line);
            assert_true(s.cells <= w);
            assert_non_null(strstr(line, "103 steps/s"));
            assert_non_null(strstr(line, "writer "));
            assert_non_null(strstr(line, shrt[a]));
            assert_null(strstr(line, "vs "));
            if (w >= 149) assert_non_null(strstr(line, "run synthetic-0000000000000000"));
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_path),
        cmocka_unit_test(test_both_states_and_rate),
        cmocka_unit_test(test_wide_keeps_words_and_names),
        cmocka_unit_test(test_single_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

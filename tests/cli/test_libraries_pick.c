/* cli/libraries_pick: --libraries parsing and which folders a CUDA replay
 * puts first for cuBLASLt / cuDNN (the recorded files, else the recorded
 * torch version's wheel, else the loader's own), over fake library folders. */
#define _GNU_SOURCE /* libraries_pick.c: dl_iterate_phdr, GLOB_ONLYDIR */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "cli/args.c"
#include "cli/cli_util.c"
#include "cli/libraries_pick.c"

static char root[512];

static void touch(const char *rel) {
    char p[1024], d[1100];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    snprintf(d, sizeof d, "mkdir -p '%s'", p);
    *strrchr(d, '/') = '\0';
    strcat(d, "'");
    assert_int_equal(system(d), 0);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
}

static int setup(void **state) {
    (void)state;
    const char *t = getenv("DRIFT_TMP");
    snprintf(root, sizeof root, "%s/libpick-XXXXXX", t && *t ? t : "/tmp");
    assert_non_null(mkdtemp(root));
    touch("sys/lib64/libcublasLt.so.13");
    touch("sys/lib64/libcudnn.so.9");
    touch("venv/lib/python3.11/site-packages/torch-2.11.0+cu130.dist-info/METADATA");
    touch("venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcublasLt.so.13");
    touch("venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcublas.so.13");
    touch("venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9");
    touch("venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn_graph.so.9");
    touch("old/libcublasLt.so.12");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char c[700];
    snprintf(c, sizeof c, "rm -rf '%s'", root);
    return system(c) == 0 ? 0 : -1;
}

static void rec_with(drift_libraries *l, const char *lt, const char *dnn, const char *torch) {
    memset(l, 0, sizeof *l);
    if (lt) snprintf(l->cublaslt_path, sizeof l->cublaslt_path, "%s/%s", root, lt);
    if (dnn) snprintf(l->cudnn_path, sizeof l->cudnn_path, "%s/%s", root, dnn);
    if (torch) snprintf(l->torch_version, sizeof l->torch_version, "%s", torch);
}

static void assert_dir(const drift_cli_libs_pick *p, int i, const char *rel) {
    char want[1024];
    snprintf(want, sizeof want, "%s/%s", root, rel);
    assert_true(i < p->n_dirs);
    assert_string_equal(p->dirs[i], want);
}

static void test_parse(void **state) {
    (void)state;
    drift_cli_libs_mode m;
    assert_int_equal(drift_cli_libraries_parse("replay", NULL, &m), 0);
    assert_int_equal(m, DRIFT_CLI_LIBS_RECORDED);
    assert_int_equal(drift_cli_libraries_parse("replay", "recorded", &m), 0);
    assert_int_equal(m, DRIFT_CLI_LIBS_RECORDED);
    assert_int_equal(drift_cli_libraries_parse("replay", "system", &m), 0);
    assert_int_equal(m, DRIFT_CLI_LIBS_SYSTEM);
    assert_int_equal(drift_cli_libraries_parse("replay", root, &m), 0);
    assert_int_equal(m, DRIFT_CLI_LIBS_DIR);
    assert_int_equal(drift_cli_libraries_parse("replay", "recroded", &m), 2); /* "did you mean 'recorded'?" */
    assert_int_equal(drift_cli_libraries_parse("replay", "/no/such/folder", &m), 2);
}

static void test_recorded_files(void **state) {
    (void)state;
    drift_libraries l;
    rec_with(&l, "sys/lib64/libcublasLt.so.13", "venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9", "2.11.0+cu130");
    drift_cli_libs_pick p;
    const char *globs[] = {NULL};
    drift_cli_libraries_pick(&l, DRIFT_CLI_LIBS_RECORDED, NULL, globs, NULL, &p);
    assert_int_equal(p.n_dirs, 2);
    assert_dir(&p, 0, "sys/lib64");
    assert_dir(&p, 1, "venv/lib/python3.11/site-packages/nvidia/cudnn/lib");
    assert_non_null(strstr(p.note, "the recording's: cuBLASLt from"));
    assert_non_null(strstr(p.note, "(the recorded file)"));
}

static void test_torch_wheel(void **state) {
    (void)state;
    drift_libraries l;
    /* the recording's venv is gone: the same torch version's wheel elsewhere */
    rec_with(&l, "gone/nvidia/cu13/lib/libcublasLt.so.13", "gone/nvidia/cudnn/lib/libcudnn.so.9", "2.11.0+cu130");
    char g[700];
    snprintf(g, sizeof g, "%s/venv/lib/python3*/site-packages", root);
    const char *globs[] = {g, NULL};
    drift_cli_libs_pick p;
    drift_cli_libraries_pick(&l, DRIFT_CLI_LIBS_RECORDED, NULL, globs, NULL, &p);
    assert_int_equal(p.n_dirs, 2);
    assert_dir(&p, 0, "venv/lib/python3.11/site-packages/nvidia/cu13/lib");
    assert_dir(&p, 1, "venv/lib/python3.11/site-packages/nvidia/cudnn/lib");
    assert_non_null(strstr(p.note, "torch 2.11.0+cu130's wheel; the recorded file is not here"));
    /* another torch version: not its wheel */
    rec_with(&l, "gone/libcublasLt.so.13", "gone/libcudnn.so.9", "2.10.0");
    drift_cli_libraries_pick(&l, DRIFT_CLI_LIBS_RECORDED, NULL, globs, NULL, &p);
    assert_int_equal(p.n_dirs, 0);
    assert_non_null(strstr(p.note, "not on this machine and no torch 2.10.0 wheel was found: the loader's own"));
}

static void test_names_must_match(void **state) {
    (void)state;
    drift_libraries l;
    /* a cu12 cuBLASLt cannot stand in for the libcublasLt.so.13 drift links */
    rec_with(&l, "old/libcublasLt.so.12", NULL, NULL);
    const char *names[2] = {"libcublasLt.so.13", "libcudnn.so.9"};
    const char *globs[] = {NULL};
    drift_cli_libs_pick p;
    drift_cli_libraries_pick(&l, DRIFT_CLI_LIBS_RECORDED, NULL, globs, names, &p);
    assert_int_equal(p.n_dirs, 0);
    assert_non_null(strstr(p.note, "the loader's own"));
    drift_cli_libraries_pick(&l, DRIFT_CLI_LIBS_RECORDED, NULL, globs, NULL, &p);
    assert_int_equal(p.n_dirs, 1);
    assert_non_null(strstr(p.note, "cuDNN the loader's own"));
}

static void test_system_dir_none(void **state) {
    (void)state;
    drift_libraries l;
    rec_with(&l, "sys/lib64/libcublasLt.so.13", "sys/lib64/libcudnn.so.9", "2.11.0");
    drift_cli_libs_pick p;
    const char *globs[] = {NULL};
    drift_cli_libraries_pick(&l, DRIFT_CLI_LIBS_SYSTEM, NULL, globs, NULL, &p);
    assert_int_equal(p.n_dirs, 0);
    assert_non_null(strstr(p.note, "--libraries system"));
    char site[700];
    snprintf(site, sizeof site, "%s/venv/lib/python3.11/site-packages", root);
    drift_cli_libraries_pick(&l, DRIFT_CLI_LIBS_DIR, site, globs, NULL, &p); /* a site-packages as DIR */
    assert_int_equal(p.n_dirs, 2);
    assert_dir(&p, 0, "venv/lib/python3.11/site-packages/nvidia/cu13/lib");
    drift_cli_libraries_pick(&l, DRIFT_CLI_LIBS_DIR, root, globs, NULL, &p); /* nothing directly or one level down */
    assert_int_equal(p.n_dirs, 0);
    assert_non_null(strstr(p.note, "holds no"));
    drift_cli_libraries_pick(NULL, DRIFT_CLI_LIBS_RECORDED, NULL, globs, NULL, &p);
    assert_int_equal(p.n_dirs, 0);
    assert_string_equal(p.note, "the trace records no library paths: the loader's own");
}

static void test_apply_off_cuda(void **state) {
    (void)state;
    /* off CUDA nothing is read or changed; a bad value is still refused */
    assert_int_equal(drift_cli_libraries_apply("replay", "/no/trace.h5", "system", "cpu"), 0);
    assert_string_equal(drift_cli_libraries_note(), "");
    assert_int_equal(drift_cli_libraries_apply("replay", "/no/trace.h5", "sytem", NULL), 2);
}

static void test_apply_messages(void **state) {
    (void)state;
    /* on CUDA without argv (no re-execution possible): the pick's sentence, nothing changed */
    drift_cli_libraries_set_argv(NULL);
    assert_int_equal(drift_cli_libraries_apply("replay", NULL, NULL, "cuda:0"), 0);
    assert_non_null(strstr(drift_cli_libraries_note(), "the trace records no library paths: the loader's own"));
    assert_int_equal(drift_cli_libraries_apply("bisect", NULL, "system", "cpu,cuda:1"), 0);
    assert_non_null(strstr(drift_cli_libraries_note(), "--libraries system"));
    /* the re-executed process: the parent's sentence, the markers removed (children never see them) */
    char pid[32];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    setenv("DRIFT_LIBRARIES_REEXEC", pid, 1);
    setenv("DRIFT_LIBRARIES_NOTE", "the recording's: cuBLASLt from /x (the recorded file)", 1);
    assert_int_equal(drift_cli_libraries_apply("replay", NULL, NULL, "cuda"), 0);
    assert_non_null(strstr(drift_cli_libraries_note(), "the recording's: cuBLASLt from /x (the recorded file)"));
    assert_null(getenv("DRIFT_LIBRARIES_REEXEC"));
    assert_null(getenv("DRIFT_LIBRARIES_NOTE"));
    /* a stale marker of another process is not this one's */
    setenv("DRIFT_LIBRARIES_REEXEC", "1", 1);
    assert_int_equal(drift_cli_libraries_apply("replay", NULL, NULL, "cuda"), 0);
    assert_non_null(strstr(drift_cli_libraries_note(), "the trace records no library paths"));
    unsetenv("DRIFT_LIBRARIES_REEXEC");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),           cmocka_unit_test(test_recorded_files),
        cmocka_unit_test(test_torch_wheel),     cmocka_unit_test(test_names_must_match),
        cmocka_unit_test(test_system_dir_none), cmocka_unit_test(test_apply_off_cuda),
        cmocka_unit_test(test_apply_messages),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

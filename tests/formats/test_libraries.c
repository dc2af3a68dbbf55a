/* formats/libraries + /libraries in a trace: version texts, the
 * recording-vs-replay comparison and its messages, escaping, the writer and
 * the guarded reader (absent group, round trip, hostile attributes written
 * with HDF5 directly, set twice / after the start). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hdf5.h>

#include "formats/libraries.h"
#include "formats/trace.h"
#include "test_trace_util.h"

static drift_libraries h200(void) {
    drift_libraries l;
    drift_libraries_init(&l);
    snprintf(l.gpu_name, sizeof l.gpu_name, "NVIDIA H200");
    l.cc_major = 9;
    l.cc_minor = 0;
    l.driver_version = 13000;
    l.runtime_version = 13010;
    l.cublaslt_version = 130100;
    l.cublas_version = 130100;
    l.cudnn_version = 91000;
    snprintf(l.cublaslt_path, sizeof l.cublaslt_path, "/usr/local/cuda/lib64/libcublasLt.so.13");
    return l;
}

static void test_versions(void **state) {
    (void)state;
    char b[32];
    assert_string_equal(drift_libraries_version_text("cudnn", 91000, b, sizeof b), "9.10.0");
    assert_string_equal(drift_libraries_version_text("cudnn", 90800, b, sizeof b), "9.8.0");
    assert_string_equal(drift_libraries_version_text("cudnn", 8907, b, sizeof b), "8.9.7");
    assert_string_equal(drift_libraries_version_text("cublaslt", 120804, b, sizeof b), "12.8.4");
    assert_string_equal(drift_libraries_version_text("driver", 12080, b, sizeof b), "12.8");
    assert_string_equal(drift_libraries_version_text("runtime", 13010, b, sizeof b), "13.1");
    assert_string_equal(drift_libraries_version_text("cudnn", 0, b, sizeof b), "unknown");
}

static void test_escape(void **state) {
    (void)state;
    char b[64];
    assert_string_equal(drift_libraries_escape("a\x1b[2Jb\\", b, sizeof b), "a\\x1b[2Jb\\\\");
    assert_string_equal(drift_libraries_escape("caf\xc3\xa9", b, sizeof b), "caf\\xc3\\xa9");
    char s[8];
    drift_libraries_escape("0123456789", s, sizeof s); /* cut, with "..." */
    assert_string_equal(s, "0123...");
}

static void test_compare(void **state) {
    (void)state;
    char msg[2048];
    drift_libraries rec = h200(), here = h200();
    assert_int_equal(drift_libraries_compare(&rec, &here, msg, sizeof msg), DRIFT_LIBRARIES_SAME);
    assert_string_equal(msg, "same libraries as the recording (NVIDIA H200 sm_90, cuBLASLt 13.1.0, cuDNN 9.10.0)");

    rec.cudnn_version = 90800; /* the brief's example: cuDNN 9.10 here, 9.8 recorded */
    assert_int_equal(drift_libraries_compare(&rec, &here, msg, sizeof msg), DRIFT_LIBRARIES_DIFFER);
    assert_string_equal(msg, "bitwise equality with the recording is not expected: cuDNN 9.10.0 here vs 9.8.0 recorded");

    snprintf(rec.gpu_name, sizeof rec.gpu_name, "NVIDIA H100 80GB HBM3");
    rec.runtime_version = 12080; /* named, not decisive */
    assert_int_equal(drift_libraries_compare(&rec, &here, msg, sizeof msg), DRIFT_LIBRARIES_DIFFER);
    assert_non_null(strstr(msg, "GPU 'NVIDIA H200' here vs 'NVIDIA H100 80GB HBM3' recorded, cuDNN 9.10.0 here vs 9.8.0"));
    assert_non_null(strstr(msg, "; also CUDA runtime 13.1 here vs 12.8 recorded (not expected to change"));

    /* only the runtime differs; cuBLAS unknown in the recording: same, both named */
    rec = h200();
    rec.runtime_version = 12080;
    rec.cublas_version = 0;
    assert_int_equal(drift_libraries_compare(&rec, &here, msg, sizeof msg), DRIFT_LIBRARIES_SAME);
    assert_non_null(strstr(msg, "same libraries as the recording"));
    assert_non_null(strstr(msg, "; not known on both sides: cuBLAS"));
    assert_non_null(strstr(msg, "; also CUDA runtime 13.1 here vs 12.8 recorded"));

    /* none: the trace has no identity, or the replay is not on a GPU */
    assert_int_equal(drift_libraries_compare(NULL, &here, msg, sizeof msg), DRIFT_LIBRARIES_NONE);
    assert_string_equal(msg, "the trace records no library identity: bitwise equality with the recording cannot be judged");
    drift_libraries empty;
    drift_libraries_init(&empty);
    assert_int_equal(drift_libraries_compare(&empty, &here, msg, sizeof msg), DRIFT_LIBRARIES_NONE);
    assert_int_equal(drift_libraries_compare(&rec, NULL, msg, sizeof msg), DRIFT_LIBRARIES_NONE);
    assert_non_null(strstr(msg, "not a CUDA device"));
    /* a hostile name is escaped in the message */
    rec = h200();
    snprintf(rec.gpu_name, sizeof rec.gpu_name, "evil\x1b]0;x\x07");
    drift_libraries_compare(&rec, &here, msg, sizeof msg);
    assert_null(strchr(msg, '\x1b'));
    assert_non_null(strstr(msg, "'evil\\x1b]0;x\\x07' recorded"));
    assert_string_equal(drift_libraries_verdict_name(DRIFT_LIBRARIES_DIFFER), "differ");
}

static void test_from_torch(void **state) {
    (void)state;
    drift_libraries l = h200();
    assert_false(drift_libraries_from_torch("drift 0.1.0", &l));
    assert_false(drift_libraries_from_torch("drift-recorder-python 0.1.0", NULL)); /* numpy only */
    assert_true(drift_libraries_from_torch("drift-recorder-python 0.1.0 torch 2.11.0+cu128", NULL));
    snprintf(l.torch_version, sizeof l.torch_version, "2.11.0");
    assert_true(drift_libraries_from_torch("drift 0.1.0", &l));
    assert_false(drift_libraries_from_torch(NULL, NULL));
}

/* A started and closed trace, with lib written when not NULL. */
static void write_trace(const char *path, const drift_libraries *lib) {
    drift_err err;
    drift_trace_writer *w = NULL;
    drift_trace_meta m = tt_meta();
    assert_int_equal(drift_trace_writer_create(&w, path, &m, &err), DRIFT_OK);
    if (lib) {
        assert_int_equal(drift_trace_writer_set_libraries(w, lib, &err), DRIFT_OK);
        assert_int_equal(drift_trace_writer_set_libraries(w, lib, &err), DRIFT_E_USAGE); /* once */
    }
    assert_int_equal(drift_trace_writer_start(w, &err), DRIFT_OK);
    if (lib) assert_int_equal(drift_trace_writer_set_libraries(w, lib, &err), DRIFT_E_USAGE); /* before the start only */
    assert_int_equal(drift_trace_writer_close(w, &err), DRIFT_OK);
}

static int read_back(const char *path, drift_libraries *out, int *present, drift_err *err) {
    drift_trace_reader *r = NULL;
    int rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, err);
    assert_int_equal(rc, DRIFT_OK);
    rc = drift_trace_read_libraries(r, out, present, err);
    drift_trace_reader_close(r);
    return rc;
}

static void test_roundtrip(void **state) {
    (void)state;
    drift_err err;
    drift_libraries in = h200(), out;
    snprintf(in.torch_version, sizeof in.torch_version, "2.11.0+cu128");
    snprintf(in.cudnn_path, sizeof in.cudnn_path, "/venv/nvidia/cudnn/lib/libcudnn.so.9");
    in.cublas_workspace = 131072;      /* CUBLAS_WORKSPACE_CONFIG=:16:8 */
    in.cublaslt_workspace = 2 << 20;   /* CUBLASLT_WORKSPACE_SIZE=2048 */
    const char *p = tt_path("libs.h5");
    write_trace(p, &in);
    int present = 0;
    assert_int_equal(read_back(p, &out, &present, &err), DRIFT_OK);
    assert_int_equal(present, 1);
    assert_memory_equal(&in, &out, sizeof in);
    const char *q = tt_path("nolibs.h5");
    write_trace(q, NULL);
    out.cudnn_version = 7;
    assert_int_equal(read_back(q, &out, &present, &err), DRIFT_OK);
    assert_int_equal(present, 0);
    assert_int_equal(out.cudnn_version, 0);
    assert_false(drift_libraries_known(&out));
}

/* Rewrites attribute name of path's /libraries through HDF5 directly. */
static void poke(const char *path, const char *name, hid_t type, hid_t space, const void *buf) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(f >= 0);
    hid_t g = H5Gopen2(f, "/libraries", H5P_DEFAULT);
    assert_true(g >= 0);
    if (H5Aexists(g, name) > 0) H5Adelete(g, name);
    hid_t a = H5Acreate2(g, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(a >= 0);
    assert_true(H5Awrite(a, type, buf) >= 0);
    H5Aclose(a);
    H5Gclose(g);
    H5Fclose(f);
}

static void expect_refused(const char *path, const char *attr) {
    drift_err err;
    drift_err_clear(&err);
    drift_libraries out;
    int present = 1;
    assert_int_equal(read_back(path, &out, &present, &err), DRIFT_E_INPUT);
    assert_int_equal(present, 0);
    assert_non_null(strstr(err.where, "/libraries"));
    assert_non_null(strstr(err.msg, attr));
}

static void test_hostile(void **state) {
    (void)state;
    drift_libraries in = h200();
    const char *p = tt_path("hostile.h5");
    /* a string longer than its field (a GPU name of 4000 bytes) */
    write_trace(p, &in);
    char big[4000];
    memset(big, 'x', sizeof big);
    hid_t st = H5Tcopy(H5T_C_S1), sc = H5Screate(H5S_SCALAR);
    H5Tset_size(st, sizeof big);
    poke(p, "gpu_name", st, sc, big);
    expect_refused(p, "gpu_name");
    /* a version of the wrong type, and out of range */
    write_trace(p, &in);
    H5Tset_size(st, 4);
    poke(p, "cudnn", st, sc, "9.8");
    expect_refused(p, "cudnn");
    write_trace(p, &in);
    int64_t neg = -1;
    poke(p, "cublaslt", H5T_NATIVE_INT64, sc, &neg);
    expect_refused(p, "cublaslt");
    /* a GEMM workspace that is negative or absurd (it sizes a device allocation) */
    write_trace(p, &in);
    poke(p, "cublas_workspace_bytes", H5T_NATIVE_INT64, sc, &neg);
    expect_refused(p, "cublas_workspace_bytes");
    write_trace(p, &in);
    int64_t huge = (int64_t)1 << 40;
    poke(p, "cublaslt_workspace_bytes", H5T_NATIVE_INT64, sc, &huge);
    expect_refused(p, "cublaslt_workspace_bytes");
    /* a compute capability of three numbers */
    write_trace(p, &in);
    hsize_t three = 3;
    hid_t s3 = H5Screate_simple(1, &three, NULL);
    int64_t cc[3] = {9, 0, 1};
    poke(p, "compute_capability", H5T_NATIVE_INT64, s3, cc);
    expect_refused(p, "compute_capability");
    /* a missing attribute is unknown, not an error */
    write_trace(p, &in);
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    H5Adelete_by_name(f, "/libraries", "cudnn", H5P_DEFAULT);
    H5Fclose(f);
    drift_err err;
    drift_libraries out;
    int present = 0;
    assert_int_equal(read_back(p, &out, &present, &err), DRIFT_OK);
    assert_int_equal(present, 1);
    assert_int_equal(out.cudnn_version, 0);
    assert_int_equal(out.cublaslt_version, 130100);
    H5Sclose(s3);
    H5Sclose(sc);
    H5Tclose(st);
}

static int setup(void **state) {
    (void)state;
    return tt_setup_tmp("test_libraries");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_versions),  cmocka_unit_test(test_escape),    cmocka_unit_test(test_compare),
        cmocka_unit_test(test_from_torch), cmocka_unit_test(test_roundtrip), cmocka_unit_test(test_hostile),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}

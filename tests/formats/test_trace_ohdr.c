/* formats/trace_ohdr.c: dataset object headers read by drift before
 * H5Dopen2 decodes them. Files are made here with the HDF5 C API (v2
 * headers, libver latest; v1 headers, libver earliest: refused, with their
 * version 0 superblock), then patched byte by byte: a virtual dataset is
 * found in its header (allowed or not), a
 * global heap collection whose free-space object has size 0 (on which
 * H5Dopen2 loops forever) or which lacks the mapping's object is refused,
 * and a header whose checksum no longer matches is left to HDF5. The
 * checksum is checked against Bob Jenkins' published lookup3 values. No
 * test here calls H5Dopen2 on a patched file. */
#include <hdf5.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "formats/trace_internal.h"
#include "test_trace_util.h"

/* lookup3's own self-test values (hashlittle, initval 0): "" -> deadbeef,
 * "Four score and seven years ago" -> 17770551. */
static void test_lookup3_vectors(void **state) {
    (void)state;
    assert_int_equal(tr_ohdr_lookup3((const uint8_t *)"", 0), 0xdeadbeefu);
    const char *s = "Four score and seven years ago";
    assert_int_equal(tr_ohdr_lookup3((const uint8_t *)s, strlen(s)), 0x17770551u);
}

/* A file with /plain (chunked, 1-D) and /v (virtual over missing.h5:/x). */
static void make_file(const char *path, int v1) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, v1 ? H5F_LIBVER_EARLIEST : H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    assert_true(f >= 0);
    hsize_t n = 16, chunk = 4, mx = H5S_UNLIMITED;
    hid_t sp = H5Screate_simple(1, &n, &mx);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    hid_t d = H5Dcreate2(f, "plain", H5T_NATIVE_FLOAT, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(d >= 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    hid_t vs = H5Screate_simple(1, &n, NULL), ss = H5Screate_simple(1, &n, NULL);
    hid_t vcpl = H5Pcreate(H5P_DATASET_CREATE);
    assert_true(H5Pset_virtual(vcpl, vs, "missing.h5", "/x", ss) >= 0);
    d = H5Dcreate2(f, "v", H5T_NATIVE_FLOAT, vs, H5P_DEFAULT, vcpl, H5P_DEFAULT);
    assert_true(d >= 0);
    H5Dclose(d);
    H5Pclose(vcpl);
    H5Sclose(vs);
    H5Sclose(ss);
    H5Fclose(f);
    H5Pclose(fapl);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void spill(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static uint64_t get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Offset of the first "GCOL" collection of b. */
static size_t find_gcol(const unsigned char *b, size_t n) {
    for (size_t i = 0; i + 5 <= n; i++)
        if (memcmp(b + i, "GCOL\x01", 5) == 0) return i;
    fail_msg("no global heap collection");
    return 0;
}

/* Offset (from the collection) of the collection's object idx (0: free space). */
static size_t find_heap_obj(const unsigned char *b, size_t gc, unsigned idx) {
    uint64_t size = get64(b + gc + 8);
    size_t p = 16;
    while (p + 16 <= size) {
        unsigned id = b[gc + p] | (unsigned)b[gc + p + 1] << 8;
        uint64_t len = get64(b + gc + p + 8);
        if (id == idx) return p;
        p += 16 + (size_t)((len + 7) & ~(uint64_t)7);
    }
    fail_msg("no heap object %u", idx);
    return 0;
}

/* tr_guard_header on dataset name of path: its status, message in msg. */
static int guard(const char *path, const char *name, int allow_virtual, char *msg, size_t sz) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(f >= 0);
    drift_err e;
    drift_err_clear(&e);
    int rc = tr_guard_header(f, name, allow_virtual, path, name, &e);
    snprintf(msg, sz, "%s", e.msg);
    assert_int_equal(H5Fget_obj_count(f, H5F_OBJ_ALL), 1); /* nothing left open but the file */
    H5Fclose(f);
    return rc;
}

static void check_versions(int v1) {
    char path[1400], msg[1024];
    snprintf(path, sizeof path, "%s", tt_path(v1 ? "v1.h5" : "v2.h5"));
    make_file(path, v1);
    size_t n = 0;
    unsigned char *b = slurp(path, &n);
    int has_ohdr = 0;
    for (size_t i = 0; i + 4 <= n; i++) has_ohdr |= memcmp(b + i, "OHDR", 4) == 0;
    assert_int_equal(has_ohdr, !v1); /* the headers really are of the version under test */
    drift_err e;
    drift_err_clear(&e);
    if (v1) {
        /* nothing of it is checksummed: refused, the superblock (version 0) and every header */
        assert_int_equal(tr_guard_superblock(path, &e), DRIFT_E_INPUT);
        assert_non_null(strstr(e.msg, "superblock version 0"));
        assert_int_equal(guard(path, "plain", 0, msg, sizeof msg), DRIFT_E_INPUT);
        assert_non_null(strstr(msg, "version-1 object header"));
        assert_int_equal(guard(path, "v", 1, msg, sizeof msg), DRIFT_E_INPUT);
        assert_non_null(strstr(msg, "version-1 object header"));
        hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        assert_int_equal(tr_guard_group_header(f, "/", path, "/", &e), DRIFT_OK); /* "/" is no link: not checked here */
        H5Fclose(f);
        free(b);
        return;
    }
    assert_int_equal(tr_guard_superblock(path, &e), DRIFT_OK);

    assert_int_equal(guard(path, "plain", 0, msg, sizeof msg), DRIFT_OK);
    assert_int_equal(guard(path, "v", 1, msg, sizeof msg), DRIFT_OK);
    assert_int_equal(guard(path, "v", 0, msg, sizeof msg), DRIFT_E_INPUT);
    assert_non_null(strstr(msg, "found in its object header"));

    /* the collection's free space of size 0: HDF5 would never finish decoding it */
    size_t gc = find_gcol(b, n);
    unsigned char *c = malloc(n);
    assert_non_null(c);
    memcpy(c, b, n);
    put64(c + gc + find_heap_obj(c, gc, 0) + 8, 0);
    spill(path, c, n);
    assert_int_equal(guard(path, "v", 1, msg, sizeof msg), DRIFT_E_INPUT);
    assert_non_null(strstr(msg, "loop forever"));
    assert_int_equal(guard(path, "v", 0, msg, sizeof msg), DRIFT_E_INPUT); /* refused before the heap */
    assert_non_null(strstr(msg, "found in its object header"));
    assert_int_equal(guard(path, "plain", 0, msg, sizeof msg), DRIFT_OK);

    /* the mapping's object renumbered: the collection lacks it */
    memcpy(c, b, n);
    size_t o1 = find_heap_obj(c, gc, 1);
    c[gc + o1] = 0x77;
    spill(path, c, n);
    assert_int_equal(guard(path, "v", 1, msg, sizeof msg), DRIFT_E_INPUT);
    assert_non_null(strstr(msg, "no object of the mapping's index"));

    /* the collection's signature gone */
    memcpy(c, b, n);
    c[gc] = 'X';
    spill(path, c, n);
    assert_int_equal(guard(path, "v", 1, msg, sizeof msg), DRIFT_E_INPUT);
    assert_non_null(strstr(msg, "GCOL"));
    free(c);
    free(b);
}

static void test_v2_headers(void **state) {
    (void)state;
    check_versions(0);
}

static void test_v1_headers(void **state) {
    (void)state;
    check_versions(1);
}

/* A v2 header whose checksum fails is HDF5's to judge (it retries such a
 * read under SWMR): not refused here. Every byte of /v's first chunk is
 * flipped in turn (the file opens: the root group is elsewhere); the guard
 * never crashes and refuses only with a message. */
static void test_v2_checksum_left_to_hdf5(void **state) {
    (void)state;
    char path[1400], msg[1024];
    snprintf(path, sizeof path, "%s", tt_path("sum.h5"));
    make_file(path, 0);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    H5O_info_t oi;
    assert_true(H5Oget_info_by_name2(f, "v", &oi, H5O_INFO_BASIC, H5P_DEFAULT) >= 0);
    H5Fclose(f);
    size_t n = 0;
    unsigned char *b = slurp(path, &n);
    size_t at = (size_t)oi.addr;
    assert_memory_equal(b + at, "OHDR", 4);
    /* the layout message's class byte (type 8, class 3) flipped to 2: the checksum no longer matches */
    unsigned char *c = malloc(n);
    assert_non_null(c);
    int flipped = 0;
    for (size_t i = at; i + 6 < n && i < at + 512 && !flipped; i++) {
        if (c == NULL) break;
        memcpy(c, b, n);
        if (b[i] == 0x08 && b[i + 4] == 4 && b[i + 5] == 3) { /* type 8, size, flags, layout v4 class 3 */
            c[i + 5] = 2;
            spill(path, c, n);
            assert_int_equal(guard(path, "v", 0, msg, sizeof msg), DRIFT_OK); /* bad checksum: HDF5 decides */
            flipped = 1;
        }
    }
    assert_true(flipped);
    for (size_t i = at + 4; i < at + 200 && i < n; i++) {
        memcpy(c, b, n);
        c[i] ^= 0x5a;
        spill(path, c, n);
        f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        if (f < 0) continue;
        drift_err e;
        drift_err_clear(&e);
        int rc = tr_guard_header(f, "v", 0, path, "v", &e);
        assert_true(rc == DRIFT_OK || (rc == DRIFT_E_INPUT && e.msg[0]));
        H5Fclose(f);
    }
    free(c);
    free(b);
}

int main(void) {
    if (tt_setup_tmp("trace_ohdr")) return 1;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup3_vectors),
        cmocka_unit_test(test_v2_headers),
        cmocka_unit_test(test_v1_headers),
        cmocka_unit_test(test_v2_checksum_left_to_hdf5),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

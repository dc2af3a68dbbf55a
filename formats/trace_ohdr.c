/* A dataset's object header read with drift's own bounded reads, before
 * H5Dopen2 decodes it (docs/RELIABILITY.md, "Traces from strangers").
 *
 * Why: H5Dopen2 of a virtual dataset reads its mappings from a global heap
 * collection, and HDF5 (1.10 to 1.14) decodes a collection in a loop that
 * advances by each object's stored size; a free-space object of size 0 makes
 * that loop spin forever (fuzz_trace, regress input
 * timeout-h5dopen-global-heap-loop.h5). drift's checks of the open dataset
 * come too late for that, so the layout message is found here first: a
 * virtual layout where none is allowed is refused without calling H5Dopen2,
 * and an allowed one (a merge index) has its collection walked by the same
 * rules, bounded, before HDF5 sees it.
 *
 * The header is found through its hard link's address, before HDF5 has
 * decoded it. Version-1 headers (and files with version 0/1 superblocks,
 * tr_guard_superblock) are refused: nothing in them is checksummed, and
 * HDF5 1.10 crashes on corrupt ones (fuzz_trace: huge allocations in
 * H5C_protect, overflows in H5O__msg_iterate_real and H5T__conv_struct_opt);
 * drift writes version 2 only (docs/format.md section 1). The v1 layout is
 * still parsed, so that what a refused header held is known to the tests.
 *
 * Layouts (HDF5 file format specification, version 3): object headers v1
 * and v2 ("OHDR", continuation blocks "OCHK", Jenkins lookup3 checksums),
 * the data layout message (type 8, versions 1-4; class 3 = virtual, version
 * 4: heap address + object index), global heap collections ("GCOL").
 *
 * A v2 chunk whose checksum does not match is left to HDF5 (it retries
 * such reads under SWMR and fails them otherwise); a header that checksums
 * but does not parse is refused. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/alloc.h"
#include "formats/infile.h"
#include "formats/trace_internal.h"

#define OH_CHUNK_MAX ((uint64_t)16 << 20) /* one header chunk; HDF5 writes far less */
#define OH_CHUNKS_MAX 256                 /* continuation chunks followed per header */
#define GH_MIN 4096                       /* HDF5 never writes a smaller collection */
#define GH_MAX ((uint64_t)64 << 20)
#define OH_UNDEF UINT64_MAX

typedef struct oh_file {
    int fd;
    uint64_t size; /* bytes on disk */
    uint64_t base; /* addresses are relative to it (the user block) */
    unsigned sa, ss; /* sizes of addresses and lengths (superblock) */
} oh_file;

/* Bob Jenkins' lookup3 "hashlittle" over bytes, initial value 0: the
 * checksum of HDF5's v2 metadata. */
#define OH_ROT(x, k) (((x) << (k)) | ((x) >> (32 - (k))))
uint32_t tr_ohdr_lookup3(const uint8_t *k, size_t n) {
    uint32_t a, b, c;
    a = b = c = 0xdeadbeefu + (uint32_t)n;
    while (n > 12) {
        a += k[0] + ((uint32_t)k[1] << 8) + ((uint32_t)k[2] << 16) + ((uint32_t)k[3] << 24);
        b += k[4] + ((uint32_t)k[5] << 8) + ((uint32_t)k[6] << 16) + ((uint32_t)k[7] << 24);
        c += k[8] + ((uint32_t)k[9] << 8) + ((uint32_t)k[10] << 16) + ((uint32_t)k[11] << 24);
        a -= c, a ^= OH_ROT(c, 4), c += b;
        b -= a, b ^= OH_ROT(a, 6), a += c;
        c -= b, c ^= OH_ROT(b, 8), b += a;
        a -= c, a ^= OH_ROT(c, 16), c += b;
        b -= a, b ^= OH_ROT(a, 19), a += c;
        c -= b, c ^= OH_ROT(b, 4), b += a;
        n -= 12;
        k += 12;
    }
    if (n == 0) return c;
    uint32_t w[3] = {0, 0, 0};
    for (size_t i = 0; i < n; i++) w[i / 4] |= (uint32_t)k[i] << (8 * (i % 4));
    a += w[0], b += w[1], c += w[2];
    c ^= b, c -= OH_ROT(b, 14);
    a ^= c, a -= OH_ROT(c, 11);
    b ^= a, b -= OH_ROT(a, 25);
    c ^= b, c -= OH_ROT(b, 16);
    a ^= c, a -= OH_ROT(c, 4);
    b ^= a, b -= OH_ROT(a, 14);
    c ^= b, c -= OH_ROT(b, 24);
    return c;
}

/* Little-endian unsigned of n bytes (1..8). */
static uint64_t le(const uint8_t *p, unsigned n) {
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* An address of n bytes: all ones (HDF5's undefined address) is OH_UNDEF. */
static uint64_t le_addr(const uint8_t *p, unsigned n) {
    uint64_t v = le(p, n);
    return n < 8 && v == ((uint64_t)1 << (8 * n)) - 1 ? OH_UNDEF : v;
}

/* n bytes at address addr into a new buffer (*out owned by the caller);
 * 0, -1 when they do not lie in the file, -2 out of memory. */
static int oh_read(const oh_file *f, uint64_t addr, uint64_t n, uint8_t **out) {
    *out = NULL;
    if (addr == OH_UNDEF || n == 0 || addr > f->size || f->base > f->size - addr || n > f->size - addr - f->base)
        return -1;
    uint8_t *b = drift_malloc((size_t)n);
    if (!b) return -2;
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(f->fd, b + got, (size_t)n - got, (off_t)(f->base + addr + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            drift_free(b);
            return -1;
        }
        got += (size_t)k;
    }
    *out = b;
    return 0;
}

/* What the walk found: the layout message's bytes (a copy) and its version. */
typedef struct oh_scan {
    uint8_t *layout;
    size_t layout_len;
    int bad_sum;      /* a v2 chunk failed its checksum: left to HDF5 */
    int v1;           /* a version-1 header (refused: nothing in it is checksummed) */
    const char *why;  /* the header does not parse */
    uint64_t cont[OH_CHUNKS_MAX][2];
    int n_cont;
} oh_scan;

/* The messages of one chunk (its message area m[0..n)); v1 or v2. */
static int oh_messages(const oh_file *f, const uint8_t *m, size_t n, int v2, int order, oh_scan *s) {
    size_t hdr = v2 ? 4u + (order ? 2u : 0u) : 8u;
    size_t p = 0;
    while (p + hdr <= n) {
        unsigned type = v2 ? m[p] : (unsigned)le(m + p, 2);
        size_t len = (size_t)le(m + p + (v2 ? 1 : 2), 2);
        unsigned flags = m[p + (v2 ? 3 : 4)];
        p += hdr;
        if (len > n - p) return (s->why = "a message runs past its chunk"), -1;
        const uint8_t *d = m + p;
        if (type == 0x10) { /* continuation: address, length */
            if (len < (size_t)f->sa + f->ss) return (s->why = "a short continuation message"), -1;
            if (s->n_cont >= OH_CHUNKS_MAX) return (s->why = "too many continuation chunks"), -1;
            s->cont[s->n_cont][0] = le_addr(d, f->sa);
            s->cont[s->n_cont][1] = le(d + f->sa, f->ss);
            s->n_cont++;
        } else if (type == 0x08) {
            if (s->layout) return (s->why = "two layout messages"), -1;
            if (flags & 0x02) return (s->why = "a shared layout message"), -1;
            if (len < 2) return (s->why = "a short layout message"), -1;
            if (!(s->layout = drift_malloc(len))) return -2;
            memcpy(s->layout, d, len);
            s->layout_len = len;
        }
        p += len;
    }
    return 0;
}

/* Walks the header at addr and its continuation chunks. 0 (s filled), -1
 * (s->why, or s->bad_sum), -2 out of memory. */
static int oh_scan_header(const oh_file *f, uint64_t addr, oh_scan *s) {
    uint8_t *b = NULL;
    uint64_t avail = f->size - (f->base < f->size ? f->base : f->size);
    uint64_t want = avail > addr ? avail - addr : 0;
    if (want > 1024) want = 1024; /* the prefix and, mostly, the whole first chunk */
    int rc = oh_read(f, addr, want, &b);
    if (rc) return rc == -2 ? -2 : ((s->why = "its address lies outside the file"), -1);
    int v2 = want >= 6 && memcmp(b, "OHDR", 4) == 0;
    int order = 0;
    uint64_t pre = 0, chunk = 0;
    if (v2) {
        unsigned fl = b[5];
        if (b[4] != 2) {
            drift_free(b);
            return (s->why = "an object header of unknown version"), -1;
        }
        order = (fl & 0x04) != 0;
        pre = 6 + ((fl & 0x20) ? 16 : 0) + ((fl & 0x10) ? 4 : 0);
        unsigned w = 1u << (fl & 0x03);
        if (pre + w > want) {
            drift_free(b);
            return (s->why = "a cut-short object header"), -1;
        }
        chunk = le(b + pre, w);
        pre += w;
    } else {
        if (want < 16 || b[0] != 1) {
            drift_free(b);
            return (s->why = "an object header of unknown version"), -1;
        }
        s->v1 = 1;
        chunk = le(b + 8, 4);
        pre = 16;
    }
    if (chunk > OH_CHUNK_MAX) {
        drift_free(b);
        return (s->why = "an object header chunk larger than 16 MiB"), -1;
    }
    /* chunk 0: prefix + messages (+ checksum for v2) */
    uint64_t total = pre + chunk + (v2 ? 4 : 0);
    if (total > want) {
        drift_free(b);
        if ((rc = oh_read(f, addr, total, &b))) return rc == -2 ? -2 : ((s->why = "it runs past the end of the file"), -1);
    }
    if (v2 && tr_ohdr_lookup3(b, (size_t)(total - 4)) != (uint32_t)le(b + total - 4, 4)) {
        drift_free(b);
        s->bad_sum = 1;
        return -1;
    }
    rc = oh_messages(f, b + pre, (size_t)chunk, v2, order, s);
    drift_free(b);
    for (int i = 0; rc == 0 && i < s->n_cont; i++) {
        uint64_t ca = s->cont[i][0], cl = s->cont[i][1];
        if (cl > OH_CHUNK_MAX || cl < (v2 ? 8u : 1u)) return (s->why = "a continuation chunk of impossible size"), -1;
        if ((rc = oh_read(f, ca, cl, &b))) return rc == -2 ? -2 : ((s->why = "a continuation chunk outside the file"), -1);
        if (v2) {
            if (memcmp(b, "OCHK", 4) != 0) {
                drift_free(b);
                return (s->why = "a continuation chunk without its signature"), -1;
            }
            if (tr_ohdr_lookup3(b, (size_t)(cl - 4)) != (uint32_t)le(b + cl - 4, 4)) {
                drift_free(b);
                s->bad_sum = 1;
                return -1;
            }
            rc = oh_messages(f, b + 4, (size_t)(cl - 8), 1, order, s);
        } else {
            rc = oh_messages(f, b, (size_t)cl, 0, 0, s);
        }
        drift_free(b);
    }
    return rc;
}

/* Walks global heap collection addr as HDF5 decodes it and checks that
 * object idx is in it. NULL when it is sound, else what is wrong. */
static const char *gh_check(const oh_file *f, uint64_t addr, uint32_t idx, int *nomem) {
    uint8_t *b = NULL;
    size_t hdr = 8 + f->ss, ohdr = 8 + f->ss;
    int rc = oh_read(f, addr, hdr, &b);
    if (rc) return (*nomem = rc == -2), "its global heap collection lies outside the file";
    uint64_t size = le(b + 8, f->ss);
    int sig = memcmp(b, "GCOL", 4) == 0 && b[4] == 1;
    drift_free(b);
    if (!sig) return "its global heap collection has no \"GCOL\" version 1 signature";
    if (size < GH_MIN || size > GH_MAX) return "its global heap collection's size is below 4 KiB or above 64 MiB";
    if ((rc = oh_read(f, addr, size, &b))) return (*nomem = rc == -2), "its global heap collection runs past the file";
    const char *why = "its global heap collection has no object of the mapping's index";
    size_t p = hdr;
    while (p < size) {
        if (p + ohdr > size) break; /* a tail too small for an object: free space */
        uint32_t id = (uint32_t)le(b + p, 2);
        uint64_t len = le(b + p + 8, f->ss);
        uint64_t need;
        if (id > 0) {
            if (len > size) {
                why = "an object of its global heap collection runs past the collection";
                break;
            }
            need = ohdr + ((len + 7) & ~(uint64_t)7);
            if (id == idx) why = NULL;
        } else {
            need = len; /* the free-space object: its size includes its header */
            if (need < ohdr) {
                why = "its global heap collection's free space has a size below its own header (HDF5 would loop "
                      "forever decoding it)";
                break;
            }
        }
        if (need > size - p) {
            why = "an object of its global heap collection runs past the collection";
            break;
        }
        p += (size_t)need;
    }
    drift_free(b);
    return why;
}

/* The layout class of a dataset's header (0-3), -1 unknown. */
static int layout_class(const uint8_t *l, size_t n) {
    if (l[0] == 1 || l[0] == 2) return n >= 3 && l[2] <= 2 ? l[2] : -1;
    if (l[0] == 3 || l[0] == 4) return l[1] <= 3 ? l[1] : -1;
    return -1;
}

/* The file behind fid: the sec2 driver's descriptor, else the file opened
 * by name (*own_fd set: the caller closes it). -1 when neither works. */
static int file_fd(hid_t fid, int *own_fd) {
    *own_fd = 0;
    hid_t fapl = H5Fget_access_plist(fid);
    hid_t drv = fapl >= 0 ? H5Pget_driver(fapl) : H5I_INVALID_HID;
    if (fapl >= 0) H5Pclose(fapl);
    void *h = NULL;
    if (drv == H5FD_SEC2 && H5Fget_vfd_handle(fid, H5P_DEFAULT, &h) >= 0 && h) return *(int *)h;
    if (drv == H5FD_CORE) return -1; /* in memory: a view drift built itself */
    char name[4096];
    ssize_t nl = H5Fget_name(fid, name, sizeof name);
    if (nl <= 0 || (size_t)nl >= sizeof name) return -1;
    int fd = open(name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd >= 0) *own_fd = 1;
    return fd;
}

/* The last sec2 file's geometry, per thread: an open checks every dataset
 * of one file in a row, and copying its property lists for each of them
 * doubled the time of opening 8,000 sites. HDF5 never reuses an identifier
 * and gives an open file one identifier, so a stale entry never matches. */
static _Thread_local struct {
    hid_t fid;
    oh_file f;
} g_last = {H5I_INVALID_HID, {-1, 0, 0, 8, 8}};

/* f (size not set) for file fid; 0, or -1 when it cannot be read here. */
static int file_geometry(hid_t fid, oh_file *f, int *own) {
    *own = 0;
    if (g_last.fid == fid && g_last.f.fd >= 0) {
        *f = g_last.f;
        return 0;
    }
    hid_t fcpl = H5Fget_create_plist(fid);
    size_t sa = 0, ss = 0;
    hsize_t ub = 0;
    int ok = fcpl >= 0 && H5Pget_sizes(fcpl, &sa, &ss) >= 0 && H5Pget_userblock(fcpl, &ub) >= 0;
    if (fcpl >= 0) H5Pclose(fcpl);
    if (!ok || sa < 2 || sa > 8 || ss < 2 || ss > 8) return -1;
    int fd = file_fd(fid, own);
    if (fd < 0) return -1;
    f->fd = fd;
    f->size = 0;
    f->base = ub;
    f->sa = (unsigned)sa;
    f->ss = (unsigned)ss;
    if (!*own) {
        g_last.fid = fid;
        g_last.f = *f;
    }
    return 0;
}

/* The header of object name of loc, found through its hard link (so that
 * HDF5 has not decoded it yet), checked; dataset: its layout too. */
static int guard_object(hid_t loc, const char *name, int dataset, int allow_virtual, const char *file,
                        const char *obj, drift_err *err) {
    char w[1500];
    snprintf(w, sizeof w, "%s:%s", file ? file : "?", obj ? obj : name);
    H5L_info_t li;
    /* the link alone: H5Oget_info would make HDF5 decode the header first */
    if (H5Lget_info(loc, name, &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_HARD) return DRIFT_OK;
    hid_t fid = H5Iget_file_id(loc);
    if (fid < 0) return DRIFT_OK;
    oh_file f;
    int own = 0, rc = file_geometry(fid, &f, &own);
    H5Fclose(fid); /* the reference H5Iget_file_id added */
    struct stat st;
    if (rc != 0 || fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (own) close(f.fd);
        return DRIFT_OK; /* nothing to read it from (an in-memory view): HDF5 decides */
    }
    f.size = (uint64_t)st.st_size;
    oh_scan s;
    memset(&s, 0, sizeof s);
    rc = oh_scan_header(&f, (uint64_t)li.u.address, &s);
    int out = DRIFT_OK;
    if (rc == -2) {
        out = drift_err_set(err, DRIFT_E_NOMEM, w, "out of memory reading the object header");
    } else if (s.v1) {
        out = drift_err_set(err, DRIFT_E_INPUT, w,
                            "a version-1 object header (expected version 2, checksummed: docs/format.md section 1; "
                            "HDF5 1.10 trusts every byte of a version-1 header and crashes on corrupt ones; not "
                            "opened) " TR_POLICY);
    } else if (rc == -1 && !s.bad_sum) {
        out = drift_err_set(err, DRIFT_E_INPUT, w, "damaged object header: %s (expected an HDF5 object header; not "
                            "opened) " TR_POLICY, s.why ? s.why : "unreadable");
    } else if (rc == 0 && dataset && s.layout && layout_class(s.layout, s.layout_len) == 3) {
        if (!allow_virtual) {
            out = drift_err_set(err, DRIFT_E_INPUT, w,
                                "a virtual dataset (its elements come from other files): drift reads only the file it "
                                "is given; virtual datasets are accepted only inside a `drift merge` index (found in its "
                                "object header; not opened) " TR_POLICY);
        } else if (s.layout_len < 2 + (size_t)f.sa + 4) {
            out = drift_err_set(err, DRIFT_E_INPUT, w, "a short virtual layout message (not opened) " TR_POLICY);
        } else {
            uint64_t ha = le_addr(s.layout + 2, f.sa);
            uint32_t hi = (uint32_t)le(s.layout + 2 + f.sa, 4);
            int nomem = 0;
            const char *why = ha == OH_UNDEF ? NULL : gh_check(&f, ha, hi, &nomem);
            if (nomem) out = drift_err_set(err, DRIFT_E_NOMEM, w, "out of memory reading the global heap");
            else if (why)
                out = drift_err_set(err, DRIFT_E_INPUT, w,
                                    "virtual dataset mappings unreadable: %s (expected a well-formed global heap "
                                    "collection; not opened) " TR_POLICY,
                                    why);
        }
    }
    /* no layout message: not a dataset, H5Dopen2 says so (the header parsed and checksummed) */
    drift_free(s.layout);
    if (own) close(f.fd);
    return out;
}

int tr_guard_header(hid_t loc, const char *name, int allow_virtual, const char *file, const char *obj,
                    drift_err *err) {
    return guard_object(loc, name, 1, allow_virtual, file, obj, err);
}

int tr_guard_group_header(hid_t loc, const char *name, const char *file, const char *obj, drift_err *err) {
    return guard_object(loc, name, 0, 0, file, obj, err);
}

int tr_guard_superblock(const char *path, drift_err *err) {
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return DRIFT_OK; /* the open that follows says why */
    struct stat st;
    int version = -1;
    if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) { /* a FIFO: never handed to HDF5, whose open would block */
        close(fd);
        return drift_in_check(path, err) ? DRIFT_E_INPUT
                                         : drift_err_set(err, DRIFT_E_INPUT, path, "is not a regular file (expected a drift trace)");
    }
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        /* HDF5 looks for the signature at 0, 512, 1024, 2048, ... */
        for (uint64_t off = 0; off + 9 <= (uint64_t)st.st_size && off <= ((uint64_t)1 << 30) && version < 0;
             off = off ? off * 2 : 512) {
            unsigned char b[9];
            if (pread(fd, b, sizeof b, (off_t)off) != (ssize_t)sizeof b) break;
            if (memcmp(b, sig, 8) == 0) version = b[8];
        }
    }
    close(fd);
    if (version < 0 || version >= 2) return DRIFT_OK; /* not HDF5 (HDF5 says so), or checksummed */
    char w[1100];
    snprintf(w, sizeof w, "%s:superblock", path);
    return drift_err_set(err, DRIFT_E_INPUT, w,
                         "HDF5 superblock version %d, expected 2 or 3 (docs/format.md section 1: a trace's metadata "
                         "is all checksummed; with version 0/1 superblocks and version-1 object headers nothing is, "
                         "and HDF5 1.10 crashes on such metadata when it is corrupt) " TR_POLICY,
                         version);
}

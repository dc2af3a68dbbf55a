/* drift-sum64: the content hash of parameter tensors referenced by a trace
 * (docs/format.md, "Parameters by reference"). Computable identically, and at
 * memory bandwidth, on a CPU (any number of threads) and on a GPU (any grid):
 *
 *   bytes b[0..n) -> 64-bit little-endian words w_i = b[8i .. 8i+8), the last
 *   one zero-padded;
 *   S = sum over i of fmix64(w_i + (i + 1) * 0x9E3779B97F4A7C15)   (mod 2^64)
 *   H = fmix64(S ^ fmix64(n))
 *
 * fmix64 is MurmurHash3's 64-bit finaliser. Because the terms are summed, any
 * split of the words over threads or blocks, reduced in any order, gives the
 * same S: no fixed block size is part of the definition. fmix64 is a
 * bijection, so changing any one word (in particular any one byte) always
 * changes H; the position factor makes swapped words change it too. Not a
 * cryptographic hash: it detects corruption and stale files, not tampering.
 * Written as 16 lowercase hex digits. */
#ifndef DRIFT_FORMATS_HASH64_H
#define DRIFT_FORMATS_HASH64_H

#include <stddef.h>
#include <stdint.h>

#define DRIFT_HASH64_NAME "drift-sum64"
#define DRIFT_HASH64_GOLDEN 0x9E3779B97F4A7C15ull

static inline uint64_t drift_hash64_fmix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

/* The partial sum S over the bytes data[0..n) taken as the words starting at
 * word index first_word (data must start on a word boundary of the whole
 * buffer; only the buffer's last piece may have n % 8 != 0). */
uint64_t drift_hash64_partial(const void *data, size_t n, uint64_t first_word);
/* H from the sum S of all words and the total byte count. */
static inline uint64_t drift_hash64_finish(uint64_t sum, uint64_t nbytes) {
    return drift_hash64_fmix(sum ^ drift_hash64_fmix(nbytes));
}
/* H of data[0..n), on up to threads threads (<= 1: the calling thread only;
 * the result does not depend on it). */
uint64_t drift_hash64(const void *data, size_t n, int threads);
/* Writes H as 16 lowercase hex digits and a NUL into out (17 bytes). */
void drift_hash64_hex(uint64_t h, char out[17]);
/* Parses 16 hex digits (either case); 0 on success, -1 otherwise. */
int drift_hash64_parse(const char *s, uint64_t *h);

#endif

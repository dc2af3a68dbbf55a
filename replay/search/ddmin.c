#include "replay/search/ddmin.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"

/* Memo of probed subsets: linear, since a search runs at most a few hundred
 * probes and each compare is n bytes. */
typedef struct memo_entry {
    unsigned char *mask;
    int fails;
} memo_entry;

typedef struct search {
    size_t n;
    const drift_ddmin_opts *opts;
    memo_entry *memo;
    size_t n_memo, cap_memo;
    size_t probes, memo_hits, max_concurrent;
    size_t bound;
} search;

static int memo_find(const search *s, const unsigned char *mask) {
    for (size_t i = 0; i < s->n_memo; i++)
        if (memcmp(s->memo[i].mask, mask, s->n) == 0) return s->memo[i].fails;
    return -1;
}

static int memo_add(search *s, const unsigned char *mask, int fails, drift_err *err) {
    if (s->n_memo == s->cap_memo) {
        size_t cap = s->cap_memo ? s->cap_memo * 2 : 32;
        memo_entry *m = drift_realloc(s->memo, cap * sizeof *m);
        if (!m) return drift_err_set(err, DRIFT_E_NOMEM, "bisect", "out of memory (probe memo)");
        s->memo = m;
        s->cap_memo = cap;
    }
    unsigned char *copy = drift_malloc(s->n);
    if (!copy) return drift_err_set(err, DRIFT_E_NOMEM, "bisect", "out of memory (probe memo)");
    memcpy(copy, mask, s->n);
    s->memo[s->n_memo].mask = copy;
    s->memo[s->n_memo].fails = fails;
    s->n_memo++;
    return DRIFT_OK;
}

typedef struct probe_job {
    const search *s;
    const unsigned char *mask;
    int slot;
    int fails;
    int rc;
    drift_err err;
} probe_job;

static void *probe_thread(void *arg) {
    probe_job *j = arg;
    drift_err_clear(&j->err);
    j->rc = j->s->opts->probe(j->mask, j->s->n, j->slot, j->s->opts->user, &j->fails, &j->err);
    return NULL;
}

/* Evaluates candidates in order; *first gets the index of the first failing
 * one, or -1. Sequential runs stop at the first failure; parallel runs go in
 * batches and take the first failure in order, which is the same answer. */
static int eval_candidates(search *s, unsigned char **cands, size_t n_cands, long *first, drift_err *err) {
    *first = -1;
    size_t par = s->opts->parallel > 1 ? (size_t)s->opts->parallel : 1;
    size_t i = 0;
    while (i < n_cands) {
        /* Resolve memoised candidates in order before spending probes. */
        int known = memo_find(s, cands[i]);
        if (known >= 0) {
            s->memo_hits++;
            if (known) { *first = (long)i; return DRIFT_OK; }
            i++;
            continue;
        }
        /* Batch: the next up to `par` unknown candidates (stop at a known failure). */
        size_t batch_idx[64];
        size_t nb = 0;
        size_t j = i;
        for (; j < n_cands && nb < par && nb < 64; j++) {
            int k = memo_find(s, cands[j]);
            if (k >= 0) {
                if (k) break;
                continue;
            }
            /* skip duplicates inside the batch */
            int dup = 0;
            for (size_t q = 0; q < nb; q++)
                if (memcmp(cands[batch_idx[q]], cands[j], s->n) == 0) dup = 1;
            if (!dup) batch_idx[nb++] = j;
        }
        probe_job jobs[64];
        pthread_t th[64];
        int started[64] = {0};
        for (size_t q = 0; q < nb; q++) {
            jobs[q].s = s;
            jobs[q].mask = cands[batch_idx[q]];
            jobs[q].slot = (int)q;
            jobs[q].fails = 0;
            jobs[q].rc = DRIFT_OK;
        }
        if (nb == 1) {
            probe_thread(&jobs[0]);
        } else {
            for (size_t q = 0; q < nb; q++)
                started[q] = pthread_create(&th[q], NULL, probe_thread, &jobs[q]) == 0;
            for (size_t q = 0; q < nb; q++) {
                if (started[q]) pthread_join(th[q], NULL);
                else probe_thread(&jobs[q]); /* could not start a thread: run it here */
            }
        }
        if (nb > s->max_concurrent) s->max_concurrent = nb;
        s->probes += nb;
        for (size_t q = 0; q < nb; q++) {
            if (jobs[q].rc) {
                if (err) *err = jobs[q].err;
                return jobs[q].rc;
            }
            int rc = memo_add(s, jobs[q].mask, jobs[q].fails, err);
            if (rc) return rc;
        }
        if (s->opts->progress) s->opts->progress(s->probes, s->bound, s->opts->user);
        /* Loop again from i: memo now answers the batch in order. */
    }
    return DRIFT_OK;
}

/* Splits the members of cur (count m) into k nearly equal chunks, in index order. */
static void chunk_mask(const unsigned char *cur, size_t n, size_t m, size_t k, size_t c, unsigned char *out) {
    size_t lo = c * m / k, hi = (c + 1) * m / k, pos = 0;
    memset(out, 0, n);
    for (size_t i = 0; i < n; i++) {
        if (!cur[i]) continue;
        if (pos >= lo && pos < hi) out[i] = 1;
        pos++;
    }
}

static size_t count(const unsigned char *mask, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += mask[i] != 0;
    return c;
}

size_t drift_ddmin_single_bound(size_t n) {
    size_t lg = 0;
    while (((size_t)1 << lg) < n) lg++;
    return 2 * lg + 2;
}

int drift_ddmin_run(size_t n, const unsigned char *universe, const drift_ddmin_opts *opts, drift_ddmin_result *res,
                    drift_err *err) {
    memset(res, 0, sizeof *res);
    if (n == 0 || !opts || !opts->probe)
        return drift_err_set(err, DRIFT_E_INTERNAL, "bisect", "ddmin needs at least one difference and a probe");
    search s = {.n = n, .opts = opts};
    int rc = DRIFT_OK;
    unsigned char *cur = drift_calloc(n, 1);
    unsigned char **cands = NULL;
    size_t n_cands_cap = 0;
    if (!cur) { rc = drift_err_set(err, DRIFT_E_NOMEM, "bisect", "out of memory"); goto done; }
    for (size_t i = 0; i < n; i++) cur[i] = universe ? (universe[i] != 0) : 1;
    size_t m = count(cur, n);
    s.bound = m * m + 2; /* loose worst case, for progress only */
    if (m == 0) goto done;

    if (!opts->assume_full_fails) {
        unsigned char *full[1] = {cur};
        long first;
        if ((rc = eval_candidates(&s, full, 1, &first, err))) goto done;
        if (first < 0) goto done; /* nothing fails: no culprit */
    }
    res->found = 1;
    size_t k = 2;
    while (m > 1) {
        if (k > m) k = m;
        size_t need = 2 * k;
        if (need > n_cands_cap) {
            unsigned char **nc = drift_realloc(cands, need * sizeof *nc);
            if (!nc) { rc = drift_err_set(err, DRIFT_E_NOMEM, "bisect", "out of memory"); goto done; }
            for (size_t q = n_cands_cap; q < need; q++) nc[q] = NULL;
            cands = nc;
            for (size_t q = n_cands_cap; q < need; q++) {
                cands[q] = drift_malloc(n);
                if (!cands[q]) { n_cands_cap = q; rc = drift_err_set(err, DRIFT_E_NOMEM, "bisect", "out of memory"); goto done; }
            }
            n_cands_cap = need;
        }
        /* Subsets first, then complements (identical to the subsets when k == 2). */
        for (size_t c = 0; c < k; c++) chunk_mask(cur, n, m, k, c, cands[c]);
        long first;
        if ((rc = eval_candidates(&s, cands, k, &first, err))) goto done;
        if (first >= 0) {
            memcpy(cur, cands[first], n);
            m = count(cur, n);
            k = 2;
            continue;
        }
        if (k > 2) {
            for (size_t c = 0; c < k; c++) {
                for (size_t i = 0; i < n; i++) cands[k + c][i] = cur[i] && !cands[c][i];
            }
            if ((rc = eval_candidates(&s, cands + k, k, &first, err))) goto done;
            if (first >= 0) {
                memcpy(cur, cands[k + first], n);
                m = count(cur, n);
                k = k - 1 > 2 ? k - 1 : 2;
                continue;
            }
        }
        if (k >= m) break; /* 1-minimal: no single removal still fails */
        k = 2 * k < m ? 2 * k : m;
    }
    res->culprit = cur;
    res->culprit_size = m;
    cur = NULL;
done:
    res->probes = s.probes;
    res->memo_hits = s.memo_hits;
    res->max_concurrent = s.max_concurrent;
    if (!res->found && rc == DRIFT_OK) {
        res->culprit = cur ? cur : drift_calloc(n, 1);
        if (res->culprit) memset(res->culprit, 0, n);
        cur = NULL;
    }
    free(cur);
    for (size_t q = 0; q < n_cands_cap; q++) free(cands[q]);
    free(cands);
    for (size_t i = 0; i < s.n_memo; i++) free(s.memo[i].mask);
    free(s.memo);
    if (rc) drift_ddmin_result_free(res);
    return rc;
}

void drift_ddmin_result_free(drift_ddmin_result *res) {
    if (!res) return;
    free(res->culprit);
    res->culprit = NULL;
    res->culprit_size = 0;
}

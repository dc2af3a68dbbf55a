/* --libraries: which cuBLASLt / cuDNN a CUDA replay loads, and the
 * re-execution that makes the loader map them (cli/libraries_pick.h). */
#define _GNU_SOURCE /* dl_iterate_phdr, setenv */
#include "cli/libraries_pick.h"

#include <dirent.h>
#include <glob.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli_util.h"
#include "formats/trace.h"

static const char *const MODE_WORDS[] = {"recorded", "system", NULL};
static const char *const LIB_PREFIX[2] = {"libcublasLt.so", "libcudnn.so"};
static const char *const LIB_LABEL[2] = {"cuBLASLt", "cuDNN"};
/* set by the re-executing process, read (and removed) by the new one */
#define ENV_MARK "DRIFT_LIBRARIES_REEXEC"
#define ENV_NOTE "DRIFT_LIBRARIES_NOTE"

static char **g_argv;
static char g_note[4096 + 1024];

void drift_cli_libraries_set_argv(char **argv) { g_argv = argv; }
const char *drift_cli_libraries_note(void) { return g_note; }

static int is_dir(const char *p) {
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p) {
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int drift_cli_libraries_parse(const char *cmd, const char *value, drift_cli_libs_mode *mode) {
    *mode = DRIFT_CLI_LIBS_RECORDED;
    if (!value || strcmp(value, "recorded") == 0) return 0;
    if (strcmp(value, "system") == 0) {
        *mode = DRIFT_CLI_LIBS_SYSTEM;
        return 0;
    }
    if (is_dir(value)) {
        *mode = DRIFT_CLI_LIBS_DIR;
        return 0;
    }
    const char *s = strchr(value, '/') ? NULL : drift_cli_suggest(value, MODE_WORDS, 2);
    return drift_cli_usage_error_field(cmd, "--libraries",
                                       "--libraries: expected recorded, system or an existing folder, got '%s'%s%s%s", value,
                                       s ? " (did you mean '" : (is_file(value) ? " (a file, not a folder)" : " (no such folder)"),
                                       s ? s : "", s ? "'?)" : "");
}

/* 1 if folder d holds the library k: the file name want (when given), else
 * any libcublasLt.so* / libcudnn.so*; its path into path. */
static int holds(const char *d, int k, const char *want, char *path, size_t psz) {
    if (!is_dir(d)) return 0;
    if (want && *want) {
        snprintf(path, psz, "%s/%s", d, want);
        return is_file(path);
    }
    DIR *dir = opendir(d);
    if (!dir) return 0;
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(dir));) {
        size_t pl = strlen(LIB_PREFIX[k]);
        if (strncmp(e->d_name, LIB_PREFIX[k], pl) == 0 && (e->d_name[pl] == '\0' || e->d_name[pl] == '.')) {
            snprintf(path, psz, "%s/%s", d, e->d_name);
            found = is_file(path);
        }
    }
    closedir(dir);
    return found;
}

static void dirname_of(const char *p, char *out, size_t sz) {
    snprintf(out, sz, "%s", p);
    char *s = strrchr(out, '/');
    if (s && s != out) *s = '\0';
    else if (s) s[1] = '\0';
    else snprintf(out, sz, ".");
}

/* The first folder matching one of the patterns (below root) that holds library k. */
static int search_lib_dirs(const char *root, int k, const char *want, char *dir, size_t dsz) {
    static const char *const SUB[] = {"", "/nvidia/*/lib", "/nvidia/*/*/lib", "/*/lib", NULL};
    for (int i = 0; SUB[i]; i++) {
        char pat[DRIFT_LIBRARIES_PATH_MAX + 32], path[DRIFT_LIBRARIES_PATH_MAX + 256];
        snprintf(pat, sizeof pat, "%s%s", root, SUB[i]);
        glob_t g;
        if (glob(pat, 0, NULL, &g) != 0) continue;
        int hit = -1;
        for (size_t j = 0; j < g.gl_pathc && hit < 0; j++)
            if (holds(g.gl_pathv[j], k, want, path, sizeof path)) hit = (int)j;
        if (hit >= 0) snprintf(dir, dsz, "%s", g.gl_pathv[hit]);
        globfree(&g);
        if (hit >= 0) return 1;
    }
    return 0;
}

/* The site-packages (matching one of globs) that holds torch-<version>.dist-info. */
static int find_torch_site(const char *version, const char *const *globs, char *site, size_t ssz) {
    for (int i = 0; globs && globs[i]; i++) {
        glob_t g;
        if (glob(globs[i], GLOB_ONLYDIR, NULL, &g) != 0) continue;
        int hit = -1;
        for (size_t j = 0; j < g.gl_pathc && hit < 0; j++) {
            char di[DRIFT_LIBRARIES_PATH_MAX + 400];
            snprintf(di, sizeof di, "%s/torch-%s.dist-info", g.gl_pathv[j], version);
            if (is_dir(di)) hit = (int)j;
        }
        if (hit >= 0) snprintf(site, ssz, "%s", g.gl_pathv[hit]);
        globfree(&g);
        if (hit >= 0) return 1;
    }
    return 0;
}

const char *const *drift_cli_libraries_site_globs(void) {
    static char buf[16][1100];
    static const char *list[17];
    int n = 0;
    const char *ts = getenv("DRIFT_TORCH_SITE");
    if (ts && *ts) {
        const char *p = ts;
        while (*p && n < 8) {
            size_t l = strcspn(p, ":");
            if (l && l < sizeof buf[0]) {
                snprintf(buf[n], sizeof buf[n], "%.*s", (int)l, p);
                list[n] = buf[n];
                n++;
            }
            p += l;
            if (*p == ':') p++;
        }
    }
    const char *roots[4] = {getenv("VIRTUAL_ENV"), getenv("CONDA_PREFIX"), NULL, NULL};
    char home[1024];
    const char *h = getenv("HOME");
    if (h && *h) {
        snprintf(home, sizeof home, "%s/.local", h);
        roots[2] = home;
    }
    for (int i = 0; i < 3 && n < 12; i++)
        if (roots[i] && *roots[i] && strlen(roots[i]) < 1000) {
            snprintf(buf[n], sizeof buf[n], "%s/lib/python3*/site-packages", roots[i]);
            list[n] = buf[n];
            n++;
        }
    static const char *const fixed[] = {"/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
                                        "/usr/lib/python3/dist-packages", "/opt/conda/lib/python3*/site-packages"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && n < 16; i++) list[n++] = fixed[i];
    list[n] = NULL;
    return list;
}

static void add_dir(drift_cli_libs_pick *o, const char *d) {
    for (int i = 0; i < o->n_dirs; i++)
        if (strcmp(o->dirs[i], d) == 0) return;
    if (o->n_dirs < DRIFT_CLI_LIBS_MAX_DIRS) snprintf(o->dirs[o->n_dirs++], sizeof o->dirs[0], "%s", d);
}

static void append(char *dst, size_t sz, const char *fmt, const char *a, const char *b, const char *c) {
    size_t l = strlen(dst);
    if (l + 1 < sz) snprintf(dst + l, sz - l, fmt, a, b, c);
}

void drift_cli_libraries_pick(const drift_libraries *rec, drift_cli_libs_mode mode, const char *dir,
                              const char *const *site_globs, const char *const names[2], drift_cli_libs_pick *o) {
    memset(o, 0, sizeof *o);
    if (mode == DRIFT_CLI_LIBS_SYSTEM) {
        snprintf(o->note, sizeof o->note, "--libraries system: the loader's own (LD_LIBRARY_PATH, then drift's build)");
        return;
    }
    if (!site_globs) site_globs = drift_cli_libraries_site_globs();
    char found[2][DRIFT_LIBRARIES_PATH_MAX], why[2][DRIFT_LIBRARIES_PATH_MAX + 200];
    int have[2] = {0, 0};
    char site[DRIFT_LIBRARIES_PATH_MAX] = "";
    int site_tried = 0, site_ok = 0;
    for (int k = 0; k < 2; k++) {
        const char *want = names ? names[k] : NULL;
        why[k][0] = '\0';
        if (mode == DRIFT_CLI_LIBS_DIR) {
            have[k] = search_lib_dirs(dir, k, want, found[k], sizeof found[k]);
            if (have[k]) snprintf(why[k], sizeof why[k], "--libraries");
            continue;
        }
        const char *p = !rec ? "" : k == 0 ? rec->cublaslt_path : rec->cudnn_path;
        char d[DRIFT_LIBRARIES_PATH_MAX], path[DRIFT_LIBRARIES_PATH_MAX + 256];
        if (p[0] && is_file(p)) {
            dirname_of(p, d, sizeof d);
            if (holds(d, k, want, path, sizeof path)) {
                snprintf(found[k], sizeof found[k], "%s", d);
                snprintf(why[k], sizeof why[k], "the recorded file");
                have[k] = 1;
                continue;
            }
        }
        if (rec && rec->torch_version[0]) {
            if (!site_tried) {
                site_tried = 1;
                site_ok = find_torch_site(rec->torch_version, site_globs, site, sizeof site);
            }
            if (site_ok && search_lib_dirs(site, k, want, found[k], sizeof found[k])) {
                snprintf(why[k], sizeof why[k], "torch %.200s's wheel; %s", rec->torch_version,
                         p[0] ? "the recorded file is not here" : "no recorded path");
                have[k] = 1;
            }
        }
    }
    if (mode == DRIFT_CLI_LIBS_DIR && !have[0] && !have[1]) {
        snprintf(o->note, sizeof o->note, "--libraries %.1000s holds no %s%s or %s%s: the loader's own", dir,
                 names && names[0] ? names[0] : "libcublasLt.so*", "", names && names[1] ? names[1] : "libcudnn.so*", "");
        return;
    }
    if (mode == DRIFT_CLI_LIBS_RECORDED && !have[0] && !have[1]) {
        if (!rec || (!rec->cublaslt_path[0] && !rec->cudnn_path[0] && !rec->torch_version[0]))
            snprintf(o->note, sizeof o->note, "the trace records no library paths: the loader's own");
        else
            snprintf(o->note, sizeof o->note, "the recorded cuBLASLt/cuDNN are not on this machine%s%s%s: the loader's own",
                     rec->torch_version[0] ? " and no torch " : "", rec->torch_version,
                     rec->torch_version[0] ? " wheel was found" : "");
        return;
    }
    snprintf(o->note, sizeof o->note, "%s: ", mode == DRIFT_CLI_LIBS_DIR ? "--libraries DIR" : "the recording's");
    for (int k = 0; k < 2; k++) {
        if (k) append(o->note, sizeof o->note, "%s%s%s", ", ", "", "");
        if (have[k]) {
            add_dir(o, found[k]);
            append(o->note, sizeof o->note, "%s from %s (%s)", LIB_LABEL[k], found[k], why[k]);
        } else {
            append(o->note, sizeof o->note, "%s the loader's own (%s)", LIB_LABEL[k],
                   mode == DRIFT_CLI_LIBS_DIR ? "not in DIR" : "the recorded one is not here", "");
        }
    }
}

/* --- what the loader mapped ------------------------------------------------------------- */

typedef struct mapped {
    char path[2][DRIFT_LIBRARIES_PATH_MAX];
} mapped;

static int on_object(struct dl_phdr_info *info, size_t sz, void *user) {
    (void)sz;
    mapped *m = user;
    const char *n = info->dlpi_name;
    if (!n || !*n) return 0;
    const char *b = strrchr(n, '/');
    b = b ? b + 1 : n;
    for (int k = 0; k < 2; k++) {
        size_t pl = strlen(LIB_PREFIX[k]);
        if (!m->path[k][0] && strncmp(b, LIB_PREFIX[k], pl) == 0 && (b[pl] == '\0' || b[pl] == '.'))
            snprintf(m->path[k], sizeof m->path[k], "%s", n);
    }
    return 0;
}

static void mapped_now(mapped *m) {
    memset(m, 0, sizeof *m);
    dl_iterate_phdr(on_object, m);
}

/* The file names of what the loader mapped (pointers into m), NULL when not mapped. */
static void mapped_names(const mapped *m, const char *names[2]) {
    for (int k = 0; k < 2; k++) {
        const char *b = strrchr(m->path[k], '/');
        names[k] = m->path[k][0] ? (b ? b + 1 : m->path[k]) : NULL;
    }
}

static int names_cuda(const char *list) {
    for (const char *p = list; p && *p;) {
        if (strncmp(p, "cuda", 4) == 0 && (p[4] == '\0' || p[4] == ':' || p[4] == ',')) return 1;
        const char *c = strchr(p, ',');
        p = c ? c + 1 : NULL;
    }
    return 0;
}

static void say(const char *cmd, const char *pick_note, const mapped *m, const char *const want_dirs[2]) {
    char d[DRIFT_LIBRARIES_PATH_MAX];
    snprintf(g_note, sizeof g_note, "%s", pick_note);
    for (int k = 0; k < 2; k++) {
        if (!m->path[k][0]) continue;
        dirname_of(m->path[k], d, sizeof d);
        int off = want_dirs && want_dirs[k] && strcmp(d, want_dirs[k]) != 0;
        size_t l = strlen(g_note);
        snprintf(g_note + l, sizeof g_note - l, "%s%s %s%s", k == 0 || !m->path[0][0] ? "; mapped " : ", ", LIB_LABEL[k],
                 m->path[k], off ? " (NOT the one picked: the loader found another first)" : "");
    }
    char esc[sizeof g_note];
    fprintf(stderr, "drift %s: libraries: %s\n", cmd, drift_cli_printable(g_note, esc, sizeof esc));
}

int drift_cli_libraries_apply(const char *cmd, const char *trace, const char *value, const char *device) {
    g_note[0] = '\0';
    drift_cli_libs_mode mode;
    if (drift_cli_libraries_parse(cmd, value, &mode)) return 2;
    if (!names_cuda(device)) return 0;
    mapped m;
    mapped_now(&m);
    char pid[32];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    const char *mark = getenv(ENV_MARK);
    if (mark && strcmp(mark, pid) == 0) {
        /* the re-executed process: say what the loader mapped now */
        char note[sizeof g_note];
        const char *n = getenv(ENV_NOTE);
        snprintf(note, sizeof note, "%s", n ? n : "");
        unsetenv(ENV_MARK);
        unsetenv(ENV_NOTE);
        drift_trace_reader *r = NULL;
        drift_libraries rec;
        int present = 0;
        if (trace && drift_trace_reader_open(&r, trace, DRIFT_TRACE_OPEN_NORMAL, NULL) == DRIFT_OK) {
            if (drift_trace_read_libraries(r, &rec, &present, NULL) != DRIFT_OK) present = 0;
            drift_trace_reader_close(r);
        }
        const char *names[2];
        mapped_names(&m, names);
        drift_cli_libs_pick p;
        drift_cli_libraries_pick(present ? &rec : NULL, mode, value, NULL, names, &p);
        char want[2][DRIFT_LIBRARIES_PATH_MAX];
        const char *wd[2] = {NULL, NULL};
        for (int k = 0; k < 2; k++) {
            char path[DRIFT_LIBRARIES_PATH_MAX + 256];
            for (int i = 0; i < p.n_dirs && !wd[k]; i++)
                if (holds(p.dirs[i], k, names[k], path, sizeof path)) {
                    snprintf(want[k], sizeof want[k], "%s", p.dirs[i]);
                    wd[k] = want[k];
                }
        }
        say(cmd, note, &m, wd);
        return 0;
    }
    drift_trace_reader *r = NULL;
    drift_libraries rec;
    int present = 0;
    if (trace && drift_trace_reader_open(&r, trace, DRIFT_TRACE_OPEN_NORMAL, NULL) == DRIFT_OK) {
        if (drift_trace_read_libraries(r, &rec, &present, NULL) != DRIFT_OK) present = 0;
        drift_trace_reader_close(r);
    }
    /* a folder is a substitute only when it holds the file names drift was linked against */
    const char *names[2];
    mapped_names(&m, names);
    drift_cli_libs_pick p;
    drift_cli_libraries_pick(present ? &rec : NULL, mode, value, NULL, names, &p);
    /* nothing to change: every picked folder is where the loader already took the library from */
    int need = 0;
    char path[DRIFT_LIBRARIES_PATH_MAX + 256], d[DRIFT_LIBRARIES_PATH_MAX];
    for (int i = 0; i < p.n_dirs; i++)
        for (int k = 0; k < 2; k++)
            if (holds(p.dirs[i], k, names[k], path, sizeof path)) {
                dirname_of(m.path[k], d, sizeof d);
                if (!m.path[k][0] || strcmp(d, p.dirs[i]) != 0) need = 1;
            }
    if (!need || !g_argv) {
        say(cmd, p.note, &m, NULL);
        return 0;
    }
    const char *old = getenv("LD_LIBRARY_PATH");
    size_t len = (old ? strlen(old) : 0) + 2;
    for (int i = 0; i < p.n_dirs; i++) len += strlen(p.dirs[i]) + 1;
    char *ld = malloc(len);
    if (!ld) {
        say(cmd, p.note, &m, NULL);
        return 0;
    }
    ld[0] = '\0';
    for (int i = 0; i < p.n_dirs; i++) {
        strcat(ld, p.dirs[i]);
        strcat(ld, ":");
    }
    if (old && *old) strcat(ld, old);
    else ld[strlen(ld) - 1] = '\0';
    if (setenv("LD_LIBRARY_PATH", ld, 1) == 0 && setenv(ENV_MARK, pid, 1) == 0 && setenv(ENV_NOTE, p.note, 1) == 0) {
        fflush(NULL);
        execv("/proc/self/exe", g_argv); /* returns only on failure */
    }
    free(ld);
    if (old) setenv("LD_LIBRARY_PATH", old, 1);
    else unsetenv("LD_LIBRARY_PATH");
    unsetenv(ENV_MARK);
    unsetenv(ENV_NOTE);
    fprintf(stderr, "drift %s: libraries: could not re-execute with the recording's libraries; ", cmd);
    say(cmd, "the loader's own", &m, NULL);
    return 0;
}

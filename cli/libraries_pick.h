/* --libraries recorded|system|DIR (drift replay, bisect, invariance on
 * CUDA): which cuBLASLt and cuDNN builds the replay loads (docs/cli.md
 * "Which libraries a replay loads").
 *
 * drift links cuBLASLt, cuBLAS and cuDNN by soname (libcublasLt.so.13,
 * libcudnn.so.9), so the loader maps them before main. To run the builds a
 * recording used, drift re-executes itself once, before it opens anything
 * else, with their folders first on LD_LIBRARY_PATH (drift is linked with
 * RUNPATH, which LD_LIBRARY_PATH precedes; cuDNN's own sub-libraries, which
 * libcudnn dlopens, are then found in the same folder). The new process
 * checks what the loader actually mapped and says so on stderr. */
#ifndef DRIFT_CLI_LIBRARIES_PICK_H
#define DRIFT_CLI_LIBRARIES_PICK_H

#include "formats/libraries.h"

#define DRIFT_CLI_LIBRARIES_SPEC                                                                                   \
    {"--libraries", NULL, "L",                                                                                   \
     "on CUDA, the cuBLASLt/cuDNN to load: recorded (default: the files the trace\n"                            \
     "names, else the torch wheel of the recorded torch version found here), system\n"                          \
     "(the loader's own), or DIR (a folder holding them, or a site-packages)",                                  \
     NULL, 0}

typedef enum drift_cli_libs_mode {
    DRIFT_CLI_LIBS_RECORDED = 0,
    DRIFT_CLI_LIBS_SYSTEM = 1,
    DRIFT_CLI_LIBS_DIR = 2
} drift_cli_libs_mode;

#define DRIFT_CLI_LIBS_MAX_DIRS 4

typedef struct drift_cli_libs_pick {
    int n_dirs;                                                /* folders to put first, in order */
    char dirs[DRIFT_CLI_LIBS_MAX_DIRS][DRIFT_LIBRARIES_PATH_MAX];
    char note[4096]; /* one sentence: what comes from where, or why the loader's own */
} drift_cli_libs_pick;

/* The --libraries value (NULL: recorded): recorded, system or an existing
 * folder. Returns 0 with *mode set, or reports a usage error for cmd naming
 * --libraries (a misspelt word gets a suggestion) and returns 2. */
int drift_cli_libraries_parse(const char *cmd, const char *value, drift_cli_libs_mode *mode);

/* Pure selection (reads only the file system). rec: the trace's identity
 * (NULL: none). dir: the DIR of DRIFT_CLI_LIBS_DIR. site_globs: glob
 * patterns of site-packages folders to look for the recorded torch's wheel
 * in (NULL-terminated; NULL: drift_cli_libraries_site_globs()). names: the
 * file names the loader must find in a folder for a substitution to happen
 * ([0] cuBLASLt, [1] cuDNN, e.g. "libcublasLt.so.13"; NULL or NULL entries:
 * any libcublasLt.so* / libcudnn.so*). */
void drift_cli_libraries_pick(const drift_libraries *rec, drift_cli_libs_mode mode, const char *dir,
                              const char *const *site_globs, const char *const names[2], drift_cli_libs_pick *out);

/* The default site-packages patterns: $DRIFT_TORCH_SITE (colon-separated),
 * $VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, /usr/local, /usr, /opt/conda
 * lib/python3*\/{site,dist}-packages. Static storage, NULL-terminated. */
const char *const *drift_cli_libraries_site_globs(void);

/* main's argv (for the re-execution). */
void drift_cli_libraries_set_argv(char **argv);

/* For cmd on device (a --device spec or --devices list; NULL: cpu): does
 * nothing off CUDA. On CUDA, picks the libraries for trace (value: the
 * --libraries value) and, when they are not what the loader mapped,
 * re-executes drift with their folders first on LD_LIBRARY_PATH (no
 * return); in the re-executed process (or when nothing needs changing)
 * prints one stderr line naming the cuBLASLt and cuDNN files mapped and
 * where they came from, and returns 0. 2 after a usage error. */
int drift_cli_libraries_apply(const char *cmd, const char *trace, const char *value, const char *device);

/* The sentence of the last apply ("" when none ran): for the report. */
const char *drift_cli_libraries_note(void);

#endif

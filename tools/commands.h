/* The driver's subcommands, one file each; accparc.c only dispatches. Each
 * takes argv starting at the command name and returns the exit status: 0,
 * 1 for an error in the input, 2 for a usage error. */
#ifndef ACCPAR_COMMANDS_H
#define ACCPAR_COMMANDS_H

#include <stdbool.h>
#include <stdint.h>

#include "accpar/accpar.h"
#include "accpar/plan.h"

int cmd_dump(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_tensor(int argc, char **argv);
int cmd_compile(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);

/* compile --verify (tools/verify.c): the program in outdir (of ndev devices, for g)
 * against the one-device program accparc compiles with the options argv
 * (from the command name on) minus the array, strategy and output folder. */
ap_status cli_verify(int argc, char **argv, const ap_graph *g, const char *model,
                     const char *outdir, int ndev, bool train, ap_diag *d);

/* Where compiled programs find the runtime and the kernels
 * (tools/runtime_paths.c): beside an installed accparc, else in the build
 * tree it was built in; the environment overrides either. */
enum { CLI_PATH_MAX = 4096 };
typedef struct cli_runtime_paths {
  char rt_lib[CLI_PATH_MAX];      /* libaccpar_rt.a: the threads transport */
  char rt_mpi_lib[CLI_PATH_MAX];  /* libaccpar_rt_mpi.a (threads and MPI); "" when not built;
                                     ACCPAR_RT_LIB overrides both */
  char rt_include[CLI_PATH_MAX];  /* the folder of accpar_rt.h */
  char kernels_dir[CLI_PATH_MAX]; /* the folder of kernels.h, gemm.c, conv.c */
  const char *mpi_link_flags;     /* what libaccpar_rt_mpi.a needs besides the threads' libraries */
  bool installed;                 /* found beside an installed accparc */
} cli_runtime_paths;
ap_status cli_runtime_paths_find(cli_runtime_paths *p, ap_diag *d);

/* Libraries the runtime archive needs. A sanitized build (ACCPAR_SANITIZE)
 * sanitizes the runtime too, so its programs must link the sanitizers. */
#if defined(__SANITIZE_ADDRESS__)
#define AP_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AP_SANITIZED 1
#endif
#endif
#ifndef ACCPAR_RT_LINK_FLAGS
#ifdef AP_SANITIZED
#define ACCPAR_RT_LINK_FLAGS "-lprotobuf-c -lpthread -lm -fsanitize=address,undefined"
#else
#define ACCPAR_RT_LINK_FLAGS "-lprotobuf-c -lpthread -lm"
#endif
#endif

/* A long command's phases, reported on stderr only when stderr is a
 * terminal (scripts and tests see nothing): "accparc compile: [0.12 s] build ...". */
typedef struct cli_progress {
  const char *cmd;
  bool on;        /* stderr is a terminal */
  double start_s; /* monotonic clock at cli_progress_start */
} cli_progress;
void cli_progress_start(cli_progress *p, const char *cmd);
void cli_phase(cli_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* --plan FILE (tools/cli.c): plans g with the plan in FILE, a plan's JSON
 * or a model accparc export wrote (its metadata_props 'accpar.plan'), by
 * ap_partition_from_json into *devices; when want is not NULL (--devices
 * was given too) the file's array must be the same kinds and counts. */
ap_status cli_load_plan(ap_graph *g, const char *path, const ap_devices *want,
                        ap_devices *devices, ap_diag *d);

/* Shared by the subcommands (tools/cli.c). */
int cli_fail(const ap_diag *d);                         /* prints the diag; returns 1 or 2 */
int cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));              /* prints; returns 2 */
int cli_parse_int64(const char *cmd, const char *flag, const char *text, int64_t *out);
/* --dim NAME=VALUE, repeatable: symbolic input dimensions to bind. */
enum { CLI_MAX_DIMS = 32 };
typedef struct cli_dims {
  int n;
  const char *name[CLI_MAX_DIMS]; /* into argv: the text before '=' */
  int name_len[CLI_MAX_DIMS];
  int64_t size[CLI_MAX_DIMS];
} cli_dims;
/* Adds "NAME=VALUE" to dims; a usage error (returns 2) when malformed. */
int cli_parse_dim(const char *cmd, const char *text, cli_dims *dims);
/* ap_bind_dim for each of dims. */
ap_status cli_bind_dims(ap_graph *g, const cli_dims *dims, ap_diag *d);

/* A copy of g (after the pipeline) planned on the one device of devs: what
 * prices a program compiled without a plan (its step time and rows in
 * --report; ap_codegen_opts.priced). NULL when it cannot be planned. g is
 * left as it was; the caller frees the copy. */
ap_graph *cli_one_device_plan(const ap_graph *g, const ap_devices *devs);
/* Runs fn(ctx, stream) into memory and copies the result to out only when fn
 * succeeds, so a failure never leaves half a report behind. */
int cli_emit(FILE *out, ap_status (*fn)(void *ctx, FILE *stream), void *ctx, ap_diag *d);

#endif

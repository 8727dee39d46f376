/* The driver's subcommands, one file each; accparc.c only dispatches. Each
 * takes argv starting at the command name and returns the exit status: 0,
 * 1 for an error in the input, 2 for a usage error. */
#ifndef ACCPAR_COMMANDS_H
#define ACCPAR_COMMANDS_H

#include <stdbool.h>
#include <stdint.h>

#include "accpar/accpar.h"

int cmd_dump(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_tensor(int argc, char **argv);
int cmd_compile(int argc, char **argv);

/* compile --verify (tools/verify.c): the program in outdir (of ndev devices, for g)
 * against the one-device program accparc compiles with the options argv
 * (from the command name on) minus the array, strategy and output folder. */
ap_status cli_verify(int argc, char **argv, const ap_graph *g, const char *model,
                     const char *outdir, int ndev, bool train, ap_diag *d);

/* Shared by the subcommands (tools/cli.c). */
int cli_fail(const ap_diag *d);                         /* prints the diag; returns 1 or 2 */
int cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));              /* prints; returns 2 */
int cli_parse_int64(const char *cmd, const char *flag, const char *text, int64_t *out);
/* The --dim NAME=VALUE options of a command, bound in order. */
enum { CLI_MAX_DIMS = 32, CLI_DIM_NAME_MAX = 128 };
typedef struct cli_dims {
  int n;
  char name[CLI_MAX_DIMS][CLI_DIM_NAME_MAX];
  int64_t value[CLI_MAX_DIMS];
} cli_dims;
int cli_parse_dim(const char *cmd, const char *text, cli_dims *dims); /* 0, or 2 (printed) */
ap_status cli_bind_dims(ap_graph *g, const cli_dims *dims, ap_diag *d);
/* Runs fn(ctx, stream) into memory and copies the result to out only when fn
 * succeeds, so a failure never leaves half a report behind. */
int cli_emit(FILE *out, ap_status (*fn)(void *ctx, FILE *stream), void *ctx, ap_diag *d);

#endif

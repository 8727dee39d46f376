/* accparc: the driver. It only dispatches to the subcommands (tools/cmd_*.c),
 * which string the library's stages together. */
#include <stdio.h>
#include <string.h>

#include "accpar/accpar.h"
#include "tools/commands.h"

static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} commands[] = {
    {"dump", cmd_dump, "print the IR of a model (text or JSON)"},
    {"plan", cmd_plan, "partition a model over a device array and print the plan (or draw it)"},
    {"compare", cmd_compare, "dp, owt, hypar and accpar side by side"},
    {"export", cmd_export, "write the model with its plan inside (metadata_props)"},
    {"tensor", cmd_tensor, "print a TensorProto file (.pb), or compare two"},
    {"compile", cmd_compile, "generate and build the program of a model (OUTDIR/model)"},
    {"run", cmd_run, "compile a model's program in memory (LLVM JIT) and run it"},
    {"calibrate", cmd_calibrate, "measure this machine and write it as a device file"},
};

static void usage(FILE *out) {
  fprintf(out, "usage: accparc COMMAND MODEL.onnx [options]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
  fprintf(out, "\n'accparc COMMAND --help' describes a command's options; "
               "'accparc --version' prints the version.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("accparc %s\n", ap_version());
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(argv[1], commands[i].name) == 0)
      return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "accparc: unknown command '%s' (try 'accparc --help')\n", argv[1]);
  return 2;
}

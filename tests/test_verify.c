/* accparc compile --verify: the partitioned program is run against the
 * one-device program on the same seeded inputs. A correct program passes
 * (inference and training) and keeps OUTDIR/model; a program that computes
 * something else is refused in one line naming the output, and OUTDIR/model
 * is removed. The wrong program is made the way a code-generation bug
 * would make it: a compiler wrapper (CC) alters the ReLU kernel of the
 * multi-device build only. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/test_util.h"

#define ZOO ACCPAR_BINARY_DIR "/samples/accpar-zoo"
#define WORK_DIR ACCPAR_BINARY_DIR "/verify"

/* LeNet-5 in dir (each test its own: they run in parallel). */
static void setup(const char *dir) {
  char cmd[4096];
  fmt(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && '%s' --batch 4 -o '%s' lenet5 >/dev/null",
      dir, dir, ZOO, dir);
  cr_assert_eq(system(cmd), 0, "accpar-zoo failed");
}

/* Runs accparc compile on dir's model with args; stderr into dir/err. */
static int compile(const char *dir, const char *env, const char *args) {
  char cmd[8192];
  fmt(cmd, sizeof cmd, "%s CFLAGS=-O1 '%s' compile '%s/lenet5.onnx' %s >/dev/null 2>'%s/err'", env,
      ACCPARC, dir, args, dir);
  int st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void read_err(const char *dir, char *buf, size_t cap) {
  char path[4200];
  fmt(path, sizeof path, "%s/err", dir);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
  buf[n] = 0;
  if (f)
    fclose(f);
}

#define OK_DIR WORK_DIR "/ok"
#define BAD_DIR WORK_DIR "/bad"

Test(verify, a_correct_partitioned_program_passes, .timeout = 600) {
  setup(OK_DIR);
  char err[4096];
  int rc = compile(OK_DIR, "", "--devices tpuv3:1,tpuv2:2 --strategy accpar --verify -o " OK_DIR
                               "/infer");
  read_err(OK_DIR, err, sizeof err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert(exists(OK_DIR "/infer/model"));
  rc = compile(OK_DIR, "", "--devices cpu:3 --strategy hypar --mode train --verify -o " OK_DIR
                           "/train");
  read_err(OK_DIR, err, sizeof err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert(exists(OK_DIR "/train/model"));
}

Test(verify, a_wrong_partitioned_program_is_refused, .timeout = 600) {
  setup(BAD_DIR);
  FILE *f = fopen(BAD_DIR "/cc.sh", "w");
  cr_assert(f);
  fputs("#!/bin/sh\n"
        "for a in \"$@\"; do\n"
        "  case \"$a\" in *.c) d=$(dirname \"$a\")\n"
        "    [ -f \"$d/dev1.c\" ] && sed -i 's/? a : 0.0f);/? a : 0.5f);/' \"$d/kernels.c\";;\n"
        "  esac\n"
        "done\n"
        "exec cc \"$@\"\n",
        f);
  fclose(f);
  chmod(BAD_DIR "/cc.sh", 0755);
  char err[4096];
  int rc = compile(BAD_DIR, "CC='" BAD_DIR "/cc.sh'",
                   "--devices tpuv3:1,tpuv2:2 --strategy accpar --verify -o " BAD_DIR "/prog");
  read_err(BAD_DIR, err, sizeof err);
  cr_assert_eq(rc, 1, "exit status %d: %s", rc, err);
  cr_assert(strstr(err, "lenet5.onnx: --verify: output 'output' of the 3-device program differs "
                        "from the one-device program's: element "),
            "%s", err);
  cr_assert_eq(strchr(err, '\n'), err + strlen(err) - 1, "not one line: %s", err);
  cr_assert(!exists(BAD_DIR "/prog/model"), "the refused program was left behind");
}

/* accparc compile --mode train end to end through the driver: the program
 * trains (its loss falls), reports one loss per step, and what is not
 * supported yet (plans with type II/III layers on several devices; data
 * parallel training is tests/test_train_partitioned.c) is refused in one line
 * with no program. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define ZOO ACCPAR_BINARY_DIR "/samples/accpar-zoo"
#define WORK ACCPAR_BINARY_DIR "/tests/train_cli"

static void make_models(void) {
  mkdir(ACCPAR_BINARY_DIR "/tests", 0777);
  mkdir(WORK, 0777);
  cr_assert_eq(system("'" ZOO "' --seed 2 --batch 16 -o '" WORK "' mlp lenet5 >/dev/null"), 0);
}

/* The "losses" array of a --report file. */
static int read_losses(const char *path, double *out, int cap) {
  FILE *f = fopen(path, "r");
  cr_assert(f, "no report %s", path);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  char *p = strstr(buf, "\"losses\": [");
  cr_assert(p, "no losses in %s", path);
  p += strlen("\"losses\": [");
  int k = 0;
  while (k < cap && *p && *p != ']') {
    char *end;
    out[k++] = strtod(p, &end);
    cr_assert(end != p, "bad losses in %s", path);
    p = end;
    while (*p == ',' || *p == ' ')
      p++;
  }
  return k;
}

static void trains(const char *model, const char *extra) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "CFLAGS=-O1 '%s' compile '%s/%s.onnx' --devices cpu:1 --mode train %s -o '%s/%s_out' "
           "&& '%s/%s_out/model' --steps 12 --lr 0.05 --seed 4 --report '%s/%s.json' >/dev/null",
           ACCPARC, WORK, model, extra, WORK, model, WORK, model, WORK, model);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  double loss[64];
  char report[1024];
  snprintf(report, sizeof report, "%s/%s.json", WORK, model);
  int n = read_losses(report, loss, 64);
  cr_assert_eq(n, 12, "%s: %d losses for 12 steps", model, n);
  for (int i = 0; i < n; i++)
    cr_assert(loss[i] > 0 && loss[i] < 100, "%s: step %d loss %g", model, i + 1, loss[i]);
  /* Ten classes at random init start near ln 10; SGD on a fixed batch must
   * bring the loss well down in a dozen steps. */
  cr_expect_lt(loss[n - 1], 0.8 * loss[0], "%s: loss %g -> %g", model, loss[0], loss[n - 1]);
}

Test(train_cli, mlp_trains, .init = make_models) { trains("mlp", ""); }
Test(train_cli, lenet5_trains_with_momentum, .init = make_models) {
  trains("lenet5", "--momentum 0.9");
}

Test(train_cli, bad_momentum_is_refused, .init = make_models) {
  int st;
  st = system("'" ACCPARC "' compile '" WORK "/mlp.onnx' --devices cpu:1 --mode train "
              "--momentum 1.5 -o '" WORK "/refused' 2>/dev/null");
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "momentum 1.5 is a usage error");
}

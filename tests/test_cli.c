/* The driver's and the executables' command lines tell the truth:
 * compile --transport links the runtime it names (the default, when MPI was
 * built, runs under mpirun with no environment variable set), compile
 * reports its phases on a terminal and nothing otherwise, builds every
 * source on its own then links, and the help of an executable describes
 * every option its synopsis offers. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "tests/test_util.h"

#define ZOO ACCPAR_BINARY_DIR "/samples/accpar-zoo"
#define WORK_DIR ACCPAR_BINARY_DIR "/cli"
#define RT_MPI_LIB ACCPAR_BINARY_DIR "/runtime/libaccpar_rt_mpi.a"

/* dir afresh with the zoo's models as `accpar-zoo ARGS -o dir` writes them
 * (each test its own dir: they run in parallel). */
static void zoo_in(const char *dir, const char *args) {
  char cmd[4096];
  fmt(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && '%s' %s -o '%s' >/dev/null", dir, dir,
      ZOO, args, dir);
  cr_assert_eq(system(cmd), 0, "accpar-zoo %s failed", args);
}

/* LeNet-5 and its inputs in dir. */
static void setup(const char *dir) { zoo_in(dir, "--inputs lenet5"); }

/* The whole of a file, NUL-terminated (freed by the caller). */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  cr_assert(f, "cannot open %s", path);
  char *buf = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&buf, &len);
  cr_assert(mem);
  int c;
  while ((c = fgetc(f)) != EOF)
    fputc(c, mem);
  fclose(f);
  fclose(mem);
  return buf;
}

/* Runs cmd through sh with the ACCPAR_RT_* overrides removed; 0 if it exits 0. */
static int sh(const char *cmd) {
  char full[8192];
  fmt(full, sizeof full, "unset ACCPAR_RT_LIB ACCPAR_RT_INCLUDE ACCPAR_KERNELS_DIR; %s", cmd);
  int st = system(full);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(cli, transport_threads_links_the_threads_runtime, .timeout = 300) {
  const char *dir = WORK_DIR "/threads";
  setup(dir);
  char cmd[4096];
  /* LeNet-5's sources are small: one unit, unless the bound says 0, then
   * every source on its own and one link. Both programs compute the same. */
  fmt(cmd, sizeof cmd, "CFLAGS=-O1 ACCPAR_BUILD_UNITY_BYTES=0 '%s' compile '%s/lenet5.onnx' "
      "--devices cpu:2 --transport threads -o '%s/parts' 2>/dev/null", ACCPARC, dir, dir);
  cr_assert_eq(sh(cmd), 0, "compile source by source failed");
  fmt(cmd, sizeof cmd, "%s/parts/build.sh", dir);
  char *script = slurp(cmd);
  cr_assert(strstr(script, "-c \"$1.c\" -o \"$1.o\"") &&
                strstr(script, "for unit in kernels dev0 dev1 main;") &&
                strstr(script, "-o model.tmp kernels.o dev0.o dev1.o main.o "),
            "%s", script);
  free(script);
  fmt(cmd, sizeof cmd, "CFLAGS=-O1 ACCPAR_BUILD_UNITY_BYTES=x '%s' compile '%s/lenet5.onnx' "
      "--devices cpu:2 -o '%s/bad' 2>'%s/err'", ACCPARC, dir, dir, dir);
  cr_assert_eq(sh(cmd), 2, "a bound that is not a number is refused as a usage error");
  fmt(cmd, sizeof cmd, "%s/err", dir);
  char *err = slurp(cmd);
  cr_assert_str_eq(err, "accparc: error: ACCPAR_BUILD_UNITY_BYTES: must be a number of bytes, "
                        "not 'x'\n");
  free(err);
  fmt(cmd, sizeof cmd, "%s/bad", dir);
  cr_assert(!exists(cmd), "nothing is written before the refusal");
  fmt(cmd, sizeof cmd, "CFLAGS=-O1 '%s' compile '%s/lenet5.onnx' --devices cpu:2 --transport threads -o '%s/prog' 2>'%s/err'",
      ACCPARC, dir, dir, dir);
  cr_assert_eq(sh(cmd), 0, "compile failed");
  fmt(cmd, sizeof cmd, "%s/prog/build.sh", dir);
  script = slurp(cmd);
  cr_assert(strstr(script, "/libaccpar_rt.a'"), "%s", script);
  cr_assert(!strstr(script, "libaccpar_rt_mpi") && !strstr(script, "libmpi"), "%s", script);
  cr_assert(strstr(script, "as one unit") && strstr(script, "#include \"dev1.c\"") &&
                strstr(script, "-o model.tmp unit.c ") && !strstr(script, "-c \"$1.c\""),
            "%s", script);
  free(script);
  fmt(cmd, sizeof cmd, "'%s/parts/model' --inputs '%s/lenet5_data' --outputs '%s/parts_out' "
      ">/dev/null && '%s/prog/model' --inputs '%s/lenet5_data' --outputs '%s/prog_out' >/dev/null "
      "&& cmp '%s/parts_out/output_0.pb' '%s/prog_out/output_0.pb'", dir, dir, dir, dir, dir, dir,
      dir, dir);
  cr_assert_eq(sh(cmd), 0, "the two builds compute different outputs");
  fmt(cmd, sizeof cmd, "%s/err", dir);
  err = slurp(cmd);
  cr_assert_str_eq(err, "", "stderr is not a terminal: no phases");
  free(err);
  /* --outputs names a folder that does not exist yet. */
  fmt(cmd, sizeof cmd, "'%s/prog/model' --inputs '%s/lenet5_data' --outputs '%s/out/new' >/dev/null",
      dir, dir, dir);
  cr_assert_eq(sh(cmd), 0);
  fmt(cmd, sizeof cmd, "%s/out/new/output_0.pb", dir);
  cr_assert(exists(cmd));
  /* This program has no MPI transport, and says how to get one. */
  fmt(cmd, sizeof cmd, "'%s/prog/model' --transport mpi 2>'%s/err' >/dev/null", dir, dir);
  cr_assert_eq(sh(cmd), 1);
  fmt(cmd, sizeof cmd, "%s/err", dir);
  err = slurp(cmd);
  cr_assert(strstr(err, "accparc compile --transport mpi"), "%s", err);
  free(err);
}

Test(cli, default_transport_runs_under_mpirun_without_environment, .timeout = 300) {
  if (!exists(RT_MPI_LIB))
    cr_skip_test("MPI was not found: no %s", RT_MPI_LIB);
  const char *dir = WORK_DIR "/mpi";
  setup(dir);
  char cmd[4096];
  fmt(cmd, sizeof cmd, "CFLAGS=-O1 '%s' compile '%s/lenet5.onnx' --devices tpuv3:1,tpuv2:2 -o '%s/prog'",
      ACCPARC, dir, dir);
  cr_assert_eq(sh(cmd), 0, "compile failed");
  fmt(cmd, sizeof cmd, "%s/prog/build.sh", dir);
  char *script = slurp(cmd);
  cr_assert(strstr(script, "/libaccpar_rt_mpi.a'"), "%s", script);
  free(script);
  /* The same program on threads and under mpirun: the same output. */
  fmt(cmd, sizeof cmd, "'%s/prog/model' --inputs '%s/lenet5_data' --outputs '%s/threads' >/dev/null",
      dir, dir, dir);
  cr_assert_eq(sh(cmd), 0);
  if (system("command -v mpirun >/dev/null 2>&1") != 0)
    cr_skip_test("no mpirun");
  fmt(cmd, sizeof cmd,
      "ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np 3 "
      "'%s/prog/model' --transport mpi --inputs '%s/lenet5_data' --outputs '%s/mpi' >/dev/null",
      dir, dir, dir);
  cr_assert_eq(sh(cmd), 0, "mpirun failed");
  fmt(cmd, sizeof cmd, "cmp '%s/threads/output_0.pb' '%s/mpi/output_0.pb'", dir, dir);
  cr_assert_eq(sh(cmd), 0, "the MPI run's output differs from the threads run's");
}

Test(cli, transport_is_checked) {
  char cmd[4096];
  fmt(cmd, sizeof cmd, "'%s' compile m.onnx --devices cpu:2 --transport pigeons -o x 2>&1", ACCPARC);
  FILE *p = popen(cmd, "r");
  cr_assert(p);
  char line[512] = "";
  cr_assert(fgets(line, sizeof line, p));
  cr_assert_eq(WEXITSTATUS(pclose(p)), 2);
  cr_assert_str_eq(line, "accparc compile: --transport must be threads, mpi or both, got 'pigeons'\n");
}

/* run binds dims as compile does: --dim and --inputs, and a dim left
 * unbound is the one line naming it and the inputs carrying it. */
Test(cli, run_refuses_unbound_dims) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc was built without LLVM");
  char cmd[4096];
  fmt(cmd, sizeof cmd,
      "'%s' run '%s/tests/golden/models/symbolic_dims.onnx' --devices cpu:2 --dim B=2 2>&1",
      ACCPARC, ACCPAR_SOURCE_DIR);
  FILE *p = popen(cmd, "r");
  cr_assert(p);
  char line[1024] = "";
  cr_assert(fgets(line, sizeof line, p));
  cr_assert_eq(WEXITSTATUS(pclose(p)), 2);
  cr_assert(strstr(line, "symbolic_dims.onnx: input dimensions not bound: 'S' (a[1]), unnamed "
                         "(c[0]); bind them with --dim NAME=VALUE, --batch N or --inputs DIR\n"),
            "%s", line);
}

/* The LLVM backend is a module loaded by the commands that use it alone
 * (codegen/llvm_module.c): accparc does not load libLLVM at start, and a
 * module that cannot be loaded, or is not accpar's, is one line naming it,
 * with nothing written. */
Test(cli, the_llvm_backend_is_loaded_by_the_commands_that_use_it) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc was built without LLVM");
  const char *dir = WORK_DIR "/llvm_module";
  setup(dir);
  char cmd[4096];
  fmt(cmd, sizeof cmd, "LD_DEBUG=files '%s' plan '%s/lenet5.onnx' --devices cpu:2 2>&1 >/dev/null "
      "| grep -q libLLVM", ACCPARC, dir);
  cr_assert_neq(sh(cmd), 0, "accparc plan loaded libLLVM");
  fmt(cmd, sizeof cmd, "LD_DEBUG=files '%s' compile '%s/lenet5.onnx' --devices cpu:2 --backend llvm "
      "--no-build -o '%s/loaded' 2>&1 >/dev/null | grep -q 'file=.*/accpar-llvm.so '", ACCPARC, dir,
      dir);
  cr_assert_eq(sh(cmd), 0, "compile --backend llvm did not load accpar-llvm.so");
  const char *modules[] = {"/no/such/accpar-llvm.so", ACCPARC, "libm.so.6"};
  const char *says[] = {"cannot be loaded: /no/such/accpar-llvm.so: cannot open shared object file",
                        "cannot be loaded:", "libm.so.6 is not accpar's LLVM backend"};
  for (int i = 0; i < 3; i++) {
    for (int run = 0; run < 2; run++) {
      fmt(cmd, sizeof cmd, "ACCPAR_LLVM_MODULE='%s' '%s' %s '%s/lenet5.onnx' --devices cpu:2 %s "
          "2>'%s/err'", modules[i], ACCPARC, run ? "run" : "compile", dir,
          run ? "" : "--backend llvm -o x/y", dir);
      cr_assert_eq(sh(cmd), 1, "%s", cmd);
      fmt(cmd, sizeof cmd, "%s/err", dir);
      char *err = slurp(cmd);
      char want[1024];
      fmt(want, sizeof want, "accparc: error: %s/lenet5.onnx: the LLVM backend (%s) ", dir,
          modules[i]);
      cr_assert(strncmp(err, "accparc: error: ", 16) == 0 && strstr(err, says[i]) &&
                    strchr(err, '\n') == err + strlen(err) - 1 &&
                    (i == 2 || strncmp(err, want, strlen(want)) == 0),
                "%s", err);
      free(err);
    }
  }
  cr_assert(!exists("x/y"), "nothing is written before the refusal");
}

Test(cli, compile_reports_its_phases_on_a_terminal, .timeout = 300) {
  if (system("command -v script >/dev/null 2>&1") != 0)
    cr_skip_test("no script(1) to give accparc a terminal");
  const char *dir = WORK_DIR "/phases";
  setup(dir);
  char cmd[4096];
  /* script(1) runs accparc on a pseudo-terminal and copies what it wrote. */
  fmt(cmd, sizeof cmd,
      "CFLAGS=-O1 script -qec \"'%s' compile '%s/lenet5.onnx' --devices cpu:2 -o '%s/prog'\" "
      "/dev/null >'%s/tty' 2>&1",
      ACCPARC, dir, dir, dir);
  cr_assert_eq(sh(cmd), 0, "compile failed");
  fmt(cmd, sizeof cmd, "%s/tty", dir);
  char *tty = slurp(cmd);
  const char *phases[] = {"] parse ", "] plan 2 devices (accpar)", "] generate C in ",
                          "] build ", "] done"};
  const char *at = tty;
  for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++) {
    const char *p = strstr(at, phases[i]);
    cr_assert(p, "phase '%s' missing or out of order in:\n%s", phases[i], tty);
    at = p;
  }
  cr_assert(strstr(tty, "accparc compile: [0."), "%s", tty);
  free(tty);
  fmt(cmd, sizeof cmd, "%s/prog/model", dir);
  cr_assert(exists(cmd));
}

Test(cli, executable_help_describes_every_option, .timeout = 300) {
  const char *dir = WORK_DIR "/help";
  setup(dir);
  char cmd[4096];
  fmt(cmd, sizeof cmd, "CFLAGS=-O1 '%s' compile '%s/lenet5.onnx' --devices cpu:1 -o '%s/prog'",
      ACCPARC, dir, dir);
  cr_assert_eq(sh(cmd), 0, "compile failed");
  fmt(cmd, sizeof cmd, "'%s/prog/model' --help >'%s/help'", dir, dir);
  cr_assert_eq(sh(cmd), 0);
  fmt(cmd, sizeof cmd, "%s/help", dir);
  char *help = slurp(cmd);
  const char *options[] = {"--transport", "--steps", "--lr",     "--seed",
                           "--inputs",    "--outputs", "--report", "--repeat"};
  for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) {
    char line[64];
    fmt(line, sizeof line, "\n  %s ", options[i]);
    cr_assert(strstr(help, line), "no description of %s in:\n%s", options[i], help);
  }
  free(help);
}

/* Every option the synopsis of `accparc compile --help` offers is described
 * below it, and nothing says training is limited to one device. */
Test(cli, compile_help_describes_every_option) {
  char cmd[4096];
  fmt(cmd, sizeof cmd, "'%s' compile --help", ACCPARC);
  FILE *p = popen(cmd, "r");
  cr_assert(p);
  char *help = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&help, &len);
  int c;
  while ((c = fgetc(p)) != EOF)
    fputc(c, mem);
  fclose(mem);
  cr_assert_eq(pclose(p), 0);
  cr_assert(!strstr(help, "one device so far"), "%s", help);
  const char *synopsis_end = strstr(help, "\n  -");
  cr_assert(synopsis_end);
  for (const char *s = help; s < synopsis_end; s++) {
    if (*s != '[' || s[1] != '-')
      continue;
    char opt[32];
    size_t n = strcspn(s + 1, " ]");
    cr_assert_lt(n, sizeof opt - 4);
    memcpy(opt + 3, s + 1, n);
    memcpy(opt, "\n  ", 3);
    opt[3 + n] = 0;
    cr_assert(strstr(synopsis_end, opt), "'%s' is in the synopsis, not described:\n%s", opt + 3,
              help);
  }
  free(help);
}

/* A plan read back (--plan FILE.json) is the plan that was written: the
 * JSON of `plan --plan` equals the file, for every strategy and cost, on
 * one- and two-level arrays, homogeneous and mixed, with joins (ResNet). */
Test(cli, plans_read_back_exactly, .timeout = 300) {
  const char *dir = WORK_DIR "/readback";
  char cmd[8192];
  zoo_in(dir, "lenet5 resnet_small");
  const char *models[] = {"lenet5 --batch 1", "resnet_small --batch 8"};
  const char *arrays[] = {"cpu:4", "tpuv3:1,tpuv2:2", "tpuv3:2,tpuv2:6"};
  const char *strategies[] = {"dp", "owt", "hypar", "accpar"};
  const char *costs[] = {"time", "paper"};
  int runs = 0;
  for (size_t m = 0; m < 2; m++)
    for (size_t a = 0; a < 3; a++)
      for (size_t s = 0; s < 4; s++)
        for (size_t c = 0; c < 2; c++) {
          char model[64];
          fmt(model, sizeof model, "%s", models[m]);
          *strchr(model, ' ') = 0;
          fmt(cmd, sizeof cmd,
              "cd '%s' && '%s' plan %s.onnx %s --devices %s --strategy %s --cost %s --format json "
              ">a.json && '%s' plan %s.onnx %s --plan a.json --format json >b.json && cmp a.json b.json",
              dir, ACCPARC, model, strchr(models[m], ' ') + 1, arrays[a], strategies[s], costs[c],
              ACCPARC, model, strchr(models[m], ' ') + 1);
          cr_expect_eq(sh(cmd), 0, "%s on %s, %s, cost %s: not read back as written", model,
                       arrays[a], strategies[s], costs[c]);
          runs++;
        }
  cr_assert_eq(runs, 48);
  /* ...and from a model accparc export wrote. */
  fmt(cmd, sizeof cmd,
      "cd '%s' && '%s' export resnet_small.onnx --batch 8 --devices tpuv3:2,tpuv2:6 -o planned.onnx "
      "&& '%s' plan resnet_small.onnx --batch 8 --devices tpuv3:2,tpuv2:6 --format json >a.json "
      "&& '%s' plan resnet_small.onnx --batch 8 --plan planned.onnx --format json >b.json "
      "&& cmp a.json b.json",
      dir, ACCPARC, ACCPARC, ACCPARC);
  cr_expect_eq(sh(cmd), 0, "the plan of an exported model is not read back as written");
}

/* --no-boxes leaves each node's boxes out of the JSON (plan and export);
 * the file reads back as the plan with them: `plan --plan` of it prints
 * the full JSON byte for byte. Without --format json it is refused. */
Test(cli, a_plan_without_boxes_reads_back_as_the_plan, .timeout = 300) {
  const char *dir = WORK_DIR "/no-boxes";
  char cmd[8192];
  zoo_in(dir, "lenet5 resnet_small");
  const struct {
    const char *model, *batch, *search;
  } cases[] = {{"lenet5", "--batch 1", "--devices tpuv3:1,tpuv2:2 --strategy hypar"},
               {"resnet_small", "--batch 8", "--devices tpuv3:2,tpuv2:6"}};
  for (size_t i = 0; i < 2; i++) {
    const char *m = cases[i].model, *b = cases[i].batch, *sr = cases[i].search;
    fmt(cmd, sizeof cmd,
        "cd '%s' && '%s' plan %s.onnx %s %s --format json >a.json && "
        "'%s' plan %s.onnx %s %s --format json --no-boxes >nb.json && "
        "'%s' plan %s.onnx %s --plan nb.json --format json >b.json && cmp a.json b.json && "
        "'%s' export %s.onnx %s %s --no-boxes -o nb.onnx && "
        "'%s' plan %s.onnx %s --plan nb.onnx --format json >c.json && cmp a.json c.json",
        dir, ACCPARC, m, b, sr, ACCPARC, m, b, sr, ACCPARC, m, b, ACCPARC, m, b, sr, ACCPARC,
        m, b);
    cr_expect_eq(sh(cmd), 0, "%s: the plan without boxes does not read back as the plan", m);
    fmt(cmd, sizeof cmd, "%s/nb.json", dir);
    char *without = slurp(cmd);
    fmt(cmd, sizeof cmd, "%s/a.json", dir);
    char *with = slurp(cmd);
    cr_expect(strstr(with, "\"boxes\": [[[") != NULL, "%s: no boxes in\n%s", m, with);
    cr_expect(strstr(without, "\"boxes\"") == NULL, "%s: boxes in\n%s", m, without);
    cr_expect(strstr(without, "\"types\": [") != NULL, "%s: no types in\n%s", m, without);
    free(without);
    free(with);
  }
  fmt(cmd, sizeof cmd,
      "cd '%s' && '%s' plan lenet5.onnx --devices cpu:2 --no-boxes >out.txt 2>err.txt", dir,
      ACCPARC);
  cr_expect_eq(sh(cmd), 2, "--no-boxes with the table is not a usage error");
  fmt(cmd, sizeof cmd, "%s/err.txt", dir);
  char *err = slurp(cmd);
  cr_expect(strstr(err, "--no-boxes goes with --format json") != NULL, "%s", err);
  free(err);
  fmt(cmd, sizeof cmd, "%s/out.txt", dir);
  char *out = slurp(cmd);
  cr_expect_str_eq(out, "", "something was printed before the refusal");
  free(out);
}

/* compile --plan builds the program of the plan in the file: its measured
 * bytes are the file's predicted bytes, device by device. */
Test(cli, compile_builds_the_plan_of_a_file, .timeout = 300) {
  const char *dir = WORK_DIR "/compile-plan";
  setup(dir);
  char cmd[8192];
  fmt(cmd, sizeof cmd,
      "cd '%s' && '%s' plan lenet5.onnx --devices tpuv3:1,tpuv2:2 --strategy hypar --format json "
      ">plan.json && CFLAGS=-O1 '%s' compile lenet5.onnx --plan plan.json --transport threads -o prog "
      "&& prog/model --inputs lenet5_data --report report.json >/dev/null",
      dir, ACCPARC, ACCPARC);
  cr_assert_eq(sh(cmd), 0);
  fmt(cmd, sizeof cmd, "%s/plan.json", dir);
  char *plan = slurp(cmd);
  fmt(cmd, sizeof cmd, "%s/report.json", dir);
  char *report = slurp(cmd);
  const char *want = strstr(plan, "\"device_forward_bytes\": ");
  const char *got = strstr(report, "\"bytes_sent\": ");
  cr_assert(want && got, "%s\n%s", plan, report);
  want += strlen("\"device_forward_bytes\": ");
  got += strlen("\"bytes_sent\": ");
  cr_assert_eq(strncmp(want, got, (size_t)(strchr(want, ']') - want + 1)), 0,
               "bytes sent %.*s, the plan's %.*s", (int)(strchr(got, ']') - got + 1), got,
               (int)(strchr(want, ']') - want + 1), want);
  free(plan);
  free(report);
}

/* A plan edited by hand (one layer's types changed at every level, every
 * node's boxes dropped) is read back as edited, and its program sends
 * exactly the bytes it predicts. */
Test(cli, a_hand_edited_plan_compiles_and_sends_what_it_predicts, .timeout = 300) {
  const char *dir = WORK_DIR "/edited-plan";
  setup(dir);
  char cmd[8192];
  fmt(cmd, sizeof cmd,
      "cd '%s' && '%s' plan lenet5.onnx --devices tpuv3:1,tpuv2:2 --format json >plan.json && "
      "/usr/bin/python3 -c \"import json; p = json.load(open('plan.json')); "
      "l = [n for n in p['nodes'] if n['name'] == 'fc2'][0]; "
      "l['types'] = ['II' if t != 'II' else 'III' for t in l['types']]; "
      "[n.pop('boxes', None) for n in p['nodes']]; "
      "json.dump(p, open('edited.json', 'w')); print(' '.join(l['types']))\" >types.txt && "
      "'%s' plan lenet5.onnx --plan edited.json --format json >replanned.json && "
      "CFLAGS=-O1 '%s' compile lenet5.onnx --plan edited.json --transport threads -o prog && "
      "prog/model --inputs lenet5_data --report report.json >/dev/null",
      dir, ACCPARC, ACCPARC, ACCPARC);
  cr_assert_eq(sh(cmd), 0);
  fmt(cmd, sizeof cmd, "%s/types.txt", dir);
  char *types = slurp(cmd);
  fmt(cmd, sizeof cmd, "%s/replanned.json", dir);
  char *replanned = slurp(cmd);
  /* The plan read back carries the edited types. */
  char want[256], t0[8] = "", t1[8] = "";
  cr_assert_eq(sscanf(types, "%7s %7s", t0, t1), 2, "%s", types);
  fmt(want, sizeof want, "\"name\": \"fc2\", \"op\": \"Gemm\", \"types\": [\"%s\", \"%s\"]",
      t0, t1);
  cr_expect(strstr(replanned, want) != NULL, "fc2 is not typed %s in\n%s", types, replanned);
  fmt(cmd, sizeof cmd, "%s/report.json", dir);
  char why[1024] = "";
  double moved = 0;
  cr_expect(bytes_as_predicted(cmd, 3, &moved, why, sizeof why), "%s", why);
  cr_expect_gt(moved, 0);
  free(types);
  free(replanned);
}

/* The number after "KEY": in json (NAN when absent or null). */
static double json_number_of(const char *json, const char *key) {
  char pat[128];
  fmt(pat, sizeof pat, "\"%s\": ", key);
  const char *s = strstr(json, pat);
  if (!s || strncmp(s + strlen(pat), "null", 4) == 0)
    return NAN;
  return strtod(s + strlen(pat), NULL);
}

/* A --report's rows against the plan they were compiled from (plan, the
 * JSON of `accparc plan --format json`): the plan's rows (its nodes with a
 * time_s) in order, each with the plan's time as its prediction (NAN: an
 * inference program, which predicts none), and on each of ndev devices the
 * rows' times adding up to the phases of the steps (all but "other"), of
 * which they are a division. */
static void expect_rows_of_plan(const char *report, const char *plan, int ndev, bool train) {
  const char *r = strstr(report, "\"rows\": [");
  cr_assert(r, "no rows in\n%s", report);
  double sum[8] = {0};
  int n = 0;
  for (const char *p = strstr(plan, "\"nodes\": ["); (p = strstr(p, "{\"name\": \"")); n++) {
    p += strlen("{\"name\": \"");
    const char *end = strchr(p, '}'), *t = strstr(p, "\"time_s\": ");
    if (!t || t > end) {
      n--;
      continue;
    }
    char name[256], pat[300];
    fmt(name, sizeof name, "%.*s", (int)(strchr(p, '"') - p), p);
    fmt(pat, sizeof pat, "{\"node\": \"%s\", \"predicted_step_s\": ", name);
    r = strstr(r, pat);
    cr_assert(r, "row %d (%s) missing or out of order in\n%s", n, name, report);
    r += strlen(pat);
    double want = strtod(t + strlen("\"time_s\": "), NULL), got = NAN;
    if (strncmp(r, "null", 4) != 0)
      got = strtod(r, NULL);
    if (train)
      cr_expect(fabs(got - want) <= 1e-5 * want + 1e-12, "%s: %g, plan %g", name, got, want);
    else
      cr_expect(isnan(got), "%s: an inference program predicts %g", name, got);
    const char *ts = strstr(r, "\"time_s\": [") + strlen("\"time_s\": [");
    for (int d = 0; d < ndev; d++) {
      char *next;
      double x = strtod(ts, &next);
      cr_expect(next != ts && x >= 0, "%s: device %d's time", name, d);
      sum[d] += x;
      ts = next + 1;
    }
  }
  cr_assert_gt(n, 0);
  const char *ph = strstr(report, "\"phase_time_s\": {");
  cr_assert(ph);
  double body[8] = {0};
  for (const char *q = ph; (q = strstr(q, ": [")) && q < strstr(ph, "}"); q += 3) {
    bool other = strncmp(q - 7, "\"other\"", 7) == 0;
    char *at = (char *)q + 3;
    for (int d = 0; d < ndev; d++) {
      double x = strtod(at, &at);
      body[d] += other ? 0 : x;
      at++;
    }
  }
  for (int d = 0; d < ndev; d++)
    cr_expect(fabs(sum[d] - body[d]) <= 0.05 * body[d], "device %d: rows %g s, steps %g s\n%s",
              d, sum[d], body[d], report);
}

/* accparc calibrate writes a device file that plans and programs use: its
 * kind plans two devices, a training program compiled for them reports the
 * plan's step time beside the measured steps (an inference program none),
 * and a file that cannot be written is one line and nothing written. */
Test(cli, calibrate_writes_a_device_file_that_plans_use, .timeout = 300) {
  const char *dir = WORK_DIR "/calibrate";
  setup(dir);
  char cmd[4096], path[4096];
  fmt(cmd, sizeof cmd, "'%s' calibrate --quick --name thishost -o '%s/host.dev' >'%s/out'",
      ACCPARC, dir, dir);
  cr_assert_eq(sh(cmd), 0, "calibrate failed");
  fmt(path, sizeof path, "%s/host.dev", dir);
  char *dev = slurp(path);
  cr_assert(strstr(dev, "\nname = thishost\n"), "%s", dev);
  static const char *const keys[] = {"peak_flops",     "mem_bw_bytes_s", "mem_bytes",
                                     "link_bw_bytes_s", "link_latency_s", "exp_s",
                                     "tanh_s",          "lower_row_s",    "lower_float_s",
                                     "lower_gather_s",  "direct_flops",   "pack_float_s",
                                     "pack_transposed_s", "wino_block_s", "wino_pair_s",
                                     "wino_tile_s"};
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
    char pat[64];
    fmt(pat, sizeof pat, "\n%s = ", keys[k]);
    const char *s = strstr(dev, pat);
    cr_assert(s, "no %s in\n%s", keys[k], dev);
    double x = strtod(s + strlen(pat), NULL);
    cr_assert(x > 0 && x < 1e15, "%s = %g", keys[k], x);
  }
  free(dev);
  /* The plan over two of them, and a training program's report. */
  fmt(cmd, sizeof cmd,
      "'%s' plan '%s/lenet5.onnx' --devices '%s/host.dev:2' --format json >'%s/plan.json'",
      ACCPARC, dir, dir, dir);
  cr_assert_eq(sh(cmd), 0);
  fmt(path, sizeof path, "%s/plan.json", dir);
  char *plan = slurp(path);
  cr_assert(strstr(plan, "\"thishost\""), "%s", plan);
  double planned = json_number_of(plan, "step_time_s");
  cr_assert(planned > 0);
  fmt(cmd, sizeof cmd,
      "CFLAGS=-O1 '%s' compile '%s/lenet5.onnx' --devices '%s/host.dev:2' --mode train -o "
      "'%s/train' && '%s/train/model' --steps 2 --report '%s/train.json' >/dev/null",
      ACCPARC, dir, dir, dir, dir, dir);
  cr_assert_eq(sh(cmd), 0);
  fmt(path, sizeof path, "%s/train.json", dir);
  char *report = slurp(path);
  double predicted = json_number_of(report, "predicted_step_time_s");
  cr_assert(fabs(predicted - planned) <= 1e-5 * planned, "report %g, plan %g\n%s", predicted,
            planned, report);
  expect_rows_of_plan(report, plan, 2, true);
  free(report);
  /* One device: priced without a plan, still reported. */
  fmt(cmd, sizeof cmd,
      "CFLAGS=-O1 '%s' compile '%s/lenet5.onnx' --devices '%s/host.dev:1' --mode train -o "
      "'%s/one' && '%s/one/model' --steps 2 --report '%s/one.json' >/dev/null",
      ACCPARC, dir, dir, dir, dir, dir);
  cr_assert_eq(sh(cmd), 0);
  fmt(path, sizeof path, "%s/one.json", dir);
  report = slurp(path);
  predicted = json_number_of(report, "predicted_step_time_s");
  fmt(cmd, sizeof cmd,
      "'%s' plan '%s/lenet5.onnx' --devices '%s/host.dev:1' --format json >'%s/plan1.json'",
      ACCPARC, dir, dir, dir);
  cr_assert_eq(sh(cmd), 0);
  fmt(path, sizeof path, "%s/plan1.json", dir);
  char *plan1 = slurp(path);
  planned = json_number_of(plan1, "step_time_s");
  expect_rows_of_plan(report, plan1, 1, true);
  free(plan1);
  free(report);
  cr_assert(planned > 0 && fabs(predicted - planned) <= 1e-5 * planned, "report %g, plan %g",
            predicted, planned);
  fmt(cmd, sizeof cmd,
      "CFLAGS=-O1 '%s' compile '%s/lenet5.onnx' --devices '%s/host.dev:2' -o '%s/infer' && "
      "'%s/infer/model' --inputs '%s/lenet5_data' --report '%s/infer.json' >/dev/null",
      ACCPARC, dir, dir, dir, dir, dir, dir);
  cr_assert_eq(sh(cmd), 0);
  fmt(path, sizeof path, "%s/infer.json", dir);
  report = slurp(path);
  cr_assert(strstr(report, "\"predicted_step_time_s\": null"), "%s", report);
  expect_rows_of_plan(report, plan, 2, false);
  free(report);
  free(plan);
  /* Nothing half-written. */
  fmt(cmd, sizeof cmd, "'%s' calibrate --quick -o '%s/missing/host.dev' 2>'%s/err' >/dev/null",
      ACCPARC, dir, dir);
  cr_assert_eq(sh(cmd), 1);
  fmt(path, sizeof path, "%s/err", dir);
  char *err = slurp(path);
  cr_assert(strstr(err, "missing/host.dev") && strchr(err, '\n') == err + strlen(err) - 1,
            "one line naming the file:\n%s", err);
  free(err);
  fmt(path, sizeof path, "%s/missing", dir);
  cr_assert(!exists(path));
  fmt(cmd, sizeof cmd, "'%s' calibrate 2>/dev/null", ACCPARC);
  cr_assert_eq(sh(cmd), 2);
}

/* The JSON plan lists every device's bytes from the program's distribution
 * (passes/distribute.c), whose box lists and all-reduce groups once grew
 * with the square of the device count: ResNet-152's plan over 1024 devices
 * took 24 GB and was killed. ResNet-18 over 2048 devices now needs about
 * 0.3 GB (more under the sanitizers); the bound leaves room for those.
 * GPT-2 small over 1024 devices gathers activations to every device, a
 * million pieces a gather: the bytes are priced without them (0.4 GB,
 * where the pieces took more than 6 GB before 2026-11-28). */
Test(cli, a_json_plan_over_thousands_of_devices_fits_in_memory, .timeout = 300) {
  const char *dir = WORK_DIR "/many";
  char cmd[4096];
  zoo_in(dir, "--no-weights --batch 0 resnet18");
  fmt(cmd, sizeof cmd,
      "'%s' plan '%s/resnet18.onnx' --devices cpu:2048 --batch 2048 --format json >'%s/p.json'",
      ACCPARC, dir, dir);
  cr_assert_eq(sh(cmd), 0, "%s", cmd);
  struct rusage ru;
  cr_assert_eq(getrusage(RUSAGE_CHILDREN, &ru), 0);
  cr_expect_lt(ru.ru_maxrss, 1536L * 1024, "accparc plan took %ld MB", ru.ru_maxrss / 1024);
  char *json = slurp(WORK_DIR "/many/p.json");
  cr_expect(strstr(json, "\"device_step_bytes\""), "no per-device bytes in the plan");
  free(json);
  fmt(cmd, sizeof cmd,
      "'%s' --no-weights --batch 8 -o '%s' gpt2 >/dev/null && '%s' plan '%s/gpt2.onnx' "
      "--devices cpu:1024 --format json >'%s/g.json'",
      ZOO, dir, ACCPARC, dir, dir);
  cr_assert_eq(sh(cmd), 0, "%s", cmd);
  cr_assert_eq(getrusage(RUSAGE_CHILDREN, &ru), 0);
  cr_expect_lt(ru.ru_maxrss, 1536L * 1024, "accparc plan took %ld MB", ru.ru_maxrss / 1024);
  json = slurp(WORK_DIR "/many/g.json");
  cr_expect(strstr(json, "\"device_step_bytes\""), "no per-device bytes in GPT-2's plan");
  free(json);
}

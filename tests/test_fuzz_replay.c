/* Replays the fuzzers' seed corpora and every input that once crashed them
 * (tests/fuzz/regressions/) through the fuzz entry points themselves, so
 * the sanitized CI run keeps them fixed without needing clang's libFuzzer:
 * the ONNX importer's and the plan reader's (both define
 * LLVMFuzzerTestOneInput; the second is renamed here). */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/fuzz/fuzz_import.c"
#define LLVMFuzzerTestOneInput fuzz_plan_one
#include "tests/fuzz/fuzz_plan.c"
#undef LLVMFuzzerTestOneInput

typedef int (*fuzz_entry)(const uint8_t *data, size_t size);

static int replay_dir(const char *dir, fuzz_entry one) {
  DIR *d = opendir(dir);
  cr_assert(d, "cannot open %s", dir);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.')
      continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    static uint8_t buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    cr_expect_eq(one(buf, len), 0, "%s", path);
    n++;
  }
  closedir(d);
  return n;
}

Test(fuzz_replay, seed_corpus) {
  cr_expect_gt(replay_dir(ACCPAR_SOURCE_DIR "/tests/fuzz/corpus", LLVMFuzzerTestOneInput), 10);
}

Test(fuzz_replay, crash_regressions) {
  cr_expect_gt(replay_dir(ACCPAR_SOURCE_DIR "/tests/fuzz/regressions", LLVMFuzzerTestOneInput),
               0);
}

/* The plan reader's seeds are plans accparc wrote: each reads back. A change
 * to the shares the cost model gives makes the boxes of a seed stale: write
 * the seeds again as tests/fuzz/CMakeLists.txt says. */
static int plan_seed(const uint8_t *data, size_t size) { return plan_reads(data, size) ? 0 : 1; }

Test(fuzz_replay, plan_seed_corpus) {
  cr_expect_gt(replay_dir(ACCPAR_SOURCE_DIR "/tests/fuzz/plan_corpus", plan_seed), 5);
}

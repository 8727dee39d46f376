/* Replays the fuzzer's seed corpus and every input that once crashed it
 * (tests/fuzz/regressions/) through the fuzz entry point itself, so the
 * sanitized CI run keeps them fixed without needing clang's libFuzzer. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/fuzz/fuzz_import.c"

static int replay_dir(const char *dir) {
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
    cr_expect_eq(LLVMFuzzerTestOneInput(buf, len), 0, "%s", path);
    n++;
  }
  closedir(d);
  return n;
}

Test(fuzz_replay, seed_corpus) {
  cr_expect_gt(replay_dir(ACCPAR_SOURCE_DIR "/tests/fuzz/corpus"), 10);
}

Test(fuzz_replay, crash_regressions) {
  cr_expect_gt(replay_dir(ACCPAR_SOURCE_DIR "/tests/fuzz/regressions"), 0);
}

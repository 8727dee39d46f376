/* The LLVM backend's module: print_llvm.c and the kernel library's object
 * are built as their own shared object (accpar-llvm.so, linked with
 * libLLVM) and loaded here on first use. Linking libLLVM-15 into accparc
 * cost every command, even `accparc plan`, 60 ms of processor time at
 * start (the dynamic loader's 393,647 relocations of libLLVM and the page
 * faults they take), and the test sweeps start accparc thousands of times;
 * only --backend llvm and run need it.
 *
 * Where the module is: $ACCPAR_LLVM_MODULE if set; else beside the object
 * this code is linked into, as installed (an accparc in BINDIR finds
 * LIBDIR/accpar/accpar-llvm.so through the install's relative path,
 * libaccpar.so in LIBDIR finds accpar/accpar-llvm.so); else where the
 * build tree wrote it. A module of another build of accpar is refused:
 * it reads this build's structures. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accpar/accpar.h"
#include "codegen/codegen.h"

#ifndef ACCPAR_LLVM_MODULE_BUILT
#error "ACCPAR_LLVM_MODULE_BUILT names the module in the build tree"
#endif
#ifndef ACCPAR_LLVM_MODULE_FROM_BINDIR
#error "ACCPAR_LLVM_MODULE_FROM_BINDIR is the installed module's path from BINDIR"
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const cg_llvm_module *module;
static char failure[PATH_MAX + 256]; /* why it did not load, when it did not */

/* The installed module beside the object holding this code, or "". */
static void installed_path(char *dst, size_t cap) {
  *dst = 0;
  Dl_info info;
  if (!dladdr(&once, &info) || !info.dli_fname)
    return;
  char *self = realpath(info.dli_fname, NULL);
  char *slash = self ? strrchr(self, '/') : NULL;
  if (slash) {
    *slash = 0;
    const char *rel[] = {ACCPAR_LLVM_MODULE_FROM_BINDIR, "accpar/accpar-llvm.so"};
    for (size_t i = 0; i < sizeof rel / sizeof *rel && !*dst; i++)
      if (snprintf(dst, cap, "%s/%s", self, rel[i]) >= (int)cap || access(dst, R_OK) != 0)
        *dst = 0;
  }
  free(self);
}

static void load(void) {
  char path[PATH_MAX];
  const char *env = getenv("ACCPAR_LLVM_MODULE");
  if (env && *env)
    snprintf(path, sizeof path, "%s", env);
  else if (installed_path(path, sizeof path), !*path)
    snprintf(path, sizeof path, "%s", ACCPAR_LLVM_MODULE_BUILT);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(failure, sizeof failure, "the LLVM backend (%s) cannot be loaded: %s", path,
             dlerror());
    return;
  }
  const cg_llvm_module *m = dlsym(h, "accpar_llvm_module");
  if (!m) {
    snprintf(failure, sizeof failure, "%s is not accpar's LLVM backend: it has no accpar_llvm_module",
             path);
  } else if (strcmp(m->version, ACCPAR_VERSION_STRING) != 0 || m->abi != CG_LLVM_MODULE_ABI) {
    snprintf(failure, sizeof failure,
             "%s is the LLVM backend of another accpar (%s), not of this one (%s)", path,
             m->version, ACCPAR_VERSION_STRING);
  } else {
    module = m;
    return;
  }
  dlclose(h);
}

const cg_llvm_module *cg_llvm_module_load(const char *file, ap_diag *d) {
  pthread_once(&once, load);
  if (!module)
    ap_error(d, AP_ERR_IO, file, NULL, NULL, "%s", failure);
  return module;
}

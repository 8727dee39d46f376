/* Where the programs accparc compiles find the runtime and the kernels.
 *
 * An installed accparc (PREFIX/bin/accparc) finds them beside itself, from
 * its own location (/proc/self/exe) and the install layout's relative paths
 * (cmake/AccparInstall.cmake): PREFIX/lib/libaccpar_rt.a,
 * PREFIX/include/accpar/runtime, PREFIX/share/accpar/kernels. The accparc
 * of a build tree has no such neighbours and uses the paths the build
 * configured. ACCPAR_RT_LIB, ACCPAR_RT_INCLUDE and ACCPAR_KERNELS_DIR
 * override either (a runtime built elsewhere). */
#define _XOPEN_SOURCE 700 /* realpath */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/ir.h"
#include "tools/commands.h"

#ifndef ACCPAR_RT_LIB
#define ACCPAR_RT_LIB ""
#endif
#ifndef ACCPAR_RT_MPI_LIB
#define ACCPAR_RT_MPI_LIB ""
#endif
#ifndef ACCPAR_RT_INCLUDE_DIR
#define ACCPAR_RT_INCLUDE_DIR ""
#endif
#ifndef ACCPAR_KERNELS_DIR
#define ACCPAR_KERNELS_DIR ""
#endif
#ifndef ACCPAR_MPI_LINK_FLAGS
#define ACCPAR_MPI_LINK_FLAGS ""
#endif
/* From the folder of the installed accparc to the install's folders. */
#ifndef ACCPAR_REL_LIBDIR
#define ACCPAR_REL_LIBDIR "../lib"
#endif
#ifndef ACCPAR_REL_INCLUDEDIR
#define ACCPAR_REL_INCLUDEDIR "../include"
#endif
#ifndef ACCPAR_REL_DATADIR
#define ACCPAR_REL_DATADIR "../share"
#endif

/* dst = dir/rel/tail; false if it does not fit. */
static bool set_path(char *dst, const char *dir, const char *rel, const char *tail) {
  return snprintf(dst, CLI_PATH_MAX, "%s/%s/%s", dir, rel, tail) < CLI_PATH_MAX;
}

static bool override(char *dst, const char *env) {
  const char *v = getenv(env);
  return !(v && *v) || snprintf(dst, CLI_PATH_MAX, "%s", v) < CLI_PATH_MAX;
}

ap_status cli_runtime_paths_find(cli_runtime_paths *p, ap_diag *d) {
  memset(p, 0, sizeof *p);
  p->mpi_link_flags = ACCPAR_MPI_LINK_FLAGS;
  char *exe = realpath("/proc/self/exe", NULL);
  char *slash = exe ? strrchr(exe, '/') : NULL;
  if (slash)
    *slash = 0; /* PREFIX/bin, or BUILD/tools */
  char probe[CLI_PATH_MAX];
  bool ok = true;
  p->installed = slash && set_path(probe, exe, ACCPAR_REL_DATADIR, "accpar/kernels/kernels.h") &&
                 access(probe, R_OK) == 0;
  if (p->installed) {
    ok = set_path(p->rt_lib, exe, ACCPAR_REL_LIBDIR, "libaccpar_rt.a") &&
         set_path(p->rt_include, exe, ACCPAR_REL_INCLUDEDIR, "accpar/runtime") &&
         set_path(p->kernels_dir, exe, ACCPAR_REL_DATADIR, "accpar/kernels") &&
         set_path(probe, exe, ACCPAR_REL_LIBDIR, "libaccpar_rt_mpi.a");
    if (ok && access(probe, R_OK) == 0)
      snprintf(p->rt_mpi_lib, CLI_PATH_MAX, "%s", probe);
  } else {
    snprintf(p->rt_lib, CLI_PATH_MAX, "%s", ACCPAR_RT_LIB);
    snprintf(p->rt_mpi_lib, CLI_PATH_MAX, "%s", ACCPAR_RT_MPI_LIB);
    snprintf(p->rt_include, CLI_PATH_MAX, "%s", ACCPAR_RT_INCLUDE_DIR);
    snprintf(p->kernels_dir, CLI_PATH_MAX, "%s", ACCPAR_KERNELS_DIR);
  }
  free(exe);
  /* ACCPAR_RT_LIB names the archive to link whatever --transport says. */
  ok = ok && override(p->rt_lib, "ACCPAR_RT_LIB") && override(p->rt_mpi_lib, "ACCPAR_RT_LIB") &&
       override(p->rt_include, "ACCPAR_RT_INCLUDE") &&
       override(p->kernels_dir, "ACCPAR_KERNELS_DIR");
  if (!ok)
    return ap_error(d, AP_ERR_IO, "accparc", NULL, NULL,
                    "the runtime's path is longer than %d bytes", CLI_PATH_MAX - 1);
  if (!*p->rt_lib || !*p->rt_include || !*p->kernels_dir)
    return ap_error(d, AP_ERR_IO, "accparc", NULL, NULL,
                    "cannot tell where the runtime is (set ACCPAR_RT_LIB, "
                    "ACCPAR_RT_INCLUDE and ACCPAR_KERNELS_DIR)");
  return AP_OK;
}

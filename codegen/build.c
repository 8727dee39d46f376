/* Building a generated program with the system C compiler, and binding the
 * graph inputs that fix shapes. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "codegen/codegen.h"

/* ops.def's CONST_IN. */
bool cg_input_needs_constant(ap_op op, int slot) {
  return op < AP_OP_COUNT && slot >= 0 && slot < 32 && (ap_op_table[op].const_in >> slot & 1);
}

/* A fed input few enough elements to be a setting (a sample rate, a
 * length), not data: its dims known and at most MAX_SETTING elements. */
enum { MAX_SETTING = 16 };
static bool small_input(const ap_value *v) {
  if (v->rank < 0)
    return false;
  int64_t n = 1;
  for (int i = 0; i < v->rank; i++) {
    if (v->dims[i] < 0)
      return false;
    n *= v->dims[i];
  }
  return n <= MAX_SETTING;
}

ap_status cg_bind_shape_inputs(ap_graph *g, const char *dir, ap_diag *d) {
  bool *fed = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *fed);
  bool *needed = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *needed);
  if (!fed || !needed)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  for (int i = 0; i < g->n_inputs; i++)
    fed[g->inputs[i]] = g->values[g->inputs[i]].kind == AP_VAL_INPUT;
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ap_node *n = &g->nodes[ni];
    for (int i = 0; i < n->n_in; i++)
      if (n->in[i] >= 0 && (cg_input_needs_constant(n->op, i) || ap_recurrent_input_constant(n, i) ||
                        ap_control_input_constant(n, i)))
        needed[n->in[i]] = true;
  }
  /* What a needed value is computed from is needed too (an If on
   * Equal(sr, 16000), a Reshape to Concat(Shape(x)[0], n)), up to the
   * operators that read only their input's shape, and only through small
   * values: a condition computed from a whole tensor of data is decided at
   * run time, which the If refuses. Nodes are in topological order, so one
   * pass from the last node back reaches every ancestor. */
  for (int ni = g->n_nodes - 1; ni >= 0; ni--) {
    const ap_node *n = &g->nodes[ni];
    bool wanted = false;
    for (int k = 0; k < n->n_out && !wanted; k++)
      wanted = n->out[k] >= 0 && needed[n->out[k]];
    if (!wanted || n->dead || n->op == AP_OP_SHAPE || n->op == AP_OP_SIZE)
      continue;
    for (int i = 0; i < n->n_in; i++) {
      int v = n->in[i];
      if (v >= 0 && !(fed[v] && !small_input(&g->values[v])))
        needed[v] = true;
    }
  }
  bool any = false;
  for (int v = 0; v < g->n_values; v++)
    any |= fed[v] && needed[v];
  /* The inputs fed at run time get the files' shapes. */
  if (!any)
    return ap_bind_input_dims_dir(g, dir, d);
  ap_status s = ap_bind_inputs_dir(g, dir, d);
  if (s != AP_OK)
    return s;
  for (int v = 0; v < g->n_values; v++)
    if (fed[v] && !needed[v] && g->values[v].data) {
      g->values[v].data = NULL;
      g->values[v].kind = AP_VAL_INPUT;
    }
  return AP_OK;
}

/* s in single quotes for sh. */
static void put_quoted(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'')
      fputs("'\\''", f);
    else
      fputc(*s, f);
  }
  fputc('\'', f);
}

ap_status cg_run_build_script(const char *outdir, const char *name, const char *script,
                              const char *tool, ap_diag *d) {
  size_t plen = strlen(outdir) + strlen(name) + 32;
  char *path = malloc(plen), *log = malloc(plen);
  if (!path || !log) {
    free(path);
    free(log);
    return ap_error(d, AP_ERR_NOMEM, outdir, NULL, NULL, "out of memory");
  }
  snprintf(path, plen, "%s/%s", outdir, name);
  snprintf(log, plen, "%s/build.log", outdir);
  FILE *f = fopen(path, "w");
  ap_status s = AP_OK;
  if (!f) {
    s = ap_error(d, AP_ERR_IO, path, NULL, NULL, "cannot write: %s", strerror(errno));
  } else {
    bool ok = fputs(script, f) >= 0;
    if (fclose(f) != 0 || !ok)
      s = ap_error(d, AP_ERR_IO, path, NULL, NULL, "cannot write");
  }
  if (s == AP_OK) {
    size_t clen = 2 * plen + 64;
    char *cmd = malloc(clen);
    FILE *q = cmd ? fmemopen(cmd, clen, "w") : NULL;
    if (!q) {
      free(cmd);
      s = ap_error(d, AP_ERR_NOMEM, outdir, NULL, NULL, "out of memory");
    } else {
      fputs("sh ", q);
      put_quoted(q, path);
      fputs(" >", q);
      put_quoted(q, log);
      fputs(" 2>&1", q);
      fputc(0, q);
      fclose(q);
      int st = system(cmd);
      if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        s = ap_error(d, AP_ERR_IO, outdir, NULL, NULL,
                     "building the program with '%s' failed; see %s", tool, log);
      free(cmd);
    }
  }
  free(path);
  free(log);
  return s;
}

/* Generated sources up to this many bytes (kernels, devices and main) are
 * compiled as one unit, unless ACCPAR_BUILD_UNITY_BYTES sets another bound
 * (0: never): a compiler process per source costs more than the parallel
 * compiles save. Measured with CFLAGS=-O1 on 2 cores: a
 * 3-device Add, 250 lines, built in 0.64 s of processor time as five units
 * and 0.27 s as one; GPT-2 tiny's inference on cpu:4, 78 KB, in 2.5 s of
 * wall time as six and 1.5 s as one; the small ResNet's training step on
 * tpuv3:1,tpuv2:2, 233 KB, in 1.75 s of wall time (1.72 s of processor
 * time) as five and 1.81 s (1.53 s) as one. */
enum { UNITY_MAX_BYTES = 256 << 10 };

ap_status cg_build_unity_bound(long long *out, ap_diag *d) {
  const char *env = getenv("ACCPAR_BUILD_UNITY_BYTES");
  *out = UNITY_MAX_BYTES;
  if (!env || !*env)
    return AP_OK;
  char *end;
  long long v = strtoll(env, &end, 10);
  if (*end || v < 0)
    return ap_error(d, AP_ERR_USAGE, "ACCPAR_BUILD_UNITY_BYTES", NULL, NULL,
                    "must be a number of bytes, not '%s'", env);
  *out = v;
  return AP_OK;
}

/* The bytes of the generated sources of b, or -1 if one cannot be read. */
static long long source_bytes(const ap_build_opts *b, int n_dev) {
  long long total = 0;
  size_t len = strlen(b->outdir) + 32;
  char *path = malloc(len);
  if (!path)
    return -1;
  for (int i = -2; i < n_dev && total >= 0; i++) {
    struct stat st;
    if (i == -2)
      snprintf(path, len, "%s/kernels.c", b->outdir);
    else if (i == -1)
      snprintf(path, len, "%s/main.c", b->outdir);
    else
      snprintf(path, len, "%s/dev%d.c", b->outdir, i);
    total = stat(path, &st) == 0 ? total + (long long)st.st_size : -1;
  }
  free(path);
  return total;
}

ap_status ap_codegen_build(const ap_build_opts *b, ap_diag *d) {
  const char *cc = b->cc ? b->cc : getenv("CC");
  const char *cflags = b->cflags ? b->cflags : getenv("CFLAGS");
  if (!cc || !*cc)
    cc = "cc";
  if (!cflags)
    cflags = "-O3 -march=native";
  cg_text t;
  if (!cg_text_open(&t))
    return ap_error(d, AP_ERR_NOMEM, b->outdir, NULL, NULL, "out of memory");
  FILE *f = t.f;
  /* CC and CFLAGS are split by the shell, as make would. A small program
   * is compiled and linked as one unit (unit.c includes its sources: the
   * devices' programs have no names of their own at file scope); a larger
   * one source by source, as many at once as there are processors
   * (ACCPAR_BUILD_JOBS overrides), then the objects are linked. */
  int n_dev = b->n_devices > 1 ? b->n_devices : 1;
  long long bytes = source_bytes(b, n_dev), unity_max;
  if (cg_build_unity_bound(&unity_max, d) != AP_OK) {
    cg_text_close(&t);
    free(t.s);
    return d->status;
  }
  if (bytes >= 0 && bytes <= unity_max) {
    fprintf(f, "#!/bin/sh\n# Generated by accparc: builds ./model from the sources beside it,\n"
               "# %lld bytes, as one unit.\n"
               "set -e\ncd \"$(dirname \"$0\")\"\n"
               "{\n  echo '#include \"kernels.c\"'\n",
            bytes);
    for (int dev = 0; dev < n_dev; dev++)
      fprintf(f, "  echo '#include \"dev%d.c\"'\n", dev);
    fprintf(f, "  echo '#include \"main.c\"'\n} >unit.c\n%s %s -std=gnu11 -I. -I", cc, cflags);
    put_quoted(f, b->rt_include);
    fprintf(f, " -I");
    put_quoted(f, b->kernels_dir);
    fprintf(f, " -o model.tmp unit.c ");
    put_quoted(f, b->rt_lib);
    fprintf(f, " %s\nrm -f unit.c\nmv model.tmp model\n", b->extra_libs ? b->extra_libs : "");
  } else {
    fprintf(f, "#!/bin/sh\n# Generated by accparc: builds ./model from the sources beside it,\n"
               "# compiling them in parallel (ACCPAR_BUILD_JOBS at a time; default: the processors).\n"
               "set -e\ncd \"$(dirname \"$0\")\"\n"
               "jobs=${ACCPAR_BUILD_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}\n"
               "compile() {\n  %s %s -std=gnu11 -I. -I", cc, cflags);
    put_quoted(f, b->rt_include);
    fprintf(f, " -I");
    put_quoted(f, b->kernels_dir);
    fprintf(f, " -c \"$1.c\" -o \"$1.o\"\n}\n"
               "pids='' running=0 failed=0\n"
               "for unit in kernels");
    for (int dev = 0; dev < n_dev; dev++)
      fprintf(f, " dev%d", dev);
    fprintf(f, " main; do\n"
               "  compile \"$unit\" & pids=\"$pids $!\" running=$((running + 1))\n"
               "  if [ \"$running\" -ge \"$jobs\" ]; then\n"
               "    for p in $pids; do wait \"$p\" || failed=1; done\n"
               "    pids='' running=0\n"
               "  fi\n"
               "done\n"
               "for p in $pids; do wait \"$p\" || failed=1; done\n"
               "[ \"$failed\" -eq 0 ]\n"
               "%s %s -o model.tmp kernels.o", cc, cflags);
    for (int dev = 0; dev < n_dev; dev++)
      fprintf(f, " dev%d.o", dev);
    fprintf(f, " main.o ");
    put_quoted(f, b->rt_lib);
    fprintf(f, " %s\nrm -f kernels.o main.o", b->extra_libs ? b->extra_libs : "");
    for (int dev = 0; dev < n_dev; dev++)
      fprintf(f, " dev%d.o", dev);
    fprintf(f, "\nmv model.tmp model\n");
  }
  if (!cg_text_close(&t)) {
    free(t.s);
    return ap_error(d, AP_ERR_NOMEM, b->outdir, NULL, NULL, "out of memory");
  }
  ap_status s = cg_run_build_script(b->outdir, "build.sh", t.s, cc, d);
  free(t.s);
  return s;
}

/* The C backend: prints a lowered program (codegen.h, "lower.c") as C11
 * sources in the output folder: kernels.c (one function per distinct
 * kernel), dev<d>.c (the steps of device d), main.c (the aprt_program the
 * runtime's main runs) and weights.bin (the constant blob, which main.c
 * assembles into the executable). */
#define _XOPEN_SOURCE 700
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/train.h"
#include "runtime/accpar_rt.h"

typedef struct printer {
  const cg_program *p;
  const cg_device *D;
  FILE *f;
} printer;

/* The program input the loss's fed operand is (training). */
static int fed_input(const cg_program *p) { return p->n_inputs - 1; }

/* Buffer b (or a CG_ARG_*) as a C expression of its pointer type. */
static void put_buf(const printer *P, int b) {
  FILE *f = P->f;
  if (b == CG_ARG_LOSS) {
    fputs("&loss", f);
    return;
  }
  if (b == CG_ARG_LR) {
    fputs("lr", f);
    return;
  }
  if (b == CG_ARG_LABELS) { /* the whole labels tensor, as the runtime read it */
    fprintf(f, "((const int64_t *)in%d)", fed_input(P->p));
    return;
  }
  int r = cg_buf_root(P->D, b);
  const cg_buf *bi = &P->D->bufs[r];
  const char *ct = cg_ctype(P->D->bufs[b].dtype ? P->D->bufs[b].dtype : bi->dtype);
  switch (bi->st) {
  case CG_INPUT: fprintf(f, "((%s *)in%d)", ct, bi->input_index); break;
  case CG_CONST: fprintf(f, "((%s *)(ap_blob + %lld))", ct, (long long)bi->offset); break;
  case CG_PARAM: fprintf(f, "((%s *)(params + %lld))", ct, (long long)bi->offset); break;
  case CG_MOM: fprintf(f, "((%s *)(mom + %lld))", ct, (long long)bi->offset); break;
  case CG_INBOX: fprintf(f, "((%s *)(inbox + %lld))", ct, (long long)bi->offset); break;
  case CG_PACKED: fprintf(f, "((%s *)(packed + %lld))", ct, (long long)bi->offset); break;
  case CG_ARENA: fprintf(f, "((%s *)(arena + %lld))", ct, (long long)bi->offset); break;
  default: ap_die("buffer %d has no storage", b);
  }
}

static const char *const phase_names[] = {"APRT_PHASE_FORWARD", "APRT_PHASE_LOSS",
                                          "APRT_PHASE_BACKWARD", "APRT_PHASE_GRADIENT",
                                          "APRT_PHASE_UPDATE"};

static void put_comm_check(FILE *f, const char *indent) {
  fprintf(f, "%sif (s != APRT_OK)\n%s  goto done;\n", indent, indent);
}

/* An exchange step: this device's sends (boxes of the source) and
 * receives (per mode), then the adds of CG_XM_ADD. */
static void put_xchg(const printer *P, const cg_step *st, const char *ind) {
  FILE *f = P->f;
  const ap_dxfer *t = st->xfer;
  const ap_value *v = &P->p->g->values[t->value];
  int dev = P->D->dev;
  int src = st->args[0], dst = st->mode == CG_XM_ADD ? st->args[2] : st->args[1];
  ap_dbox sbox = P->D->bufs[src].box, dbox = P->D->bufs[st->args[1]].box;
  int64_t count = ap_dbox_volume(v->rank, &sbox);
  int ns = 0, nr = 0;
  /* The sends' list (pass 0) for a whole step or a start, the receives'
   * (pass 1) for a whole step or a finish. */
  int first = st->half == CG_HALF_FINISH, last = st->half == CG_HALF_START ? 0 : 1;
  for (int pass = first; pass <= last; pass++) {
    if (pass > first)
      fprintf(f, "%s  };\n", ind);
    fprintf(f, "%s  static const aprt_xfer %s[] = {\n", ind, pass ? "recvs" : "sends");
    int64_t at = 0;
    for (int k = 0; k < t->n_pieces; k++) {
      const ap_dpiece *pc = &t->pieces[k];
      int sender = st->reverse ? pc->to : pc->from, receiver = st->reverse ? pc->from : pc->to;
      if ((st->skip_local && pc->from == pc->to) || (pass ? receiver : sender) != dev)
        continue;
      fprintf(f, "%s    {%d, ", ind, pass ? sender : receiver);
      if (pass == 0) {
        cg_put_box(f, v->rank, &pc->box, &sbox, 0);
        ns++;
      } else if (st->mode == CG_XM_SUMMANDS) {
        cg_put_box(f, v->rank, &pc->box, &sbox, count * pc->summand);
        nr++;
      } else if (st->mode == CG_XM_ADD) {
        cg_put_box(f, v->rank, &pc->box, &pc->box, at);
        at += ap_dbox_volume(v->rank, &pc->box);
        nr++;
      } else {
        cg_put_box(f, v->rank, &pc->box, &dbox, 0);
        nr++;
      }
      fprintf(f, "},\n");
    }
    if ((pass ? nr : ns) == 0)
      fprintf(f, "%s    {0, {0, 0, {0}, {0}}},\n", ind); /* never read: the count is 0 */
  }
  fprintf(f, "%s  };\n", ind);
  size_t es = ap_dtype_size(v->dtype);
  if (st->half == CG_HALF_START) {
    fprintf(f, "%s  s = aprt_exchange_start(c, ", ind);
    put_buf(P, src);
    fprintf(f, ", %d, sends, %zu, %d);\n", ns, es, st->tag);
  } else if (st->half == CG_HALF_FINISH) {
    fprintf(f, "%s  s = aprt_exchange_finish(c, ", ind);
    put_buf(P, dst);
    fprintf(f, ", %d, recvs, %zu, %d);\n", nr, es, st->tag);
  } else {
    fprintf(f, "%s  s = aprt_exchange(c, ", ind);
    put_buf(P, src);
    fprintf(f, ", %d, sends, ", ns);
    put_buf(P, dst);
    fprintf(f, ", %d, recvs, %zu, %d);\n", nr, es, st->tag);
  }
  char ind2[32];
  snprintf(ind2, sizeof ind2, "%s  ", ind);
  put_comm_check(f, ind2);
  if (st->mode == CG_XM_ADD && nr && st->half != CG_HALF_START) {
    fprintf(f, "%s  static const aprt_box adds[] = {\n", ind);
    for (int k = 0; k < t->n_pieces; k++) {
      const ap_dpiece *pc = &t->pieces[k];
      int receiver = st->reverse ? pc->from : pc->to;
      if ((st->skip_local && pc->from == pc->to) || receiver != dev)
        continue;
      fprintf(f, "%s    ", ind);
      cg_put_box(f, v->rank, &pc->box, &dbox, 0);
      fprintf(f, ",\n");
    }
    fprintf(f, "%s  };\n%s  const float *part = (const float *)", ind, ind);
    put_buf(P, dst);
    fprintf(f, ";\n%s  for (int k = 0; k < %d; k++) {\n%s    aprt_box_add_f32(", ind, nr, ind);
    put_buf(P, st->args[1]);
    fprintf(f, ", &adds[k], part);\n%s    part += aprt_box_volume(&adds[k]);\n%s  }\n", ind, ind);
  }
}

/* The comment naming step st, with half ("start", "finish") when it is
 * printed in two. */
static void put_step_comment(const printer *P, const cg_step *st, const char *ind,
                             const char *half) {
  FILE *f = P->f;
  const ap_graph *g = P->p->g;
  fprintf(f, "%s/* %s", ind, st->what);
  if (st->node >= 0) {
    fprintf(f, " %s '", g->nodes[st->node].op_type);
    cg_put_comment_name(f, g->nodes[st->node].name);
    fprintf(f, "'");
  }
  if (st->value >= 0) {
    fprintf(f, "%s'", st->node >= 0 ? ", of " : " ");
    cg_put_comment_name(f, g->values[st->value].name);
    fprintf(f, "'");
  }
  if (half)
    fprintf(f, ", %s", half);
  fprintf(f, " */\n");
}

/* An all-reduce: fn is aprt_allreduce_sum, _start or _finish. */
static void put_allreduce(const printer *P, const cg_step *st, const char *ind, const char *fn) {
  FILE *f = P->f;
  const ap_graph *g = P->p->g;
  const cg_device *D = P->D;
  const ap_dxfer *t = st->xfer;
  const ap_value *v = &g->values[t->value];
  ap_dbox b = D->bufs[st->args[0]].box;
  int64_t count = ap_dbox_volume(v->rank, &b);
  int n = t->n_group ? t->n_group[D->dev] : t->n_summands;
  if (count == 0 || n < 2) /* so is every member's: they hold equal boxes */
    return;
  fprintf(f, "%s{\n%s  static const int group[] = {", ind, ind);
  for (int k = 0; k < n; k++)
    fprintf(f, "%s%d", k ? ", " : "", ap_dxfer_group(t, D->dev)[k]);
  fprintf(f, "};\n%s  s = %s(c, group, %d, ", ind, fn, n);
  put_buf(P, st->args[0]);
  fprintf(f, ", %lld, NULL, %d);\n", (long long)count, st->tag);
  char ind2[32];
  snprintf(ind2, sizeof ind2, "%s  ", ind);
  put_comm_check(f, ind2);
  fprintf(f, "%s}\n", ind);
}

static const char *const halves[] = {[CG_HALF_WHOLE] = NULL, [CG_HALF_START] = "start",
                                     [CG_HALF_FINISH] = "finish"};
static const char *const allreduce_fns[] = {[CG_HALF_WHOLE] = "aprt_allreduce_sum",
                                            [CG_HALF_START] = "aprt_allreduce_start",
                                            [CG_HALF_FINISH] = "aprt_allreduce_finish"};

static void put_step(const printer *P, const cg_step *st, const char *ind) {
  FILE *f = P->f;
  const ap_graph *g = P->p->g;
  const cg_device *D = P->D;
  put_step_comment(P, st, ind, halves[st->half]);
  switch (st->kind) {
  case CG_S_KERNEL:
    fprintf(f, "%scgk_%d(", ind, st->kernel);
    for (int a = 0; a < st->n_args; a++) {
      if (a)
        fprintf(f, ", ");
      put_buf(P, st->args[a]);
    }
    if (st->work)
      fprintf(f, "%swork", st->n_args ? ", " : "");
    fprintf(f, ");\n");
    if (st->reports_loss) {
      fprintf(f, "%ss = aprt_step_loss(c, step, loss);\n", ind);
      put_comm_check(f, ind);
    }
    break;
  case CG_S_ZERO: {
    int r = cg_buf_root(D, st->args[0]);
    if (D->bufs[r].bytes > 0) {
      fprintf(f, "%smemset(", ind);
      put_buf(P, st->args[0]);
      fprintf(f, ", 0, %lld);\n", (long long)D->bufs[r].bytes);
    }
    break;
  }
  case CG_S_SLICE:
  case CG_S_ADDBOX: {
    /* CG_S_SLICE: the box of args[1] out of args[0]; CG_S_ADDBOX: args[0]
     * into its box of args[1]. */
    bool slice = st->kind == CG_S_SLICE;
    int whole = slice ? st->args[0] : st->args[1], part = slice ? st->args[1] : st->args[0];
    ap_dbox wb = D->bufs[whole].box, pb = D->bufs[part].box;
    const ap_value *v = &g->values[st->value];
    if (ap_dbox_volume(v->rank, &pb) == 0)
      break;
    fprintf(f, "%s{\n%s  static const aprt_box b = ", ind, ind);
    cg_put_box(f, v->rank, &pb, &wb, 0);
    fprintf(f, ";\n%s  %s(", ind, slice ? "aprt_box_pack" : "aprt_box_add_f32");
    put_buf(P, slice ? part : whole);
    fprintf(f, ", ");
    if (slice) {
      put_buf(P, whole);
      fprintf(f, ", &b, %zu);\n%s}\n", ap_dtype_size(v->dtype), ind);
    } else {
      fprintf(f, "&b, ");
      put_buf(P, part);
      fprintf(f, ");\n%s}\n", ind);
    }
    break;
  }
  case CG_S_ALLREDUCE:
    put_allreduce(P, st, ind, allreduce_fns[st->half]);
    break;
  case CG_S_XCHG:
    fprintf(f, "%s{\n", ind);
    put_xchg(P, st, ind);
    fprintf(f, "%s}\n", ind);
    break;
  }
}

/* This device's box b of output index, held in buffer buf. */
static void put_output(const printer *P, const cg_output *o) {
  FILE *f = P->f;
  if (o->value < 0) { /* the loss, a float64 scalar */
    fprintf(f, "  {\n    static const int64_t one[] = {1}, zero[] = {0};\n"
               "    aprt_box box = aprt_box_dense(0, one, zero, one);\n"
               "    s = aprt_output_box(c, %d, &box, &loss);\n",
            o->index);
    put_comm_check(f, "    ");
    fprintf(f, "  }\n");
    return;
  }
  const ap_value *v = &P->p->g->values[o->value];
  fprintf(f, "  {\n    static const int64_t shape[] = {");
  for (int k = 0; k < v->rank; k++)
    fprintf(f, "%s%lld", k ? ", " : "", (long long)v->dims[k]);
  fprintf(f, "%s}, start[] = {", v->rank ? "" : "0");
  for (int k = 0; k < v->rank; k++)
    fprintf(f, "%s%lld", k ? ", " : "", (long long)o->box.lo[k]);
  fprintf(f, "%s}, size[] = {", v->rank ? "" : "0");
  for (int k = 0; k < v->rank; k++)
    fprintf(f, "%s%lld", k ? ", " : "", (long long)(o->box.hi[k] - o->box.lo[k]));
  fprintf(f, "%s};\n", v->rank ? "" : "0");
  fprintf(f, "    aprt_box box = aprt_box_dense(%d, shape, start, size);\n", v->rank);
  fprintf(f, "    s = aprt_output_box(c, %d, &box, ", o->index);
  put_buf(P, o->buf);
  fprintf(f, ");\n");
  put_comm_check(f, "    ");
  fprintf(f, "  }\n");
}

/* Packs this device's box of a run-time input (a CG_INBOX buffer) out of
 * the whole tensor the runtime read. */
static void put_inbox_pack(const printer *P, int b) {
  const cg_buf *bi = &P->D->bufs[b];
  const cg_spec *in = &P->p->inputs[bi->input_index];
  ap_dbox within;
  memset(&within, 0, sizeof within);
  for (int i = 0; i < in->rank; i++)
    within.hi[i] = in->dims[i];
  fprintf(P->f, "  {\n    static const aprt_box b = ");
  cg_put_box(P->f, in->rank, &bi->box, &within, 0);
  fprintf(P->f, ";\n    aprt_box_pack(inbox + %lld, in%d, &b, %zu);\n  }\n",
          (long long)bi->offset, bi->input_index, ap_dtype_size(bi->dtype));
}

static ap_status write_device(const cg_program *p, const cg_device *D, const char *outdir,
                              ap_diag *d) {
  ap_graph *g = p->g;
  cg_text t;
  if (!cg_text_open(&t))
    return cg_oom(g, d);
  printer P = {p, D, t.f};
  FILE *f = t.f;
  int dev = D->dev;
  bool train = p->o.train, mom = train && p->o.momentum != 0;
  fprintf(f, "/* Generated by accparc: the %sprogram of device %d (%s).\n"
             " * Activations%s live in one arena of %lld bytes planned from last use\n"
             " * (%lld bytes without reuse)%s; constants in the blob of weights.bin",
          train ? "training " : "", dev,
          p->n_dev > 1 ? "its box of every value" : "the whole graph",
          train ? " and gradients" : "", (long long)D->arena_bytes,
          (long long)D->unshared_bytes, train ? " over a whole step" : "");
  if (train)
    fprintf(f, ";\n * the %lld bytes of its trainable weights are a writable copy of their\n"
               " * boxes in the blob",
            (long long)D->params_bytes);
  fprintf(f, ". */\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n\n"
             "#include \"accpar_rt.h\"\n#include \"kernels.h\"\n\n"
             "extern const unsigned char ap_blob[];\n"
             "int ap_device_%d(aprt_comm *c);\n\n",
          dev);
  fprintf(f, "int ap_device_%d(aprt_comm *c) {\n", dev);
  /* The rank's memory rather than static: under the threads transport every
   * device is a thread of one process and needs memory of its own. The
   * runtime keeps it across repeated runs (--repeat), populated. */
  fprintf(f, "  unsigned char *arena = aprt_buffer(c, 0, %lld);\n",
          (long long)(D->arena_bytes ? D->arena_bytes : CG_ALIGN));
  fprintf(f, "  float *work = aprt_buffer(c, 1, cgk_work_floats() * 4 + %d);\n", CG_ALIGN);
  fprintf(f, "  if (!arena || !work)\n    return aprt_fail(c, APRT_ERR_NOMEM, "
             "\"device %d: out of memory (%lld bytes)\");\n",
          dev, (long long)D->arena_bytes);
  if (train) {
    fprintf(f, "  unsigned char *params = aprt_buffer(c, 2, %lld);\n",
            (long long)(D->params_bytes ? D->params_bytes : CG_ALIGN));
    if (mom)
      fprintf(f, "  unsigned char *mom = aprt_buffer(c, 3, %lld);\n",
              (long long)(D->params_bytes ? D->params_bytes : CG_ALIGN));
    fprintf(f, "  if (!params%s)\n    return aprt_fail(c, APRT_ERR_NOMEM, "
               "\"device %d: out of memory (%lld bytes of weights)\");\n",
            mom ? " || !mom" : "", dev, (long long)D->params_bytes);
  }
  bool has_inbox = false;
  for (int b = 0; b < D->n_bufs; b++)
    has_inbox |= D->bufs[b].st == CG_INBOX;
  if (has_inbox)
    fprintf(f, "  unsigned char *inbox = aprt_buffer(c, 4, %lld);\n"
               "  if (!inbox)\n    return aprt_fail(c, APRT_ERR_NOMEM, "
               "\"device %d: out of memory (%lld bytes of inputs)\");\n",
            (long long)(D->inbox_bytes ? D->inbox_bytes : CG_ALIGN), dev,
            (long long)D->inbox_bytes);
  fprintf(f, "  (void)work;\n  aprt_status s = APRT_OK;\n");
  if (D->n_prep) {
    /* The constant operands packed as their kernels read them, on the first
     * run: later runs (--repeat) find them where this one left them. */
    fprintf(f, "  int packed_new;\n"
               "  unsigned char *packed = aprt_buffer_new(c, 5, %lld, &packed_new);\n"
               "  if (!packed)\n    return aprt_fail(c, APRT_ERR_NOMEM, "
               "\"device %d: out of memory (%lld bytes of packed weights)\");\n"
               "  if (packed_new) {\n",
            (long long)D->packed_bytes, dev, (long long)D->packed_bytes);
    for (int i = 0; i < D->n_prep; i++)
      put_step(&P, &D->prep[i], "    ");
    fprintf(f, "  }\n");
  }
  if (train) {
    /* The weights start from the blob's values on every run, the momentum
     * from zero. */
    for (int b = 0; b < p->g->n_values; b++)
      if (D->bufs[b].st == CG_PARAM && D->bufs[b].bytes)
        fprintf(f, "  memcpy(params + %lld, ap_blob + %lld, %lld);\n",
                (long long)D->bufs[b].offset, (long long)D->bufs[b].src,
                (long long)D->bufs[b].bytes);
    if (mom && D->params_bytes)
      fprintf(f, "  memset(mom, 0, %lld);\n", (long long)D->params_bytes);
    fprintf(f, "  const aprt_args *args = aprt_get_args(c);\n  const float lr = args->lr;\n"
               "  (void)lr;\n  double loss = 0;\n");
  }
  for (int i = 0; i < p->n_inputs; i++) {
    fprintf(f, "  const void *in%d = aprt_input(c, %d)->data; /* '", i, i);
    cg_put_comment_name(f, p->inputs[i].name);
    fprintf(f, "' */\n  (void)in%d;\n", i);
    if (p->bound_inputs[i] >= 0) {
      /* Bound at compile time (it fixed shapes): the run must feed the same. */
      const cg_spec *in = &p->inputs[i];
      int64_t bytes = ap_numel(in->rank, in->dims) * (int64_t)ap_dtype_size(in->dtype);
      fprintf(f, "  if (%lld && memcmp(in%d, ap_blob + %lld, %lld) != 0) {\n"
                 "    return aprt_fail(c, APRT_ERR_MISMATCH, \"input %d (",
              (long long)bytes, i, (long long)p->bound_inputs[i], (long long)bytes, i);
      cg_put_comment_name(f, in->name);
      fprintf(f, ") differs from the tensor bound when the program was compiled\");\n  }\n");
    }
    for (int b = 0; b < D->n_bufs; b++)
      if (D->bufs[b].st == CG_INBOX && D->bufs[b].input_index == i && D->bufs[b].bytes)
        put_inbox_pack(&P, b);
  }
  const char *ind = train ? "    " : "  ";
  if (train)
    fprintf(f, "  for (int step = 0; step < args->steps; step++) {\n");
  for (int si = 0; si < D->n_steps; si++) {
    const cg_step *st = &D->steps[si];
    if (si == 0 || D->steps[si - 1].phase != st->phase) {
      if (si)
        fprintf(f, "%saprt_phase_end(c);\n", ind);
      fprintf(f, "%saprt_phase_begin(c, %s);\n", ind, phase_names[st->phase]);
    }
    if (cg_row_changes(p, D, si))
      fprintf(f, "%saprt_row(c, %d);\n", ind, st->row);
    put_step(&P, st, ind);
  }
  if (D->n_steps)
    fprintf(f, "%saprt_phase_end(c);\n", ind);
  if (cg_row_changes(p, D, D->n_steps))
    fprintf(f, "%saprt_row(c, -1);\n", ind);
  if (train)
    fprintf(f, "  }\n");
  for (int i = 0; i < D->n_outs; i++)
    put_output(&P, &D->outs[i]);
  fprintf(f, "done:\n  return s;\n}\n");
  char name[32];
  snprintf(name, sizeof name, "dev%d.c", dev);
  return cg_write_text(g, d, outdir, name, &t);
}

static ap_status write_main(const cg_program *p, const char *outdir, const char *blob_path,
                            ap_diag *d) {
  ap_graph *g = p->g;
  cg_text t;
  if (!cg_text_open(&t))
    return cg_oom(g, d);
  FILE *f = t.f;
  bool train = p->o.train;
  fprintf(f, "/* Generated by accparc: the %sprogram's description and main. */\n"
             "#include <stdint.h>\n\n#include \"accpar_rt.h\"\n\n",
          train ? "training " : "");
  for (int dev = 0; dev < p->n_dev; dev++)
    fprintf(f, "int ap_device_%d(aprt_comm *c);\n", dev);
  /* The constants are assembled into the executable as they are, which keeps
   * large models out of the C compiler's parser. */
  fprintf(f, "\n");
  cg_put_blob_asm(f, blob_path);
  cg_put_device_names(f, p->n_dev > 1 ? g->plan : NULL, p->n_dev, p->o.device_kind);
  /* Bytes each device sends: the plan's prediction (passes/distribute.c),
   * which the transfers move exactly. */
  fprintf(f, "static const uint64_t predicted_bytes[] = {");
  for (int dev = 0; dev < p->n_dev; dev++)
    fprintf(f, "%s%.0f", dev ? ", " : "", p->predicted_bytes[dev]);
  fprintf(f, "};\n");
  if (p->plan_step_bytes) {
    fprintf(f, "/* The plan's step bytes, per device:");
    for (int dev = 0; dev < p->n_dev; dev++)
      fprintf(f, " %.0f", p->plan_step_bytes[dev]);
    fprintf(f, " */\n");
  }
  fprintf(f, "\n");
  if (p->n_inputs) {
    fprintf(f, "static const aprt_tensor_spec inputs[] = {\n");
    for (int i = 0; i < p->n_inputs; i++) {
      const cg_spec *s = &p->inputs[i];
      cg_put_spec(f, s->name, s->dtype, s->rank, s->dims, s->classes, s->ignore);
    }
    fprintf(f, "};\n\n");
  }
  if (p->n_outputs) {
    fprintf(f, "static const aprt_tensor_spec outputs[] = {\n");
    for (int i = 0; i < p->n_outputs; i++) {
      const cg_spec *s = &p->outputs[i];
      cg_put_spec(f, s->name, s->dtype, s->rank, s->dims, s->classes, s->ignore);
    }
    fprintf(f, "};\n\n");
  }
  if (p->n_rows) {
    fprintf(f, "static const char *const row_names[] = {");
    for (int r = 0; r < p->n_rows; r++) {
      fputs(r % 4 ? " " : "\n  ", f);
      cg_put_cstring(f, p->row_names[r]);
      fputc(',', f);
    }
    fprintf(f, "\n};\n\n");
  }
  if (p->n_rows && p->row_time_s) {
    fprintf(f, "static const double predicted_row_time_s[] = {");
    for (int r = 0; r < p->n_rows; r++)
      fprintf(f, "%s%.9g,", r % 6 ? " " : "\n  ", p->row_time_s[r]);
    fprintf(f, "\n};\n\n");
  }
  cg_put_run(f, p->n_dev);
  fprintf(f, "static const aprt_program program = {\n  .name = ");
  cg_put_cstring(f, p->o.model_name ? p->o.model_name : "model");
  fprintf(f, ",\n  .ndev = %d,\n  .device_names = device_names,\n  .train = %d,\n"
             "  .n_inputs = %d,\n  .inputs = %s,\n  .n_outputs = %d,\n  .outputs = %s,\n"
             "  .%s = predicted_bytes,\n  .run = run,\n"
             "  .constants = ap_blob,\n  .constants_bytes = %lld,\n",
          p->n_dev, train, p->n_inputs, p->n_inputs ? "inputs" : "0", p->n_outputs,
          p->n_outputs ? "outputs" : "0",
          train ? "predicted_step_bytes" : "predicted_fixed_bytes", (long long)p->blob_bytes);
  if (p->predicted_step_time_s > 0)
    fprintf(f, "  .predicted_step_time_s = %.9g,\n", p->predicted_step_time_s);
  if (p->n_rows)
    fprintf(f, "  .n_rows = %d,\n  .row_names = row_names,\n", p->n_rows);
  if (p->n_rows && p->row_time_s)
    fprintf(f, "  .predicted_row_time_s = predicted_row_time_s,\n");
  fprintf(f, "};\n\n");
  fprintf(f, "int main(int argc, char **argv) { return aprt_main(argc, argv, &program); }\n");
  return cg_write_text(g, d, outdir, "main.c", &t);
}

/* ---- kernels ------------------------------------------------------------------ */

static const char kernels_minmax[] =
    "#define AP_MINMAX(T) \\\n"
    "  static inline T ap_max_##T(T p, T q) { return (p != p || p > q) ? p : q; } \\\n"
    "  static inline T ap_min_##T(T p, T q) { return (p != p || p < q) ? p : q; }\n"
    "AP_MINMAX(float)\nAP_MINMAX(double)\nAP_MINMAX(int8_t)\nAP_MINMAX(uint8_t)\n"
    "AP_MINMAX(int16_t)\nAP_MINMAX(uint16_t)\nAP_MINMAX(int32_t)\nAP_MINMAX(uint32_t)\n"
    "AP_MINMAX(int64_t)\nAP_MINMAX(uint64_t)\n";

typedef struct kprinter {
  const cg_kir *k;
  FILE *f;
  char (*names)[24];  /* per variable */
} kprinter;

static const char *const role_names[] = {"x", "y", "dy", "dx", "work", "labels", "all_labels",
                                         "w", "loss", "w", "g", "v", "lr"};
static const bool role_slotted[] = {true, true, true, true};

static void put_param_name(FILE *f, int role, int slot) {
  fprintf(f, "%s", role_names[role]);
  if (role <= CG_R_DX && role_slotted[role])
    fprintf(f, "%d", slot);
}

/* A float constant in the shortest decimal that reads back exactly
 * ("0.5f", "0.044715"), or as cg_literal spells it (hexadecimal, INFINITY). */
static void put_float(FILE *f, bool single, double v) {
  char buf[64];
  if (isfinite(v))
    for (int digits = 1; digits <= 17; digits++) {
      snprintf(buf, sizeof buf, "%.*g", digits, v);
      if (single ? strtof(buf, NULL) != (float)v : strtod(buf, NULL) != v)
        continue;
      if (!strpbrk(buf, ".en"))
        strcat(buf, ".0");
      fprintf(f, "%s%s", buf, single ? "f" : "");
      return;
    }
  fputs(cg_literal(buf, single ? AP_DT_FLOAT : AP_DT_DOUBLE, v), f);
}

/* The C spelling of a constant of type t. */
static void put_const(FILE *f, cg_ty t, const cg_x *x) {
  switch (t) {
  case CG_T_F32: put_float(f, true, x->f); return;
  case CG_T_F64: put_float(f, false, x->f); return;
  case CG_T_U64: fprintf(f, "UINT64_C(%llu)", (unsigned long long)x->i); return;
  case CG_T_U32: case CG_T_U16: case CG_T_U8:
    fprintf(f, "%lluu", (unsigned long long)x->i);
    return;
  case CG_T_I64:
    if (x->i == INT64_MIN)
      fputs("INT64_MIN", f);
    else if (x->i >= INT32_MIN && x->i <= INT32_MAX)
      fprintf(f, "%lld", (long long)x->i);
    else
      fprintf(f, "INT64_C(%lld)", (long long)x->i);
    return;
  default:
    if (x->i == INT32_MIN)
      fputs("INT32_MIN", f);
    else
      fprintf(f, "%lld", (long long)x->i);
  }
}

/* The C type of a pointer to elem, const or not. */
static void put_ptr_type(FILE *f, cg_ty elem, bool is_const) {
  fprintf(f, "%s%s *", is_const ? "const " : "", cg_ty_c(elem));
}

static void put_x(const kprinter *P, const cg_x *x) {
  FILE *f = P->f;
  static const char *const ops[] = {
      [CG_X_ADD] = "+", [CG_X_SUB] = "-", [CG_X_MUL] = "*", [CG_X_DIV] = "/", [CG_X_REM] = "%",
      [CG_X_LT] = "<",  [CG_X_LE] = "<=", [CG_X_GT] = ">",  [CG_X_GE] = ">=", [CG_X_EQ] = "==",
      [CG_X_NE] = "!=", [CG_X_AND] = "&&", [CG_X_OR] = "||"};
  switch ((cg_xop)x->op) {
  case CG_X_CONST: put_const(f, (cg_ty)x->ty, x); break;
  case CG_X_VAR: fputs(P->names[x->id], f); break;
  case CG_X_PARAM: put_param_name(f, x->role, x->slot); break;
  case CG_X_DATA: fprintf(f, "table%d", x->id); break;
  case CG_X_LOAD:
    put_x(P, x->a[0]);
    fputc('[', f);
    put_x(P, x->a[1]);
    fputc(']', f);
    break;
  case CG_X_INDEX:
    fputc('(', f);
    put_x(P, x->a[0]);
    fputs(" + ", f);
    put_x(P, x->a[1]);
    fputc(')', f);
    break;
  case CG_X_VIEW:
    fputs("((", f);
    put_ptr_type(f, (cg_ty)x->elem, x->is_const);
    fprintf(f, ")(%svoid *)", x->is_const ? "const " : "");
    put_x(P, x->a[0]);
    fputc(')', f);
    break;
  case CG_X_CAST:
    fprintf(f, "((%s)", cg_ty_c((cg_ty)x->ty));
    put_x(P, x->a[0]);
    fputc(')', f);
    break;
  case CG_X_NEG:
  case CG_X_NOT:
    fprintf(f, "(%s", x->op == CG_X_NEG ? "-" : "!");
    put_x(P, x->a[0]);
    fputc(')', f);
    break;
  case CG_X_MAX:
  case CG_X_MIN:
    fprintf(f, "ap_%s_%s(", x->op == CG_X_MAX ? "max" : "min", cg_ty_c((cg_ty)x->ty));
    put_x(P, x->a[0]);
    fputs(", ", f);
    put_x(P, x->a[1]);
    fputc(')', f);
    break;
  case CG_X_SELECT:
    fputc('(', f);
    put_x(P, x->a[0]);
    fputs(" ? ", f);
    put_x(P, x->a[1]);
    fputs(" : ", f);
    put_x(P, x->a[2]);
    fputc(')', f);
    break;
  case CG_X_CALL:
    /* apk_math.h's: vectorisable, the LLVM backend's too (print_llvm.c's math_of) */
    if (x->fn == CG_FN_TANH && x->ty == CG_T_F32)
      fputs("apk_tanhf(", f);
    else if (x->fn == CG_FN_EXP)
      fputs(x->ty == CG_T_F32 ? "apk_expf(" : "apk_exp(", f);
    else
      fprintf(f, "%s%s(", cg_fn_name((cg_fn)x->fn), x->ty == CG_T_F32 ? "f" : "");
    put_x(P, x->a[0]);
    if (x->a[1]) {
      fputs(", ", f);
      put_x(P, x->a[1]);
    }
    fputc(')', f);
    break;
  default:
    fputc('(', f);
    put_x(P, x->a[0]);
    fprintf(f, " %s ", ops[x->op]);
    put_x(P, x->a[1]);
    fputc(')', f);
  }
}

static void put_conv_fields(FILE *f, const int64_t *v) {
  static const char *const fields[CG_CONV_FIELDS] = {
      "batch",      "in_channels", "in_h",    "in_w",      "out_channels", "kernel_h",
      "kernel_w",   "stride_h",    "stride_w", "pad_top",   "pad_left",     "pad_bottom",
      "pad_right",  "dilation_h",  "dilation_w", "groups"};
  fputc('{', f);
  for (int i = 0; i < CG_CONV_FIELDS; i++)
    fprintf(f, "%s.%s = %lld", i ? ", " : "", fields[i], (long long)v[i]);
  fputc('}', f);
}

static void put_arg(const kprinter *P, const cg_x *x) {
  if (x)
    put_x(P, x);
  else
    fputs("NULL", P->f);
}

static void put_stmts(const kprinter *P, const cg_s *s, int depth) {
  FILE *f = P->f;
  static const char *const conv_fns[] = {"apk_conv2d_forward", "apk_conv2d_backward_data",
                                         "apk_conv2d_backward_weights",
                                         "apk_conv2d_forward_packed"};
  for (; s; s = s->next) {
    fprintf(f, "%*s", 2 * depth, "");
    switch ((cg_sop)s->op) {
    case CG_ST_DECL: {
      const cg_var *v = &P->k->vars[s->var];
      if (v->ty == CG_T_PTR)
        put_ptr_type(f, (cg_ty)v->elem, v->is_const);
      else
        fprintf(f, "%s%s ", v->mut ? "" : "const ", cg_ty_c((cg_ty)v->ty));
      fprintf(f, "%s = ", P->names[s->var]);
      put_x(P, s->a[0]);
      fputs(";\n", f);
      break;
    }
    case CG_ST_SET:
      fprintf(f, "%s = ", P->names[s->var]);
      put_x(P, s->a[0]);
      fputs(";\n", f);
      break;
    case CG_ST_STORE:
      put_x(P, s->a[0]);
      fputc('[', f);
      put_x(P, s->a[1]);
      fputs("] = ", f);
      put_x(P, s->a[2]);
      fputs(";\n", f);
      break;
    case CG_ST_FOR: {
      const char *v = P->names[s->var];
      fprintf(f, "for (int64_t %s = ", v);
      put_x(P, s->a[0]);
      fprintf(f, "; %s < ", v);
      put_x(P, s->a[1]);
      fprintf(f, "; %s++) {\n", v);
      put_stmts(P, s->body, depth + 1);
      fprintf(f, "%*s}\n", 2 * depth, "");
      break;
    }
    case CG_ST_IF:
      fputs("if (", f);
      put_x(P, s->a[0]);
      fputs(") {\n", f);
      put_stmts(P, s->body, depth + 1);
      if (s->els) {
        fprintf(f, "%*s} else {\n", 2 * depth, "");
        put_stmts(P, s->els, depth + 1);
      }
      fprintf(f, "%*s}\n", 2 * depth, "");
      break;
    case CG_ST_MEMCPY:
    case CG_ST_MEMSET:
      fprintf(f, "%s(", s->op == CG_ST_MEMCPY ? "memcpy" : "memset");
      put_x(P, s->a[0]);
      fputs(", ", f);
      if (s->op == CG_ST_MEMCPY) {
        put_x(P, s->a[1]);
        fputs(", ", f);
        put_x(P, s->a[2]);
      } else {
        fprintf(f, "%d, ", (int)s->iarg[0]);
        put_x(P, s->a[1]);
      }
      fputs(");\n", f);
      break;
    case CG_ST_SGEMM: {
      char al[64], be[64];
      bool pb = s->iarg[8] != 0;
      if (pb)
        fprintf(f, "apk_sgemm_pb(%lld, ", (long long)s->iarg[0]);
      else
        fprintf(f, "apk_sgemm(%lld, %lld, ", (long long)s->iarg[0], (long long)s->iarg[1]);
      fprintf(f, "%lld, %lld, %lld, %s, ", (long long)s->iarg[2], (long long)s->iarg[3],
              (long long)s->iarg[4], cg_literal(al, AP_DT_FLOAT, s->farg[0]));
      put_x(P, s->a[0]);
      fprintf(f, ", %lld, ", (long long)s->iarg[5]);
      put_x(P, s->a[1]);
      if (pb)
        fprintf(f, ", %s, ", cg_literal(be, AP_DT_FLOAT, s->farg[1]));
      else
        fprintf(f, ", %lld, %s, ", (long long)s->iarg[6],
                cg_literal(be, AP_DT_FLOAT, s->farg[1]));
      put_x(P, s->a[2]);
      fprintf(f, ", %lld, ", (long long)s->iarg[7]);
      put_x(P, s->a[3]);
      fputs(");\n", f);
      break;
    }
    case CG_ST_CONV:
      fputs("{\n", f);
      fprintf(f, "%*sstatic const apk_conv2d conv = ", 2 * depth + 2, "");
      put_conv_fields(f, s->iarg);
      fprintf(f, ";\n%*s%s(&conv", 2 * depth + 2, "", conv_fns[s->lib]);
      for (int i = 0; i < s->n_args; i++) {
        fputs(", ", f);
        put_arg(P, s->a[i]);
      }
      fprintf(f, ");\n%*s}\n", 2 * depth, "");
      break;
    case CG_ST_PACK:
      if (s->lib == CG_PACK_B) {
        fprintf(f, "apk_pack_b_all(%lld, %lld, %lld, ", (long long)s->iarg[0],
                (long long)s->iarg[1], (long long)s->iarg[2]);
        put_x(P, s->a[0]);
        fprintf(f, ", %lld, ", (long long)s->iarg[3]);
        put_x(P, s->a[1]);
        fputs(");\n", f);
        break;
      }
      fputs("{\n", f);
      fprintf(f, "%*sstatic const apk_conv2d conv = ", 2 * depth + 2, "");
      put_conv_fields(f, s->iarg);
      fprintf(f, ";\n%*sapk_conv2d_pack_weights(&conv, ", 2 * depth + 2, "");
      put_x(P, s->a[0]);
      fputs(", ", f);
      put_x(P, s->a[1]);
      fprintf(f, ");\n%*s}\n", 2 * depth, "");
      break;
    }
  }
}

/* The kernel's signature: "const float *restrict x0, float *restrict y0". */
static void put_signature(FILE *f, const cg_kir *k) {
  for (int i = 0; i < k->n_params; i++) {
    const cg_param *pa = &k->params[i];
    if (i)
      fputs(", ", f);
    if (pa->scalar)
      fprintf(f, "%s ", cg_ty_c((cg_ty)pa->ty));
    else
      fprintf(f, "%s%s *%s", pa->is_const ? "const " : "", cg_ty_c((cg_ty)pa->ty),
              pa->is_restrict ? "restrict " : "");
    put_param_name(f, pa->role, pa->slot);
  }
  if (!k->n_params)
    fputs("void", f);
}

/* Names every variable of k: its hint, numbered when the hint is taken. */
static bool name_variables(const cg_kir *k, char (*names)[24]) {
  for (int i = 0; i < k->n_vars; i++) {
    const char *hint = k->vars[i].name;
    for (int n = 0;; n++) {
      if (n)
        snprintf(names[i], sizeof names[i], "%s%d", hint, n);
      else
        snprintf(names[i], sizeof names[i], "%s", hint);
      bool taken = false;
      for (int j = 0; j < i && !taken; j++)
        taken = strcmp(names[j], names[i]) == 0;
      for (int j = 0; j < k->n_params && !taken; j++) {
        char pn[24];
        snprintf(pn, sizeof pn, "%s%d", role_names[k->params[j].role], k->params[j].slot);
        taken = strcmp(pn, names[i]) == 0 || strcmp(role_names[k->params[j].role], names[i]) == 0;
      }
      taken |= strncmp(names[i], "table", 5) == 0 || strcmp(names[i], "conv") == 0;
      if (!taken)
        break;
    }
  }
  return true;
}

static void put_table(FILE *f, const cg_ktable *t, int id) {
  fprintf(f, "  static const %s table%d[%lld] = {", cg_ty_c((cg_ty)t->ty), id, (long long)t->n);
  char lit[64];
  for (int64_t i = 0; i < t->n; i++) {
    if (i)
      fputs(", ", f);
    switch ((cg_ty)t->ty) {
    case CG_T_F32: fputs(cg_literal(lit, AP_DT_FLOAT, ((const float *)t->data)[i]), f); break;
    case CG_T_F64: fputs(cg_literal(lit, AP_DT_DOUBLE, ((const double *)t->data)[i]), f); break;
    case CG_T_I8: fprintf(f, "%d", ((const int8_t *)t->data)[i]); break;
    case CG_T_U8: fprintf(f, "%uu", ((const uint8_t *)t->data)[i]); break;
    case CG_T_I16: fprintf(f, "%d", ((const int16_t *)t->data)[i]); break;
    case CG_T_U16: fprintf(f, "%uu", ((const uint16_t *)t->data)[i]); break;
    case CG_T_I32:
      if (((const int32_t *)t->data)[i] == INT32_MIN)
        fputs("INT32_MIN", f);
      else
        fprintf(f, "%d", ((const int32_t *)t->data)[i]);
      break;
    case CG_T_U32: fprintf(f, "%uu", ((const uint32_t *)t->data)[i]); break;
    case CG_T_I64: {
      int64_t v = ((const int64_t *)t->data)[i];
      if (v == INT64_MIN)
        fputs("INT64_MIN", f);
      else
        fprintf(f, "INT64_C(%lld)", (long long)v);
      break;
    }
    default: fprintf(f, "UINT64_C(%llu)", (unsigned long long)((const uint64_t *)t->data)[i]);
    }
  }
  fputs("};\n", f);
}

/* The scratch kernel k needs, as a C expression of size_t. */
static void put_work(FILE *f, const cg_kir *k) {
  fprintf(f, "(size_t)%lld", (long long)k->work_floats);
  for (int i = 0; i < k->n_work_terms; i++) {
    const cg_work_term *t = &k->work_terms[i];
    if (t->conv) {
      fputs(" + apk_conv2d_work_floats(&(apk_conv2d)", f);
      put_conv_fields(f, t->v);
      fputc(')', f);
    } else {
      fprintf(f, " + apk_sgemm_work_floats(%lld, %lld, %lld)", (long long)t->v[0],
              (long long)t->v[1], (long long)t->v[2]);
    }
  }
}

static ap_status write_kernels(const cg_program *p, const char *outdir, ap_diag *d) {
  ap_graph *g = p->g;
  cg_text h, c;
  if (!cg_text_open(&h))
    return cg_oom(g, d);
  if (!cg_text_open(&c)) {
    cg_text_close(&h);
    free(h.s);
    return cg_oom(g, d);
  }
  fprintf(h.f, "/* Generated by accparc: kernel prototypes. */\n#ifndef ACCPAR_GEN_KERNELS_H\n"
               "#define ACCPAR_GEN_KERNELS_H\n#include <stddef.h>\n#include <stdint.h>\n\n"
               "/* Floats of scratch the largest kernel needs. */\nsize_t cgk_work_floats(void);\n");
  fprintf(c.f, "/* Generated by accparc: the kernels of this %s, each emitted once. */\n"
               "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n\n"
               "#include \"apk_math.h\"\n#include \"kernels.h\"\n\n"
               "/* Max and Min as numpy's maximum and minimum: a NaN operand wins. */\n%s",
          p->o.train ? "training program" : "program", kernels_minmax);
  if (p->needs_kernels_lib)
    fprintf(c.f, "\n/* The project's GEMM and convolution, static in this unit so the\n"
                 " * compiler specialises them for the constant shapes of the calls. */\n"
                 "#define APK_STATIC\n#include \"gemm.c\"\n#include \"conv.c\"\n");
  ap_status s = AP_OK;
  for (int i = 0; i < p->n_kernels && s == AP_OK; i++) {
    const cg_kir *k = p->kernels[i];
    char(*names)[24] = ap_arena_array(g->arena, (size_t)k->n_vars + 1, sizeof *names);
    if (!names) {
      s = cg_oom(g, d);
      break;
    }
    name_variables(k, names);
    kprinter P = {k, c.f, names};
    fprintf(h.f, "void cgk_%d(", i);
    put_signature(h.f, k);
    fprintf(h.f, ");\n");
    fprintf(c.f, "\n/* ");
    cg_put_comment_name(c.f, k->key);
    fprintf(c.f, " */\nvoid cgk_%d(", i);
    put_signature(c.f, k);
    fprintf(c.f, ") {\n");
    for (int t = 0; t < k->n_tables; t++)
      put_table(c.f, &k->tables[t], t);
    put_stmts(&P, k->body, 1);
    fprintf(c.f, "}\n");
  }
  fprintf(c.f, "\nsize_t cgk_work_floats(void) {\n  size_t most = 0, need;\n  (void)need;\n");
  for (int i = 0; i < p->n_kernels; i++)
    if (cg_kir_needs_work(p->kernels[i])) {
      fprintf(c.f, "  need = ");
      put_work(c.f, p->kernels[i]);
      fprintf(c.f, ";\n  if (need > most)\n    most = need;\n");
    }
  fprintf(c.f, "  return most;\n}\n");
  fprintf(h.f, "\n#endif\n");
  if (s != AP_OK) {
    cg_text_close(&h);
    free(h.s);
    cg_text_close(&c);
    free(c.s);
    return s;
  }
  s = cg_write_text(g, d, outdir, "kernels.h", &h);
  if (s != AP_OK) {
    cg_text_close(&c);
    free(c.s);
    return s;
  }
  return cg_write_text(g, d, outdir, "kernels.c", &c);
}

ap_status cg_write_blob(const cg_program *p, const char *outdir, ap_diag *d) {
  ap_graph *g = p->g;
  unsigned char *blob = ap_arena_alloc(g->arena, (size_t)p->blob_bytes + 1);
  if (!blob)
    return cg_oom(g, d);
  for (int i = 0; i < p->n_blob; i++) {
    const ap_value *v = p->blob[i].view;
    int64_t bytes = ap_numel(v->rank, v->dims) * (int64_t)ap_dtype_size(v->dtype);
    if (bytes)
      memcpy(blob + p->blob[i].offset, v->data, (size_t)bytes);
  }
  return cg_write_file(g, d, outdir, "weights.bin", blob, (size_t)p->blob_bytes);
}

ap_status cg_print_c(const cg_program *p, const char *outdir, const cg_emit_opts *o,
                     ap_diag *d) {
  (void)o;
  char *blob_path = NULL;
  ap_status s = cg_prepare_outdir(p->g, d, outdir, &blob_path);
  if (s == AP_OK)
    s = cg_write_blob(p, outdir, d);
  if (s == AP_OK)
    s = write_kernels(p, outdir, d);
  for (int dev = 0; s == AP_OK && dev < p->n_dev; dev++)
    s = write_device(p, &p->devs[dev], outdir, d);
  if (s == AP_OK)
    s = write_main(p, outdir, blob_path, d);
  return s;
}

ap_status ap_codegen_c(ap_graph *g, const ap_codegen_opts *o, ap_diag *d) {
  cg_program *p = NULL;
  ap_status s = cg_lower_codegen(g, o, &p, d);
  if (s == AP_OK)
    s = cg_print_c(p, o->outdir, NULL, d);
  return s;
}

ap_status cg_emit_train_program(ap_graph *g, const cg_train_opts *o, ap_diag *d) {
  cg_lower_opts lo = {.train = true,
                      .loss = o->loss,
                      .momentum = o->momentum,
                      .grad_inputs = o->grad_inputs,
                      .export_grads = o->export_grads,
                      .export_weights = o->export_weights,
                      .model_name = o->model_name,
                      .device_kind = o->device_kind};
  cg_program *p = NULL;
  ap_status s = cg_lower(g, &lo, &p, d);
  if (s == AP_OK)
    s = cg_print_c(p, o->outdir, NULL, d);
  return s;
}

/* The ONNX frontend: loading real and hand-made models, every tensor
 * encoding, external data and its refusals, malformed and truncated input,
 * running out of memory at every allocation, TensorProto files, and the
 * writer's round trip checked by ONNX's own checker.
 *
 * Hand-made models come from tests/data/make_models.py. */
#define _XOPEN_SOURCE 700 /* mkdtemp, symlink */

#include <criterion/criterion.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "ir/ir.h"

#define DATA(p) ACCPAR_SOURCE_DIR "/tests/data/" p
#define MNIST ACCPAR_SHARED_DIR "/models/mnist-8/model.onnx"
#define LIGHT(p) ACCPAR_SHARED_DIR "/onnx-tests/light/" p
#define NODE_TEST(p) ACCPAR_ONNX_TESTDATA "/node/" p "/model.onnx"

/* ---- helpers --------------------------------------------------------------- */

static ap_graph *load_ok(const char *path) {
  ap_graph *g = NULL;
  ap_diag d = {0};
  ap_status s = ap_load_onnx(path, &g, &d);
  cr_assert_eq(s, AP_OK, "%s: %s (%s)", path, d.message, ap_status_name(s));
  cr_assert_not_null(g);
  cr_assert_eq(d.status, AP_OK);
  return g;
}

/* Loads a model that must fail: checks the status, that no graph comes
 * back, and that the message is one line naming the file. */
static void load_fails(const char *path, ap_status want, const char *substr) {
  ap_graph *g = (ap_graph *)1;
  ap_diag d = {0};
  ap_status s = ap_load_onnx(path, &g, &d);
  cr_assert_eq(s, want, "%s: got %s, want %s: %s", path, ap_status_name(s),
               ap_status_name(want), d.message);
  cr_assert_null(g, "%s: a failed load must leave *out NULL", path);
  cr_assert_eq(d.status, want);
  cr_assert(strstr(d.message, path) == d.message, "message does not start with the file: %s",
            d.message);
  cr_assert(strstr(d.message, substr), "%s: message '%s' lacks '%s'", path, d.message, substr);
  cr_assert_null(strchr(d.message, '\n'), "message is not one line: %s", d.message);
}

static int count_kind(const ap_graph *g, ap_value_kind kind) {
  int n = 0;
  for (int v = 0; v < g->n_values; v++)
    n += g->values[v].kind == kind;
  return n;
}

static const ap_value *value(const ap_graph *g, const char *name) {
  int v = ap_graph_find(g, name);
  cr_assert_geq(v, 0, "no value '%s'", name);
  return &g->values[v];
}

static const ap_node *node_named(const ap_graph *g, const char *name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (strcmp(g->nodes[i].name, name) == 0)
      return &g->nodes[i];
  cr_assert_fail("no node '%s'", name);
  return NULL;
}

static void *read_whole(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *buf = malloc((size_t)n + 1);
  cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *size = (size_t)n;
  return buf;
}

/* A fresh folder under the build tree, unique per test process. */
static const char *scratch_dir(const char *tag) {
  static char dir[512];
  mkdir(ACCPAR_BINARY_DIR "/test_frontend_tmp", 0755);
  snprintf(dir, sizeof dir, ACCPAR_BINARY_DIR "/test_frontend_tmp/%s-%ld", tag, (long)getpid());
  mkdir(dir, 0755);
  return dir;
}

static bool onnx_checker_accepts(const char *path) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 -c \"import onnx,sys; "
           "onnx.checker.check_model(onnx.load(sys.argv[1]))\" '%s'",
           path);
  int rc = system(cmd);
  return rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
}

/* ---- real models ------------------------------------------------------------ */

Test(load, mnist8) {
  ap_graph *g = load_ok(MNIST);
  cr_expect_eq(g->n_nodes, 12);
  cr_expect_eq(count_kind(g, AP_VAL_WEIGHT), 8);
  cr_expect_eq(g->n_inputs, 9);
  cr_expect_eq(g->n_outputs, 1);
  cr_expect_eq(g->ir_version, 3);
  cr_expect_eq(g->opset, 8);
  cr_expect_str_eq(g->producer_name, "CNTK");
  cr_expect_str_eq(g->producer_version, "2.5.1");

  const ap_value *w = value(g, "Parameter193");
  cr_expect_eq(w->kind, AP_VAL_WEIGHT);
  cr_expect(w->is_graph_input);
  cr_expect_eq(w->dtype, AP_DT_FLOAT);
  cr_expect_eq(w->rank, 4);
  cr_expect_eq(w->dims[0], 16);
  cr_expect_eq(w->dims[3], 10);
  cr_expect_float_eq(((float *)w->data)[0], 0.09163288f, 1e-7);
  const ap_value *shape = value(g, "Pooling160_Output_0_reshape0_shape");
  cr_expect_eq(shape->dtype, AP_DT_INT64);
  cr_expect_eq(((int64_t *)shape->data)[0], 1);
  cr_expect_eq(((int64_t *)shape->data)[1], 256);

  const ap_value *in = value(g, "Input3");
  cr_expect_eq(in->kind, AP_VAL_INPUT);
  cr_expect_eq(g->values[g->inputs[0]].name, in->name);
  cr_expect_eq(in->rank, 4);
  cr_expect_eq(in->dims[2], 28);

  const ap_node *conv = node_named(g, "Convolution28");
  cr_expect_str_eq(conv->op_type, "Conv");
  cr_expect_eq(conv->op, AP_OP_CONV);
  int n;
  const int64_t *k = ap_attr_ints(conv, "kernel_shape", &n);
  cr_expect_eq(n, 2);
  cr_expect(k && k[0] == 5 && k[1] == 5);
  cr_expect_str_eq(ap_attr_string(conv, "auto_pad", ""), "SAME_UPPER");
  cr_expect_eq(ap_attr_int(conv, "group", 0), 1);
  cr_expect_str_eq(g->values[conv->in[0]].name, "Input3");
  cr_expect_eq(g->values[conv->out[0]].producer, conv - g->nodes);
  /* value_info gives intermediate values their types. */
  const ap_value *relu = value(g, "ReLU32_Output_0");
  cr_expect_eq(relu->dtype, AP_DT_FLOAT);
  cr_expect_eq(relu->rank, 4);
  ap_graph_free(g);
}

/* Node and initializer counts as /usr/bin/python3's onnx reports them. */
static const struct {
  const char *file;
  int nodes, inits;
} light_models[] = {
    {"light_bvlc_alexnet.onnx", 40, 17},   {"light_densenet121.onnx", 1746, 848},
    {"light_inception_v1.onnx", 237, 118}, {"light_inception_v2.onnx", 916, 486},
    {"light_resnet50.onnx", 415, 269},     {"light_shufflenet.onnx", 446, 281},
    {"light_squeezenet.onnx", 105, 52},    {"light_vgg19.onnx", 82, 39},
    {"light_zfnet512.onnx", 38, 18},
};

Test(load, light_models) {
  for (size_t i = 0; i < sizeof light_models / sizeof light_models[0]; i++) {
    char path[512];
    snprintf(path, sizeof path, LIGHT("%s"), light_models[i].file);
    ap_graph *g = load_ok(path);
    cr_expect_eq(g->n_nodes, light_models[i].nodes, "%s", path);
    cr_expect_eq(count_kind(g, AP_VAL_WEIGHT), light_models[i].inits, "%s", path);
    cr_expect_eq(g->n_inputs, light_models[i].inits + 1, "%s", path);
    cr_expect_eq(g->opset, 9, "%s", path);
    /* Every weight is a ConstantOfShape node carrying a TENSOR attribute. */
    bool saw = false;
    for (int k = 0; k < g->n_nodes && !saw; k++) {
      const ap_attr *a = ap_attr_find(&g->nodes[k], "value");
      if (g->nodes[k].op == AP_OP_CONSTANT_OF_SHAPE && a) {
        cr_expect_eq(a->type, AP_ATTR_TENSOR);
        cr_expect_float_eq((float)ap_tensor_get_f64(a->t, 0), 0.02f, 1e-7);
        saw = true;
      }
    }
    cr_expect(saw, "%s: no ConstantOfShape with a value", path);
    ap_graph_free(g);
  }
}

/* ONNX's conformance models: every one loads, except the training
 * optimizers of the 1.12 suite, which import no default-domain opset. */
static int load_all(const char *pattern, int *refused) {
  glob_t gl;
  cr_assert_eq(glob(pattern, 0, NULL, &gl), 0, "nothing matches %s", pattern);
  *refused = 0;
  for (size_t i = 0; i < gl.gl_pathc; i++) {
    ap_graph *g = NULL;
    ap_diag d = {0};
    ap_status s = ap_load_onnx(gl.gl_pathv[i], &g, &d);
    if (s != AP_OK) {
      cr_expect(strstr(d.message, "no opset for the default ONNX domain"), "%s", d.message);
      (*refused)++;
    }
    ap_graph_free(g);
  }
  int n = (int)gl.gl_pathc;
  globfree(&gl);
  return n;
}

Test(load, conformance_node_models) {
  int refused;
  cr_expect_eq(load_all(ACCPAR_SHARED_DIR "/onnx-tests/node-v1.22/*/model.onnx", &refused), 294);
  cr_expect_eq(refused, 0);
  cr_expect_gt(load_all(ACCPAR_ONNX_TESTDATA "/node/*/model.onnx", &refused), 900);
  cr_expect_eq(refused, 7, "only the 7 optimizer models lack the default opset");
}

/* And their test data: TensorProto files in the encodings exporters use. */
Test(tensor_pb, conformance_test_data) {
  glob_t gl;
  cr_assert_eq(glob(ACCPAR_SHARED_DIR "/onnx-tests/node-v1.22/*/test_data_set_0/*.pb", 0, NULL,
                    &gl), 0);
  cr_expect_gt(gl.gl_pathc, 600);
  for (size_t i = 0; i < gl.gl_pathc; i++) {
    ap_arena *a = ap_arena_new();
    ap_tensor t;
    ap_diag d = {0};
    ap_status s = ap_read_tensor_pb(gl.gl_pathv[i], a, &t, NULL, &d);
    /* Two tests store a SequenceProto or an OptionalProto, not a tensor. */
    bool not_a_tensor = strstr(gl.gl_pathv[i], "/test_identity_opt/") ||
                        strstr(gl.gl_pathv[i], "/test_identity_sequence/");
    if (not_a_tensor)
      cr_expect(s != AP_OK && d.message[0], "%s read as a tensor", gl.gl_pathv[i]);
    else
      cr_expect_eq(s, AP_OK, "%s", d.message);
    ap_arena_free(a);
  }
  globfree(&gl);
}

/* ---- tensor encodings -------------------------------------------------------- */

static const ap_value *weight(const ap_graph *g, const char *name, ap_dtype dt, int64_t numel) {
  const ap_value *v = value(g, name);
  cr_assert_eq(v->kind, AP_VAL_WEIGHT, "%s", name);
  cr_assert_eq(v->dtype, dt, "%s: dtype %d", name, v->dtype);
  ap_tensor t = ap_value_tensor(v);
  cr_assert_eq(t.numel, numel, "%s", name);
  cr_assert_not_null(v->data, "%s", name);
  return v;
}

Test(tensor, typed_fields) {
  ap_graph *g = load_ok(DATA("typed_fields.onnx"));
  const float *f32 = weight(g, "f32", AP_DT_FLOAT, 3)->data;
  cr_expect(f32[0] == 1.5f && f32[1] == -2.0f && f32[2] == 3.25f);
  const float *c64 = weight(g, "c64", AP_DT_COMPLEX64, 2)->data;
  cr_expect(c64[0] == 1 && c64[1] == 2 && c64[2] == 3 && c64[3] == 4);
  const int32_t *i32 = weight(g, "i32", AP_DT_INT32, 3)->data;
  cr_expect(i32[0] == -7 && i32[1] == 0 && i32[2] == 2147483647);
  const int16_t *i16 = weight(g, "i16", AP_DT_INT16, 3)->data;
  cr_expect(i16[0] == -300 && i16[1] == 0 && i16[2] == 32767);
  const int8_t *i8 = weight(g, "i8", AP_DT_INT8, 3)->data;
  cr_expect(i8[0] == -1 && i8[1] == 2 && i8[2] == -128);
  const uint16_t *u16 = weight(g, "u16", AP_DT_UINT16, 3)->data;
  cr_expect(u16[0] == 1 && u16[1] == 65535 && u16[2] == 300);
  const uint8_t *u8 = weight(g, "u8", AP_DT_UINT8, 3)->data;
  cr_expect(u8[0] == 0 && u8[1] == 255 && u8[2] == 7);
  const uint8_t *b = weight(g, "b", AP_DT_BOOL, 3)->data;
  cr_expect(b[0] == 1 && b[1] == 0 && b[2] == 1);
  const uint16_t *f16 = weight(g, "f16", AP_DT_FLOAT16, 3)->data;
  cr_expect(f16[0] == 0x3C00 && f16[1] == 0xC000 && f16[2] == 0x7BFF);
  ap_tensor t16 = ap_value_tensor(value(g, "f16"));
  cr_expect_eq(ap_tensor_get_f64(&t16, 1), -2.0);
  const uint16_t *bf16 = weight(g, "bf16", AP_DT_BFLOAT16, 3)->data;
  cr_expect(bf16[0] == 0x3F80 && bf16[1] == 0xC040 && bf16[2] == 0);
  const int64_t *i64 = weight(g, "i64", AP_DT_INT64, 4)->data;
  cr_expect(i64[0] == -(INT64_C(1) << 40) && i64[3] == INT64_C(1) << 62);
  const double *f64 = weight(g, "f64", AP_DT_DOUBLE, 2)->data;
  cr_expect(f64[0] == 0.1 && f64[1] == -1e300);
  const double *c128 = weight(g, "c128", AP_DT_COMPLEX128, 1)->data;
  cr_expect(c128[0] == 0.5 && c128[1] == -0.25);
  const uint32_t *u32 = weight(g, "u32", AP_DT_UINT32, 2)->data;
  cr_expect(u32[0] == 4294967295u && u32[1] == 5);
  const uint64_t *u64 = weight(g, "u64", AP_DT_UINT64, 2)->data;
  cr_expect(u64[0] == UINT64_MAX && u64[1] == 9);
  char *const *str = weight(g, "str", AP_DT_STRING, 2)->data;
  cr_expect_str_eq(str[0], "hello");
  cr_expect_str_eq(str[1], "");
  const ap_value *scalar = weight(g, "scalar", AP_DT_FLOAT, 1);
  cr_expect_eq(scalar->rank, 0);
  cr_expect_eq(((float *)scalar->data)[0], 42.0f);
  const ap_value *empty = weight(g, "empty", AP_DT_FLOAT, 0);
  cr_expect(empty->rank == 2 && empty->dims[0] == 0 && empty->dims[1] == 3);

  /* raw_data holds the same numbers, little-endian. */
  cr_expect_arr_eq(weight(g, "raw_f32", AP_DT_FLOAT, 3)->data, f32, 3 * sizeof(float));
  const int64_t *ri64 = weight(g, "raw_i64", AP_DT_INT64, 2)->data;
  cr_expect(ri64[0] == i64[0] && ri64[1] == i64[3]);
  cr_expect_arr_eq(weight(g, "raw_u16", AP_DT_UINT16, 3)->data, u16, 3 * sizeof(uint16_t));
  cr_expect_arr_eq(weight(g, "raw_f16", AP_DT_FLOAT16, 3)->data, f16, 3 * sizeof(uint16_t));
  cr_expect_arr_eq(weight(g, "raw_bool", AP_DT_BOOL, 3)->data, b, 3);
  cr_expect_arr_eq(weight(g, "raw_f64", AP_DT_DOUBLE, 2)->data, f64, 2 * sizeof(double));
  cr_expect_arr_eq(weight(g, "raw_c64", AP_DT_COMPLEX64, 2)->data, c64, 4 * sizeof(float));
  ap_graph_free(g);
}

Test(tensor, attributes_of_every_type) {
  ap_graph *g = load_ok(DATA("attrs.onnx"));
  const ap_node *n = node_named(g, "all");
  cr_expect_str_eq(n->domain, "test.attrs");
  cr_expect_eq(n->op, AP_OP_UNKNOWN);
  cr_expect_eq(n->n_attr, 8);
  cr_expect_eq(ap_attr_float(n, "f", 0), 0.5f);
  cr_expect_eq(ap_attr_int(n, "i", 0), -3);
  const ap_attr *s = ap_attr_find(n, "s");
  cr_assert(s && s->type == AP_ATTR_STRING);
  cr_expect_eq(s->s_len, 8);
  cr_expect_str_eq(s->s, "with");
  cr_expect_arr_eq(s->s, "with\0nul", 8);
  const ap_attr *t = ap_attr_find(n, "t");
  cr_assert(t && t->type == AP_ATTR_TENSOR && t->t);
  cr_expect(t->t->dtype == AP_DT_INT64 && t->t->numel == 2);
  cr_expect_eq(ap_tensor_get_i64(t->t, 1), -6);
  const ap_attr *fs = ap_attr_find(n, "fs");
  cr_assert(fs && fs->type == AP_ATTR_FLOATS && fs->n == 2);
  cr_expect(fs->floats[0] == 1.0f && fs->floats[1] == 2.5f);
  int cnt;
  const int64_t *is = ap_attr_ints(n, "is", &cnt);
  cr_assert_eq(cnt, 3);
  cr_expect(is[0] == 1 && is[1] == -2 && is[2] == 3);
  const ap_attr *ss = ap_attr_find(n, "ss");
  cr_assert(ss && ss->type == AP_ATTR_STRINGS && ss->n == 2);
  cr_expect_str_eq(ss->strings[0], "a");
  cr_expect_str_eq(ss->strings[1], "bc");
  const ap_attr *ts = ap_attr_find(n, "ts");
  cr_assert(ts && ts->type == AP_ATTR_TENSORS && ts->n == 2);
  cr_expect_eq(ap_tensor_get_i64(&ts->t[0], 0), 5);
  cr_expect(ts->t[1].dtype == AP_DT_FLOAT && ap_tensor_get_f64(&ts->t[1], 0) == 7.0);
  ap_graph_free(g);
}

/* ---- external data ------------------------------------------------------------ */

Test(external, good) {
  ap_graph *g = load_ok(DATA("ext/good.onnx"));
  const float *w = weight(g, "w", AP_DT_FLOAT, 6)->data;
  for (int i = 0; i < 6; i++)
    cr_expect_eq(w[i], (float)(i + 1));
  const float *w2 = weight(g, "w2", AP_DT_FLOAT, 2)->data;
  cr_expect(w2[0] == 7 && w2[1] == 8);
  ap_graph_free(g);
}

Test(external, refused_from_a_buffer) {
  size_t size;
  void *buf = read_whole(DATA("ext/good.onnx"), &size);
  ap_graph *g = NULL;
  ap_diag d = {0};
  cr_expect_eq(ap_load_onnx_buffer(buf, size, "mem.onnx", &g, &d), AP_ERR_UNSUPPORTED);
  cr_expect_null(g);
  cr_expect(strstr(d.message, "mem.onnx: ") == d.message, "%s", d.message);
  cr_expect(strstr(d.message, "initializer 'w'") && strstr(d.message, "external data"), "%s",
            d.message);
  free(buf);
}

Test(external, refused) {
  static const struct {
    const char *file;
    ap_status status;
    const char *msg;
  } cases[] = {
      {DATA("ext/bad_abs.onnx"), AP_ERR_INVALID, "'/etc/passwd' leaves the model's folder"},
      {DATA("ext/bad_dotdot.onnx"), AP_ERR_INVALID, "'sub/../weights.bin' leaves"},
      {DATA("ext/bad_offset_past_end.onnx"), AP_ERR_INVALID, "offset 1000 is past the end"},
      {DATA("ext/bad_length_past_end.onnx"), AP_ERR_INVALID, "length 4096 at offset 16 is past"},
      {DATA("ext/bad_length_mismatch.onnx"), AP_ERR_INVALID, "length 20 does not match the 24"},
      {DATA("ext/bad_short_file.onnx"), AP_ERR_INVALID, "holds 8 bytes after the offset"},
      {DATA("ext/bad_missing.onnx"), AP_ERR_IO, "cannot open external data 'nowhere.bin'"},
      {DATA("ext/bad_no_location.onnx"), AP_ERR_INVALID, "without a location"},
      {DATA("ext/bad_bad_offset.onnx"), AP_ERR_INVALID, "offset '-5' is not"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    load_fails(cases[i].file, cases[i].status, cases[i].msg);
}

/* A symbolic link inside the folder must not lead outside it. */
Test(external, symlink_out_of_the_folder) {
  const char *dir = scratch_dir("symlink");
  char model[600], link[600], cmd[1400];
  snprintf(model, sizeof model, "%s/model.onnx", dir);
  snprintf(link, sizeof link, "%s/link.bin", dir);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", DATA("ext/bad_link.onnx"), model);
  cr_assert_eq(system(cmd), 0);
  unlink(link);
  cr_assert_eq(symlink(DATA("ext/weights.bin"), link), 0);
  load_fails(model, AP_ERR_INVALID, "'link.bin' resolves outside the model's folder");
  /* The same link pointing inside the folder is fine. */
  snprintf(cmd, sizeof cmd, "cp '%s' '%s/real.bin'", DATA("ext/weights.bin"), dir);
  cr_assert_eq(system(cmd), 0);
  unlink(link);
  cr_assert_eq(symlink("real.bin", link), 0);
  ap_graph *g = load_ok(model);
  cr_expect_eq(((float *)value(g, "w")->data)[5], 6.0f);
  ap_graph_free(g);
}

/* ---- invalid models ------------------------------------------------------------- */

Test(invalid, each_refused_with_one_line) {
  static const struct {
    const char *file;
    ap_status status;
    const char *msg;
  } cases[] = {
      {DATA("invalid/dup_initializer.onnx"), AP_ERR_INVALID, "initializer 'w' is defined twice"},
      {DATA("invalid/dup_input.onnx"), AP_ERR_INVALID, "graph input 'x' is listed twice"},
      {DATA("invalid/dup_producer.onnx"), AP_ERR_INVALID,
       "node 'b' (Relu): output 'y' is already produced by node 'a'"},
      {DATA("invalid/producer_is_input.onnx"), AP_ERR_INVALID,
       "node 'a' (Relu): output 'x' is already defined as a graph input"},
      {DATA("invalid/producer_is_initializer.onnx"), AP_ERR_INVALID,
       "node 'a' (Relu): output 'w' is already defined as an initializer"},
      {DATA("invalid/undefined_input.onnx"), AP_ERR_INVALID,
       "node 'r' (Relu): input 'nope' is not produced by any node, initializer or graph input"},
      {DATA("invalid/undefined_output.onnx"), AP_ERR_INVALID, "graph output 'z' is not produced"},
      {DATA("invalid/no_default_opset.onnx"), AP_ERR_INVALID, "no opset for the default"},
      {DATA("invalid/no_op_type.onnx"), AP_ERR_INVALID, "node 0 has no op_type"},
      {DATA("invalid/sparse_initializer.onnx"), AP_ERR_UNSUPPORTED, "sparse initializer 'sv'"},
      {DATA("invalid/negative_dim.onnx"), AP_ERR_INVALID,
       "initializer 'w': dimension 1 is negative (-3)"},
      {DATA("invalid/rank9.onnx"), AP_ERR_INVALID, "initializer 'w': has rank 9; at most 8"},
      {DATA("invalid/overflow_dims.onnx"), AP_ERR_INVALID, "element count of its shape overflows"},
      {DATA("invalid/raw_size.onnx"), AP_ERR_INVALID, "need 24 bytes but raw_data holds 20"},
      {DATA("invalid/count.onnx"), AP_ERR_INVALID, "6 elements but float_data holds 2 values"},
      {DATA("invalid/wrong_field.onnx"), AP_ERR_INVALID,
       "a int64 tensor cannot hold its data in float_data"},
      {DATA("invalid/two_fields.onnx"), AP_ERR_INVALID, "more than one field"},
      {DATA("invalid/no_data.onnx"), AP_ERR_INVALID, "2 elements but it holds no data"},
      {DATA("invalid/no_dtype.onnx"), AP_ERR_INVALID, "initializer 'w': has no data type"},
      {DATA("invalid/float8.onnx"), AP_ERR_UNSUPPORTED, "float8e4m3fn tensors are not supported"},
      {DATA("invalid/value_rank9.onnx"), AP_ERR_UNSUPPORTED,
       "graph input 'x' has rank 9; at most 8 is supported"},
      {DATA("invalid/value_negative_dim.onnx"), AP_ERR_INVALID,
       "graph input 'x': dimension 1 is negative (-1)"},
      {DATA("invalid/dup_opset.onnx"), AP_ERR_INVALID, "opset_import lists domain 'ai.onnx' twice"},
      {DATA("invalid/opset_zero.onnx"), AP_ERR_INVALID, "opset version 0 is not positive"},
      {DATA("invalid/input_no_name.onnx"), AP_ERR_INVALID, "graph input 1 has no name"},
      {DATA("invalid/initializer_no_name.onnx"), AP_ERR_INVALID, "initializer 0 has no name"},
      {DATA("invalid/output_no_name.onnx"), AP_ERR_INVALID, "graph output 0 has no name"},
      {DATA("invalid/output_twice.onnx"), AP_ERR_INVALID, "graph output 'y' is listed twice"},
      {DATA("invalid/input_rank_mismatch.onnx"), AP_ERR_INVALID,
       "initializer 'w' has rank 2 but the graph input of that name has rank 1"},
      {DATA("invalid/input_dim_mismatch.onnx"), AP_ERR_INVALID,
       "initializer 'w' has dimension 1 of size 3 but the graph input of that name says 4"},
      {DATA("invalid/unknown_elem_type.onnx"), AP_ERR_INVALID,
       "graph input 'x' has unknown element type 99"},
      {DATA("invalid/attr_no_name.onnx"), AP_ERR_INVALID, "node 'r' (Relu): an attribute has no"},
      {DATA("invalid/attr_twice.onnx"), AP_ERR_INVALID,
       "node 'r' (Relu): attribute 'a' is given twice"},
      {DATA("invalid/attr_tensor_missing.onnx"), AP_ERR_INVALID,
       "attribute 't' is of type TENSOR but holds no tensor"},
      {DATA("invalid/attr_unknown_type.onnx"), AP_ERR_INVALID,
       "attribute 'u' has unknown type 42"},
      {DATA("invalid/input_mismatch.onnx"), AP_ERR_INVALID,
       "initializer 'w' is float32 but the graph input of that name is int64"},
      {DATA("nonexistent.onnx"), AP_ERR_IO, "cannot open: No such file"},
      {DATA("invalid"), AP_ERR_IO, "not a regular file"},
      {DATA("make_models.py"), AP_ERR_PARSE, "not an ONNX model"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    load_fails(cases[i].file, cases[i].status, cases[i].msg);
}

Test(invalid, empty_buffer_has_no_graph) {
  ap_graph *g = NULL;
  ap_diag d = {0};
  cr_expect_eq(ap_load_onnx_buffer("", 0, NULL, &g, &d), AP_ERR_INVALID);
  cr_expect_null(g);
  cr_expect(strstr(d.message, "<buffer>: ") == d.message, "%s", d.message);
}

/* Protobuf wire format, written by hand: nested messages deep enough to
 * overflow a recursive parser's stack. */
static size_t put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  for (; v >= 0x80; v >>= 7)
    p[n++] = (uint8_t)(v | 0x80);
  p[n++] = (uint8_t)v;
  return n;
}

/* Prepends field `field` (length-delimited) around everything from p to
 * end; returns the new start. */
static uint8_t *wrap(uint8_t *buf, uint8_t *p, uint8_t *end, int field) {
  uint8_t hdr[16];
  size_t h = put_varint(hdr, (uint64_t)(field << 3) | 2);
  h += put_varint(hdr + h, (uint64_t)(end - p));
  cr_assert_geq((size_t)(p - buf), h);
  p -= h;
  memcpy(p, hdr, h);
  return p;
}

/* A model whose graph input is a sequence of sequences ... `levels` deep,
 * built inside out at the end of buf. */
static uint8_t *nested_sequence_model(uint8_t *buf, size_t cap, int levels, size_t *size) {
  uint8_t *end = buf + cap, *p = end;
  for (int i = 0; i < levels; i++) {
    p = wrap(buf, p, end, 1); /* Sequence.elem_type */
    p = wrap(buf, p, end, 4); /* TypeProto.sequence_type */
  }
  p = wrap(buf, p, end, 2); /* ValueInfoProto.type */
  p -= 3;                   /* ValueInfoProto.name = "x" */
  p[0] = (1 << 3) | 2, p[1] = 1, p[2] = 'x';
  p = wrap(buf, p, end, 11); /* GraphProto.input */
  p = wrap(buf, p, end, 7);  /* ModelProto.graph */
  *size = (size_t)(end - p);
  return p;
}

Test(invalid, deep_nesting_refused_before_parsing) {
  size_t cap = 8u << 20, size;
  uint8_t *buf = malloc(cap);
  ap_graph *g = NULL;
  ap_diag d = {0};
  uint8_t *m = nested_sequence_model(buf, cap, 30, &size);
  cr_assert_eq(ap_load_onnx_buffer(m, size, "shallow", &g, &d), AP_ERR_INVALID, "%s",
               d.message); /* parsed: only the missing opset is wrong */
  cr_expect(strstr(d.message, "no opset"), "%s", d.message);
  d = (ap_diag){0};
  m = nested_sequence_model(buf, cap, 500000, &size);
  cr_assert_eq(ap_load_onnx_buffer(m, size, "deep", &g, &d), AP_ERR_PARSE, "%s", d.message);
  cr_expect(strstr(d.message, "deep: protobuf messages nest deeper than 100 levels"), "%s",
            d.message);
  cr_expect_null(g);
  free(buf);
}

/* Every prefix of a file must load or fail with a diagnostic: never crash,
 * never leak (ASan/LSan watch), never report success without a graph. */
static void every_prefix(const char *path) {
  size_t size;
  uint8_t *buf = read_whole(path, &size);
  int loaded = 0;
  for (size_t len = 0; len <= size; len++) {
    /* An exact-size copy lets ASan catch any read past the prefix. */
    uint8_t *p = malloc(len + 1);
    memcpy(p, buf, len);
    ap_graph *g = NULL;
    ap_diag d = {0};
    ap_status s = ap_load_onnx_buffer(p, len, "prefix", &g, &d);
    if (s == AP_OK) {
      cr_assert_not_null(g);
      loaded++;
      ap_graph_free(g);
    } else {
      cr_assert_null(g);
      cr_assert_eq(d.status, s);
      cr_assert(d.message[0], "prefix %zu: empty message", len);
    }
    free(p);
  }
  cr_expect_geq(loaded, 1, "%s: the whole file did not load", path);
  free(buf);
}

Test(invalid, every_prefix_of_small_models) {
  every_prefix(DATA("small_cnn.onnx"));
  every_prefix(DATA("typed_fields.onnx"));
  every_prefix(DATA("attrs.onnx"));
}

Test(invalid, every_prefix_of_mnist8, .timeout = 600) { every_prefix(MNIST); }

/* ---- structure ------------------------------------------------------------------- */

Test(structure, order_names_and_shapes) {
  ap_graph *g = load_ok(DATA("out_of_order.onnx"));
  cr_assert_eq(g->n_nodes, 3);
  cr_expect_str_eq(g->nodes[0].name, "Relu_0");
  cr_expect_str_eq(g->nodes[1].name, "Relu_1_2");
  cr_expect_str_eq(g->nodes[2].name, "Relu_1");
  cr_expect_str_eq(g->values[g->nodes[0].in[0]].name, "t");
  cr_expect_eq(g->values[g->nodes[0].in[0]].producer, 2);
  const ap_value *x = value(g, "x");
  cr_expect_eq(x->rank, 3);
  cr_expect(x->dims[0] == -1 && x->sym[0] && strcmp(x->sym[0], "N") == 0);
  cr_expect(x->dims[1] == 3 && !x->sym[1]);
  cr_expect(x->dims[2] == -1 && !x->sym[2]);
  const ap_value *t = value(g, "t");
  cr_expect(t->rank == 3 && t->dims[2] == 5 && t->sym[0] && t->dtype == AP_DT_FLOAT);
  const ap_value *z = value(g, "z");
  cr_expect(z->is_graph_output && z->rank == -1 && z->dtype == AP_DT_FLOAT);
  ap_graph_free(g);
}

Test(structure, non_tensor_types_are_recorded) {
  ap_graph *g = load_ok(DATA("sequence.onnx"));
  cr_expect_str_eq(value(g, "s")->non_tensor, "sequence");
  cr_expect_null(value(g, "i")->non_tensor);
  ap_graph_free(g);
}

Test(structure, omitted_input_and_initializer_input) {
  ap_graph *g = load_ok(DATA("optional_input.onnx"));
  const ap_node *clip = node_named(g, "clip");
  cr_expect_eq(clip->n_in, 3);
  cr_expect_eq(clip->in[1], -1);
  const ap_value *hi = value(g, "hi");
  cr_expect(hi->kind == AP_VAL_WEIGHT && hi->is_graph_input && hi->rank == 0);
  cr_expect_eq(g->n_inputs, 2);
  cr_expect_eq(g->inputs[1], ap_graph_find(g, "hi"));
  ap_graph_free(g);
}

Test(structure, untyped_attributes_of_ir_version_1) {
  ap_graph *g = load_ok(DATA("untyped_attrs.onnx"));
  const ap_node *n = node_named(g, "old");
  static const struct {
    const char *name;
    ap_attr_type type;
  } want[] = {{"f", AP_ATTR_FLOAT},   {"i", AP_ATTR_INT},     {"s", AP_ATTR_STRING},
              {"t", AP_ATTR_TENSOR},  {"fs", AP_ATTR_FLOATS}, {"is_", AP_ATTR_INTS},
              {"ss", AP_ATTR_STRINGS}, {"ts", AP_ATTR_TENSORS}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const ap_attr *a = ap_attr_find(n, want[i].name);
    cr_assert_not_null(a, "%s", want[i].name);
    cr_expect_eq(a->type, want[i].type, "%s", want[i].name);
  }
  cr_expect_eq(ap_attr_int(n, "i", 0), 2);
  cr_expect_eq(ap_tensor_get_f64(&ap_attr_find(n, "ts")->t[0], 0), 2.0);
  ap_graph_free(g);
}

Test(structure, map_and_sparse_types_are_recorded) {
  ap_graph *g = load_ok(DATA("map_sparse.onnx"));
  cr_expect_str_eq(value(g, "m")->non_tensor, "map");
  cr_expect_str_eq(value(g, "sp")->non_tensor, "sparse tensor");
  ap_graph_free(g);
}

Test(structure, graph_attributes_kept_by_type) {
  ap_graph *g = load_ok(DATA("if.onnx"));
  const ap_node *n = node_named(g, "if");
  cr_expect_eq(n->op, AP_OP_UNKNOWN);
  const ap_attr *a = ap_attr_find(n, "then_branch");
  cr_assert_not_null(a);
  cr_expect_eq(a->type, AP_ATTR_GRAPH);
  ap_diag d = {0};
  char path[600];
  snprintf(path, sizeof path, "%s/if.onnx", scratch_dir("if"));
  cr_expect_eq(ap_write_onnx(g, path, &d), AP_ERR_UNSUPPORTED);
  cr_expect(strstr(d.message, "node 'if' (If): attribute '") &&
                strstr(d.message, "_branch' of type 5"),
            "%s", d.message);
  cr_expect_neq(access(path, F_OK), 0, "a refused write left a file");
  ap_graph_free(g);
}

/* ---- the writer --------------------------------------------------------------------- */

static bool same_tensor_data(ap_dtype dt, int64_t numel, const void *a, const void *b) {
  if (dt == AP_DT_STRING) {
    for (int64_t i = 0; i < numel; i++)
      if (strcmp(((char *const *)a)[i], ((char *const *)b)[i]) != 0)
        return false;
    return true;
  }
  return memcmp(a, b, (size_t)numel * ap_dtype_size(dt)) == 0;
}

static void expect_same_tensor(const ap_tensor *a, const ap_tensor *b, const char *what) {
  cr_assert(a->dtype == b->dtype && a->rank == b->rank && a->numel == b->numel, "%s", what);
  for (int i = 0; i < a->rank; i++)
    cr_assert_eq(a->dims[i], b->dims[i], "%s", what);
  cr_assert(same_tensor_data(a->dtype, a->numel, a->data, b->data), "%s: data differs", what);
}

static void expect_same_attr(const ap_attr *a, const ap_attr *b, const char *node) {
  cr_assert_str_eq(a->name, b->name, "node %s", node);
  cr_assert_eq(a->type, b->type, "node %s attr %s", node, a->name);
  switch (a->type) {
  case AP_ATTR_FLOAT: cr_assert_eq(a->f, b->f); break;
  case AP_ATTR_INT: cr_assert_eq(a->i, b->i); break;
  case AP_ATTR_STRING:
    cr_assert_eq(a->s_len, b->s_len);
    cr_assert_arr_eq(a->s, b->s, a->s_len);
    break;
  case AP_ATTR_TENSOR: expect_same_tensor(a->t, b->t, a->name); break;
  case AP_ATTR_FLOATS:
    cr_assert_eq(a->n, b->n);
    cr_assert_arr_eq(a->floats, b->floats, (size_t)a->n * sizeof(float));
    break;
  case AP_ATTR_INTS:
    cr_assert_eq(a->n, b->n);
    cr_assert_arr_eq(a->ints, b->ints, (size_t)a->n * sizeof(int64_t));
    break;
  case AP_ATTR_STRINGS:
    cr_assert_eq(a->n, b->n);
    for (int i = 0; i < a->n; i++)
      cr_assert_str_eq(a->strings[i], b->strings[i]);
    break;
  case AP_ATTR_TENSORS:
    cr_assert_eq(a->n, b->n);
    for (int i = 0; i < a->n; i++)
      expect_same_tensor(&a->t[i], &b->t[i], a->name);
    break;
  default: break;
  }
}

static const char *vname(const ap_graph *g, int v) { return v >= 0 ? g->values[v].name : ""; }

static void expect_same_graph(const ap_graph *a, const ap_graph *b) {
  cr_assert_eq(a->opset, b->opset);
  cr_assert_eq(a->n_opsets, b->n_opsets);
  for (int i = 0; i < a->n_opsets; i++) {
    cr_assert_str_eq(a->opsets[i].domain, b->opsets[i].domain);
    cr_assert_eq(a->opsets[i].version, b->opsets[i].version);
  }
  cr_assert_eq(a->n_nodes, b->n_nodes);
  cr_assert_eq(a->n_values, b->n_values);
  cr_assert_eq(a->n_inputs, b->n_inputs);
  cr_assert_eq(a->n_outputs, b->n_outputs);
  for (int i = 0; i < a->n_inputs; i++)
    cr_assert_str_eq(vname(a, a->inputs[i]), vname(b, b->inputs[i]));
  for (int i = 0; i < a->n_outputs; i++)
    cr_assert_str_eq(vname(a, a->outputs[i]), vname(b, b->outputs[i]));
  for (int i = 0; i < a->n_nodes; i++) {
    const ap_node *na = &a->nodes[i], *nb = &b->nodes[i];
    cr_assert_str_eq(na->name, nb->name);
    cr_assert_str_eq(na->op_type, nb->op_type);
    cr_assert_str_eq(na->domain, nb->domain);
    cr_assert(na->n_in == nb->n_in && na->n_out == nb->n_out && na->n_attr == nb->n_attr,
              "node %s", na->name);
    for (int k = 0; k < na->n_in; k++)
      cr_assert_str_eq(vname(a, na->in[k]), vname(b, nb->in[k]), "node %s", na->name);
    for (int k = 0; k < na->n_out; k++)
      cr_assert_str_eq(vname(a, na->out[k]), vname(b, nb->out[k]), "node %s", na->name);
    for (int k = 0; k < na->n_attr; k++)
      expect_same_attr(&na->attr[k], &nb->attr[k], na->name);
  }
  for (int v = 0; v < a->n_values; v++) {
    const ap_value *va = &a->values[v];
    int id = ap_graph_find(b, va->name);
    cr_assert_geq(id, 0, "value %s lost", va->name);
    const ap_value *vb = &b->values[id];
    cr_assert(va->kind == vb->kind && va->dtype == vb->dtype && va->rank == vb->rank,
              "value %s: kind %d/%d dtype %d/%d rank %d/%d", va->name, va->kind, vb->kind,
              va->dtype, vb->dtype, va->rank, vb->rank);
    cr_assert(va->is_graph_input == vb->is_graph_input &&
              va->is_graph_output == vb->is_graph_output, "value %s", va->name);
    for (int i = 0; i < va->rank; i++) {
      cr_assert_eq(va->dims[i], vb->dims[i], "value %s", va->name);
      cr_assert_str_eq(va->sym[i] ? va->sym[i] : "", vb->sym[i] ? vb->sym[i] : "");
    }
    cr_assert_eq(va->data != NULL, vb->data != NULL, "value %s", va->name);
    if (va->data) {
      ap_tensor t = ap_value_tensor(va);
      cr_assert(same_tensor_data(va->dtype, t.numel, va->data, vb->data), "value %s",
                va->name);
    }
  }
}

/* Read, write, read: the same graph; and ONNX's checker accepts the file
 * when its onnx (Debian's 1.12) knows the opset. */
static void round_trip(const char *path, bool check) {
  ap_graph *a = load_ok(path);
  char out[700];
  const char *base = strrchr(path, '/');
  snprintf(out, sizeof out, "%s/%s", scratch_dir("rt"), base ? base + 1 : path);
  ap_diag d = {0};
  cr_assert_eq(ap_write_onnx(a, out, &d), AP_OK, "%s: %s", out, d.message);
  ap_graph *b = load_ok(out);
  expect_same_graph(a, b);
  cr_expect_str_eq(b->producer_name, "accpar");
  cr_expect_eq(b->ir_version, a->ir_version < 3 ? 3 : a->ir_version);
  if (check)
    cr_expect(onnx_checker_accepts(out), "onnx.checker refused %s (from %s)", out, path);
  ap_graph_free(a);
  ap_graph_free(b);
}

Test(write, round_trip_mnist8) { round_trip(MNIST, true); }

Test(write, round_trip_light_models, .timeout = 600) {
  for (size_t i = 0; i < sizeof light_models / sizeof light_models[0]; i++) {
    char path[512];
    snprintf(path, sizeof path, LIGHT("%s"), light_models[i].file);
    round_trip(path, true);
  }
}

Test(write, round_trip_node_tests) {
  static const char *const names[] = {
      NODE_TEST("test_constant"),       NODE_TEST("test_conv_with_strides_padding"),
      NODE_TEST("test_gemm_all_attributes"), NODE_TEST("test_maxpool_2d_pads"),
      NODE_TEST("test_lrn"),            NODE_TEST("test_split_variable_parts_1d"),
      NODE_TEST("test_batchnorm_example"), NODE_TEST("test_cast_FLOAT_to_STRING"),
      NODE_TEST("test_reshape_negative_dim"), NODE_TEST("test_clip_default_inbounds"),
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    round_trip(names[i], true);
}

/* Whether g holds something the reader keeps by kind only: a non-tensor
 * value or a graph-valued attribute. */
static bool keeps_only_kinds(const ap_graph *g) {
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].non_tensor)
      return true;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_attr; k++)
      if (g->nodes[i].attr[k].type == AP_ATTR_GRAPH || g->nodes[i].attr[k].type > AP_ATTR_TENSORS)
        return true;
  return false;
}

/* Newer than Debian's checker, so compared with ourselves only; the few
 * models with sequences, optionals or subgraphs must be refused cleanly. */
Test(write, round_trip_conformance_models, .timeout = 600) {
  glob_t gl;
  cr_assert_eq(glob(ACCPAR_SHARED_DIR "/onnx-tests/node-v1.22/*/model.onnx", 0, NULL, &gl), 0);
  int refused = 0;
  for (size_t i = 0; i < gl.gl_pathc; i++) {
    ap_graph *g = load_ok(gl.gl_pathv[i]);
    if (keeps_only_kinds(g)) {
      char out[600];
      snprintf(out, sizeof out, "%s/refused.onnx", scratch_dir("rt"));
      ap_diag d = {0};
      cr_expect_eq(ap_write_onnx(g, out, &d), AP_ERR_UNSUPPORTED, "%s", gl.gl_pathv[i]);
      refused++;
    } else {
      round_trip(gl.gl_pathv[i], false);
    }
    ap_graph_free(g);
  }
  cr_expect_lt(refused, 10);
  globfree(&gl);
}

Test(write, round_trip_hand_made) {
  round_trip(DATA("typed_fields.onnx"), true);
  round_trip(DATA("attrs.onnx"), true);
  round_trip(DATA("small_cnn.onnx"), true);
  round_trip(DATA("out_of_order.onnx"), false);
  round_trip(DATA("optional_input.onnx"), true);
  round_trip(DATA("ext/good.onnx"), true);
}

/* Dead nodes are dropped and folded constants become initializers; IR
 * version 3 cannot hold an initializer that is not a graph input. */
Test(write, dead_nodes_and_folded_constants) {
  ap_graph *g = load_ok(MNIST);
  /* Pretend folding evaluated the weight reshape. */
  ap_node *reshape = (ap_node *)node_named(g, "Times212_reshape1");
  int out = reshape->out[0];
  ap_tensor t = ap_value_tensor(value(g, "Parameter193"));
  t.rank = 2;
  t.dims[0] = 256;
  t.dims[1] = 10;
  cr_assert(ap_value_set_constant(g, out, &t));
  reshape->dead = true;
  char path[600];
  snprintf(path, sizeof path, "%s/folded.onnx", scratch_dir("folded"));
  ap_diag d = {0};
  cr_assert_eq(ap_write_onnx(g, path, &d), AP_OK, "%s", d.message);
  ap_graph *b = load_ok(path);
  cr_expect_eq(b->n_nodes, 11);
  cr_expect_eq(b->ir_version, 4);
  const ap_value *c = value(b, "Parameter193_reshape1");
  cr_expect(c->kind == AP_VAL_WEIGHT && !c->is_graph_input && c->rank == 2 && c->dims[0] == 256);
  cr_expect_arr_eq(c->data, value(g, "Parameter193")->data, 2560 * sizeof(float));
  cr_expect(onnx_checker_accepts(path));
  ap_graph_free(b);
  ap_graph_free(g);
}

Test(write, nothing_half_written) {
  const char *dir = scratch_dir("atomic");
  char path[600];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  ap_graph *good = load_ok(DATA("small_cnn.onnx"));
  ap_diag d = {0};
  cr_assert_eq(ap_write_onnx(good, path, &d), AP_OK, "%s", d.message);
  size_t before;
  void *old = read_whole(path, &before);

  /* A graph the writer refuses leaves the previous file untouched. */
  ap_graph *seq = load_ok(DATA("sequence.onnx"));
  d = (ap_diag){0};
  cr_expect_eq(ap_write_onnx(seq, path, &d), AP_ERR_UNSUPPORTED);
  cr_expect(strstr(d.message, "value 's' is of sequence type"), "%s", d.message);
  size_t after;
  void *now = read_whole(path, &after);
  cr_expect(before == after && memcmp(old, now, before) == 0);
  free(now);

  /* A folder that does not exist: an I/O error naming the file. */
  char missing[700];
  snprintf(missing, sizeof missing, "%s/no/such/dir/model.onnx", dir);
  d = (ap_diag){0};
  cr_expect_eq(ap_write_onnx(good, missing, &d), AP_ERR_IO);
  cr_expect(strstr(d.message, missing) == d.message, "%s", d.message);

  /* No temporary file is left behind either way. */
  char cmd[800];
  snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 1", dir);
  cr_expect_eq(system(cmd), 0, "stray files in %s", dir);
  free(old);
  ap_graph_free(seq);
  ap_graph_free(good);
}

/* ---- TensorProto files -------------------------------------------------------------- */

Test(tensor_pb, read_write_read) {
  ap_arena *a = ap_arena_new();
  ap_tensor t;
  const char *name;
  ap_diag d = {0};
  const char *in = ACCPAR_SHARED_DIR "/models/mnist-8/test_data_set_0/input_0.pb";
  cr_assert_eq(ap_read_tensor_pb(in, a, &t, &name, &d), AP_OK, "%s", d.message);
  cr_expect_eq(t.dtype, AP_DT_FLOAT);
  cr_expect(t.rank == 4 && t.dims[0] == 1 && t.dims[1] == 1 && t.dims[2] == 28 &&
            t.dims[3] == 28);
  cr_expect_eq(t.numel, 784);
  char path[600];
  snprintf(path, sizeof path, "%s/input_0.pb", scratch_dir("pb"));
  cr_assert_eq(ap_write_tensor_pb(path, &t, "Input3", &d), AP_OK, "%s", d.message);
  ap_tensor u;
  const char *name2;
  cr_assert_eq(ap_read_tensor_pb(path, a, &u, &name2, &d), AP_OK, "%s", d.message);
  cr_expect_str_eq(name2, "Input3");
  expect_same_tensor(&t, &u, "input_0");

  /* Typed fields in a .pb file: the libonnx test data stores some that way. */
  ap_tensor s;
  const char *strings =
      ACCPAR_ONNX_TESTDATA "/node/test_cast_FLOAT_to_STRING/test_data_set_0/output_0.pb";
  cr_assert_eq(ap_read_tensor_pb(strings, a, &s, NULL, &d), AP_OK, "%s", d.message);
  cr_expect_eq(s.dtype, AP_DT_STRING);
  snprintf(path, sizeof path, "%s/strings.pb", scratch_dir("pb"));
  cr_assert_eq(ap_write_tensor_pb(path, &s, "out", &d), AP_OK, "%s", d.message);
  cr_assert_eq(ap_read_tensor_pb(path, a, &u, NULL, &d), AP_OK, "%s", d.message);
  expect_same_tensor(&s, &u, "strings");
  ap_arena_free(a);
}

Test(tensor_pb, errors) {
  ap_arena *a = ap_arena_new();
  ap_tensor t;
  ap_diag d = {0};
  cr_expect_eq(ap_read_tensor_pb(DATA("missing.pb"), a, &t, NULL, &d), AP_ERR_IO);
  cr_expect(strstr(d.message, "missing.pb: cannot open"), "%s", d.message);
  d = (ap_diag){0};
  cr_expect_eq(ap_read_tensor_pb(DATA("make_models.py"), a, &t, NULL, &d), AP_ERR_PARSE);
  cr_expect(strstr(d.message, "not a TensorProto"), "%s", d.message);
  /* A model is a valid protobuf but its fields make no sense as a tensor. */
  d = (ap_diag){0};
  ap_status s = ap_read_tensor_pb(DATA("small_cnn.onnx"), a, &t, NULL, &d);
  cr_expect_neq(s, AP_OK);
  cr_expect(d.message[0]);
  ap_arena_free(a);
}

/* ---- running out of memory ---------------------------------------------------------- */

static long alloc_calls, fail_from = -1, live_blocks;
static size_t counted_from_size; /* only allocations at least this big count */

static void *failing_realloc(void *ptr, size_t size, void *user) {
  (void)user;
  if (size == 0) {
    if (ptr)
      live_blocks--;
    free(ptr);
    return NULL;
  }
  if (size >= counted_from_size) {
    if (fail_from >= 0 && alloc_calls >= fail_from)
      return NULL;
    alloc_calls++;
  }
  void *p = realloc(ptr, size);
  if (p && !ptr)
    live_blocks++;
  return p;
}

/* Loads path failing each counted allocation in turn (at least min_points
 * of them): every failure is AP_ERR_NOMEM, leaving nothing allocated. */
static void expect_nomem_at(const char *path, long min_points) {
  ap_set_allocator(failing_realloc, NULL);
  alloc_calls = 0;
  fail_from = -1;
  ap_graph *g = NULL;
  ap_diag d = {0};
  cr_assert_eq(ap_load_onnx(path, &g, &d), AP_OK, "%s", d.message);
  ap_graph_free(g);
  long total = alloc_calls;
  cr_assert_eq(live_blocks, 0);
  cr_assert_geq(total, min_points, "%s: %ld allocations", path, total);
  for (long k = 0; k < total; k++) {
    alloc_calls = 0;
    fail_from = k;
    g = NULL;
    d = (ap_diag){0};
    ap_status s = ap_load_onnx(path, &g, &d);
    cr_assert_eq(s, AP_ERR_NOMEM, "allocation %ld of %ld: %s (%s)", k, total,
                 ap_status_name(s), d.message);
    cr_assert_null(g);
    cr_assert_eq(live_blocks, 0, "allocation %ld: %ld blocks leaked", k, live_blocks);
    cr_assert(strstr(d.message, "out of memory"), "%s", d.message);
  }
  fail_from = -1;
  ap_set_allocator(NULL, NULL);
}

static void expect_nomem_at_every_allocation(const char *path) { expect_nomem_at(path, 11); }

Test(nomem, mnist8_at_every_allocation, .timeout = 600) { expect_nomem_at_every_allocation(MNIST); }

Test(nomem, hand_made_at_every_allocation) {
  expect_nomem_at_every_allocation(DATA("typed_fields.onnx"));
  expect_nomem_at_every_allocation(DATA("attrs.onnx"));
  expect_nomem_at_every_allocation(DATA("ext/good.onnx"));
}

/* A small model's graph fits in the arena's first chunk, so the loops above
 * never fail an allocation in the middle of the conversion. A large model
 * needs several chunks (they double from 64 KiB, ir/arena.c): fail each
 * chunk-sized allocation in turn. */
Test(nomem, large_model_at_every_arena_chunk) {
  counted_from_size = 64 * 1024;
  expect_nomem_at(LIGHT("light_densenet121.onnx"), 5);
  counted_from_size = 0;
}

Test(nomem, writer_at_every_allocation) {
  ap_graph *g = load_ok(DATA("small_cnn.onnx"));
  char path[600];
  snprintf(path, sizeof path, "%s/model.onnx", scratch_dir("nomem"));
  ap_set_allocator(failing_realloc, NULL);
  alloc_calls = 0;
  fail_from = -1;
  long base = live_blocks;
  ap_diag d = {0};
  cr_assert_eq(ap_write_onnx(g, path, &d), AP_OK, "%s", d.message);
  long total = alloc_calls;
  for (long k = 0; k < total; k++) {
    alloc_calls = 0;
    fail_from = k;
    d = (ap_diag){0};
    cr_assert_eq(ap_write_onnx(g, path, &d), AP_ERR_NOMEM, "allocation %ld: %s", k, d.message);
    cr_assert_eq(live_blocks, base, "allocation %ld leaked", k);
  }
  fail_from = -1;
  ap_set_allocator(NULL, NULL);
  ap_graph_free(g);
}

/* The zoo's models with seeded random weights, compiled by accparc for one
 * device and run, agree with ONNX Runtime on the same inputs: an executor
 * nobody here wrote, so a wrong kernel, layout or weight can't agree with it
 * by construction. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "tests/ort_compare.h"

#define ZOO ACCPAR_BINARY_DIR "/samples/accpar-zoo"
#define WORK ACCPAR_BINARY_DIR "/tests/ort_zoo"

/* own_inputs: the zoo's seeded inputs (token ids inside the vocabulary,
 * attention masks of 0 and 1) rather than make_inputs.js's. */
static void check(const char *name, int batch, bool own_inputs) {
  char dir[512], model[600], in[600], got[600], out[600], cmd[8192], msg[2048];
  snprintf(dir, sizeof dir, "%s/%s_b%d", WORK, name, batch);
  snprintf(model, sizeof model, "%s/%s.onnx", dir, name);
  snprintf(in, sizeof in, "%s/in", dir);
  snprintf(got, sizeof got, "%s/got", dir);
  snprintf(out, sizeof out, "%s/prog", dir);
  cr_assert(ort_ready(msg, sizeof msg), "%s", msg);
  snprintf(cmd, sizeof cmd,
           "rm -rf '%s' && mkdir -p '%s' '%s' && '%s' --seed 11 --batch %d %s -o '%s' %s >/dev/null",
           dir, in, got, ZOO, batch, own_inputs ? "--inputs" : "", dir, name);
  cr_assert_eq(system(cmd), 0, "accpar-zoo failed: %s", cmd);
  if (own_inputs) {
    snprintf(cmd, sizeof cmd, "cp '%s/%s_data/'*.pb '%s'", dir, name, in);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
  } else {
    cr_assert(ort_make_inputs(model, in, 5, batch, msg, sizeof msg), "%s", msg);
  }
  /* -O1: these programs run once; the kernels are the same code at any level. */
  snprintf(cmd, sizeof cmd,
           "CFLAGS=-O1 '%s' compile '%s' --devices cpu:1 --mode infer -o '%s' >'%s.log' 2>&1 && "
           "'%s/model' --inputs '%s' --outputs '%s' >>'%s.log' 2>&1",
           ACCPARC, model, out, dir, out, in, got, dir);
  cr_assert_eq(system(cmd), 0, "compiling or running %s failed (see %s.log)", name, dir);
  cr_assert(ort_check(model, in, got, ORT_RTOL, ORT_ATOL, msg, sizeof msg), "%s: %s", name, msg);
}

static void check_model(const char *name, int batch) { check(name, batch, false); }

static void make_work(void) {
  mkdir(ACCPAR_BINARY_DIR "/tests", 0777);
  mkdir(WORK, 0777);
}

Test(ort_zoo, mlp, .init = make_work) { check_model("mlp", 4); }
Test(ort_zoo, lenet5, .init = make_work) { check_model("lenet5", 4); }
Test(ort_zoo, resnet_block, .init = make_work) { check_model("resnet_block", 2); }
Test(ort_zoo, resnet_small, .init = make_work) { check_model("resnet_small", 2); }
Test(ort_zoo, inception_block, .init = make_work) { check_model("inception_block", 1); }
Test(ort_zoo, resnet18, .init = make_work, .timeout = 600) { check_model("resnet18", 1); }

/* Transformers as exported (samples/zoo_transformer.c). */
Test(ort_zoo, gpt2_tiny, .init = make_work) { check("gpt2_tiny", 2, true); }
Test(ort_zoo, bert_tiny, .init = make_work) { check("bert_tiny", 3, true); }
Test(ort_zoo, vit_tiny, .init = make_work) { check("vit_tiny", 2, true); }

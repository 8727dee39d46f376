/* libFuzzer entry point for the plan reader: any byte string handed to
 * `accparc plan|compile --plan FILE` must be read back as a plan or refused
 * with a diagnostic, never crash, leak or trip a sanitizer. A plan is read
 * for a fixed model, the small CNN of tests/data (batch 2, through the
 * pipeline, loaded afresh for each input: reading attaches the plan to the
 * graph); one that reads is printed again, as `--plan` prints it. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accpar/accpar.h"
#include "accpar/plan.h"

#ifndef ACCPAR_SOURCE_DIR
#error "ACCPAR_SOURCE_DIR must name the source tree (the model is read from tests/data)"
#endif

/* Whether data reads as a plan of the small CNN (the seeds all do). */
static bool plan_reads(const uint8_t *data, size_t size) {
  static FILE *sink;
  if (!sink)
    sink = fopen("/dev/null", "w");
  char *json = malloc(size + 1); /* the reader takes a string */
  if (!json)
    return false;
  memcpy(json, data, size);
  json[size] = 0;
  ap_graph *g = NULL;
  ap_diag diag = {0};
  if (ap_load_onnx(ACCPAR_SOURCE_DIR "/tests/data/small_cnn.onnx", &g, &diag) != AP_OK ||
      ap_bind_batch(g, 2, &diag) != AP_OK || ap_run_pipeline(g, NULL, &diag) != AP_OK) {
    fprintf(stderr, "fuzz_plan: %s\n", diag.message);
    abort(); /* the fixed model must load: nothing could be fuzzed */
  }
  ap_devices devices;
  bool reads = ap_partition_from_json(g, json, "fuzz", &devices, &diag) == AP_OK;
  if (reads) {
    ap_plan_print_json(g, sink);
    ap_plan_print_table(g, sink);
  }
  ap_graph_free(g);
  free(json);
  return reads;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  plan_reads(data, size);
  return 0;
}

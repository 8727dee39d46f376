/* libFuzzer entry point: any byte string handed to the compiler's front half
 * must load or fail with a diagnostic, never crash, leak or trip a
 * sanitizer. A graph that loads goes on through everything a user's model
 * meets before code generation: batch binding, the pass pipeline (verify,
 * fold, shapes, check), both dumps, and planning for a small mixed array. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "accpar/accpar.h"
#include "accpar/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *sink;
  static ap_devices devices;
  static int have_devices;
  if (!sink)
    sink = fopen("/dev/null", "w");
  if (!have_devices) {
    ap_diag dd = {0};
    have_devices = ap_devices_parse("tpuv3:1,tpuv2:2", &devices, &dd) == AP_OK;
  }
  ap_graph *g = NULL;
  ap_diag diag = {0};
  if (ap_load_onnx_buffer(data, size, "fuzz", &g, &diag) != AP_OK)
    return 0;
  /* Binding may be refused (no fed input); the pipeline must cope either way. */
  ap_diag bind_diag = {0};
  ap_bind_batch(g, 2, &bind_diag);
  if (ap_run_pipeline(g, NULL, &diag) == AP_OK) {
    ap_dump_text(g, sink);
    ap_dump_json(g, sink);
    ap_plan_opts opts = {.devices = &devices, .strategy = AP_STRATEGY_ACCPAR};
    if (have_devices && ap_partition(g, &opts, &diag) == AP_OK)
      ap_plan_print_json(g, sink);
  }
  ap_graph_free(g);
  return 0;
}

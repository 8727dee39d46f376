/* libFuzzer entry point: any byte string handed to the importer must load or
 * fail with a diagnostic, never crash, leak or trip a sanitizer. The lead
 * extends this to run the pass pipeline on graphs that load. */
#include <stddef.h>
#include <stdint.h>

#include "accpar/accpar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ap_graph *g = NULL;
  ap_diag diag = {0};
  if (ap_load_onnx_buffer(data, size, "fuzz", &g, &diag) == AP_OK)
    ap_graph_free(g);
  return 0;
}

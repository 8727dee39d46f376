/* An out-of-tree client of libaccpar: loads an ONNX model, plans it over a
 * device array with the public API only, and prints every layer's partition
 * type at each level, then each device's bytes and memory.
 *
 *   accpar-client MODEL.onnx DEVICES [STRATEGY]
 *
 * Built against an installed accpar through pkg-config
 *   cc client.c $(pkg-config --cflags --libs accpar) -o accpar-client
 * or through CMake (CMakeLists.txt beside this file: find_package(accpar)). */
#include <stdio.h>
#include <string.h>

#include <accpar/accpar.h>
#include <accpar/plan.h>

static const char *type_name(int type) {
  static const char *const names[] = {"-", "I", "II", "III"};
  return type >= 0 && type <= 3 ? names[type] : "?";
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4) {
    fprintf(stderr, "usage: %s MODEL.onnx DEVICES [STRATEGY]\n", argv[0]);
    return 2;
  }
  if (strcmp(ap_version(), ACCPAR_VERSION_STRING) != 0) {
    fprintf(stderr, "%s: built with accpar %s headers, running libaccpar %s\n", argv[0],
            ACCPAR_VERSION_STRING, ap_version());
    return 1;
  }
  ap_strategy strategy = AP_STRATEGY_ACCPAR;
  if (argc == 4 && !ap_strategy_parse(argv[3], &strategy)) {
    fprintf(stderr, "%s: unknown strategy '%s'\n", argv[0], argv[3]);
    return 2;
  }
  ap_diag d = {0};
  ap_devices devices;
  ap_graph *g = NULL;
  ap_plan_opts opts = {.devices = &devices, .strategy = strategy};
  if (ap_devices_parse(argv[2], &devices, &d) != AP_OK || ap_load_onnx(argv[1], &g, &d) != AP_OK ||
      ap_run_pipeline(g, NULL, &d) != AP_OK || ap_partition(g, &opts, &d) != AP_OK) {
    fprintf(stderr, "%s\n", d.message);
    ap_graph_free(g);
    return 1;
  }
  ap_plan_summary plan;
  if (!ap_plan_get(g, &plan)) {
    fprintf(stderr, "%s: no plan after ap_partition\n", argv[1]);
    ap_graph_free(g);
    return 1;
  }
  printf("libaccpar %s: %s on %d devices, strategy %s, %d levels, %d layers\n", ap_version(),
         argv[1], devices.n_devices, ap_strategy_name(plan.strategy), plan.n_levels,
         plan.n_layers);
  printf("%-24s %-12s types\n", "layer", "op");
  for (int n = 0; n < ap_graph_num_nodes(g); n++) {
    if (!ap_node_is_live(g, n) || ap_node_num_levels(g, n) == 0)
      continue;
    printf("%-24s %-12s", ap_node_name(g, n), ap_node_op(g, n));
    for (int l = 0; l < ap_node_num_levels(g, n); l++)
      printf(" %s", type_name(ap_node_type(g, n, l)));
    putchar('\n');
  }
  printf("%-6s %16s %16s %16s\n", "device", "infer_bytes", "train_step_bytes", "memory_bytes");
  for (int dev = 0; dev < devices.n_devices; dev++)
    printf("%-6d %16.0f %16.0f %16.0f\n", dev, ap_plan_device_bytes(g, dev, false),
           ap_plan_device_bytes(g, dev, true), ap_plan_device_mem(g, dev));
  printf("predicted step %.6g s, %.0f bytes sent in all\n", plan.step_time_s, plan.comm_bytes);
  ap_graph_free(g);
  return 0;
}

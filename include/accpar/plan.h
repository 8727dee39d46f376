/* accpar: the public API of planning.
 *
 * A device array (kinds of accelerators, each with its figures) is arranged
 * as a tree of levels; ap_partition decides, for every layer of a graph and
 * every level, one of the three partition types of AccPar (I: split the
 * batch, II: split the input features, III: split the output features) and
 * annotates the graph with the plan. The plan's predicted step time, bytes
 * and memory are read back with the ap_plan_* calls and printed as a table,
 * as JSON (which ap_partition_from_json reads back), as a Graphviz graph or
 * as an HTML page. Everything lives in the graph's arena.
 */
#ifndef ACCPAR_PLAN_H
#define ACCPAR_PLAN_H

#include <stdbool.h>

#include "accpar/accpar.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { AP_DEVICE_NAME_MAX = 32, AP_MAX_KINDS = 8, AP_MAX_LEVELS = 32 };

/* One kind of accelerator. */
typedef struct ap_device_kind {
  char name[AP_DEVICE_NAME_MAX]; /* "tpuv3", or the name a device file gives */
  double peak_flops;             /* FLOP/s */
  double mem_bw_bytes_s;         /* memory bandwidth, bytes/s */
  double mem_bytes;              /* memory capacity, bytes */
  double link_bw_bytes_s;        /* link bandwidth to the other devices, bytes/s */
  double link_latency_s;         /* per message, seconds */
  double exp_s;                  /* one element of a softmax (the loss, Softmax), seconds;
                                    0: free */
  double tanh_s;                 /* one element of a vectorised tanh (GELU, Tanh; Sigmoid,
                                    Exp), seconds */
  /* The convolutions' lowering (docs/partition.md, "Cost model"); 0: absent */
  double lower_row_s;            /* per row of the column matrix (a tap's output row), seconds */
  double lower_float_s;          /* per float of a contiguous row, beyond the row's cost */
  double lower_gather_s;         /* per float of a strided row (stride > 1) */
  double direct_flops;           /* FLOP/s of the one-input-channel direct convolution */
  /* A GEMM's packing of its B operand, held in the caches, per float packed;
   * 0: absent (docs/partition.md, "Cost model") */
  double pack_float_s;           /* copied from contiguous rows of op(B) */
  double pack_transposed_s;      /* gathered from strided columns (op(B) = B^T) */
  /* The F(2x2, 3x3) Winograd convolution's kernels beyond their products
   * (at peak_flops); 0: absent (their tiles streamed at mem_bw) */
  double wino_block_s;           /* per block of tiles (apk_conv2d_wino_blocks) */
  double wino_pair_s;            /* per block and pair of input and output channels
                                    (the 16 GEMMs reading the transformed weight) */
  double wino_tile_s;            /* per 4x4 tile and channel transformed, in or out */
  int count;                     /* devices of this kind in the array */
} ap_device_kind;

typedef struct ap_devices {
  ap_device_kind kinds[AP_MAX_KINDS];
  int n_kinds;
  int n_devices;                 /* sum of counts; devices are numbered kind by kind */
} ap_devices;

/* The figures of a preset ("tpuv2", "tpuv3", "eyeriss", "cpu"), count 0;
 * false if name is not a preset. */
AP_API bool ap_device_preset(const char *name, ap_device_kind *out);
/* Names of the presets, NULL-terminated. */
AP_API const char *const *ap_device_preset_names(void);
/* Parses "kind:count[,kind:count...]" where kind is a preset or the path of
 * a device file (see docs/partition.md), or a device file alone. */
AP_API ap_status ap_devices_parse(const char *spec, ap_devices *out, ap_diag *d);
/* Reads one device file: "key = value" lines (name, peak_flops,
 * mem_bw_bytes_s, mem_bytes, link_bw_bytes_s, link_latency_s, and optionally
 * exp_s, tanh_s, lower_row_s, lower_float_s, lower_gather_s,
 * direct_flops, pack_float_s, pack_transposed_s, wino_block_s,
 * wino_pair_s and wino_tile_s, 0 when absent;
 * # comments). */
AP_API ap_status ap_device_file_read(const char *path, ap_device_kind *out, ap_diag *d);

typedef enum ap_strategy {
  AP_STRATEGY_DP,         /* type I everywhere */
  AP_STRATEGY_OWT,        /* convolutions I, fully-connected layers II */
  AP_STRATEGY_HYPAR,      /* {I, II}, communication bytes only */
  AP_STRATEGY_ACCPAR,     /* {I, II, III}, the full time model */
  AP_STRATEGY_EXHAUSTIVE, /* {I, II, III}, every assignment (small graphs) */
  AP_STRATEGY_COUNT
} ap_strategy;

typedef enum ap_cost_mode {
  AP_COST_TIME,  /* predicted seconds: compute, bytes over bandwidth, latency */
  AP_COST_PAPER  /* communicated elements only, ratio 1/2, as the published code */
} ap_cost_mode;

typedef struct ap_plan_opts {
  const ap_devices *devices;
  ap_strategy strategy;
  ap_cost_mode cost;
  double mem_limit_bytes;  /* per device; 0: each kind's capacity */
  long exhaustive_max;     /* assignments the exhaustive search may visit; 0: 1e6 */
} ap_plan_opts;

/* The strategy's name ("dp", "owt", "hypar", "accpar", "exhaustive"), and
 * back: false if name is none of them. */
AP_API const char *ap_strategy_name(ap_strategy s);
AP_API bool ap_strategy_parse(const char *name, ap_strategy *out);

/* The partition pass: needs a verified graph with inferred shapes. Sets
 * node->types on every layer node and attaches the plan to the graph
 * (replacing an earlier one). AP_ERR_NO_FIT when no plan of the strategy
 * fits the devices' memory (o->mem_limit_bytes or each kind's capacity). */
AP_API ap_status ap_partition(ap_graph *g, const ap_plan_opts *o, ap_diag *d);

/* The partition type of node n at level l (0 is the top level) once
 * planned: 1 (I), 2 (II) or 3 (III); 0 for weightless nodes, unplanned
 * graphs and levels out of range. ap_node_num_levels is the number of levels
 * n was planned at (0 for weightless or unplanned nodes). */
AP_API int ap_node_num_levels(const ap_graph *g, int n);
AP_API int ap_node_type(const ap_graph *g, int n, int level);

/* Plans g with a plan read back: json is what ap_plan_print_json wrote
 * (`accparc plan --format json`), path names it in diagnostics. The file's
 * devices (into *devices), strategy and cost are used; every layer's type
 * and every join's layout at every level are the file's, the shares the
 * cost model's ratios for them, as ap_partition chooses them. Refused in one
 * line naming the node and the level when a layer has no type at a level or
 * one it cannot take, and naming the node when the file's boxes do not
 * cover each dimension of a value between the devices or differ from the
 * boxes its types give. g needs the same pipeline (and batch) as when the
 * plan was made. */
AP_API ap_status ap_partition_from_json(ap_graph *g, const char *json, const char *path,
                                        ap_devices *devices, ap_diag *d);

/* Reading the plan back (after ap_partition returned AP_OK). */
typedef struct ap_plan_summary {
  ap_strategy strategy;
  int n_levels;
  int n_layers;
  double step_time_s;        /* predicted time of one training step */
  double compute_time_s;     /* its compute part (slowest device per layer) */
  double comm_time_s;        /* its communication part */
  double comm_bytes;         /* bytes sent, summed over all devices */
  double paper_cost;         /* communicated elements, ratio 1/2 (the published metric) */
  double max_mem_bytes;      /* the largest per-device footprint */
  const char *optimality;    /* "exact", or the bounded method used */
} ap_plan_summary;
/* Fills out with the plan of g; false if g has not been planned. */
AP_API bool ap_plan_get(const ap_graph *g, ap_plan_summary *out);
/* Footprint (weights, gradients, activations kept for backward) of device
 * dev, 0 <= dev < n_devices, in bytes; 0 without a plan or when dev is out
 * of range. */
AP_API double ap_plan_device_mem(const ap_graph *g, int dev);
/* Bytes device dev sends in the partitioned program of this plan: the
 * forward pass of inference (train false) or one training step (forward,
 * the errors backward through every transfer, weight-gradient all-reduces of
 * type I and input-error reductions of type III). Computed box by box from
 * the plan's layouts (passes/distribute.h), as code generation moves them;
 * -1 without a plan or when dev is out of range. */
AP_API double ap_plan_device_bytes(ap_graph *g, int dev, bool train);

/* The plan in ONNX's standard multi-device form (IR version 11): attaches to
 * g a device configuration ("accpar", one device name per device, "kind:N")
 * and, for every node, the sharding of each input it reads and output it
 * computes on the devices (the boxes of the partitioned program); a type II
 * layer's output as it stands once its partial sums are resolved.
 * ap_write_onnx then writes them as ModelProto.configuration and
 * NodeProto.device_configurations, with IR version 11. ONNX shards an axis
 * evenly, so a node some tensor of which is split unevenly (a mixed
 * array's ratios) or in boxes that do not form a grid gets no annotation:
 * its name is listed in *unexpressed (*n_unexpressed of them, in g's
 * arena). Needs ap_partition first. */
AP_API ap_status ap_plan_annotate_sharding(ap_graph *g, int *n_unexpressed,
                                    const char ***unexpressed, ap_diag *d);

/* Output to out: the table (one row per layer, one column per level) or
 * JSON (what `accparc plan --format json` prints). */
AP_API ap_status ap_plan_print_table(const ap_graph *g, FILE *out);
AP_API ap_status ap_plan_print_json(const ap_graph *g, FILE *out);
/* The JSON without each node's "boxes" (`--no-boxes`): it reads back as the
 * same plan (ap_partition_from_json computes the boxes from the types), and
 * stays small where the boxes of ResNet-152 on 131,072 devices take 2.7 GB. */
AP_API ap_status ap_plan_print_json_without_boxes(const ap_graph *g, FILE *out);
/* The plan as a Graphviz digraph: every operator with its type at each
 * level (joins as hexagons with their layouts, the weightless nodes that
 * carry a layer's layout in grey), every edge with the bytes the forward
 * pass sends for it (red when any), partial-sum reductions on their node. */
AP_API ap_status ap_plan_print_dot(const ap_graph *g, FILE *out);
/* The plan as one self-contained HTML page (no scripts, no network): the
 * table, each device's boxes of the largest tensors, and bytes and memory
 * per device as inline SVG bar charts. */
AP_API ap_status ap_plan_print_html(const ap_graph *g, FILE *out);

#ifdef __cplusplus
}
#endif
#endif

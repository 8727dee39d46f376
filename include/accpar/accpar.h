/* accpar: the public C API.
 *
 * The only header other toolchains include. A model is loaded into an
 * ap_graph that owns all of its memory (one arena, freed by ap_graph_free);
 * passes annotate it in place; dumps and writers read it. Every call that can
 * fail on user input returns an ap_status and fills an ap_diag with one line
 * naming the file, the node and the operator. The library never exits and
 * never prints on its own.
 */
#ifndef ACCPAR_H
#define ACCPAR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ap_status {
  AP_OK = 0,
  AP_ERR_IO,          /* a file could not be opened, read or written */
  AP_ERR_PARSE,       /* not a well-formed ONNX protobuf */
  AP_ERR_UNSUPPORTED, /* well-formed, but uses something accpar does not handle */
  AP_ERR_INVALID,     /* well-formed, but inconsistent (shapes, names, cycles...) */
  AP_ERR_NOMEM,       /* an allocation failed */
  AP_ERR_USAGE        /* the caller passed bad options */
} ap_status;

enum { AP_DIAG_MAX = 1024 };

typedef struct ap_diag {
  ap_status status;            /* AP_OK until the first error */
  char message[AP_DIAG_MAX];   /* "FILE: node 'N' (OP): what was expected" */
} ap_diag;

typedef struct ap_graph ap_graph;

/* Memory: every allocation of the library goes through this hook, so tests
 * can make any allocation fail. NULL restores malloc/realloc/free. */
typedef void *(*ap_realloc_fn)(void *ptr, size_t size, void *user);
void ap_set_allocator(ap_realloc_fn fn, void *user);

/* Loading and writing ONNX. */
ap_status ap_load_onnx(const char *path, ap_graph **out, ap_diag *diag);
ap_status ap_load_onnx_buffer(const void *data, size_t size, const char *name,
                              ap_graph **out, ap_diag *diag);
ap_status ap_write_onnx(const ap_graph *g, const char *path, ap_diag *diag);
void ap_graph_free(ap_graph *g);

/* Binding inputs before the passes run. */
ap_status ap_bind_batch(ap_graph *g, int64_t batch, ap_diag *diag);
ap_status ap_bind_inputs_dir(ap_graph *g, const char *dir, ap_diag *diag);
/* Binds the symbolic dimension `name` (dim_param) of every graph input that
 * has it to value (--dim NAME=VALUE); an error when no input has it. */
ap_status ap_bind_dim(ap_graph *g, const char *name, int64_t value, ap_diag *diag);
/* An error naming every dimension of a run-time input still unbound (its
 * symbol, or its position when it has none) and the inputs carrying it. */
ap_status ap_check_dims_bound(const ap_graph *g, ap_diag *diag);

/* The pass pipeline: verify, infer shapes, fold constants, verify again.
 * dump_after names a pass whose result is printed to dump_to (or NULL). */
typedef struct ap_pipeline_opts {
  const char *dump_after; /* pass name, or NULL */
  FILE *dump_to;          /* where --dump-after prints; stdout if NULL */
} ap_pipeline_opts;
ap_status ap_run_pipeline(ap_graph *g, const ap_pipeline_opts *opts, ap_diag *diag);
const char *const *ap_pass_names(int *count);

/* Dumps: deterministic, so they can be compared with golden files. */
ap_status ap_dump_text(const ap_graph *g, FILE *out);
ap_status ap_dump_json(const ap_graph *g, FILE *out);

/* Inspection. Values and nodes are small integer ids, 0 <= id < count. */
int ap_graph_num_values(const ap_graph *g);
int ap_graph_num_nodes(const ap_graph *g);
int ap_graph_num_inputs(const ap_graph *g);
int ap_graph_num_outputs(const ap_graph *g);
int ap_graph_input(const ap_graph *g, int i);  /* value id */
int ap_graph_output(const ap_graph *g, int i); /* value id */
const char *ap_value_name(const ap_graph *g, int v);
int ap_value_rank(const ap_graph *g, int v);              /* -1 when unknown */
int64_t ap_value_dim(const ap_graph *g, int v, int axis); /* -1 when unknown */
int ap_value_dtype(const ap_graph *g, int v);             /* ONNX TensorProto.DataType */
int ap_value_is_constant(const ap_graph *g, int v);
const char *ap_node_name(const ap_graph *g, int n);
const char *ap_node_op(const ap_graph *g, int n);
int ap_node_num_inputs(const ap_graph *g, int n);
int ap_node_num_outputs(const ap_graph *g, int n);
int ap_node_input(const ap_graph *g, int n, int i); /* -1 for an omitted optional input */
int ap_node_output(const ap_graph *g, int n, int i);

/* The model's metadata_props (accparc export keeps the plan under
 * "accpar.plan"). ap_graph_metadata returns NULL for a missing key. */
const char *ap_graph_metadata(const ap_graph *g, const char *key);
ap_status ap_graph_set_metadata(ap_graph *g, const char *key, const char *value);

const char *ap_status_name(ap_status s);
const char *ap_version(void);

#ifdef __cplusplus
}
#endif
#endif

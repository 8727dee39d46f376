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

/* The version of these headers; ap_version() gives the library's. CMake
 * checks that they equal the project's VERSION. */
#define ACCPAR_VERSION_MAJOR 0
#define ACCPAR_VERSION_MINOR 1
#define ACCPAR_VERSION_PATCH 0
#define ACCPAR_VERSION_STRING "0.1.0"
/* One number that compares: 10000 * major + 100 * minor + patch. */
#define ACCPAR_VERSION \
  (ACCPAR_VERSION_MAJOR * 10000 + ACCPAR_VERSION_MINOR * 100 + ACCPAR_VERSION_PATCH)

/* Marks the functions libaccpar.so exports; the library is built with
 * -fvisibility=hidden, so nothing else (its protobuf-c bindings of ONNX, its
 * kernels) can clash with the caller's symbols. */
#if defined(__GNUC__) || defined(__clang__)
#define AP_API __attribute__((visibility("default")))
#else
#define AP_API
#endif

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
  AP_ERR_USAGE,       /* the caller passed bad options */
  AP_ERR_NO_FIT       /* no plan of the strategy fits the devices' memory */
} ap_status;

enum { AP_DIAG_MAX = 1024 };

typedef struct ap_diag {
  ap_status status;            /* AP_OK until the first error */
  char message[AP_DIAG_MAX];   /* "FILE: node 'N' (OP): what was expected" */
} ap_diag;

typedef struct ap_graph ap_graph;

/* Memory: every allocation of the library goes through this hook, so tests
 * can make any allocation fail. NULL restores malloc/realloc/free. The hook
 * is process-wide: set it before loading any graph. */
typedef void *(*ap_realloc_fn)(void *ptr, size_t size, void *user);
AP_API void ap_set_allocator(ap_realloc_fn fn, void *user);

/* ---- Loading and writing ONNX ---- */

/* Reads the ONNX model at path into a new graph (*out, freed with
 * ap_graph_free). On failure *out is NULL and diag names the file, node and
 * operator. */
AP_API ap_status ap_load_onnx(const char *path, ap_graph **out, ap_diag *diag);
/* The same from size bytes in memory; name is what diagnostics call it. */
AP_API ap_status ap_load_onnx_buffer(const void *data, size_t size, const char *name,
                                     ap_graph **out, ap_diag *diag);
/* Writes g as a valid ONNX model (with its metadata_props, so a plan set by
 * ap_graph_set_metadata travels with it). Nothing is left at path on failure. */
AP_API ap_status ap_write_onnx(const ap_graph *g, const char *path, ap_diag *diag);
/* Frees g and everything it owns; NULL is allowed. */
AP_API void ap_graph_free(ap_graph *g);

/* ---- Binding inputs, before the pipeline runs ---- */

/* Binds the batch dimension: dim 0 of the first graph input fed at run time
 * and every input dimension sharing its symbolic name. */
AP_API ap_status ap_bind_batch(ap_graph *g, int64_t batch, ap_diag *diag);
/* Turns graph inputs into constants read from dir/input_N.pb (TensorProto). */
AP_API ap_status ap_bind_inputs_dir(ap_graph *g, const char *dir, ap_diag *diag);
/* Binds the symbolic input dimension named name (dim_param) to size, on
 * every fed input that carries it; a name no input carries is refused. */
AP_API ap_status ap_bind_dim(ap_graph *g, const char *name, int64_t size, ap_diag *diag);
/* Binds the dimensions of the fed inputs from DIR/input_N.pb (numbered as
 * ap_bind_inputs_dir), each dim and every dim sharing its symbol, and
 * leaves the inputs fed at run time. */
AP_API ap_status ap_bind_input_dims_dir(ap_graph *g, const char *dir, ap_diag *diag);
/* AP_OK when every dimension of every fed input is known; else one error
 * naming each unbound dimension (by symbol) and the inputs carrying it. */
AP_API ap_status ap_check_input_dims(const ap_graph *g, ap_diag *diag);

/* ---- The pass pipeline: verify, infer shapes, fold constants, verify again ---- */

typedef struct ap_pipeline_opts {
  const char *dump_after; /* pass name whose result is dumped, or NULL */
  FILE *dump_to;          /* where that dump goes; stdout if NULL */
} ap_pipeline_opts;
/* Runs the pipeline in place; opts may be NULL. The library prints only
 * when opts->dump_after asks it to. */
AP_API ap_status ap_run_pipeline(ap_graph *g, const ap_pipeline_opts *opts, ap_diag *diag);
/* The pipeline's pass names, in order (*count of them; count may be NULL);
 * the array is static. */
AP_API const char *const *ap_pass_names(int *count);

/* ---- Dumps: deterministic, so they can be compared with golden files ---- */

/* Every value with its dtype and shape, every node with its attributes (and
 * its partition types once planned), as text or as JSON, to out. */
AP_API ap_status ap_dump_text(const ap_graph *g, FILE *out);
AP_API ap_status ap_dump_json(const ap_graph *g, FILE *out);

/* ---- Inspection: values and nodes are small integer ids, 0 <= id < count ---- */

AP_API int ap_graph_num_values(const ap_graph *g);
/* Nodes include those folding removed; ap_node_is_live tells them apart. */
AP_API int ap_graph_num_nodes(const ap_graph *g);
AP_API int ap_graph_num_inputs(const ap_graph *g);
AP_API int ap_graph_num_outputs(const ap_graph *g);
AP_API int ap_graph_input(const ap_graph *g, int i);  /* value id of graph input i */
AP_API int ap_graph_output(const ap_graph *g, int i); /* value id of graph output i */
AP_API const char *ap_value_name(const ap_graph *g, int v);
AP_API int ap_value_rank(const ap_graph *g, int v);              /* -1 when unknown */
AP_API int64_t ap_value_dim(const ap_graph *g, int v, int axis); /* -1 when unknown */
AP_API int ap_value_dtype(const ap_graph *g, int v);             /* ONNX TensorProto.DataType */
AP_API int ap_value_is_constant(const ap_graph *g, int v);       /* 1 if its data is known */
AP_API const char *ap_node_name(const ap_graph *g, int n);
AP_API const char *ap_node_op(const ap_graph *g, int n);         /* the ONNX op_type */
/* 1 while node n is part of the graph, 0 once folding removed it. */
AP_API int ap_node_is_live(const ap_graph *g, int n);
AP_API int ap_node_num_inputs(const ap_graph *g, int n);
AP_API int ap_node_num_outputs(const ap_graph *g, int n);
AP_API int ap_node_input(const ap_graph *g, int n, int i); /* value id; -1 for an omitted optional input */
AP_API int ap_node_output(const ap_graph *g, int n, int i); /* value id */

/* ---- Metadata ---- */

/* The model's metadata_props (accparc export keeps the plan under
 * "accpar.plan"). ap_graph_metadata returns NULL for a missing key; the
 * string lives as long as g. ap_graph_set_metadata copies key and value,
 * replacing an earlier value of key. */
AP_API const char *ap_graph_metadata(const ap_graph *g, const char *key);
AP_API ap_status ap_graph_set_metadata(ap_graph *g, const char *key, const char *value);

/* ---- Misc ---- */

/* A short name of s ("ok", "io", "parse"...), static. */
AP_API const char *ap_status_name(ap_status s);
/* The library's version, "MAJOR.MINOR.PATCH": ACCPAR_VERSION_STRING of the
 * headers it was built with (compare them to detect a mismatched install). */
AP_API const char *ap_version(void);

#ifdef __cplusplus
}
#endif
#endif

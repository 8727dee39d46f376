/* The frontend's internal header: ONNX protobuf in and out. protobuf-c types
 * stay inside frontend/; everything here speaks the IR's types. The model
 * loaders and writer are public (accpar.h): ap_load_onnx, ap_load_onnx_buffer,
 * ap_write_onnx. */
#ifndef ACCPAR_FRONTEND_H
#define ACCPAR_FRONTEND_H

#include "ir/ir.h"

/* ---- tensor_pb.c -------------------------------------------------------- */

/* Reads a serialized TensorProto file (ONNX test data: input_N.pb,
 * output_N.pb) into *t, with data allocated in arena a. *name_out, if not
 * NULL, receives the tensor's name ("" when unnamed). Errors name the file. */
ap_status ap_read_tensor_pb(const char *path, ap_arena *a, ap_tensor *t,
                            const char **name_out, ap_diag *d);
/* Writes t as a serialized TensorProto (raw_data) named name. Writes to a
 * temporary file and renames, so nothing is half-written. */
ap_status ap_write_tensor_pb(const char *path, const ap_tensor *t, const char *name,
                             ap_diag *d);

/* ---- shared by the frontend's own files --------------------------------- */

/* Declared only where the generated onnx.pb-c.h was included first, so the
 * protobuf types stay inside frontend/ while its files share one conversion
 * of TensorProto (initializers, attribute tensors and .pb files alike). */
#ifdef PROTOBUF_C_onnx_2eproto__INCLUDED

/* A protobuf allocator going through ap_xrealloc that tracks every block, so
 * a failed unpack can release whatever protobuf-c left behind and so running
 * out of memory is told apart from a malformed file. */
typedef struct ap_pb_alloc {
  ProtobufCAllocator base;
  void *blocks;   /* live blocks, a doubly linked list */
  bool failed;    /* an allocation returned NULL */
} ap_pb_alloc;

void ap_pb_alloc_init(ap_pb_alloc *pa);
void ap_pb_alloc_release(ap_pb_alloc *pa); /* frees every block still live */

/* protobuf-c unpacks nested messages recursively without a limit, so a
 * crafted file could overflow the stack; deeper files are refused first.
 * 100 is the default limit of Google's protobuf. */
enum { AP_PB_MAX_DEPTH = 100 };
bool ap_pb_nesting_ok(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t size);

/* Reads the whole file at path into a buffer from ap_xrealloc. */
ap_status ap_pb_read_file(const char *path, uint8_t **data, size_t *size, ap_diag *d);
/* Writes size bytes to path through a temporary file in the same folder and
 * a rename, so a failure leaves the old file (or none) in place. */
ap_status ap_pb_write_file(const char *path, const uint8_t *data, size_t size, ap_diag *d);

/* The folder holding path ("." when it has none), copied into a. */
const char *ap_pb_dir_of(ap_arena *a, const char *path);

/* Where a tensor being converted comes from, for diagnostics and for
 * resolving external data. */
typedef struct ap_pb_where {
  const char *file;  /* the model or .pb file, for messages */
  const char *dir;   /* folder external data is resolved in; NULL refuses it */
  const char *node;  /* node name, or NULL */
  const char *op;    /* operator type, or NULL */
  const char *what;  /* "initializer 'w'", "attribute 'value'"... */
} ap_pb_where;

/* Converts tp into *t, data allocated in a: raw_data (little-endian), every
 * typed field, or external data. */
ap_status ap_tensor_from_pb(const Onnx__TensorProto *tp, ap_arena *a, ap_tensor *t,
                            const ap_pb_where *w, ap_diag *d);
/* Fills *tp (already initialised) from t, with raw_data or string_data;
 * scratch memory comes from a. false when out of memory. */
bool ap_tensor_to_pb(const ap_tensor *t, const char *name, ap_arena *a,
                     Onnx__TensorProto *tp);

#endif

#endif

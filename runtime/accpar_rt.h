/* accpar runtime: the API generated SPMD programs call.
 *
 * A generated program is one function run once per device ("rank"): with the
 * threads transport every rank is a thread of one process; with the MPI
 * transport every rank is an MPI process. A rank talks to the others only
 * through its aprt_comm: point-to-point messages, a barrier, and collectives
 * over groups of ranks with uneven shares. Every blocking call has a timeout,
 * so a rank that failed, exited or never arrives becomes an error on the
 * others, never a hang.
 *
 * Counting: bytes_sent of a rank is the payload bytes of the messages it sent
 * to other ranks through aprt_send and the collectives below (headers, the
 * runtime's own control traffic — loss reduction, output gathering, the final
 * report — and copies to itself are not counted). The number each collective
 * sends is given by the aprt_*_bytes formulas at the end of this header, so a
 * planner can predict it exactly; a message whose payload would be empty is
 * never sent.
 *
 * Status: every call that can fail returns an aprt_status; the first error of
 * a rank is kept as one line ("rank R: ...") readable with aprt_errmsg. The
 * library never exits and never prints, except aprt_main (main.c), which is
 * the program's main and prints its diagnostics on stderr.
 *
 * The runtime does not depend on the compiler: generated programs link
 * accpar_rt (threads only) or accpar_rt_mpi (threads and MPI), protobuf-c,
 * pthreads and libm.
 */
#ifndef ACCPAR_RT_H
#define ACCPAR_RT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum aprt_status {
  APRT_OK = 0,
  APRT_ERR_IO,        /* a file could not be opened, read or written */
  APRT_ERR_FORMAT,    /* a file is not a TensorProto accpar can read */
  APRT_ERR_MISMATCH,  /* wrong dtype, shape, message size or label value */
  APRT_ERR_TIMEOUT,   /* a peer did not send or arrive within the timeout */
  APRT_ERR_PEER,      /* a peer failed or exited before it sent what we wait for */
  APRT_ERR_USAGE,     /* bad arguments: a group without the caller, bad counts... */
  APRT_ERR_NOMEM,     /* an allocation failed */
  APRT_ERR_TRANSPORT  /* the transport itself failed (MPI error, thread creation) */
} aprt_status;

const char *aprt_status_name(aprt_status s);

enum {
  APRT_MAX_RANK = 8,       /* dimensions of a box or tensor */
  APRT_TAG_MAX = 32000,    /* user tags are 0..APRT_TAG_MAX (MPI guarantees 32767) */
  APRT_ERR_MAX = 512       /* bytes of one error line */
};

/* ---- phases (timers) -------------------------------------------------------
 * Time is attributed to the innermost open phase only (exclusive time), so
 * the phases of a rank add up to its wall time inside aprt_run. Collectives
 * and aprt_send/recv/barrier open APRT_PHASE_COMM themselves. */
#define APRT_PHASES(X)                                                         \
  X(OTHER, "other")       /* time in no named phase */                         \
  X(FORWARD, "forward")                                                        \
  X(LOSS, "loss")                                                              \
  X(BACKWARD, "backward")                                                      \
  X(GRADIENT, "gradient")                                                      \
  X(UPDATE, "update")                                                          \
  X(COMM, "comm")
typedef enum aprt_phase {
#define APRT_PHASE_ENUM(id, name) APRT_PHASE_##id,
  APRT_PHASES(APRT_PHASE_ENUM)
#undef APRT_PHASE_ENUM
  APRT_PHASE_COUNT
} aprt_phase;
const char *aprt_phase_name(aprt_phase p);

/* ---- ranks, messages, barrier (core.c) ------------------------------------ */

typedef struct aprt_comm aprt_comm; /* one per rank; owned by the runtime */

int aprt_rank(const aprt_comm *c);
int aprt_size(const aprt_comm *c);
const char *aprt_transport_name(const aprt_comm *c); /* "threads" or "mpi" */

/* Sends bytes to peer. Eager: returns once the data is copied out of buf, it
 * never waits for the receiver. Messages from one rank to another with the
 * same tag are received in the order they were sent. Sending to oneself is
 * allowed (a local copy, not counted). */
aprt_status aprt_send(aprt_comm *c, int peer, int tag, const void *buf, size_t bytes);
/* Receives exactly bytes from peer with tag; a message of another size is an
 * error (APRT_ERR_MISMATCH). */
aprt_status aprt_recv(aprt_comm *c, int peer, int tag, void *buf, size_t bytes);
/* All ranks of the run. */
aprt_status aprt_barrier(aprt_comm *c);

/* Records an error of this rank, tells the other ranks that it failed (so
 * they stop waiting for it) and returns s. Later errors do not overwrite. */
aprt_status aprt_fail(aprt_comm *c, aprt_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *aprt_errmsg(const aprt_comm *c); /* "" while no error */

void aprt_phase_begin(aprt_comm *c, aprt_phase p); /* nests up to 8 deep */
void aprt_phase_end(aprt_comm *c);
/* The rank's steps are now row `row` of the program's rows (< n_rows); -1:
 * none. The time until the next call is that row's (what --report prints
 * as "rows"), beside the phases: a row's time includes its communication. */
void aprt_row(aprt_comm *c, int row);

uint64_t aprt_bytes_sent(const aprt_comm *c);
uint64_t aprt_messages_sent(const aprt_comm *c);

/* ---- collectives (collectives.c) ------------------------------------------
 * A group is a list of n distinct world ranks that contains the caller; every
 * member calls the collective with the same group (same order), counts and
 * tag. "Member i" is the i-th entry of the list, not world rank i. Shares and
 * counts are in elements and may be uneven or zero. Segments are laid out in
 * member order: member i's segment starts at the sum of the counts before it.
 * Sums are taken in member order, so every member gets bitwise the same
 * result, equal to a serial sum in that order. */

/* All-reduce (sum) of count floats in place, as a direct reduce-scatter over
 * shares (member i owns shares[i] elements; NULL = aprt_even_share) followed
 * by a direct all-gather. Bytes: aprt_allreduce_bytes. */
aprt_status aprt_allreduce_sum(aprt_comm *c, const int *group, int n, float *buf,
                               int64_t count, const int64_t *shares, int tag);
/* The all-reduce in two halves, so that a run of them waits once rather than
 * once each: start posts what the all-reduce can send before it receives
 * (the whole buffer, for two members up to 16 KB; else nothing), finish does
 * the rest. Between the two, buf must not change and the caller may start
 * other all-reduces; every member must finish them in the same order.
 * aprt_allreduce_sum is start then finish. Bytes: aprt_allreduce_bytes. */
aprt_status aprt_allreduce_start(aprt_comm *c, const int *group, int n, float *buf,
                                 int64_t count, const int64_t *shares, int tag);
aprt_status aprt_allreduce_finish(aprt_comm *c, const int *group, int n, float *buf,
                                  int64_t count, const int64_t *shares, int tag);
/* All-gather in place: buf holds sum(counts) elements of elem_size bytes, the
 * caller's own segment is filled on entry, all segments on return. */
aprt_status aprt_allgather(aprt_comm *c, const int *group, int n, void *buf,
                           const int64_t *counts, size_t elem_size, int tag);
/* Reduce-scatter (sum) in place: buf holds sum(counts) floats, this member's
 * summand; on return the caller's own segment holds the group's sum and the
 * other segments are unchanged. */
aprt_status aprt_reduce_scatter_sum(aprt_comm *c, const int *group, int n, float *buf,
                                    const int64_t *counts, int tag);

/* ---- boxes and the box exchange (collectives.c) ---------------------------
 * A box is an N-d sub-array of a buffer: element (i0..iN-1) of the box lives
 * at buffer element offset + sum(i_d * stride[d]). ndim 0 is one element. */
typedef struct aprt_box {
  int ndim;                       /* 0..APRT_MAX_RANK */
  int64_t offset;                 /* elements from buffer start to box[0,...,0] */
  int64_t size[APRT_MAX_RANK];    /* extent along each dimension */
  int64_t stride[APRT_MAX_RANK];  /* buffer elements between neighbours along d */
} aprt_box;

/* The box start[d]..start[d]+size[d]-1 of a dense row-major buffer of shape. */
aprt_box aprt_box_dense(int ndim, const int64_t *shape, const int64_t *start,
                        const int64_t *size);
int64_t aprt_box_volume(const aprt_box *b); /* elements */
/* Copies between a box and a contiguous row-major array of its volume. */
void aprt_box_pack(void *dst, const void *src, const aprt_box *b, size_t elem_size);
void aprt_box_unpack(void *dst, const aprt_box *b, const void *src, size_t elem_size);
/* Adds the contiguous array src into box b of dst, element by element: the
 * errors training sends back to the device that sent a box. */
void aprt_box_add_f32(float *dst, const aprt_box *b, const float *src);

typedef struct aprt_xfer {
  int peer;     /* world rank; may be the caller (a local copy) */
  aprt_box box; /* in src (for a send) or dst (for a receive) */
} aprt_xfer;

/* Sends every sends[k].box of src to its peer as one contiguous message, then
 * receives every recvs[k] into its box of dst. The j-th send from a to b
 * matches the j-th receive at b from a; the volumes must agree. src and dst
 * may be the same buffer only if no received box overlaps a sent one.
 * Bytes: aprt_exchange_bytes. */
aprt_status aprt_exchange(aprt_comm *c, const void *src, int nsend, const aprt_xfer *sends,
                          void *dst, int nrecv, const aprt_xfer *recvs,
                          size_t elem_size, int tag);

/* The exchange in two halves, so that a program can post its sends as soon
 * as the source is computed and wait for its receives only where it reads
 * them: start posts the sends, finish receives and unpacks. src must not
 * change until this rank's next finish, exchange or collective returns
 * (under threads the receivers may be copying straight out of it until
 * then); several starts may be outstanding. aprt_exchange is start then
 * finish. Matching and bytes as aprt_exchange. */
aprt_status aprt_exchange_start(aprt_comm *c, const void *src, int nsend, const aprt_xfer *sends,
                                size_t elem_size, int tag);
aprt_status aprt_exchange_finish(aprt_comm *c, void *dst, int nrecv, const aprt_xfer *recvs,
                                 size_t elem_size, int tag);

/* ---- tensors and TensorProto files (tensor_io.c) ------------------------- */

typedef enum aprt_dtype { /* numbered as ONNX TensorProto.DataType */
  APRT_FLOAT = 1,
  APRT_UINT8 = 2,
  APRT_INT8 = 3,
  APRT_UINT16 = 4,
  APRT_INT16 = 5,
  APRT_INT32 = 6,
  APRT_INT64 = 7,
  APRT_BOOL = 9,
  APRT_FLOAT16 = 10,
  APRT_DOUBLE = 11,
  APRT_UINT32 = 12,
  APRT_UINT64 = 13,
  APRT_BFLOAT16 = 16
} aprt_dtype;

typedef struct aprt_tensor {
  aprt_dtype dtype;
  int ndim;                    /* 0..APRT_MAX_RANK */
  int64_t dims[APRT_MAX_RANK];
  void *data;                  /* malloc'd, volume * aprt_dtype_size bytes, native order */
} aprt_tensor;

typedef struct aprt_error {
  char msg[APRT_ERR_MAX]; /* one line naming the file */
} aprt_error;

int64_t aprt_tensor_volume(const aprt_tensor *t);
size_t aprt_dtype_size(aprt_dtype t);
const char *aprt_dtype_name(aprt_dtype t); /* "float32", "int64"... */
/* Reads a .pb TensorProto of any fixed-size numeric dtype above, from
 * raw_data or from the typed field ONNX stores it in (float_data,
 * int32_data for the narrow types, int64_data, double_data, uint64_data). */
aprt_status aprt_tensor_read(const char *path, aprt_tensor *out, aprt_error *err);
/* Reads and checks that dtype and shape are exactly the expected ones. */
aprt_status aprt_tensor_read_expect(const char *path, aprt_dtype dtype, int ndim,
                                    const int64_t *dims, aprt_tensor *out, aprt_error *err);
/* Writes a TensorProto (raw_data, little-endian) through a temporary file
 * renamed into place, so a failed write leaves no half-written file. */
aprt_status aprt_tensor_write(const char *path, const char *name, const aprt_tensor *t,
                              aprt_error *err);
void aprt_tensor_free(aprt_tensor *t);

/* ---- deterministic random numbers ----------------------------------------
 * A counter-based generator: the value depends only on (seed, stream, index),
 * so a device can initialise its shard of a tensor to exactly the values the
 * whole tensor has, whatever the partition. */
float aprt_rand_uniform(uint64_t seed, uint64_t stream, uint64_t index); /* [-1, 1) */
uint64_t aprt_rand_u64(uint64_t seed, uint64_t stream, uint64_t index);

/* ---- running ranks (rt_threads.c, rt_mpi.c) ------------------------------- */

typedef enum aprt_transport_kind {
  APRT_THREADS = 0,
  APRT_MPI = 1
} aprt_transport_kind;

/* 1 if this library was built with the MPI transport (accpar_rt_mpi). */
int aprt_have_mpi(void);

typedef struct aprt_rank_stats {
  uint64_t bytes_sent;            /* counted payload bytes, see the top */
  uint64_t messages_sent;         /* counted messages */
  double phase_s[APRT_PHASE_COUNT];
  double cpu_s;                   /* CPU time of the rank's thread (waits excluded) */
} aprt_rank_stats;

typedef int (*aprt_rank_fn)(aprt_comm *c, void *arg); /* returns an aprt_status */

typedef struct aprt_run_opts {
  aprt_transport_kind transport;
  double timeout_s;     /* of every blocking wait; <= 0: ACCPAR_TIMEOUT_S or 60 */
  void *user;           /* aprt_user(c) of every rank (NULL under aprt_main) */
} aprt_run_opts;

/* Runs fn on size ranks and waits for all. threads: size threads. mpi: fn
 * runs on this process's rank; MPI must already be initialised (aprt_main
 * does it) and the world size must equal size. stats (size entries, may be
 * NULL) receives every rank's counters; with MPI only on rank 0. Returns the
 * first failing rank's status and its message in err. */
aprt_status aprt_run(const aprt_run_opts *opts, int size, aprt_rank_fn fn, void *arg,
                     aprt_rank_stats *stats, aprt_error *err);
void *aprt_user(const aprt_comm *c);

/* ---- the executable (main.c, report.c) ------------------------------------
 * A generated program describes itself in an aprt_program and its main is
 *   int main(int argc, char **argv) { return aprt_main(argc, argv, &program); }
 * aprt_main parses the command line of DESIGN.md, reads or synthesises the
 * inputs, runs prog->run on every rank, writes outputs and the report, and
 * returns the exit status. */

typedef struct aprt_tensor_spec {
  const char *name;            /* the ONNX value name */
  aprt_dtype dtype;
  int ndim;
  int64_t dims[APRT_MAX_RANK];
  int64_t classes;             /* int64 inputs (labels, token ids): values must be in
                                  [0, classes); 0: any (synthesised ones are 0 or 1) */
  int64_t ignore;              /* with classes: one more value allowed (labels: PyTorch's
                                  ignore_index, -100); 0: none */
} aprt_tensor_spec;

typedef struct aprt_args {
  aprt_transport_kind transport;
  int steps;                   /* --steps, default 1 */
  float lr;                    /* --lr, default 0.01 */
  uint64_t seed;               /* --seed, default 1 */
  const char *inputs_dir;      /* --inputs or NULL */
  const char *outputs_dir;     /* --outputs or NULL */
  const char *report_path;     /* --report or NULL */
  int repeat;                  /* --repeat N: N timed runs after one warm-up (inference);
                                  0 (default): one run */
} aprt_args;

typedef struct aprt_program {
  const char *name;                       /* for diagnostics: "mnist-8" */
  int ndev;
  const char *const *device_names;        /* ndev names ("tpuv3"), or NULL */
  int train;                              /* 1: training steps, 0: inference */
  int n_inputs;
  const aprt_tensor_spec *inputs;         /* whole (unpartitioned) tensors */
  int n_outputs;
  const aprt_tensor_spec *outputs;
  const uint64_t *predicted_step_bytes;   /* per device, bytes of one step; or NULL */
  const uint64_t *predicted_fixed_bytes;  /* per device, bytes once per run; or NULL */
  aprt_rank_fn run;                       /* every rank runs this; arg is unused */
  const void *constants;                  /* the read-only blob of weights, or NULL: */
  size_t constants_bytes;                 /* populated before the first run */
  double predicted_step_time_s;           /* the cost model's time of one training
                                             step on the plan's devices; 0: none */
  int n_rows;                             /* the rows of the plan's table, which the
                                             program times its steps by (aprt_row) */
  const char *const *row_names;           /* n_rows: each row's node */
  const double *predicted_row_time_s;     /* n_rows: the cost model's time of each in one
                                             training step; or NULL */
} aprt_program;

int aprt_main(int argc, char **argv, const aprt_program *prog);

/* ---- calibration (calibrate.c) ----------------------------------------------
 * The main of the program `accparc calibrate` builds beside the kernels of
 * codegen/kernels: measures this machine as generated programs see it (the
 * kernels' GEMM rate, copy bandwidth, the threads transport's bandwidth and
 * per-message latency, exp and tanh per element) and writes a device file.
 *   program OUT.dev [--name NAME] [--quick] */
typedef struct aprt_calibrate_kernels {
  void (*sgemm)(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                ptrdiff_t lda, const float *b, ptrdiff_t ldb, float beta, float *c,
                ptrdiff_t ldc, float *work);
  size_t (*sgemm_work_floats)(int m, int n, int k);
  void (*tanh_n)(float *y, const float *x, size_t n); /* y = tanh(x), the element-wise
                                                          loops' form */
  /* y = exp(x - max x) in double, kept as float, and their sum in double:
   * the loss's softmax over one row of logits. */
  double (*exp_n)(float *y, const float *x, size_t n);
  /* The convolutions' lowering (apk_im2col): one image's column matrix of
   * channels x size x size under a k x k kernel at stride and pad. */
  void (*im2col)(int channels, int size, int k, int stride, int pad, const float *x,
                 float *col);
  /* One input channel, m output channels, a k x k kernel on batch images of
   * size x size: the forward kernel then backward weights (the direct loops
   * where the kernels take them), work of conv1_work_floats floats. */
  void (*conv1)(int batch, int size, int k, int m, const float *x, const float *w, float *y,
                float *dw, float *work);
  size_t (*conv1_work_floats)(int batch, int size, int k, int m);
  /* A GEMM's packing of op(B), k x n (B^T where trans_b; ldb its row
   * stride), into dst of packed_b_floats(k, n) floats (apk_pack_b_all). */
  void (*pack_b)(int trans_b, int k, int n, const float *b, ptrdiff_t ldb, float *dst);
  size_t (*packed_b_floats)(int k, int n);
  /* The F(2x2, 3x3) Winograd forward kernel: c input channels, m output
   * channels, a 3x3 kernel at pad 1 on batch images of size x size, work of
   * wino_work_floats floats. */
  void (*wino)(int batch, int c, int size, int m, const float *x, const float *w, float *y,
               float *work);
  size_t (*wino_work_floats)(int batch, int c, int size, int m);
  int (*wino_blocks)(int c, int size, int m); /* its blocks of tiles an image */
} aprt_calibrate_kernels;
int aprt_calibrate_main(int argc, char **argv, const aprt_calibrate_kernels *k);

/* Memory of this rank for its arena and workspaces: `bytes` bytes, aligned
 * to 64 (large ones on 2 MiB huge pages where the system allows), every page
 * populated on the first request, and the same memory on every later call
 * with the same id until the rank ends, so repeated runs (--repeat) reuse it
 * and never page-fault. Not zeroed. The runtime frees it when the rank
 * ends; a request larger than the id's first one moves it. NULL (and the
 * rank failed with APRT_ERR_NOMEM) when out of memory or id is outside
 * 0..APRT_MAX_BUFFERS-1. */
enum { APRT_MAX_BUFFERS = 8 };
void *aprt_buffer(aprt_comm *c, int id, size_t bytes);
/* aprt_buffer, and *is_new set to 1 when this call gave new memory (its
 * content undefined: the caller fills it), 0 when it is the memory an
 * earlier call gave, as that run left it. A generated inference program
 * packs its constant weights into such a buffer on the first run only. */
void *aprt_buffer_new(aprt_comm *c, int id, size_t bytes, int *is_new);

/* Inside prog->run: the parsed arguments, the whole input tensors (read-only,
 * shared by the ranks of a process), and the outputs. */
const aprt_args *aprt_get_args(const aprt_comm *c);
const aprt_tensor *aprt_input(const aprt_comm *c, int index);
/* Writes this rank's box of output index: local holds the box's volume of
 * elements row-major; box indexes the whole output tensor (aprt_box_dense).
 * Ranks holding replicas may write the same box; partial sums must be
 * reduced before. Not counted (control traffic under MPI). */
aprt_status aprt_output_box(aprt_comm *c, int index, const aprt_box *box, const void *local);
/* Adds this rank's part of the loss of the current step; every rank calls it
 * once per step (0 when it holds no part). Rank 0 sums in rank order, records
 * the loss for the report and prints "step S loss L", one step late (the last
 * when the rank's function returns): it never waits for the other ranks'
 * parts of the step it is in. Not counted. */
aprt_status aprt_step_loss(aprt_comm *c, int step, double partial_loss);

/* ---- byte formulas ---------------------------------------------------------
 * Exactly the bytes that member i of a group of n sends in one call. */

/* Member i's element share when count elements are split evenly: the first
 * count % n members take one more. */
static inline int64_t aprt_even_share(int64_t count, int n, int i) {
  return count / n + (i < count % n ? 1 : 0);
}
/* all-gather: (n-1) * counts[i] * elem_size. */
static inline uint64_t aprt_allgather_bytes(int n, const int64_t *counts, int i,
                                            size_t elem_size) {
  return (uint64_t)(n - 1) * (uint64_t)counts[i] * elem_size;
}
/* reduce-scatter: 4 * (sum(counts) - counts[i]). */
static inline uint64_t aprt_reduce_scatter_bytes(int n, const int64_t *counts, int i) {
  int64_t total = 0;
  for (int k = 0; k < n; k++)
    total += counts[k];
  return 4u * (uint64_t)(total - counts[i]);
}
/* all-reduce: 4 * (count + (n-2) * share_i) for n >= 2, 0 for n == 1, where
 * share_i = shares[i] or aprt_even_share(count, n, i). */
static inline uint64_t aprt_allreduce_bytes(int n, int64_t count, const int64_t *shares,
                                            int i) {
  if (n < 2)
    return 0;
  int64_t share = shares ? shares[i] : aprt_even_share(count, n, i);
  return 4u * (uint64_t)(count + (int64_t)(n - 2) * share);
}
/* exchange: elem_size * sum of the volumes of the boxes sent to other ranks. */
static inline uint64_t aprt_exchange_bytes(int self, int nsend, const aprt_xfer *sends,
                                           size_t elem_size) {
  uint64_t total = 0;
  for (int k = 0; k < nsend; k++) {
    if (sends[k].peer == self)
      continue;
    uint64_t v = 1;
    for (int d = 0; d < sends[k].box.ndim; d++)
      v *= (uint64_t)sends[k].box.size[d];
    total += v * elem_size;
  }
  return total;
}

#ifdef __cplusplus
}
#endif
#endif

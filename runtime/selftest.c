/* A three-device SPMD program written the way generated code uses the
 * runtime: tests/test_runtime.c runs it under both transports and checks its
 * losses, outputs and report. Each step every rank
 *   - all-gathers its uneven block of rows of input_0 (1, 2 and 3 rows),
 *   - all-reduces a vector of 10 floats holding rank+1 (must sum to 6),
 *   - adds its part of the "loss", sum of the labels of its rows + step,
 * and finally writes its rows of the gathered tensor as output_0, which must
 * therefore equal input_0. APRT_SELFTEST_FAIL_RANK=R makes rank R fail at
 * step 1, to test that a fault ends the run with one clear line.
 *
 * With APRT_SELFTEST_INFER=1 it is an inference program instead (no loss,
 * one step per run), for --repeat: its gathered rows live in an aprt_buffer,
 * every run checks that the buffer is the one the previous run left (same
 * address, same contents), and output_1 is the number of runs rank 0 did. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accpar_rt.h"

enum { NDEV = 3, ROWS = 6, COLS = 4, VEC = 10 };

static const int64_t row_share[NDEV] = {1, 2, 3};
static const int64_t gather_counts[NDEV] = {1 * COLS, 2 * COLS, 3 * COLS};

/* Per step: all-gather (n-1)*counts[r]*4 plus all-reduce 4*(VEC+(n-2)*share_r)
 * with the even shares 4, 3, 3 of 10. */
static const uint64_t predicted_step[NDEV] = {2 * 4 * 4 + 4 * (10 + 4),
                                              2 * 8 * 4 + 4 * (10 + 3),
                                              2 * 12 * 4 + 4 * (10 + 3)};

/* The communication of one step: all-gather and all-reduce, checked. */
static aprt_status exchange_step(aprt_comm *c, const aprt_tensor *x, int64_t first_row,
                                 float *gathered) {
  const int group[NDEV] = {0, 1, 2};
  int r = aprt_rank(c);
  aprt_phase_begin(c, APRT_PHASE_FORWARD);
  memset(gathered, 0, ROWS * COLS * sizeof(float));
  memcpy(gathered + first_row * COLS, (const float *)x->data + first_row * COLS,
         (size_t)row_share[r] * COLS * sizeof(float));
  aprt_status s = aprt_allgather(c, group, NDEV, gathered, gather_counts, sizeof(float), 1);
  float vec[VEC];
  for (int i = 0; i < VEC; i++)
    vec[i] = (float)(r + 1);
  if (!s)
    s = aprt_allreduce_sum(c, group, NDEV, vec, VEC, NULL, 2);
  aprt_phase_end(c);
  if (s)
    return s;
  if (memcmp(gathered, x->data, ROWS * COLS * sizeof(float)) != 0)
    return aprt_fail(c, APRT_ERR_MISMATCH, "all-gather result differs from input_0");
  for (int i = 0; i < VEC; i++)
    if (vec[i] != 6.0f)
      return aprt_fail(c, APRT_ERR_MISMATCH, "all-reduce gave %g, expected 6", vec[i]);
  return APRT_OK;
}

static int64_t first_row_of(int r) {
  int64_t first_row = 0;
  for (int k = 0; k < r; k++)
    first_row += row_share[k];
  return first_row;
}

/* Per rank (a thread, or the only rank of an MPI process): where its
 * buffers were in the first run. */
static void *first_small[NDEV], *first_large[NDEV];
enum { LARGE_BYTES = 3 << 20 }; /* mapped, on huge pages where possible */

static int run_infer(aprt_comm *c, void *unused) {
  (void)unused;
  int r = aprt_rank(c);
  const aprt_tensor *x = aprt_input(c, 0);
  int64_t first_row = first_row_of(r);
  /* gathered[ROWS * COLS] then the count of earlier runs */
  float *small = aprt_buffer(c, 0, (ROWS * COLS + 1) * sizeof(float));
  unsigned char *large = aprt_buffer(c, 7, LARGE_BYTES);
  if (!small || !large)
    return aprt_fail(c, APRT_ERR_NOMEM, "aprt_buffer failed");
  if ((uintptr_t)small % 64 || (uintptr_t)large % 64)
    return aprt_fail(c, APRT_ERR_USAGE, "aprt_buffer: not 64-byte aligned");
  float runs_before = 0;
  if (!first_small[r]) {
    first_small[r] = small;
    first_large[r] = large;
  } else {
    if (small != first_small[r] || large != first_large[r])
      return aprt_fail(c, APRT_ERR_USAGE, "aprt_buffer moved between runs");
    runs_before = small[ROWS * COLS];
    if (large[0] != (unsigned char)runs_before || large[LARGE_BYTES - 1] != (unsigned char)r)
      return aprt_fail(c, APRT_ERR_USAGE, "aprt_buffer lost its contents between runs");
  }
  aprt_status s = exchange_step(c, x, first_row, small);
  if (s)
    return s;
  small[ROWS * COLS] = runs_before + 1;
  large[0] = (unsigned char)(runs_before + 1);
  large[LARGE_BYTES - 1] = (unsigned char)r;
  int64_t shape[2] = {ROWS, COLS}, start[2] = {first_row, 0}, size[2] = {row_share[r], COLS};
  aprt_box box = aprt_box_dense(2, shape, start, size);
  s = aprt_output_box(c, 0, &box, small + first_row * COLS);
  if (!s && r == 0) {
    int64_t one = 1, zero = 0;
    aprt_box all = aprt_box_dense(1, &one, &zero, &one);
    int64_t runs = (int64_t)(runs_before + 1);
    s = aprt_output_box(c, 1, &all, &runs);
  }
  return s;
}

static int run(aprt_comm *c, void *unused) {
  (void)unused;
  int r = aprt_rank(c);
  const aprt_args *args = aprt_get_args(c);
  const aprt_tensor *x = aprt_input(c, 0), *labels = aprt_input(c, 1);
  int64_t first_row = first_row_of(r);
  const char *fail = getenv("APRT_SELFTEST_FAIL_RANK");
  float gathered[ROWS * COLS];
  for (int step = 0; step < args->steps; step++) {
    if (fail && atoi(fail) == r && step == 1)
      return aprt_fail(c, APRT_ERR_USAGE, "failing on purpose at step %d", step + 1);
    aprt_status s = exchange_step(c, x, first_row, gathered);
    if (s)
      return s;
    aprt_phase_begin(c, APRT_PHASE_LOSS);
    double part = step;
    for (int64_t i = first_row; i < first_row + row_share[r]; i++)
      part += (double)((const int64_t *)labels->data)[i];
    s = aprt_step_loss(c, step, part);
    aprt_phase_end(c);
    if (s)
      return s;
  }
  int64_t shape[2] = {ROWS, COLS}, start[2] = {first_row, 0}, size[2] = {row_share[r], COLS};
  aprt_box box = aprt_box_dense(2, shape, start, size);
  return aprt_output_box(c, 0, &box, gathered + first_row * COLS);
}

static const char *const device_names[NDEV] = {"cpu", "cpu", "tpuv2"};
static const aprt_tensor_spec inputs[] = {
    {"x", APRT_FLOAT, 2, {ROWS, COLS}, 0, 0},
    {"labels", APRT_INT64, 1, {ROWS}, 5, 0},
};
static const aprt_tensor_spec outputs[] = {
    {"y", APRT_FLOAT, 2, {ROWS, COLS}, 0, 0},
};

static const aprt_program program = {
    .name = "rt-selftest",
    .ndev = NDEV,
    .device_names = device_names,
    .train = 1,
    .n_inputs = 2,
    .inputs = inputs,
    .n_outputs = 1,
    .outputs = outputs,
    .predicted_step_bytes = predicted_step,
    .predicted_fixed_bytes = NULL,
    .run = run,
};

static const aprt_tensor_spec infer_outputs[] = {
    {"y", APRT_FLOAT, 2, {ROWS, COLS}, 0, 0},
    {"runs", APRT_INT64, 1, {1}, 0, 0},
};

static const aprt_program infer_program = {
    .name = "rt-selftest-infer",
    .ndev = NDEV,
    .device_names = device_names,
    .train = 0,
    .n_inputs = 2,
    .inputs = inputs,
    .n_outputs = 2,
    .outputs = infer_outputs,
    .predicted_fixed_bytes = predicted_step, /* one step per run */
    .run = run_infer,
    .constants = predicted_step, /* any read-only bytes: populated before the run */
    .constants_bytes = sizeof predicted_step,
};

int main(int argc, char **argv) {
  const char *infer = getenv("APRT_SELFTEST_INFER");
  return aprt_main(argc, argv, infer && atoi(infer) ? &infer_program : &program);
}

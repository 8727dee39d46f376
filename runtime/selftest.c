/* A three-device SPMD program written the way generated code uses the
 * runtime: tests/test_runtime.c runs it under both transports and checks its
 * losses, outputs and report. Each step every rank
 *   - all-gathers its uneven block of rows of input_0 (1, 2 and 3 rows),
 *   - all-reduces a vector of 10 floats holding rank+1 (must sum to 6),
 *   - adds its part of the "loss", sum of the labels of its rows + step,
 * and finally writes its rows of the gathered tensor as output_0, which must
 * therefore equal input_0. APRT_SELFTEST_FAIL_RANK=R makes rank R fail at
 * step 1, to test that a fault ends the run with one clear line. */
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

static int run(aprt_comm *c, void *unused) {
  (void)unused;
  const int group[NDEV] = {0, 1, 2};
  int r = aprt_rank(c);
  const aprt_args *args = aprt_get_args(c);
  const aprt_tensor *x = aprt_input(c, 0), *labels = aprt_input(c, 1);
  int64_t first_row = 0;
  for (int k = 0; k < r; k++)
    first_row += row_share[k];
  const char *fail = getenv("APRT_SELFTEST_FAIL_RANK");
  float gathered[ROWS * COLS];
  for (int step = 0; step < args->steps; step++) {
    if (fail && atoi(fail) == r && step == 1)
      return aprt_fail(c, APRT_ERR_USAGE, "failing on purpose at step %d", step + 1);
    aprt_phase_begin(c, APRT_PHASE_FORWARD);
    memset(gathered, 0, sizeof gathered);
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
    if (memcmp(gathered, x->data, sizeof gathered) != 0)
      return aprt_fail(c, APRT_ERR_MISMATCH, "all-gather result differs from input_0");
    for (int i = 0; i < VEC; i++)
      if (vec[i] != 6.0f)
        return aprt_fail(c, APRT_ERR_MISMATCH, "all-reduce gave %g, expected 6", vec[i]);
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
    {"x", APRT_FLOAT, 2, {ROWS, COLS}, 0},
    {"labels", APRT_INT64, 1, {ROWS}, 5},
};
static const aprt_tensor_spec outputs[] = {
    {"y", APRT_FLOAT, 2, {ROWS, COLS}, 0},
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

int main(int argc, char **argv) { return aprt_main(argc, argv, &program); }

/* The --report JSON of an executable: per device, the bytes it sent and the
 * bytes the plan predicted, and its time per phase and per row of the plan's
 * table beside the row's predicted time; the loss of every step;
 * the wall time of every timed run.
 * Written to a temporary file renamed into place, so a failed run never
 * leaves a half-written report. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport.h"

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

static void json_number(FILE *f, double v, int digits) {
  if (isfinite(v))
    fprintf(f, "%.*g", digits, v);
  else
    fputs("null", f); /* JSON has no NaN: a diverged loss stays visible as null */
}

static void write_body(FILE *f, const aprt_program *prog, const char *transport,
                       const aprt_run_ctx *ctx, const aprt_rank_stats *stats) {
  int ndev = prog->ndev, steps = ctx->args.steps;
  /* The counters cover the timed runs (the warm-up's are dropped). */
  int runs = ctx->args.repeat > 0 ? ctx->args.repeat : 1;
  fputs("{\n  \"program\": ", f);
  json_string(f, prog->name ? prog->name : "");
  fputs(",\n  \"transport\": ", f);
  json_string(f, transport);
  fprintf(f, ",\n  \"mode\": \"%s\"", prog->train ? "train" : "infer");
  fprintf(f, ",\n  \"devices\": %d", ndev);
  fputs(",\n  \"device_names\": [", f);
  for (int d = 0; d < ndev; d++) {
    fputs(d ? ", " : "", f);
    json_string(f, prog->device_names ? prog->device_names[d] : "");
  }
  fprintf(f, "],\n  \"steps\": %d", steps);
  fputs(",\n  \"losses\": [", f);
  for (int i = 0; i < ctx->nlosses; i++) {
    fputs(i ? ", " : "", f);
    json_number(f, ctx->losses[i], 9);
  }
  /* From rank 0's part of one step's loss to its part of the next: one
   * whole step (its backward, update, and the next forward) as rank 0 ran
   * it. Rank 0 waits for the others' parts of step s at step s + 1 and for
   * whatever the plan makes it receive, so it runs at most one step ahead
   * of the slowest rank and a step's time is, over steps, the slowest
   * rank's. */
  fputs("],\n  \"step_time_s\": [", f);
  for (int i = 1; i < ctx->nlosses; i++) {
    fputs(i > 1 ? ", " : "", f);
    json_number(f, ctx->loss_at_s[i] - ctx->loss_at_s[i - 1], 6);
  }
  /* Beside the measured steps, the cost model's time of one (0: none). */
  fputs("],\n  \"predicted_step_time_s\": ", f);
  json_number(f, prog->train && prog->predicted_step_time_s > 0 ? prog->predicted_step_time_s
                                                                 : NAN, 6);
  fprintf(f, ",\n  \"runs\": %d", runs);
  fputs(",\n  \"warmup_s\": ", f);
  json_number(f, ctx->warmup_s >= 0 ? ctx->warmup_s : NAN, 6);
  fputs(",\n  \"run_time_s\": [", f);
  for (int i = 0; i < ctx->nruns; i++) {
    fputs(i ? ", " : "", f);
    json_number(f, ctx->run_time_s[i], 6);
  }
  fputs("],\n  \"bytes_sent\": [", f);
  for (int d = 0; d < ndev; d++)
    fprintf(f, "%s%llu", d ? ", " : "", (unsigned long long)stats[d].bytes_sent);
  fputs("],\n  \"predicted_bytes\": [", f);
  for (int d = 0; d < ndev; d++) {
    uint64_t fixed = prog->predicted_fixed_bytes ? prog->predicted_fixed_bytes[d] : 0;
    uint64_t step = prog->predicted_step_bytes ? prog->predicted_step_bytes[d] : 0;
    fprintf(f, "%s%llu", d ? ", " : "",
            (unsigned long long)((fixed + step * (uint64_t)steps) * (uint64_t)runs));
  }
  fputs("],\n  \"messages_sent\": [", f);
  for (int d = 0; d < ndev; d++)
    fprintf(f, "%s%llu", d ? ", " : "", (unsigned long long)stats[d].messages_sent);
  fputs("],\n  \"cpu_time_s\": [", f);
  for (int d = 0; d < ndev; d++) {
    fputs(d ? ", " : "", f);
    json_number(f, stats[d].cpu_s, 6);
  }
  fputs("],\n  \"phase_time_s\": {", f);
  for (int p = 0; p < APRT_PHASE_COUNT; p++) {
    fprintf(f, "%s\n    ", p ? "," : "");
    json_string(f, aprt_phase_name((aprt_phase)p));
    fputs(": [", f);
    for (int d = 0; d < ndev; d++) {
      fputs(d ? ", " : "", f);
      json_number(f, stats[d].phase_s[p], 6);
    }
    fputc(']', f);
  }
  /* Each row of the plan's table: what the cost model predicts for one
   * training step, and each device's seconds in its steps over the run, as
   * phase_time_s counts them. */
  fputs("\n  },\n  \"rows\": [", f);
  for (int r = 0; ctx->row_s && r < prog->n_rows; r++) {
    fputs(r ? ",\n    {\"node\": " : "\n    {\"node\": ", f);
    json_string(f, prog->row_names[r]);
    fputs(", \"predicted_step_s\": ", f);
    json_number(f, prog->train && prog->predicted_row_time_s ? prog->predicted_row_time_s[r]
                                                              : NAN, 6);
    fputs(", \"time_s\": [", f);
    for (int d = 0; d < ndev; d++) {
      fputs(d ? ", " : "", f);
      json_number(f, ctx->row_s[(size_t)d * (size_t)prog->n_rows + (size_t)r], 6);
    }
    fputs("]}", f);
  }
  fputs(prog->n_rows > 0 && ctx->row_s ? "\n  ]\n}\n" : "]\n}\n", f);
}

aprt_status aprt_report_write(const char *path, const aprt_program *prog,
                              const char *transport, const aprt_run_ctx *ctx,
                              const aprt_rank_stats *stats, aprt_error *err) {
  size_t tmp_len = strlen(path) + 8;
  char *tmp = malloc(tmp_len);
  if (!tmp) {
    aprt_errorf(err, "%s: out of memory", path);
    return APRT_ERR_NOMEM;
  }
  snprintf(tmp, tmp_len, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    aprt_errorf(err, "%s: cannot create: %s", path, strerror(errno));
    free(tmp);
    return APRT_ERR_IO;
  }
  write_body(f, prog, transport, ctx, stats);
  int bad = ferror(f);
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path) != 0) {
    aprt_errorf(err, "%s: cannot write: %s", path, strerror(errno));
    remove(tmp);
    free(tmp);
    return APRT_ERR_IO;
  }
  free(tmp);
  return APRT_OK;
}

/* Reference timings in the style of the OSU micro-benchmarks, to measure commbench's own overhead.
 *
 *   osu_like allreduce ITERS WARMUP   4-byte MPI_Allreduce, timed per iteration with a barrier after
 *                                     each (as osu_allreduce); prints the median of the per-iteration
 *                                     maximum over ranks, and the mean.
 *   osu_like allreduce_loop ITERS WARMUP
 *                                     the same all-reduce timed as nccl-tests times it: after a barrier,
 *                                     ITERS calls back to back between two timestamps, the time per call
 *                                     averaged over the ranks; LOOPS such loops, their median and mean.
 *   osu_like pingpong ITERS WARMUP [BYTES]
 *                                     ping-pong of BYTES (default 8) between ranks 0 and 1 as
 *                                     osu_latency does it, from a page-aligned send buffer into a
 *                                     page-aligned receive buffer: the loop's total time / (2 * ITERS),
 *                                     plus the per-iteration median.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc != 4 && argc != 5) {
    if (rank == 0) fprintf(stderr, "usage: osu_like allreduce|pingpong ITERS WARMUP [BYTES]\n");
    MPI_Finalize();
    return 2;
  }
  const int iters = atoi(argv[2]), warmup = atoi(argv[3]);
  double* t = calloc((size_t)iters, sizeof(double));
  if (strcmp(argv[1], "allreduce") == 0) {
    float in = 1.0f, out = 0.0f;
    double sum = 0.0;
    for (int i = 0; i < warmup + iters; ++i) {
      const double t0 = MPI_Wtime();
      MPI_Allreduce(&in, &out, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      const double dt = MPI_Wtime() - t0;
      if (i >= warmup) {
        t[i - warmup] = dt;
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Allreduce(MPI_IN_PLACE, t, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    for (int i = 0; i < iters; ++i) sum += t[i];
    if (rank == 0)
      printf("allreduce 4 median_us %.4f mean_us %.4f\n", median(t, iters) * 1e6, sum / iters * 1e6);
  } else if (strcmp(argv[1], "allreduce_loop") == 0) {
    enum { LOOPS = 5 };
    float in = 1.0f, out = 0.0f;
    double per_call[LOOPS], sum = 0.0;
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 0; i < warmup; ++i) MPI_Allreduce(&in, &out, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int l = 0; l < LOOPS; ++l) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      for (int i = 0; i < iters; ++i) MPI_Allreduce(&in, &out, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double dt = (MPI_Wtime() - t0) / iters;
      MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      per_call[l] = dt / size;
      sum += per_call[l];
    }
    if (rank == 0)
      printf("allreduce_loop 4 median_us %.4f mean_us %.4f\n", median(per_call, LOOPS) * 1e6, sum / LOOPS * 1e6);
  } else {
    const int bytes = argc == 5 ? atoi(argv[4]) : 8;
    char *sbuf = NULL, *rbuf = NULL;
    if (posix_memalign((void**)&sbuf, 4096, (size_t)bytes + 1) || posix_memalign((void**)&rbuf, 4096, (size_t)bytes + 1))
      MPI_Abort(MPI_COMM_WORLD, 1);
    memset(sbuf, 1, (size_t)bytes + 1);
    memset(rbuf, 0, (size_t)bytes + 1);
    double start = 0.0;
    for (int i = 0; i < warmup + iters; ++i) {
      if (i == warmup) start = MPI_Wtime();
      const double t0 = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(sbuf, bytes, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
        MPI_Recv(rbuf, bytes, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(rbuf, bytes, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(sbuf, bytes, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
      }
      if (i >= warmup) t[i - warmup] = (MPI_Wtime() - t0) / 2;
    }
    const double total = MPI_Wtime() - start;
    if (rank == 0)
      printf("pingpong %d median_us %.4f mean_us %.4f\n", bytes, median(t, iters) * 1e6, total / (2.0 * iters) * 1e6);
    free(sbuf);
    free(rbuf);
  }
  free(t);
  MPI_Finalize();
  return 0;
}

/* MPI_Alltoall timed the nccl-tests way, for scripts/compare-mpi-alltoall.sh.
 *
 * usage: mpi_alltoall MIN_BYTES MAX_BYTES ITERS WARMUP
 * Sizes double from MIN to MAX; a size is one rank's whole send buffer (n chunks, its own
 * included; chunk = size / n rounded down to 16 bytes), as in nccl-tests and efabench alltoall.
 * Per size: WARMUP untimed calls, a barrier, ITERS timed calls back to back; each rank's time is
 * its loop time / ITERS; time = the largest over ranks (MPI_Reduce MAX); algbw = size / time;
 * busbw = algbw x (n-1)/n. One line per size on rank 0: size_bytes time_us algbw_gbps busbw_gbps.
 * The buffers are allocated once (the largest size) and touched before timing. With
 * A2A_HUGE_PAGES=1 in the environment they are 2 MiB-aligned and advised as transparent huge
 * pages (madvise MADV_HUGEPAGE), as efabench's host buffers with --huge-pages. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc != 5) {
        if (rank == 0) fprintf(stderr, "usage: %s MIN_BYTES MAX_BYTES ITERS WARMUP\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long min = atol(argv[1]), max = atol(argv[2]);
    int iters = atoi(argv[3]), warmup = atoi(argv[4]);
    char *send = NULL, *recv = NULL;
    const char *huge = getenv("A2A_HUGE_PAGES");
    if (huge && strcmp(huge, "1") == 0) {
        size_t len = ((size_t)max + (2 << 20) - 1) / (2 << 20) * (2 << 20);
        if (posix_memalign((void **)&send, 2 << 20, len) || posix_memalign((void **)&recv, 2 << 20, len))
            MPI_Abort(MPI_COMM_WORLD, 1);
        madvise(send, len, MADV_HUGEPAGE);
        madvise(recv, len, MADV_HUGEPAGE);
    } else {
        send = malloc(max);
        recv = malloc(max);
    }
    memset(send, rank + 1, max);
    memset(recv, 0, max);
    for (long size = min; size <= max; size *= 2) {
        long chunk = size / n / 16 * 16;
        if (chunk == 0) continue;
        for (int i = 0; i < warmup; i++)
            MPI_Alltoall(send, (int)chunk, MPI_BYTE, recv, (int)chunk, MPI_BYTE, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++)
            MPI_Alltoall(send, (int)chunk, MPI_BYTE, recv, (int)chunk, MPI_BYTE, MPI_COMM_WORLD);
        double t = (MPI_Wtime() - t0) / iters, tmax = 0;
        MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        /* A cheap check that the last call delivered: chunk j came from rank j. */
        long bad = 0;
        for (int j = 0; j < n; j++)
            if (recv[j * chunk] != (char)(j + 1) || recv[j * chunk + chunk - 1] != (char)(j + 1)) bad++;
        long allbad = 0;
        MPI_Reduce(&bad, &allbad, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double bytes = (double)chunk * n;
            double algbw = bytes * 8 / (tmax * 1e9);
            printf("%ld %.3f %.4f %.4f %ld\n", (long)bytes, tmax * 1e6, algbw, algbw * (n - 1) / n, allbad);
            fflush(stdout);
        }
    }
    free(send);
    free(recv);
    MPI_Finalize();
    return 0;
}

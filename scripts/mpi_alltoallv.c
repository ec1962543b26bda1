/* MPI_Alltoallv timed the nccl-tests way, for scripts/compare-mpi-alltoallv.sh.
 *
 * usage: mpi_alltoallv ITERS WARMUP SIZE:MATRIX_FILE...
 * Each MATRIX_FILE holds an n x n matrix of bytes (row = source rank, column = destination, at
 * least n rows and columns; the first n are used), as efabench alltoallv's `counts_bytes`;
 * SIZE is only echoed (the sweep's size the matrix belongs to). Send cells are packed in
 * destination order, receive cells in source order (as efabench and nccl-tests lay them out).
 * Per matrix: WARMUP untimed calls, a barrier, ITERS timed calls back to back; each rank's time
 * is its loop time / ITERS; time = the largest over ranks (MPI_Reduce MAX); algbw = the busiest
 * rank's bytes (the largest of every rank's bytes sent and received) / time; busbw = algbw x
 * (n-1)/n. One line per matrix on rank 0: size_bytes time_us algbw_gbps busbw_gbps bad. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long *read_matrix(const char *path, int n) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    /* The file may be larger than n x n: read its dimension from the first line. */
    long *all = NULL;
    size_t cap = 0, len = 0;
    double v;
    int dim = 0, c;
    while (fscanf(f, "%lf", &v) == 1) {
        if (len == cap) {
            cap = cap ? cap * 2 : 64;
            all = realloc(all, cap * sizeof(long));
        }
        all[len++] = (long)v;
        c = fgetc(f);
        if (c == '\n' && dim == 0) dim = (int)len;
        else if (c != EOF) ungetc(c, f);
    }
    fclose(f);
    if (dim == 0) dim = (int)len;
    if (dim < n || (size_t)dim * dim != len) {
        free(all);
        return NULL;
    }
    long *m = malloc(sizeof(long) * n * n);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) m[i * n + j] = all[i * dim + j] / 16 * 16;
    free(all);
    return m;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc < 4) {
        if (rank == 0) fprintf(stderr, "usage: %s ITERS WARMUP SIZE:MATRIX_FILE...\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int iters = atoi(argv[1]), warmup = atoi(argv[2]);
    int *sc = malloc(sizeof(int) * n), *sd = malloc(sizeof(int) * n);
    int *rc = malloc(sizeof(int) * n), *rd = malloc(sizeof(int) * n);
    for (int a = 3; a < argc; a++) {
        char *colon = strchr(argv[a], ':');
        if (!colon) MPI_Abort(MPI_COMM_WORLD, 2);
        long size = atol(argv[a]);
        long *m = read_matrix(colon + 1, n);
        if (!m) {
            if (rank == 0) fprintf(stderr, "cannot read an %d x %d matrix from %s\n", n, n, colon + 1);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        long stot = 0, rtot = 0, busiest = 0;
        for (int r = 0; r < n; r++) {
            long s = 0, v = 0;
            for (int k = 0; k < n; k++) {
                s += m[r * n + k];
                v += m[k * n + r];
            }
            if (s > busiest) busiest = s;
            if (v > busiest) busiest = v;
        }
        for (int p = 0; p < n; p++) {
            sc[p] = (int)m[rank * n + p];
            sd[p] = (int)stot;
            stot += sc[p];
            rc[p] = (int)m[p * n + rank];
            rd[p] = (int)rtot;
            rtot += rc[p];
        }
        char *send = malloc(stot + 1), *recv = malloc(rtot + 1);
        for (int p = 0; p < n; p++) memset(send + sd[p], rank + 1, sc[p]);
        memset(recv, 0, rtot + 1);
        for (int i = 0; i < warmup; i++)
            MPI_Alltoallv(send, sc, sd, MPI_BYTE, recv, rc, rd, MPI_BYTE, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++)
            MPI_Alltoallv(send, sc, sd, MPI_BYTE, recv, rc, rd, MPI_BYTE, MPI_COMM_WORLD);
        double t = (MPI_Wtime() - t0) / iters, tmax = 0;
        MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        /* A cheap check that the last call delivered: segment j came from rank j. */
        long bad = 0, allbad = 0;
        for (int j = 0; j < n; j++)
            if (rc[j] > 0 && (recv[rd[j]] != (char)(j + 1) || recv[rd[j] + rc[j] - 1] != (char)(j + 1))) bad++;
        MPI_Reduce(&bad, &allbad, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double algbw = (double)busiest * 8 / (tmax * 1e9);
            printf("%ld %.3f %.4f %.4f %ld\n", size, tmax * 1e6, algbw, algbw * (n - 1) / n, allbad);
            fflush(stdout);
        }
        free(send);
        free(recv);
        free(m);
    }
    MPI_Finalize();
    return 0;
}

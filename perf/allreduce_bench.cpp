// The gradient all-reduce alone: time per MPI_Allreduce of float sums at the payloads of
// RETEXO's stages, each call after a barrier (no rank waits for another), slowest rank.
//   mpirun -np P allreduce_bench [ITERS]        (docs/results.md, "The gradient all-reduce")
// The algorithm is Open MPI's choice: mpi_scripts/allreduce.rules, or
// OMPI_MCA_coll_tuned_use_dynamic_rules=0 for its fixed decision.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const int iters = argc > 1 ? std::atoi(argv[1]) : 200;
    if (iters < 1) {
        if (rank == 0) std::fprintf(stderr, "allreduce_bench: ITERS must be a positive integer, got '%s'\n", argv[1]);
        MPI_Finalize();
        return 2;
    }
    for (const int bytes : {32768, 131072, 524288, 2097152}) {
        const int n = bytes / static_cast<int>(sizeof(float));
        std::vector<float> a(static_cast<std::size_t>(n)), b(a.size());
        for (int i = 0; i < n; ++i)
            a[static_cast<std::size_t>(i)] = static_cast<float>(rank) + static_cast<float>(i) * 1e-3F;
        double total = 0;
        for (int it = -5; it < iters; ++it) { // 5 warm-up calls
            MPI_Barrier(MPI_COMM_WORLD);
            const double t = MPI_Wtime();
            MPI_Allreduce(a.data(), b.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            if (it >= 0) total += MPI_Wtime() - t;
        }
        double slowest = 0;
        MPI_Reduce(&total, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) std::printf("%8d bytes: %8.3f ms per all-reduce\n", bytes, slowest / iters * 1e3);
    }
    MPI_Finalize();
    return 0;
}

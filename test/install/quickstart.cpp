// RETEXO and the standard trainer on a synthetic graph, one partition per MPI rank.
//   mpirun -np 4 quickstart
#include <retexo/comm/placement.hpp>
#include <retexo/graph/generate.hpp>
#include <retexo/partition/partitioner.hpp>
#include <retexo/train/retexo.hpp>
#include <retexo/train/standard.hpp>

#include <cstdio>

int main(int argc, char** argv)
{
    retexo::mpi::environment env(argc, argv);
    const retexo::mpi::communicator comm(MPI_COMM_WORLD);
    try {
        retexo::place_threads(comm, "quickstart"); // ranks on one host share its CPUs (unless OMP_NUM_THREADS is set)
        // The same graph on every rank; each keeps its partition (owned rows + halo plan).
        const retexo::graph g = retexo::generate_csbm({.nodes = 5000, .classes = 5});
        const auto assignment = retexo::partition_random(g.num_nodes(), comm.size(), /*seed=*/1);
        const auto part = retexo::extract_partition(g, assignment, comm.size(), comm.rank());
        const retexo::train::rank_context ctx(comm, part);

        retexo::train::retexo_options lazy; // retexo_mpi's defaults: 3 stages, 256 wide, ...
        lazy.model = retexo::nn::layer_kind::sage_mean;
        const auto r = retexo::train::train_retexo(ctx, lazy);
        retexo::train::standard_options full;
        full.model = retexo::nn::layer_kind::sage_mean;
        const auto s = retexo::train::train_standard(ctx, full);

        if (comm.rank() == 0)
            std::printf("test accuracy: RETEXO %.3f with %.1f MB sent, standard %.3f with %.1f MB\n", r.final_acc.test,
                        r.bytes.total_sent() / 1e6, s.final_acc.test, s.bytes.total_sent() / 1e6);
        return 0;
    } catch (const std::exception& e) { // retexo::error names the file or option at fault
        std::fprintf(stderr, "quickstart: %s\n", e.what());
        MPI_Abort(comm.get(), 1); // ends every rank, also those waiting in a collective
        return 1;
    }
}

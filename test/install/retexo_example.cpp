// A program using libretexo through its installed CMake package: it builds a synthetic
// graph in memory, partitions it with PT-Scotch (each rank passing its slice of rows; this
// also checks that the consumer loads the 64-bit PT-Scotch libraries) and checks the cut
// against a random partition's, gives each MPI rank one partition, trains a 2-stage RETEXO
// GCN and prints the accuracy and the bytes each purpose moved.  No files are read or written.
//   mpirun -np 2 retexo_example
#include <retexo/graph/generate.hpp>
#include <retexo/partition/partitioner.hpp>
#include <retexo/partition/ptscotch.hpp>
#include <retexo/train/retexo.hpp>
#include <retexo/version.hpp>

#include <cstdio>

int main(int argc, char** argv)
{
    retexo::mpi::environment env(argc, argv);
    const retexo::mpi::communicator comm(MPI_COMM_WORLD);
    try {
        retexo::csbm_options g;
        g.nodes = 3000;
        g.classes = 4;
        g.features = 32;
        g.avg_degree = 10;
        g.homophily = 0.8;
        const retexo::graph graph = retexo::generate_csbm(g); // the same on every rank
        const auto [first, rows] = retexo::row_slice(graph.num_nodes(), comm.rank(), comm.size());
        retexo::csr_slice slice;
        slice.first_row = first;
        slice.num_nodes = graph.num_nodes();
        for (retexo::node_t v = first; v < first + rows; ++v) {
            const auto row = graph.in_edges.row(v);
            slice.in_edges.sources.insert(slice.in_edges.sources.end(), row.begin(), row.end());
            slice.in_edges.offsets.push_back(static_cast<retexo::offset_t>(slice.in_edges.sources.size()));
        }
        const auto mine = retexo::partition_ptscotch(comm, slice, graph.directed, comm.size(), 1);
        const auto assignment = comm.allgatherv<retexo::part_t>(mine, retexo::purpose::setup);
        const auto cut = retexo::compute_partition_stats(graph, assignment, comm.size()).edge_cut;
        const auto random_cut = retexo::compute_partition_stats(
                                    graph, retexo::partition_random(graph.num_nodes(), comm.size(), 1), comm.size())
                                    .edge_cut;
        if (comm.rank() == 0)
            std::printf("PT-Scotch cut %lld edges, random %lld\n", static_cast<long long>(cut),
                        static_cast<long long>(random_cut));
        if (comm.size() > 1 && cut >= random_cut) return 1;
        const auto part = retexo::extract_partition(graph, assignment, comm.size(), comm.rank());

        const retexo::train::rank_context ctx(comm, part);
        retexo::train::retexo_options o;
        o.model = retexo::nn::layer_kind::gcn;
        o.stages = {{.rounds = 60, .lr = 0.01, .hidden = 64}, {.rounds = 60, .lr = 0.01, .hidden = 64}};
        const auto result = retexo::train::train_retexo(ctx, o);
        if (comm.rank() == 0)
            std::printf("retexo %s on %d ranks: test accuracy %.4f, %llu bytes sent (%llu halo)\n",
                        retexo::version_string, comm.size(), result.final_acc.test,
                        static_cast<unsigned long long>(result.bytes.total_sent()),
                        static_cast<unsigned long long>(result.bytes.sent_for(retexo::purpose::halo_forward)));
        return result.final_acc.test > 0.5 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "retexo_example: error: %s\n", e.what());
        MPI_Abort(comm.get(), 1);
        return 1;
    }
}

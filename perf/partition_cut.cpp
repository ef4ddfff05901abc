// partition_cut: edge cut and halo of random, METIS and PT-Scotch partitions of one graph.
//
//   mpirun -np P partition_cut GRAPH.h5 [PARTS] [SEED]
//
// Every rank reads the graph's CSR and keeps its row_slice; partition_ptscotch partitions the
// slices into PARTS parts (default P, the number of ranks); rank 0 gathers that assignment,
// computes random and METIS (cut and vol objectives) assignments of the whole graph itself and
// prints one tab-separated line per method:
//   graph  parts  ranks  method  edge_cut  total_halo  balance  seconds
// edge_cut counts crossing in-edge CSR entries (an undirected edge counts twice), total_halo
// the replicated boundary nodes summed over parts, balance max part / mean part.
#include <retexo/comm/communicator.hpp>
#include <retexo/io/graph_file.hpp>
#include <retexo/partition/partitioner.hpp>
#include <retexo/partition/ptscotch.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>

namespace {

using namespace retexo;

double seconds_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void print_row(const std::string& name, part_t parts, int ranks, const char* method, const partition_stats& s,
               double seconds)
{
    std::printf("%s\t%d\t%d\t%s\t%lld\t%lld\t%.4f\t%.3f\n", name.c_str(), parts, ranks, method,
                static_cast<long long>(s.edge_cut), static_cast<long long>(s.total_halo), s.balance, seconds);
    std::fflush(stdout);
}

int run(const mpi::communicator& comm, int argc, char** argv)
{
    if (argc < 2 || argc > 4) {
        if (comm.rank() == 0) std::cerr << "usage: mpirun -np P partition_cut GRAPH.h5 [PARTS] [SEED]\n";
        return 2;
    }
    const std::string path = argv[1];
    const part_t parts = argc > 2 ? static_cast<part_t>(std::stol(argv[2])) : comm.size();
    const std::uint64_t seed = argc > 3 ? std::stoull(argv[3]) : 42;
    const std::string name = std::filesystem::path(path).stem().string();

    // Each rank reads the whole CSR (cheap at these sizes) and keeps its slice.
    csr whole;
    bool directed = false;
    comm.checked([&] {
        const graph_file_reader reader(path);
        whole = reader.read_csr();
        directed = reader.info().directed;
    });
    const auto [first, rows] = row_slice(whole.num_rows(), comm.rank(), comm.size());
    csr_slice mine;
    mine.first_row = first;
    mine.num_nodes = whole.num_rows();
    mine.in_edges.offsets.assign(whole.offsets.begin() + first, whole.offsets.begin() + first + rows + 1);
    for (auto& o : mine.in_edges.offsets)
        o -= whole.offsets[first];
    mine.in_edges.sources.assign(whole.sources.begin() + whole.offsets[first],
                                 whole.sources.begin() + whole.offsets[first + rows]);

    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    const auto my_parts = partition_ptscotch(comm, mine, directed, parts, seed);
    const double scotch_seconds = comm.allreduce(seconds_since(t0), MPI_MAX, purpose::control);
    const auto assignment = comm.allgatherv<part_t>(my_parts, purpose::output);
    if (comm.rank() != 0) return 0;

    auto t = std::chrono::steady_clock::now();
    const auto rnd = partition_random(whole.num_rows(), parts, seed);
    print_row(name, parts, comm.size(), "random", compute_partition_stats(whole, {}, rnd, parts), seconds_since(t));
    t = std::chrono::steady_clock::now();
    const auto metis_cut = partition_metis(whole, directed, parts, metis_objective::cut, seed);
    const double metis_cut_seconds = seconds_since(t);
    check_no_empty_part(metis_cut, parts);
    print_row(name, parts, comm.size(), "metis-cut", compute_partition_stats(whole, {}, metis_cut, parts),
              metis_cut_seconds);
    t = std::chrono::steady_clock::now();
    const auto metis_vol = partition_metis(whole, directed, parts, metis_objective::vol, seed);
    const double metis_vol_seconds = seconds_since(t);
    check_no_empty_part(metis_vol, parts);
    print_row(name, parts, comm.size(), "metis-vol", compute_partition_stats(whole, {}, metis_vol, parts),
              metis_vol_seconds);
    print_row(name, parts, comm.size(), "ptscotch", compute_partition_stats(whole, {}, assignment, parts),
              scotch_seconds);
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    retexo::mpi::environment env(argc, argv);
    try {
        const retexo::mpi::communicator comm;
        return run(comm, argc, argv);
    } catch (const std::exception& e) {
        std::cerr << "partition_cut: " << e.what() << "\n";
        return 1;
    }
}

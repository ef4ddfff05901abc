// retexo_mpi: the MPI application.  Each rank owns one partition.
#include "mpi_main.hpp"

#include <retexo/io/load.hpp>

#include <omp.h>

int main(int argc, char** argv)
{
    using namespace retexo;
    mpi::environment env(argc, argv);
    const mpi::communicator comm(MPI_COMM_WORLD);
    const bool root = comm.rank() == 0;
    return cli::run_mpi("retexo_mpi", comm, [&] {
        data_options data;
        std::string objective = "vol";
        cli::po::options_description desc("Data");
        desc.add_options()
            ("data", cli::po::value(&data.data),
             "partitioned directory (retexo_partition) or graph file (.h5); default: the built-in synthetic graph")
            ("partition", cli::po::value(&data.partition)->default_value(data.partition),
             "with a graph file: random | metis | blocks | assignment file (line i = partition of node i)")
            ("objective", cli::po::value(&objective)->default_value(objective), "METIS objective: vol | cut")
            ("seed", cli::po::value(&data.seed)->default_value(data.seed), "random seed");
        cli::po::variables_map vm;
        int code = 0;
        if (!cli::parse(argc, argv, "retexo_mpi", "mpirun -np P retexo_mpi [options]", desc, vm, code, root))
            return code;
        data.objective = parse_metis_objective(objective);
        if (root)
            std::cout << "retexo " << version_string << ": " << comm.size() << " ranks x "
                      << omp_get_max_threads() << " threads, seed " << data.seed << ", data "
                      << (data.data.empty() ? "built-in synthetic graph" : data.data) << "\n";
        const auto lp = load_rank_partition(comm, data);
        const auto table = gather_partition_table(comm, lp);
        if (root)
            std::cout << "graph " << lp.global.name << ": " << lp.global.num_nodes << " nodes, "
                      << lp.global.num_edges << " in-edges, " << lp.global.num_features
                      << " features, " << lp.global.num_classes << " classes; assignment hash "
                      << hash_to_hex(lp.assignment_hash) << "\n"
                      << table;
        return cli::exit_ok;
    });
}

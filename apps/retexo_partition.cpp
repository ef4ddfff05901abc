// retexo_partition: split an HDF5 graph file into per-partition files.  Run alone, one process
// reads the graph and writes every part file; under `mpirun -np P` each rank reads its slice of
// the graph, the ranks partition it together and each writes its own part file.
#include "cli.hpp"

#include <retexo/core/atomic_file.hpp>
#include <retexo/core/hash.hpp>
#include <retexo/ingest/directory.hpp>
#include <retexo/ingest/load.hpp>
#include <retexo/io/assignment.hpp>
#include <retexo/io/graph_file.hpp>
#include <retexo/io/partition_files.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>

namespace {

using namespace retexo;
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t)
{
    return std::chrono::duration<double>(clock_type::now() - t).count();
}

/// Write out_dir/assignment.txt from every rank's slice: each rank writes its piece, rank 0
/// joins them in order (no rank holds the whole assignment) and adds the file to `written`.
void write_assignment_pieces(const mpi::communicator& comm, const local_partition& lp, const std::string& out_dir,
                             committed_files& written)
{
    node_directory dir(comm, lp.global.num_nodes, lp.owned_global, "retexo_partition");
    const auto [first, count] = row_slice(lp.global.num_nodes, comm.rank(), comm.size());
    std::vector<node_t> ids(static_cast<std::size_t>(count));
    std::iota(ids.begin(), ids.end(), first);
    const auto piece = (fs::path(out_dir) / ("assignment.txt.piece" + std::to_string(comm.rank()))).string();
    const auto owners = dir.owners(ids);
    committed_files pieces; // never kept: removed however this ends
    comm.checked([&] {
        write_assignment(piece, owners);
        pieces.add(piece);
    });
    comm.checked([&] {
        if (comm.rank() != 0) return;
        const auto path = (fs::path(out_dir) / "assignment.txt").string();
        atomic_file out(path);
        {
            std::ofstream o(out.temp_path(), std::ios::binary);
            for (int r = 0; r < comm.size(); ++r) {
                const auto name = (fs::path(out_dir) / ("assignment.txt.piece" + std::to_string(r))).string();
                std::ifstream in(name, std::ios::binary);
                o << in.rdbuf();
                RETEXO_ENSURE(in.good() || in.eof(), name << ": cannot read");
            }
            o.flush();
            RETEXO_ENSURE(o.good(), path << ": write failed");
        }
        out.commit();
        written.add(path);
    });
}

int partition_distributed(const mpi::communicator& comm, const std::string& graph_path, const partition_options& o,
                          const std::string& out)
{
    RETEXO_ENSURE(o.parts == comm.size(), "--parts " << o.parts << ": with mpirun -np " << comm.size()
                                                     << " each rank writes one part, so --parts must be " << comm.size()
                                                     << " (or left out)");
    const auto t0 = clock_type::now();
    data_options d;
    d.data = graph_path;
    d.partition = o.method == partition_method::given ? o.assignment_file : name_of(o.method);
    d.objective = o.objective;
    d.seed = o.seed;
    d.read_features = false; // streamed from the file into the part file below
    const auto lp = load_rank_partition(comm, d);
    const double t_partition = since(t0);
    const auto t1 = clock_type::now();
    committed_files mine; // removed if another rank's part, or a later file, fails
    comm.checked([&] {
        create_output_directory(out, mine);
        const graph_file_reader reader(graph_path);
        write_partition_file(partition_file_path(out, comm.rank()), lp, &reader);
        mine.add(partition_file_path(out, comm.rank()));
    });
    write_assignment_pieces(comm, lp, out, mine);
    partition_manifest m;
    m.graph = lp.global;
    m.num_parts = comm.size();
    m.method = name_of(o.method);
    m.objective = o.method == partition_method::metis ? name_of(o.objective) : "";
    m.seed = o.seed;
    m.assignment_hash = lp.assignment_hash;
    m.source = graph_path;
    m.stats = gather_partition_stats(comm, lp);
    comm.checked([&] {
        if (comm.rank() == 0) write_manifest(out, m);
    });
    mine.keep();
    if (comm.rank() == 0)
        std::cout << "partitioned " << graph_path << " (" << m.graph.num_nodes << " nodes) into " << m.num_parts
                  << " parts with " << m.method << (m.objective.empty() ? "" : " (" + m.objective + ")") << " on "
                  << comm.size() << " ranks, assignment hash " << hash_to_hex(m.assignment_hash) << "\n"
                  << format_partition_stats(m.stats, m.graph.directed) << "reading and partitioning " << t_partition
                  << " s, writing " << since(t1) << " s -> " << out << "\n";
    return cli::exit_ok;
}

int partition_serial(const std::string& graph_path, const partition_options& o, const std::string& out)
{
    const auto t0 = clock_type::now();
    const graph_file_reader reader(graph_path);
    const auto assignment = make_partition(reader.read_csr(), reader.info().directed, o);
    const auto t1 = clock_type::now();
    const auto m = write_partitioned(graph_path, assignment, o, out);
    std::cout << "partitioned " << graph_path << " (" << m.graph.num_nodes << " nodes) into " << m.num_parts
              << " parts with " << m.method << (m.objective.empty() ? "" : " (" + m.objective + ")")
              << ", assignment hash " << hash_to_hex(m.assignment_hash) << "\n"
              << format_partition_stats(m.stats, m.graph.directed) << "partitioning "
              << std::chrono::duration<double>(t1 - t0).count() << " s, writing " << since(t1) << " s -> " << out
              << "\n";
    return cli::exit_ok;
}

} // namespace

int main(int argc, char** argv)
{
    mpi::environment env(argc, argv);
    const mpi::communicator comm(MPI_COMM_WORLD);
    return cli::run("retexo_partition", &comm, [&] {
        std::string graph_path, out, method = "random", objective = "vol";
        partition_options o;
        cli::po::options_description desc("Options");
        desc.add_options()("graph", cli::po::value(&graph_path)->required(),
                           "graph file (.h5) from retexo_convert / retexo_generate")(
            "parts", cli::po::value(&o.parts),
            "number of partitions (under mpirun: the number of ranks, each writes its own part)")(
            "method", cli::po::value(&method)->default_value(method),
            "random | metis | scotch (PT-Scotch; under mpirun over the ranks' slices) | blocks | given")(
            "objective", cli::po::value(&objective)->default_value(objective),
            "METIS objective: vol (communication volume) | cut (edge cut)")(
            "assignment", cli::po::value(&o.assignment_file),
            "with --method given: text file, line i = partition of node i (gpmetis format; .gz ok)")(
            "seed", cli::seed_value(&o.seed), "random seed (random, metis)")(
            "out,o", cli::po::value(&out)->required(), "output directory (manifest.json, part<r>.h5)");
        cli::po::variables_map vm;
        int code = 0;
        if (!cli::parse(argc, argv, "retexo_partition",
                        "retexo_partition --graph FILE.h5 --parts P (or under mpirun -np P) "
                        "--method random|metis|scotch|blocks|given [--assignment FILE] [--seed S] --out DIR",
                        desc, vm, code, {.print = comm.rank() == 0}))
            return code;
        cli::checked_options(comm, [&] { // every rank alike: one message, no abort
            if (vm.count("parts") == 0U) {
                RETEXO_ENSURE(comm.size() > 1, "--parts is required (or run under mpirun -np P)");
                o.parts = comm.size();
            }
            RETEXO_ENSURE(o.parts >= 1, "--parts must be positive, got " << o.parts);
            o.method = cli::option_value<partition_method>(method, "--method");
            o.objective = cli::option_value<metis_objective>(objective, "--objective");
            RETEXO_ENSURE(o.method == partition_method::given || o.assignment_file.empty(),
                          "--assignment is only used with --method given");
            RETEXO_ENSURE(o.method != partition_method::given || !o.assignment_file.empty(),
                          "--assignment FILE is required with --method given");
        });
        return comm.size() > 1 ? partition_distributed(comm, graph_path, o, out) : partition_serial(graph_path, o, out);
    });
}

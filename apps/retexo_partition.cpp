// retexo_partition: split an HDF5 graph file into per-partition files.
#include "cli.hpp"

#include <retexo/io/graph_file.hpp>
#include <retexo/io/partition_files.hpp>

#include <chrono>

int main(int argc, char** argv)
{
    using namespace retexo;
    return cli::run("retexo_partition", [&] {
        std::string graph_path, out, method = "random", objective = "vol", assignment_out;
        partition_options o;
        cli::po::options_description desc("Options");
        desc.add_options()("graph", cli::po::value(&graph_path)->required(),
                           "graph file (.h5) from retexo_convert / retexo_generate")(
            "parts", cli::po::value(&o.parts)->required(), "number of partitions")(
            "method", cli::po::value(&method)->default_value(method),
            "random | metis | blocks | given")("objective", cli::po::value(&objective)->default_value(objective),
                                               "METIS objective: vol (communication volume) | cut (edge cut)")(
            "assignment", cli::po::value(&o.assignment_file),
            "with --method given: text file, line i = partition of node i (gpmetis format; .gz ok)")(
            "seed", cli::po::value(&o.seed)->default_value(o.seed), "random seed (random, metis)")(
            "out,o", cli::po::value(&out)->required(), "output directory (manifest.json, part<r>.h5)");
        cli::po::variables_map vm;
        int code = 0;
        if (!cli::parse(argc, argv, "retexo_partition",
                        "retexo_partition --graph FILE.h5 --parts P --method random|metis|blocks|given "
                        "[--assignment FILE] [--seed S] --out DIR",
                        desc, vm, code))
            return code;
        RETEXO_ENSURE(o.parts >= 1, "--parts must be positive, got " << o.parts);
        o.method = parse_name<partition_method>(method, "--method");
        o.objective = parse_name<metis_objective>(objective, "--objective");
        RETEXO_ENSURE(o.method == partition_method::given || o.assignment_file.empty(),
                      "--assignment is only used with --method given");
        const auto t0 = std::chrono::steady_clock::now();
        const graph_file_reader reader(graph_path);
        const auto assignment = make_partition(reader.read_csr(), reader.info().directed, o);
        const auto t1 = std::chrono::steady_clock::now();
        const auto m = write_partitioned(graph_path, assignment, o, out);
        const auto t2 = std::chrono::steady_clock::now();
        std::cout << "partitioned " << graph_path << " (" << m.graph.num_nodes << " nodes) into " << m.num_parts
                  << " parts with " << m.method << (m.objective.empty() ? "" : " (" + m.objective + ")")
                  << ", assignment hash " << hash_to_hex(m.assignment_hash) << "\n"
                  << format_partition_stats(m.stats, m.graph.directed) << "partitioning "
                  << std::chrono::duration<double>(t1 - t0).count() << " s, writing "
                  << std::chrono::duration<double>(t2 - t1).count() << " s -> " << out << "\n";
        return cli::exit_ok;
    });
}

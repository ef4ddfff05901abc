// retexo_shard: write owner shards.  An owner writes its own shard from its own rows (nodes and
// the edges incident to them), alone and without knowing the other owners; or every owner's
// shard is cut from one whole graph file under an assignment (tests, moving existing data).
#include "cli.hpp"

#include <retexo/ingest/owner_shard.hpp>
#include <retexo/io/assignment.hpp>
#include <retexo/io/graph_file.hpp>
#include <retexo/partition/partitioner.hpp>

#include <chrono>

namespace {

using namespace retexo;

std::vector<part_t> assignment_of(const std::string& graph_path, const partition_options& o)
{
    const graph_file_reader reader(graph_path);
    return make_partition(reader.read_csr(), reader.info().directed, o);
}

} // namespace

int main(int argc, char** argv)
{
    return cli::run("retexo_shard", [&] {
        std::string nodes, edges, graph_path, out, method = "random", storage = "auto";
        graph_info info;
        partition_options part;
        cli::po::options_description own("An owner's shard from its own rows");
        own.add_options()("nodes", cli::po::value(&nodes),
                          "node rows (.csv or .csv.gz): global_id,label,split,f_1,...,f_F per line; split is train, "
                          "valid, test or none; the label may be empty for a node in no split")(
            "edges", cli::po::value(&edges),
            "edge rows (.csv or .csv.gz): src,dst per line (global ids), the edges incident to the owner's nodes")(
            "num-classes", cli::po::value(&info.num_classes), "number of classes of the whole graph")(
            "name", cli::po::value(&info.name)->default_value("graph"), "graph name (the same for every owner)")(
            "directed", cli::po::bool_switch(&info.directed),
            "the edges are directed (default: undirected; an edge may be listed by either owner)")(
            "features", cli::po::value(&storage)->default_value(storage),
            "auto | dense | sparse: how the features are stored (auto: sparse below 25% non-zero)");
        cli::po::options_description whole("Every owner's shard from a whole graph file");
        whole.add_options()("graph", cli::po::value(&graph_path),
                            "graph file (.h5)")("parts", cli::po::value(&part.parts), "number of owners")(
            "method", cli::po::value(&method)->default_value(method), "random | metis | scotch | blocks | given")(
            "assignment", cli::po::value(&part.assignment_file), "with --method given: line i = owner of node i")(
            "seed", cli::seed_value(&part.seed), "random seed (random, metis)");
        cli::po::options_description desc("Options");
        desc.add_options()("out,o", cli::po::value(&out)->required(),
                           "output: the shard file (from rows) or the owners directory (from --graph)");
        desc.add(own).add(whole);
        cli::po::variables_map vm;
        int code = 0;
        if (!cli::parse(argc, argv, "retexo_shard",
                        "retexo_shard --nodes NODES.csv --edges EDGES.csv --num-classes C [--name N] [--directed] "
                        "--out DIR/shard<r>.h5\n       retexo_shard --graph FILE.h5 --parts P [--method M] --out DIR",
                        desc, vm, code))
            return code;
        const auto t0 = std::chrono::steady_clock::now();
        if (!graph_path.empty()) {
            for (const char* opt : {"nodes", "edges", "num-classes"})
                RETEXO_ENSURE(vm.count(opt) == 0U, "--" << opt << " is for an owner's rows, not with --graph");
            RETEXO_ENSURE(vm.count("parts") != 0U, "--graph needs --parts");
            RETEXO_ENSURE(part.parts >= 1, "--parts must be positive, got " << part.parts);
            part.method = cli::option_value<partition_method>(method, "--method");
            write_owner_shards(graph_path, assignment_of(graph_path, part), part.parts, out);
            std::cout << "wrote " << part.parts << " owner shards of " << graph_path << " (" << method << ") to " << out
                      << "/shard<r>.h5";
        } else {
            RETEXO_ENSURE(!nodes.empty() && !edges.empty() && vm.count("num-classes") != 0U,
                          "give --nodes, --edges and --num-classes (an owner's rows), or --graph and --parts");
            for (const char* opt : {"parts", "assignment"})
                RETEXO_ENSURE(vm.count(opt) == 0U, "--" << opt << " is only used with --graph");
            std::optional<feature_storage> fs;
            if (storage != "auto") fs = cli::option_value<feature_storage>(storage, "--features");
            const auto s = read_owner_rows(nodes, edges, info, fs);
            write_owner_shard(out, s.nodes, s.src, s.dst);
            std::cout << "wrote " << out << ": " << s.nodes.size() << " nodes, " << s.nodes.info.num_features
                      << " features (" << (s.nodes.features.is_sparse() ? "sparse" : "dense") << "), " << s.src.size()
                      << " edges";
        }
        std::cout << " in " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
        return cli::exit_ok;
    });
}

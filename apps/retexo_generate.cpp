// retexo_generate: write a synthetic CSBM graph to the HDF5 graph format.
#include "cli.hpp"

#include <retexo/io/graph_file.hpp>

#include <chrono>

int main(int argc, char** argv)
{
    using namespace retexo;
    return cli::run("retexo_generate", [&] {
        csbm_options o;
        std::string out;
        std::int64_t nodes = o.nodes;
        cli::po::options_description desc("Options");
        desc.add_options()("out,o", cli::po::value(&out)->required(), "output graph file (.h5)")(
            "nodes", cli::po::value(&nodes)->default_value(nodes), "number of nodes")(
            "classes", cli::po::value(&o.classes)->default_value(o.classes), "number of classes (at least 2)")(
            "features", cli::po::value(&o.features)->default_value(o.features), "feature dimension")(
            "avg-degree", cli::po::value(&o.avg_degree)->default_value(o.avg_degree), "mean degree")(
            "homophily", cli::value_shown(&o.homophily), "probability that an edge joins two nodes of the same class")(
            "power-law", cli::po::value(&o.power_law)->default_value(o.power_law),
            "degree exponent (> 2) for power-law degrees; 0 = Poisson-like degrees")(
            "feature-signal", cli::po::value(&o.feature_signal)->default_value(o.feature_signal),
            "norm of the class-mean feature vectors (noise is unit variance per dimension)")(
            "train", cli::value_shown(&o.train_fraction),
            "train fraction")("valid", cli::value_shown(&o.valid_fraction),
                              "valid fraction")("test", cli::value_shown(&o.test_fraction), "test fraction")(
            "seed", cli::seed_value(&o.seed), "random seed")("name", cli::po::value(&o.name)->default_value(o.name),
                                                             "graph name");
        cli::po::variables_map vm;
        int code = 0;
        if (!cli::parse(argc, argv, "retexo_generate", "retexo_generate --out FILE.h5 [options]", desc, vm, code))
            return code;
        RETEXO_ENSURE(nodes > 0 && nodes < (std::int64_t{1} << 31), "--nodes must be in [1, 2^31), got " << nodes);
        o.nodes = static_cast<node_t>(nodes);
        const auto t0 = std::chrono::steady_clock::now();
        const auto info = generate_csbm_file(o, out);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::cout << "wrote " << out << ": " << info.num_nodes << " nodes, " << info.num_edges / 2
                  << " undirected edges (" << info.num_edges << " CSR entries), " << info.num_features << " features, "
                  << info.num_classes << " classes in " << s << " s\n";
        return cli::exit_ok;
    });
}

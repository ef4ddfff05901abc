// retexo_convert: OGB node-property raw directory -> HDF5 graph file.  Reads the CSV layout
// (raw/*.csv.gz) and the binary one (raw/data.npz + raw/node-label.npz, e.g. ogbn-papers100M),
// streaming the features in row blocks.
#include "cli.hpp"

#include <retexo/io/ogb.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>

int main(int argc, char** argv)
{
    using namespace retexo;
    return cli::run("retexo_convert", [&] {
        std::string dir, out, directed, storage;
        ogb_options o;
        random_split_spec rs;
        cli::po::options_description desc("Options");
        desc.add_options()("ogb", cli::po::value(&dir)->required(),
                           "OGB raw dataset directory: raw/*.csv.gz (CSV layout) or raw/data.npz + raw/node-label.npz "
                           "(binary layout, as ogbn-papers100M ships; NaN labels mean unlabelled), and split/<name>/")(
            "out,o", cli::po::value(&out)->required(), "output graph file (.h5)")(
            "split", cli::po::value(&o.split), "split name under split/ (default: the only one)")(
            "random-split", cli::po::value(&rs.seed),
            "SEED: draw the split at random instead, as PyG Planetoid(split='random') does: per class "
            "--train-per-class nodes to train, then --num-valid and --num-test of the rest")(
            "train-per-class", cli::po::value(&rs.train_per_class)->default_value(rs.train_per_class),
            "train nodes per class of --random-split")(
            "num-valid", cli::po::value(&rs.num_valid)->default_value(rs.num_valid), "valid nodes of --random-split")(
            "num-test", cli::po::value(&rs.num_test)->default_value(rs.num_test), "test nodes of --random-split")(
            "directed", cli::po::value(&directed), "true|false: override meta.json (default: undirected, symmetrised)")(
            "num-classes", cli::po::value(&o.num_classes), "number of classes (default: meta.json or max label + 1)")(
            "name", cli::po::value(&o.name), "graph name (default: meta.json or directory name)")(
            "features", cli::po::value(&storage)->default_value("auto"),
            "auto | dense | sparse: how the features are stored (auto: sparse rows below 25% non-zero)");
        cli::po::variables_map vm;
        int code = 0;
        if (!cli::parse(argc, argv, "retexo_convert",
                        "retexo_convert --ogb DIR [--split NAME | --random-split SEED] --out FILE.h5", desc, vm, code))
            return code;
        if (vm.count("random-split") != 0U) {
            RETEXO_ENSURE(vm.count("split") == 0U, "--split and --random-split exclude each other");
            RETEXO_ENSURE(rs.num_valid > 0, "--num-valid must be positive, got "
                                                << rs.num_valid
                                                << ": retexo_mpi chooses its model on the validation nodes");
            o.random_split = rs;
        } else {
            for (const char* opt : {"train-per-class", "num-valid", "num-test"})
                RETEXO_ENSURE(vm[opt].defaulted(), "--" << opt << " needs --random-split");
        }
        if (!directed.empty()) {
            RETEXO_ENSURE(directed == "true" || directed == "false",
                          "--directed must be true or false, got '" << directed << "'");
            o.directed = directed == "true";
        }
        if (storage != "auto") o.features = cli::option_value<feature_storage>(storage, "--features");
        RETEXO_ENSURE(vm.count("num-classes") == 0U || o.num_classes >= 2,
                      "--num-classes must be at least 2, got " << o.num_classes);
        const auto in = std::filesystem::weakly_canonical(dir), at = std::filesystem::weakly_canonical(out);
        RETEXO_ENSURE(std::mismatch(in.begin(), in.end(), at.begin(), at.end()).first != in.end(),
                      "--out " << out << " is inside the input directory --ogb " << dir << ": write it elsewhere");
        const auto t0 = std::chrono::steady_clock::now();
        const auto r = convert_ogb(dir, out, o);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::cout << "wrote " << out << " (" << r.info.name << "): " << r.info.num_nodes << " nodes, " << r.edge_lines
                  << " edge lines -> " << r.info.num_edges << " CSR in-edges ("
                  << (r.info.directed ? "directed" : "undirected, symmetrised") << "; " << r.self_loops_dropped
                  << " self loops, " << r.duplicates_dropped << " duplicates dropped), " << r.info.num_features
                  << " features (" << name_of(r.storage) << ", " << 100 * r.density << "% non-zero), "
                  << r.info.num_classes << " classes"
                  << (r.unlabelled > 0 ? " (" + std::to_string(r.unlabelled) + " nodes unlabelled)" : "") << ", split "
                  << r.split << " " << r.train << "/" << r.valid << "/" << r.test << " in " << s << " s\n";
        return cli::exit_ok;
    });
}

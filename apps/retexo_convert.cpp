// retexo_convert: OGB node-property raw directory -> HDF5 graph file.
#include "cli.hpp"

#include <retexo/io/ogb.hpp>

#include <chrono>

int main(int argc, char** argv)
{
    using namespace retexo;
    return cli::run("retexo_convert", [&] {
        std::string dir, out, directed;
        ogb_options o;
        cli::po::options_description desc("Options");
        desc.add_options()("ogb", cli::po::value(&dir)->required(), "OGB raw dataset directory (raw/, split/)")(
            "out,o", cli::po::value(&out)->required(), "output graph file (.h5)")(
            "split", cli::po::value(&o.split), "split name under split/ (default: the only one)")(
            "directed", cli::po::value(&directed), "true|false: override meta.json (default: undirected, symmetrised)")(
            "num-classes", cli::po::value(&o.num_classes), "number of classes (default: meta.json or max label + 1)")(
            "name", cli::po::value(&o.name), "graph name (default: meta.json or directory name)");
        cli::po::variables_map vm;
        int code = 0;
        if (!cli::parse(argc, argv, "retexo_convert", "retexo_convert --ogb DIR [--split NAME] --out FILE.h5", desc, vm,
                        code))
            return code;
        if (!directed.empty()) {
            RETEXO_ENSURE(directed == "true" || directed == "false",
                          "--directed must be true or false, got '" << directed << "'");
            o.directed = directed == "true";
        }
        const auto t0 = std::chrono::steady_clock::now();
        const auto r = convert_ogb(dir, out, o);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::cout << "wrote " << out << " (" << r.info.name << "): " << r.info.num_nodes << " nodes, " << r.edge_lines
                  << " edge lines -> " << r.info.num_edges << " CSR in-edges ("
                  << (r.info.directed ? "directed" : "undirected, symmetrised") << "; " << r.self_loops_dropped
                  << " self loops, " << r.duplicates_dropped << " duplicates dropped), " << r.info.num_features
                  << " features, " << r.info.num_classes << " classes, split " << r.split << " " << r.train << "/"
                  << r.valid << "/" << r.test << " in " << s << " s\n";
        return cli::exit_ok;
    });
}

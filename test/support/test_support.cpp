#include "support/test_support.hpp"

#include <retexo/core/error.hpp>
#include <retexo/core/rng.hpp>

#include <cstdlib>
#include <fstream>
#include <zlib.h>

namespace fs = std::filesystem;

namespace retexo::test {

temp_dir::temp_dir()
{
    std::string templ = (fs::temp_directory_path() / "retexo-test-XXXXXX").string();
    RETEXO_ENSURE(::mkdtemp(templ.data()) != nullptr, "cannot create a temporary directory");
    path_ = templ;
}

temp_dir::~temp_dir()
{
    if (!owner_) return;
    std::error_code ec;
    fs::remove_all(path_, ec);
}

void write_file(const std::string& path, const std::string& text)
{
    if (path.size() > 3 && path.substr(path.size() - 3) == ".gz") {
        gzFile f = gzopen(path.c_str(), "wb");
        RETEXO_ENSURE(f != nullptr, path << ": cannot create");
        if (!text.empty()) gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
        gzclose(f);
    } else {
        std::ofstream f(path, std::ios::binary);
        RETEXO_ENSURE(f.good(), path << ": cannot create");
        f << text;
    }
}

std::optional<std::string> dataset_dir(const std::string& name)
{
    std::string base = RETEXO_DATASETS_DIR;
    if (const char* env = std::getenv("RETEXO_DATASETS")) base = env;
    const auto dir = fs::path(base) / name;
    if (fs::exists(dir / "raw")) return dir.string();
    return std::nullopt;
}

std::string apps_dir()
{
    return RETEXO_APPS_DIR;
}

graph make_graph(node_t n, const std::vector<std::pair<node_t, node_t>>& undirected_edges, int features, int classes,
                 std::uint64_t seed)
{
    graph g;
    g.name = "test";
    g.num_classes = classes;
    std::vector<node_t> src, dst;
    for (const auto& [u, v] : undirected_edges) {
        src.push_back(u);
        dst.push_back(v);
    }
    g.in_edges = build_csr(n, src, dst, {.symmetrise = true});
    const counter_rng rng(seed, 99);
    matrix_f x(n, features);
    for (node_t v = 0; v < n; ++v)
        for (int f = 0; f < features; ++f)
            x(v, f) = static_cast<float>(rng.normal(static_cast<std::uint64_t>(v) * features + f));
    g.features = std::move(x);
    g.labels.resize(static_cast<std::size_t>(n));
    for (node_t v = 0; v < n; ++v) {
        g.labels[v] = static_cast<std::int32_t>(v % classes);
        (v % 3 == 0 ? g.train : v % 3 == 1 ? g.valid : g.test).push_back(v);
    }
    return g;
}

graph with_sparse_features(graph g, double density, std::uint64_t seed)
{
    matrix_f x = g.features.to_dense();
    const counter_rng rng(seed, 98);
    for (Eigen::Index v = 0; v < x.rows(); ++v)
        for (Eigen::Index f = 0; f < x.cols(); ++f)
            if (f != v % x.cols() && rng.uniform_double(static_cast<std::uint64_t>(v * x.cols() + f)) >= density)
                x(v, f) = 0.0F;
    g.features = csr_matrix::from_dense(x);
    return g;
}

graph dense_twin(graph g)
{
    g.features = g.features.to_dense();
    return g;
}

void write_ogb_dir(const graph& g, const std::string& dir, const std::string& split)
{
    fs::create_directories(fs::path(dir) / "raw");
    fs::create_directories(fs::path(dir) / "split" / split);
    std::string edges, feats, labels;
    offset_t m = 0;
    for (node_t v = 0; v < g.num_nodes(); ++v)
        for (node_t u : g.in_edges.row(v))
            if (u < v) {
                edges += std::to_string(u) + "," + std::to_string(v) + "\n";
                ++m;
            }
    const matrix_f x = g.features.to_dense();
    for (node_t v = 0; v < g.num_nodes(); ++v) {
        for (int f = 0; f < g.num_features(); ++f) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(x(v, f)));
            feats += (f > 0 ? "," : "") + std::string(buf);
        }
        feats += "\n";
        labels += std::to_string(g.labels[v]) + "\n";
    }
    auto ids = [](const std::vector<node_t>& s) {
        std::string t;
        for (node_t v : s)
            t += std::to_string(v) + "\n";
        return t;
    };
    write_file(dir + "/raw/edge.csv.gz", edges);
    write_file(dir + "/raw/node-feat.csv.gz", feats);
    write_file(dir + "/raw/node-label.csv.gz", labels);
    write_file(dir + "/raw/num-node-list.csv.gz", std::to_string(g.num_nodes()) + "\n");
    write_file(dir + "/raw/num-edge-list.csv.gz", std::to_string(m) + "\n");
    write_file(dir + "/split/" + split + "/train.csv.gz", ids(g.train));
    write_file(dir + "/split/" + split + "/valid.csv.gz", ids(g.valid));
    write_file(dir + "/split/" + split + "/test.csv.gz", ids(g.test));
}

} // namespace retexo::test

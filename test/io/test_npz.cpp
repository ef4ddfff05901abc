#include "support/test_support.hpp"

#include <retexo/io/graph_file.hpp>
#include <retexo/io/npz.hpp>
#include <retexo/io/ogb.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

using namespace retexo;
namespace fs = std::filesystem;

namespace {

/// How the binary layout of a graph is written.
struct npz_layout {
    bool deflate = true;
    bool zip64 = false;
    int npy_version = 1;
    std::string feat_descr = "<f4";  ///< <f4, <f2 or <f8
    std::string label_descr = "<i8"; ///< <i8, <f4 or <f8 (NaN for unlabelled nodes)
    std::string edge_descr = "<i8";
};

using edge_list = std::vector<std::pair<node_t, node_t>>;

/// The edges the CSV writer lists: u < v once.
edge_list edges_of(const graph& g)
{
    edge_list e;
    for (node_t v = 0; v < g.num_nodes(); ++v)
        for (node_t u : g.in_edges.row(v))
            if (u < v) e.emplace_back(u, v);
    return e;
}

std::string ids_text(const std::vector<node_t>& ids)
{
    std::string t;
    for (node_t v : ids)
        t += std::to_string(v) + "\n";
    return t;
}

/// The CSV layout of g with the given edge list (instead of the CSR's).
void write_csv_dir(const graph& g, const edge_list& edges, const std::string& dir)
{
    test::write_ogb_dir(g, dir);
    std::string text;
    for (const auto& [u, v] : edges)
        text += std::to_string(u) + "," + std::to_string(v) + "\n";
    test::write_file(dir + "/raw/edge.csv.gz", text);
    test::write_file(dir + "/raw/num-edge-list.csv.gz", std::to_string(edges.size()) + "\n");
}

/// The binary layout of g (raw/data.npz, raw/node-label.npz, split CSVs).
void write_npz_dir(const graph& g, const edge_list& edges, const std::string& dir, const npz_layout& l = {},
                   const std::vector<node_t>& unlabelled = {})
{
    fs::create_directories(fs::path(dir) / "raw");
    fs::create_directories(fs::path(dir) / "split" / "s");
    const npz_writer::entry_options o{.deflate = l.deflate, .zip64 = l.zip64, .npy_version = l.npy_version};
    const auto n = static_cast<std::int64_t>(g.num_nodes());
    const auto m = static_cast<std::int64_t>(edges.size());
    {
        npz_writer w(dir + "/raw/data.npz", l.zip64);
        std::vector<std::int64_t> ei(2 * edges.size());
        for (std::size_t e = 0; e < edges.size(); ++e) {
            ei[e] = edges[e].first;
            ei[edges.size() + e] = edges[e].second;
        }
        if (l.edge_descr == "<i4") {
            const std::vector<std::int32_t> e32(ei.begin(), ei.end());
            w.add<std::int32_t>("edge_index", l.edge_descr, {2, m}, e32, o);
        } else {
            w.add<std::int64_t>("edge_index", l.edge_descr, {2, m}, ei, o);
        }
        const matrix_f x = g.features.to_dense();
        const std::int64_t f = x.cols();
        const std::vector<float> values(x.data(), x.data() + x.size()); // row-major
        if (l.feat_descr == "<f2") {
            std::vector<std::uint16_t> h(values.size());
            for (std::size_t i = 0; i < h.size(); ++i)
                h[i] = float_to_half(values[i]);
            w.add<std::uint16_t>("node_feat", "<f2", {n, f}, h, o);
        } else if (l.feat_descr == "<f8") {
            const std::vector<double> d(values.begin(), values.end());
            w.add<double>("node_feat", "<f8", {n, f}, d, o);
        } else {
            w.add<float>("node_feat", l.feat_descr, {n, f}, values, o);
        }
        const std::int64_t nn[] = {n}, ne[] = {m};
        w.add<std::int64_t>("num_nodes_list", "<i8", {1}, nn, o);
        w.add<std::int64_t>("num_edges_list", "<i8", {1}, ne, o);
        w.close();
    }
    {
        npz_writer w(dir + "/raw/node-label.npz", l.zip64);
        std::vector<double> y(g.labels.begin(), g.labels.end());
        for (node_t v : unlabelled)
            y[v] = std::numeric_limits<double>::quiet_NaN();
        if (l.label_descr == "<i8") {
            const std::vector<std::int64_t> yi(g.labels.begin(), g.labels.end());
            w.add<std::int64_t>("node_label", "<i8", {n, 1}, yi, o);
        } else if (l.label_descr == "<f4") {
            const std::vector<float> yf(y.begin(), y.end());
            w.add<float>("node_label", "<f4", {n, 1}, yf, o);
        } else {
            w.add<double>("node_label", l.label_descr, {n, 1}, y, o);
        }
        w.close();
    }
    test::write_file(dir + "/split/s/train.csv.gz", ids_text(g.train));
    test::write_file(dir + "/split/s/valid.csv.gz", ids_text(g.valid));
    test::write_file(dir + "/split/s/test.csv.gz", ids_text(g.test));
}

/// g's features rounded through float16 (so both layouts hold the same values).
graph with_half_features(graph g)
{
    matrix_f x = g.features.to_dense();
    for (Eigen::Index i = 0; i < x.size(); ++i)
        x.data()[i] = half_to_float(float_to_half(x.data()[i]));
    g.features = std::move(x);
    return g;
}

/// Both files hold the same graph (features compared exactly, in the same storage).
void check_same_file(const std::string& a_path, const std::string& b_path)
{
    const graph a = read_graph(a_path);
    const graph b = read_graph(b_path);
    CHECK(a.name == b.name);
    CHECK(a.directed == b.directed);
    CHECK(a.num_classes == b.num_classes);
    CHECK(a.in_edges.offsets == b.in_edges.offsets);
    CHECK(a.in_edges.sources == b.in_edges.sources);
    CHECK(a.labels == b.labels);
    CHECK(a.train == b.train);
    CHECK(a.valid == b.valid);
    CHECK(a.test == b.test);
    CHECK(a.features.is_sparse() == b.features.is_sparse());
    CHECK(a.features.to_dense() == b.features.to_dense());
}

void check_same_report(const ogb_report& a, const ogb_report& b)
{
    CHECK(a.split == b.split);
    CHECK(a.edge_lines == b.edge_lines);
    CHECK(a.self_loops_dropped == b.self_loops_dropped);
    CHECK(a.duplicates_dropped == b.duplicates_dropped);
    CHECK(a.train == b.train);
    CHECK(a.valid == b.valid);
    CHECK(a.test == b.test);
    CHECK(a.storage == b.storage);
    CHECK(a.density == b.density);
    CHECK(a.info.num_edges == b.info.num_edges);
    CHECK(a.info.num_features == b.info.num_features);
}

std::string read_bytes(const std::string& path)
{
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes)
{
    std::ofstream(path, std::ios::binary) << bytes;
}

} // namespace

TEST_CASE("float16 conversion is exact and rounds to nearest even", "[io][npz]")
{
    CHECK(half_to_float(0x3C00) == 1.0F);
    CHECK(half_to_float(0xC000) == -2.0F);
    CHECK(half_to_float(0x7BFF) == 65504.0F);
    CHECK(half_to_float(0x0001) == std::ldexp(1.0F, -24)); // smallest subnormal
    CHECK(half_to_float(0x03FF) == std::ldexp(1023.0F, -24));
    CHECK(std::isinf(half_to_float(0x7C00)));
    CHECK(std::isnan(half_to_float(0x7E00)));
    CHECK(std::signbit(half_to_float(0x8000)));
    for (std::uint32_t h = 0; h < 0x10000; ++h) {
        const auto x = static_cast<std::uint16_t>(h);
        if ((x & 0x7C00) == 0x7C00 && (x & 0x3FF) != 0) continue; // NaN payloads
        if (float_to_half(half_to_float(x)) != x) FAIL("half " << h << " does not round-trip");
    }
    CHECK(float_to_half(1.0F + std::ldexp(1.0F, -11)) == 0x3C00); // tie to even
    CHECK(float_to_half(1.0F + 3 * std::ldexp(1.0F, -11)) == 0x3C02);
    CHECK(float_to_half(1e6F) == 0x7C00);
    CHECK(float_to_half(std::ldexp(1.0F, -26)) == 0); // below half the smallest subnormal
}

TEST_CASE("npz arrays stream in blocks, stored or deflated, with ZIP64 and every .npy version", "[io][npz]")
{
    test::temp_dir tmp;
    const auto deflate = GENERATE(false, true);
    const auto zip64 = GENERATE(false, true);
    const auto version = GENERATE(1, 2, 3);
    const npz_writer::entry_options o{.deflate = deflate, .zip64 = zip64, .npy_version = version};
    const std::string path = tmp / "a.npz";
    std::vector<std::int64_t> big(300000);
    for (std::size_t i = 0; i < big.size(); ++i)
        big[i] = static_cast<std::int64_t>(i * 7919 % 1000003);
    {
        npz_writer w(path, zip64);
        w.add<std::int64_t>("big", "<i8", {2, 150000}, big, o);
        const std::int32_t be[] = {0x01020304, -2};
        std::int32_t swapped[2];
        for (int i = 0; i < 2; ++i)
            swapped[i] = static_cast<std::int32_t>(__builtin_bswap32(static_cast<std::uint32_t>(be[i])));
        w.add<std::int32_t>("be", ">i4", {2}, swapped, o);
        const std::uint8_t flags[] = {0, 1, 1};
        w.add<std::uint8_t>("flags", "|b1", {3}, flags, o);
        const std::uint64_t huge[] = {1, std::uint64_t{1} << 40};
        w.add<std::uint64_t>("huge", "<u8", {2}, huge, o);
        const std::int64_t scalar[] = {42};
        w.add<std::int64_t>("scalar", "<i8", {}, scalar, o);
        w.close();
    }
    CHECK(npz_arrays(path) == std::vector<std::string>{"big", "be", "flags", "huge", "scalar"});

    npz_array_reader r(path, "big");
    CHECK(r.shape() == std::vector<std::int64_t>{2, 150000});
    CHECK(r.shape_string() == "(2, 150000)");
    CHECK(r.dtype().descr == "<i8");
    CHECK(r.size() == 300000);
    std::vector<std::int64_t> got(300000);
    std::size_t at = 0;
    r.skip(10);
    at = 10;
    std::vector<double> as_double(7);
    at += r.read(std::span(as_double));
    CHECK(as_double[6] == static_cast<double>(big[16]));
    while (r.remaining() > 0) {
        const auto k = r.read(std::span(got).subspan(at, std::min<std::size_t>(65537, got.size() - at)));
        REQUIRE(k > 0);
        at += k;
    }
    CHECK(std::equal(got.begin() + 17, got.end(), big.begin() + 17));
    CHECK(r.read(std::span(got)) == 0);

    npz_array_reader b(path, "be");
    std::int32_t be_out[2];
    CHECK(b.read(std::span(be_out)) == 2);
    CHECK(be_out[0] == 0x01020304);
    CHECK(be_out[1] == -2);
    npz_array_reader fl(path, "flags");
    std::int64_t fl_out[3];
    fl.read(std::span(fl_out));
    CHECK((fl_out[0] == 0 && fl_out[1] == 1 && fl_out[2] == 1));
    npz_array_reader h(path, "huge");
    std::int32_t small[2];
    CHECK_THROWS_WITH(h.read(std::span(small)), Catch::Contains("entry huge.npy: element 1 is 1099511627776, which "
                                                                "does not fit in 32 bits"));
    npz_array_reader s(path, "scalar");
    CHECK(s.shape().empty());
    CHECK(s.size() == 1);
    float f = 0;
    s.read(std::span(&f, 1));
    CHECK(f == 42.0F);
    CHECK_THROWS_WITH(npz_array_reader(path, "nope"),
                      Catch::Contains("a.npz: no array 'nope' (entry nope.npy missing; the archive holds: big.npy, "
                                      "be.npy, flags.npy, huge.npy, scalar.npy)"));
}

TEST_CASE("OGB binary layout converts to the same graph file as the CSV layout", "[io][npz][ogb]")
{
    test::temp_dir tmp;
    auto g = test::make_graph(30, {{0, 1}, {1, 2}, {2, 29}, {5, 6}, {6, 7}, {7, 5}, {10, 20}}, 4, 3);
    // Edges as an OGB file may list them: a self loop, a duplicate, both directions of one.
    edge_list edges = edges_of(g);
    edges.emplace_back(3, 3);
    edges.emplace_back(0, 1);
    edges.emplace_back(29, 2);
    npz_layout l;
    SECTION("deflated, float32, int64 labels") {}
    SECTION("stored, npy 2.0, float64 labels")
    {
        l.deflate = false;
        l.npy_version = 2;
        l.label_descr = "<f8";
    }
    SECTION("ZIP64, npy 3.0, float32 labels, int32 edges")
    {
        l.zip64 = true;
        l.npy_version = 3;
        l.label_descr = "<f4";
        l.edge_descr = "<i4";
    }
    SECTION("float16 features")
    {
        l.feat_descr = "<f2";
        g = with_half_features(g);
    }
    SECTION("float64 features, big-endian edges")
    {
        l.feat_descr = "<f8";
        l.deflate = false;
        // A big-endian edge_index written byte-swapped by hand.
        write_npz_dir(g, edges, tmp / "bin", l);
        std::vector<std::int64_t> ei(2 * edges.size());
        for (std::size_t e = 0; e < edges.size(); ++e) {
            ei[e] = static_cast<std::int64_t>(__builtin_bswap64(static_cast<std::uint64_t>(edges[e].first)));
            ei[edges.size() + e] =
                static_cast<std::int64_t>(__builtin_bswap64(static_cast<std::uint64_t>(edges[e].second)));
        }
        // Rewrite data.npz with the swapped edges and the same other arrays.
        const std::vector<std::string> names = {"node_feat", "num_nodes_list", "num_edges_list"};
        npz_writer w(tmp / "data2.npz");
        w.add<std::int64_t>("edge_index", ">i8", {2, static_cast<std::int64_t>(edges.size())}, ei, {});
        for (const auto& name : names) {
            npz_array_reader r(tmp / "bin/raw/data.npz", name);
            std::vector<double> v(static_cast<std::size_t>(r.size()));
            std::vector<std::int64_t> i(v.size());
            if (name == "node_feat") {
                r.read(std::span(v));
                w.add<double>(name, "<f8", r.shape(), v, {});
            } else {
                r.read(std::span(i));
                w.add<std::int64_t>(name, "<i8", r.shape(), i, {});
            }
        }
        w.close();
        fs::rename(tmp / "data2.npz", tmp / "bin/raw/data.npz");
    }
    if (!fs::exists(tmp / "bin")) write_npz_dir(g, edges, tmp / "bin", l);
    write_csv_dir(g, edges, tmp / "csv");
    const ogb_options o{.name = "same"};
    const auto rb = convert_ogb(tmp / "bin", tmp / "bin.h5", o);
    const auto rc = convert_ogb(tmp / "csv", tmp / "csv.h5", o);
    CHECK(rb.self_loops_dropped == 1);
    CHECK(rb.duplicates_dropped == 4); // 0-1 twice and 2-29 both ways, each symmetrised
    CHECK(rb.edge_lines == static_cast<offset_t>(edges.size()));
    check_same_report(rb, rc);
    check_same_file(tmp / "bin.h5", tmp / "csv.h5");
    const graph h = read_graph(tmp / "bin.h5");
    CHECK(h.in_edges.sources == g.in_edges.sources);
    CHECK(h.features.to_dense() == g.features.to_dense());
}

TEST_CASE("OGB binary layout: directed, sparse features, several feature and edge blocks", "[io][npz][ogb]")
{
    test::temp_dir tmp;
    SECTION("directed graph, sparse features")
    {
        auto g = test::with_sparse_features(test::make_graph(50, {{0, 1}, {1, 2}, {40, 3}}, 40, 2), 0.05);
        edge_list edges = {{0, 1}, {1, 0}, {1, 2}, {40, 3}, {40, 3}, {7, 7}};
        write_npz_dir(g, edges, tmp / "bin");
        write_csv_dir(g, edges, tmp / "csv");
        test::write_file(tmp / "bin/meta.json", R"({"directed": true, "name": "d"})");
        test::write_file(tmp / "csv/meta.json", R"({"directed": true, "name": "d"})");
        const auto rb = convert_ogb(tmp / "bin", tmp / "bin.h5");
        const auto rc = convert_ogb(tmp / "csv", tmp / "csv.h5");
        CHECK(rb.storage == feature_storage::sparse);
        CHECK(rb.info.directed);
        CHECK(rb.info.num_edges == 4);
        check_same_report(rb, rc);
        check_same_file(tmp / "bin.h5", tmp / "csv.h5");
    }
    SECTION("20000 nodes (3 feature blocks), 1.2M edges (2 edge blocks)")
    {
        const node_t n = 20000;
        auto g = test::make_graph(n, {{0, 1}}, 3, 4);
        edge_list edges;
        std::vector<node_t> src, dst;
        for (std::int64_t e = 0; e < 1200000; ++e) {
            const auto u = static_cast<node_t>((e * 7919) % n), v = static_cast<node_t>((e * 104729 + 13) % n);
            edges.emplace_back(u, v);
            src.push_back(u);
            dst.push_back(v);
        }
        csr_build_report expected_rep;
        const csr expected = build_csr(n, src, dst, {.symmetrise = true}, &expected_rep);
        write_npz_dir(g, edges, tmp / "bin");
        const auto rb = convert_ogb(tmp / "bin", tmp / "bin.h5");
        CHECK(rb.self_loops_dropped == expected_rep.self_loops_dropped);
        CHECK(rb.duplicates_dropped == expected_rep.duplicates_dropped);
        const graph h = read_graph(tmp / "bin.h5");
        CHECK(h.in_edges.offsets == expected.offsets);
        CHECK(h.in_edges.sources == expected.sources);
        CHECK(h.features.to_dense() == g.features.to_dense());
        CHECK(h.labels == g.labels);
    }
}

TEST_CASE("OGB binary layout: NaN labels mark unlabelled nodes", "[io][npz][ogb]")
{
    test::temp_dir tmp;
    auto g = test::make_graph(12, {{0, 1}, {1, 2}, {3, 11}}, 3, 3);
    // Nodes 4 and 7 have no label and are in no split; stored as label 0.
    const std::vector<node_t> unlabelled = {4, 7};
    for (auto* ids : {&g.train, &g.valid, &g.test})
        std::erase_if(*ids, [&](node_t v) { return v == 4 || v == 7; });
    g.labels[4] = g.labels[7] = 0;
    npz_layout l;
    l.label_descr = GENERATE(as<std::string>{}, "<f4", "<f8");
    write_npz_dir(g, edges_of(g), tmp / "bin", l, unlabelled);
    write_csv_dir(g, edges_of(g), tmp / "csv");
    const ogb_options o{.name = "same"};
    check_same_report(convert_ogb(tmp / "bin", tmp / "bin.h5", o), convert_ogb(tmp / "csv", tmp / "csv.h5", o));
    check_same_file(tmp / "bin.h5", tmp / "csv.h5");
    CHECK(read_graph(tmp / "bin.h5").labels[4] == 0);
    CHECK(convert_ogb(tmp / "bin", tmp / "bin2.h5").unlabelled == 2);

    // A random split needs every node labelled.
    ogb_options rs;
    rs.random_split = random_split_spec{.seed = 1, .train_per_class = 1, .num_valid = 2, .num_test = 2};
    CHECK_THROWS_WITH(convert_ogb(tmp / "bin", tmp / "r.h5", rs),
                      Catch::Contains("node-label.npz: 2 nodes have no label (NaN); a random split needs every node "
                                      "labelled"));
    CHECK_FALSE(fs::exists(tmp / "r.h5"));
}

TEST_CASE("OGB binary layout rejects bad input with clear messages, leaving no output", "[io][npz][ogb][bad-input]")
{
    test::temp_dir tmp;
    const auto g = test::make_graph(10, {{0, 1}, {1, 2}, {3, 9}}, 3, 2);
    const edge_list edges = edges_of(g);
    const std::string dir = tmp / "ds";
    write_npz_dir(g, edges, dir);
    const std::string data = dir + "/raw/data.npz";
    const std::string out = tmp / "out.h5";
    auto fails_with = [&](const std::string& text) {
        CHECK_THROWS_WITH(convert_ogb(dir, out), Catch::Contains(text));
        CHECK_FALSE(fs::exists(out));
    };
    const npz_writer::entry_options o{};
    const matrix_f x = g.features.to_dense();
    const std::vector<float> feats(x.data(), x.data() + x.size());
    std::vector<std::int64_t> ei;
    for (const auto& e : edges)
        ei.push_back(e.first);
    for (const auto& e : edges)
        ei.push_back(e.second);
    const std::int64_t nn[] = {10}, ne[] = {static_cast<std::int64_t>(edges.size())};
    // data.npz with node_feat replaced by whatever `feat` writes.
    auto rewrite_data = [&](const std::function<void(npz_writer&)>& feat, std::span<const std::int64_t> edge_index) {
        npz_writer w(data);
        w.add<std::int64_t>("edge_index", "<i8", {2, static_cast<std::int64_t>(edge_index.size() / 2)}, edge_index, o);
        feat(w);
        w.add<std::int64_t>("num_nodes_list", "<i8", {1}, nn, o);
        w.add<std::int64_t>("num_edges_list", "<i8", {1}, ne, o);
        w.close();
    };
    SECTION("truncated archive")
    {
        fs::resize_file(data, fs::file_size(data) / 2);
        fails_with("data.npz: not a ZIP/.npz archive, or truncated (no end-of-central-directory record)");
    }
    SECTION("not a zip file")
    {
        write_bytes(data, "hello");
        fails_with("data.npz: not a ZIP/.npz archive");
    }
    SECTION("missing entry")
    {
        rewrite_data([](npz_writer&) {}, ei);
        fails_with("data.npz: no array 'node_feat' (entry node_feat.npy missing; the archive holds: edge_index.npy, "
                   "num_nodes_list.npy, num_edges_list.npy)");
    }
    SECTION("missing node-label.npz")
    {
        fs::remove(dir + "/raw/node-label.npz");
        fails_with("node-label.npz: missing");
    }
    SECTION("unsupported dtype")
    {
        rewrite_data([&](npz_writer& w) { w.add<float>("node_feat", "<c8", {10, 3}, feats, o); }, ei);
        fails_with("data.npz: entry node_feat.npy: unsupported dtype '<c8'");
    }
    SECTION("float edge ids")
    {
        const std::vector<double> eid(ei.begin(), ei.end());
        npz_writer w(data);
        w.add<double>("edge_index", "<f8", {2, static_cast<std::int64_t>(edges.size())}, eid, o);
        w.add<float>("node_feat", "<f4", {10, 3}, feats, o);
        w.add<std::int64_t>("num_nodes_list", "<i8", {1}, nn, o);
        w.add<std::int64_t>("num_edges_list", "<i8", {1}, ne, o);
        w.close();
        fails_with("data.npz: entry edge_index.npy: expected an integer array, found dtype '<f8'");
    }
    SECTION("fortran order")
    {
        rewrite_data(
            [&](npz_writer& w) {
                w.add<float>("node_feat", "<f4", {10, 3}, feats, {.fortran_order = true});
            },
            ei);
        fails_with("entry node_feat.npy: fortran_order is True; only C-order arrays are supported");
    }
    SECTION("feature shape does not match the nodes")
    {
        rewrite_data(
            [&](npz_writer& w) {
                w.add<float>("node_feat", "<f4", {9, 3}, std::span(feats).first(27), o);
            },
            ei);
        fails_with("entry node_feat.npy: shape (9, 3), expected (10, num_features)");
    }
    SECTION("data shorter than the shape")
    {
        rewrite_data(
            [&](npz_writer& w) {
                w.add<float>("node_feat", "<f4", {10, 3}, std::span(feats).first(24), o);
            },
            ei);
        fails_with("entry node_feat.npy: shape (10, 3) of <f4 needs 120 bytes of data but the entry holds 96");
    }
    SECTION("bad magic")
    {
        rewrite_data(
            [&](npz_writer& w) {
                w.begin_entry("node_feat.npy", o);
                w.write("NOTNUMPY..........", 18);
                w.end_entry();
            },
            ei);
        fails_with("entry node_feat.npy: not a .npy array (bad magic)");
    }
    SECTION("malformed header")
    {
        rewrite_data(
            [&](npz_writer& w) {
                const std::string h = std::string("\x93NUMPY\x01\x00\x10\x00", 10) + "{'descr': <f4,}\n";
                w.begin_entry("node_feat.npy", o);
                w.write(h.data(), h.size());
                w.end_entry();
            },
            ei);
        fails_with("entry node_feat.npy: malformed .npy header (expected a string");
    }
    SECTION("edge id out of range")
    {
        auto bad = ei;
        bad[edges.size() + 1] = 10;
        rewrite_data([&](npz_writer& w) { w.add<float>("node_feat", "<f4", {10, 3}, feats, o); }, bad);
        fails_with("data.npz: entry edge_index.npy: edge 1 (1,10) has a node id outside [0, 10)");
    }
    SECTION("edge id beyond 2^31")
    {
        auto bad = ei;
        bad[2] = std::int64_t{1} << 33;
        rewrite_data([&](npz_writer& w) { w.add<float>("node_feat", "<f4", {10, 3}, feats, o); }, bad);
        fails_with("entry edge_index.npy: element 2 is 8589934592, which does not fit in 32 bits (node ids must be "
                   "below 2^31)");
    }
    SECTION("edge count differs from num_edges_list")
    {
        rewrite_data(
            [&](npz_writer& w) {
                w.add<float>("node_feat", "<f4", {10, 3}, feats, o);
            },
            std::span<const std::int64_t>(ei).first(4));
        fails_with("entry edge_index.npy: 2 edges but num_edges_list says 3");
    }
    SECTION("several graphs")
    {
        npz_writer w(data);
        w.add<std::int64_t>("edge_index", "<i8", {2, static_cast<std::int64_t>(edges.size())}, ei, o);
        w.add<float>("node_feat", "<f4", {10, 3}, feats, o);
        const std::int64_t two[] = {5, 5};
        w.add<std::int64_t>("num_nodes_list", "<i8", {2}, two, o);
        w.add<std::int64_t>("num_edges_list", "<i8", {1}, ne, o);
        w.close();
        fails_with("entry num_nodes_list.npy: expected one count, found shape (2,) (only single-graph datasets");
    }
    SECTION("NaN label on a train node")
    {
        write_npz_dir(g, edges, dir, {.label_descr = "<f8"}, {3});
        fails_with("train.csv.gz: node 3 has no label (NaN in");
    }
    SECTION("fractional label")
    {
        npz_writer w(dir + "/raw/node-label.npz");
        std::vector<double> y(g.labels.begin(), g.labels.end());
        y[5] = 0.5;
        w.add<double>("node_label", "<f8", {10, 1}, y, o);
        w.close();
        fails_with("node-label.npz: entry node_label.npy: node 5 has label 0.5, which is negative, fractional or "
                   "too large");
    }
    SECTION("multi-column labels")
    {
        npz_writer w(dir + "/raw/node-label.npz");
        const std::vector<std::int64_t> y(20, 0);
        w.add<std::int64_t>("node_label", "<i8", {10, 2}, y, o);
        w.close();
        fails_with("entry node_label.npy: shape (10, 2), expected (num_nodes, 1) (multi-column labels are not "
                   "supported)");
    }
    SECTION("non-finite feature")
    {
        auto bad = feats;
        bad[7] = std::numeric_limits<float>::infinity();
        rewrite_data([&](npz_writer& w) { w.add<float>("node_feat", "<f4", {10, 3}, bad, o); }, ei);
        fails_with("entry node_feat.npy: non-finite value inf at node 2, feature 1");
    }
    SECTION("CRC mismatch in a stored entry")
    {
        rewrite_data([&](npz_writer& w) { w.add<float>("node_feat", "<f4", {10, 3}, feats, {.deflate = false}); }, ei);
        // Flip a bit in the last feature value (the end of node_feat's data).
        std::string bytes = read_bytes(data);
        float last = feats.back();
        std::string pattern(reinterpret_cast<const char*>(&last), 4);
        const auto at = bytes.find(pattern);
        REQUIRE(at != std::string::npos);
        bytes[at] = static_cast<char>(bytes[at] ^ 1);
        write_bytes(data, bytes);
        fails_with("entry node_feat.npy: CRC-32 mismatch (corrupt entry)");
    }
    SECTION("corrupt deflate data")
    {
        std::vector<float> many(30000);
        for (std::size_t i = 0; i < many.size(); ++i)
            many[i] = static_cast<float>((i * 2654435761U) % 100003);
        rewrite_data([&](npz_writer& w) { w.add<float>("node_feat", "<f4", {10000, 3}, many, o); }, ei);
        std::string bytes = read_bytes(data);
        const auto at = bytes.find("node_feat.npy") + 200;
        for (std::size_t i = 0; i < 64; ++i)
            bytes[at + i] = static_cast<char>(0xA5 ^ i);
        write_bytes(data, bytes);
        CHECK_THROWS_WITH(convert_ogb(dir, out), Catch::Contains("entry node_feat.npy: "));
        CHECK_FALSE(fs::exists(out));
    }
    SECTION("unsupported .npy version")
    {
        rewrite_data(
            [&](npz_writer& w) {
                const std::string h = std::string("\x93NUMPY\x04\x00", 8) + std::string("\x10\x00", 2) + "{}";
                w.begin_entry("node_feat.npy", o);
                w.write(h.data(), h.size());
                w.end_entry();
            },
            ei);
        fails_with("entry node_feat.npy: .npy format version 4.0 is not supported (1.0, 2.0 and 3.0 are)");
    }
}

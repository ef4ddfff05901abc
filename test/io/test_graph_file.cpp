#include "support/test_support.hpp"

#include <retexo/io/graph_file.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>

using namespace retexo;
namespace fs = std::filesystem;

TEST_CASE("graph file round-trips exactly", "[io]")
{
    test::temp_dir tmp;
    const auto g = test::make_graph(50, {{0, 1}, {1, 2}, {2, 3}, {10, 40}, {7, 49}}, 5, 3);
    write_graph(g, tmp / "g.h5");
    const graph h = read_graph(tmp / "g.h5");
    CHECK(h.name == g.name);
    CHECK(h.num_classes == 3);
    CHECK_FALSE(h.directed);
    CHECK(h.in_edges.offsets == g.in_edges.offsets);
    CHECK(h.in_edges.sources == g.in_edges.sources);
    CHECK(h.features == g.features);
    CHECK(h.labels == g.labels);
    CHECK(h.train == g.train);
    CHECK(h.valid == g.valid);
    CHECK(h.test == g.test);
    // No temporary file left behind.
    int files = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(tmp.path()))
        ++files;
    CHECK(files == 1);
}

TEST_CASE("string attributes are read fixed-length or variable-length (h5py's default)", "[io]")
{
    test::temp_dir tmp;
    const auto g = test::make_graph(20, {{0, 1}, {1, 2}}, 4, 2);
    write_graph(g, tmp / "g.h5");
    {
        auto f = h5::file::open(tmp / "g.h5", true);
        H5Adelete(f.id(), "name");
        h5::handle type(H5Tcopy(H5T_C_S1), H5Tclose);
        H5Tset_size(type.get(), H5T_VARIABLE);
        h5::handle space(H5Screate(H5S_SCALAR), H5Sclose);
        h5::handle attr(H5Acreate2(f.id(), "name", type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
        const char* text = g.name.c_str(); // the same text, stored as h5py stores a str
        REQUIRE(H5Awrite(attr.get(), type.get(), &text) >= 0);
        // Two strings where one is expected: refused, not read past the buffer.
        const hsize_t two = 2;
        h5::handle pair(H5Screate_simple(1, &two, nullptr), H5Sclose);
        h5::handle many(H5Acreate2(f.id(), "many", type.get(), pair.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    }
    CHECK(read_graph(tmp / "g.h5").name == g.name);
    CHECK_FALSE(g.name.empty());
    CHECK_THROWS_WITH(h5::file::open(tmp / "g.h5").attr_string("many"),
                      Catch::Contains("does not hold exactly one string"));
}

TEST_CASE("graph files carry checksummed metadata, so corruption is reported, not read", "[io][bad-input]")
{
    test::temp_dir tmp;
    write_graph(test::make_graph(20, {{0, 1}, {1, 2}}, 4, 2), tmp / "g.h5");
    {
        const auto f = h5::file::open(tmp / "g.h5", false);
        H5F_info2_t info;
        REQUIRE(H5Fget_info2(f.id(), &info) >= 0);
        CHECK(info.super.version >= 2); // superblock v2+: checksummed, as are v2 object headers
    }
    // One flipped bit in the superblock (its size-of-lengths byte) fails the checksum.
    std::fstream io(tmp / "g.h5", std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(10);
    char c = 0;
    io.get(c);
    io.seekp(10);
    io.put(static_cast<char>(c ^ 0x01));
    io.close();
    CHECK_THROWS_WITH(read_graph(tmp / "g.h5"), Catch::Contains("g.h5"));
}

TEST_CASE("graph file values carry checksums, so a flipped bit in a dataset is reported, not read", "[io][bad-input]")
{
    test::temp_dir tmp;
    const auto g = test::make_graph(20, {{0, 1}, {1, 2}, {3, 4}}, 4, 2);
    for (const std::string name : {"csr/offsets", "csr/sources", "labels", "split/train", "features"}) {
        DYNAMIC_SECTION(name)
        {
            write_graph(g, tmp / "g.h5");
            haddr_t at = 0;
            hsize_t bytes = 0;
            {
                const auto f = h5::file::open(tmp / "g.h5", false);
                const auto ds = f.open_dataset(name);
                unsigned mask = 0;
                hsize_t offset[2] = {0, 0};
                const h5::handle space(H5Dget_space(ds.get()), H5Sclose);
                REQUIRE(H5Dget_chunk_info(ds.get(), space.get(), 0, offset, &mask, &at, &bytes) >= 0);
                REQUIRE(bytes > 4); // the values, then their 4-byte checksum
            }
            std::fstream io(tmp / "g.h5", std::ios::in | std::ios::out | std::ios::binary);
            const auto where = static_cast<std::streamoff>(at);
            io.seekg(where);
            char c = 0;
            io.get(c);
            io.seekp(where);
            io.put(static_cast<char>(c ^ 0x10));
            io.close();
            CHECK_THROWS_WITH(read_graph(tmp / "g.h5"),
                              Catch::Contains("g.h5") && Catch::Contains(name) &&
                                  Catch::Contains("data error detected by Fletcher32 checksum"));
        }
    }
}

TEST_CASE("graph file errors name the file and the problem", "[io][bad-input]")
{
    test::temp_dir tmp;
    const auto g = test::make_graph(20, {{0, 1}, {1, 2}}, 4, 2);
    write_graph(g, tmp / "g.h5");

    SECTION("missing file")
    {
        CHECK_THROWS_WITH(read_graph(tmp / "nope.h5"), Catch::Contains("nope.h5: cannot open"));
    }
    SECTION("not HDF5")
    {
        test::write_file(tmp / "text.h5", "hello\n");
        CHECK_THROWS_WITH(read_graph(tmp / "text.h5"), Catch::Contains("text.h5: not an HDF5 file"));
    }
    SECTION("truncated file")
    {
        const auto size = fs::file_size(tmp / "g.h5");
        fs::resize_file(tmp / "g.h5", size / 2);
        CHECK_THROWS_WITH(read_graph(tmp / "g.h5"), Catch::Contains("g.h5"));
    }
    SECTION("wrong layout: a dataset is missing")
    {
        {
            auto f = h5::file::open(tmp / "g.h5", true);
            H5Ldelete(f.id(), "labels", H5P_DEFAULT);
        }
        CHECK_THROWS_WITH(read_graph(tmp / "g.h5"), Catch::Contains("dataset labels is missing"));
    }
    SECTION("a label outside 0..C-1")
    {
        {
            auto f = h5::file::open(tmp / "g.h5", true);
            f.set_attr("num_classes", std::int64_t{1});
        }
        CHECK_THROWS_WITH(read_graph(tmp / "g.h5"), Catch::Contains("is outside 0..0"));
    }
    SECTION("a node id out of range in the CSR")
    {
        {
            auto f = h5::file::open(tmp / "g.h5", true);
            const auto ds = f.open_dataset("csr/sources");
            const node_t bad = 999;
            f.write_rows<node_t>(ds, "csr/sources", 0, 1, 1, &bad);
        }
        CHECK_THROWS_WITH(read_graph(tmp / "g.h5"), Catch::Contains("source id 999 outside [0, 20)"));
    }
    SECTION("a self loop or a duplicate edge in the CSR")
    {
        // Rows 0, 1, 2 hold sources [1], [0, 2], [1].
        const auto write_sources = [&](std::vector<node_t> sources) {
            auto f = h5::file::open(tmp / "g.h5", true);
            f.write_rows<node_t>(f.open_dataset("csr/sources"), "csr/sources", 0, sources.size(), 1, sources.data());
        };
        write_sources({0, 0, 2, 1});
        CHECK_THROWS_WITH(read_graph(tmp / "g.h5"), Catch::Contains("g.h5: node 0 has a self loop"));
        write_sources({1, 0, 0, 1});
        CHECK_THROWS_WITH(read_graph(tmp / "g.h5"), Catch::Contains("g.h5: the in-edges of node 1 are not strictly "
                                                                    "ascending (source 0 before 0"));
        write_sources({1, 2, 0, 1});
        CHECK_THROWS_WITH(graph_file_reader(tmp / "g.h5").read_csr_rows(1, 2),
                          Catch::Contains("in-edges of node 1 are not strictly ascending (source 2 before 0"));
        CHECK_NOTHROW(graph_file_reader(tmp / "g.h5").read_csr_rows(2, 5));
    }
    SECTION("an undirected graph whose CSR is not symmetric")
    {
        // Rows 0, 1, 2 hold sources [1], [0, 2], [1]: node 2's in-edge from 1 becomes one from 3.
        {
            auto f = h5::file::open(tmp / "g.h5", true);
            const node_t three = 3;
            f.write_rows<node_t>(f.open_dataset("csr/sources"), "csr/sources", 3, 1, 1, &three);
        }
        CHECK_THROWS_WITH(
            read_graph(tmp / "g.h5"),
            Catch::Contains("g.h5: the graph is undirected, but node 1 has 2 in-edges and is the source of 1 edges"));
    }
    SECTION("labels stored as a column")
    {
        {
            auto f = h5::file::open(tmp / "g.h5", true);
            H5Ldelete(f.id(), "labels", H5P_DEFAULT);
            f.write<std::int32_t>("labels", g.labels, {20, 1});
        }
        CHECK_THROWS_WITH(graph_file_reader(tmp / "g.h5"),
                          Catch::Contains("g.h5: dataset labels must be 1-D with num_nodes = 20 entries, has shape "
                                          "[20, 1]"));
    }
    SECTION("a dense feature that is not finite")
    {
        for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
            {
                auto f = h5::file::open(tmp / "g.h5", true);
                f.write_rows<float>(f.open_dataset("features"), "features", 17, 1, 1, &bad);
            }
            CHECK_THROWS_WITH(read_graph(tmp / "g.h5"), Catch::Contains("g.h5: features: node 17 has a non-finite "
                                                                        "value") &&
                                                            Catch::Contains("at column 0"));
            CHECK_THROWS_WITH(graph_file_reader(tmp / "g.h5").read_features(16, 4),
                              Catch::Contains("node 17 has a non-finite value"));
            CHECK_NOTHROW(graph_file_reader(tmp / "g.h5").read_features(0, 17));
        }
    }
    SECTION("an incomplete writer leaves no file")
    {
        {
            graph_file_writer w(tmp / "partial.h5", info_of(g));
            w.write_structure(g.in_edges, g.labels, g.train, g.valid, g.test);
            CHECK_THROWS_WITH(w.commit(), Catch::Contains("feature rows written"));
        }
        CHECK_FALSE(fs::exists(tmp / "partial.h5"));
        int files = 0;
        for ([[maybe_unused]] const auto& e : fs::directory_iterator(tmp.path()))
            ++files;
        CHECK(files == 1);
    }
}

TEST_CASE("sparse features round-trip, are read by row block, and convert to the other storage", "[io][sparse]")
{
    test::temp_dir tmp;
    const graph g = test::with_sparse_features(test::make_graph(50, {{0, 1}, {1, 2}, {10, 40}}, 30, 3), 0.1);
    REQUIRE(g.features.is_sparse());
    write_graph(g, tmp / "s.h5");
    const graph h = read_graph(tmp / "s.h5");
    REQUIRE(h.features.is_sparse());
    CHECK(h.features == g.features);
    const graph_file_reader r(tmp / "s.h5");
    CHECK(r.storage() == feature_storage::sparse);
    CHECK(r.read_features(7, 20) == g.features.select_rows(std::vector<node_t>{
                                        7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26}));
    CHECK(r.read_features(50, 0).rows() == 0);
    // The same graph written dense reads back as the dense twin.
    const graph d = test::dense_twin(g);
    write_graph(d, tmp / "d.h5");
    CHECK(graph_file_reader(tmp / "d.h5").storage() == feature_storage::dense);
    CHECK(read_graph(tmp / "d.h5").features.dense() == g.features.to_dense());
    // A writer asked for sparse storage takes dense blocks (and the other way round).
    {
        graph_file_writer w(tmp / "s2.h5", info_of(d), feature_storage::sparse);
        w.write_structure(d.in_edges, d.labels, d.train, d.valid, d.test);
        w.append_features(d.features.select_rows(std::vector<node_t>{0, 1, 2}));
        std::vector<node_t> rest(47);
        std::iota(rest.begin(), rest.end(), 3);
        w.append_features(g.features.select_rows(rest));
        w.commit();
    }
    CHECK(read_graph(tmp / "s2.h5").features == g.features);
}

TEST_CASE("bad sparse feature files are rejected with the file, the dataset and the problem", "[io][sparse][bad-input]")
{
    test::temp_dir tmp;
    const graph g = test::with_sparse_features(test::make_graph(20, {{0, 1}, {1, 2}}, 16, 2), 0.2);
    write_graph(g, tmp / "g.h5");
    const auto& x = g.features.sparse();
    REQUIRE(x.nnz() > 3);
    const offset_t e = x.offsets[5]; // an entry of row 5 or later
    auto edit = [&](auto&& change) {
        auto f = h5::file::open(tmp / "g.h5", true);
        change(f);
    };
    SECTION("a column id out of range")
    {
        edit([&](h5::file& f) {
            const std::int32_t bad = 16;
            f.write_rows<std::int32_t>(f.open_dataset("features_csr/indices"), "features_csr/indices",
                                       static_cast<hsize_t>(e), 1, 1, &bad);
        });
        CHECK_THROWS_WITH(read_graph(tmp / "g.h5"),
                          Catch::Contains("g.h5: features_csr") && Catch::Contains("column 16 outside [0, 16)"));
    }
    SECTION("columns repeated within a row")
    {
        std::int64_t row = 0;
        while (row < x.rows && x.row_nnz(row) < 2)
            ++row;
        REQUIRE(row < x.rows);
        edit([&](h5::file& f) {
            const std::vector<std::int32_t> ids(2, x.indices[x.offsets[row]]);
            f.write_rows<std::int32_t>(f.open_dataset("features_csr/indices"), "features_csr/indices",
                                       static_cast<hsize_t>(x.offsets[row]), 2, 1, ids.data());
        });
        CHECK_THROWS_WITH(read_graph(tmp / "g.h5"),
                          Catch::Contains("g.h5: features_csr") && Catch::Contains("columns out of order or repeated"));
    }
    SECTION("decreasing offsets")
    {
        edit([&](h5::file& f) {
            const offset_t bad = x.nnz();
            f.write_rows<offset_t>(f.open_dataset("features_csr/offsets"), "features_csr/offsets", 3, 1, 1, &bad);
        });
        CHECK_THROWS_WITH(read_graph(tmp / "g.h5"), Catch::Contains("g.h5: features_csr"));
    }
    SECTION("offsets beyond the stored entries")
    {
        edit([&](h5::file& f) {
            const offset_t bad = x.nnz() + 5;
            f.write_rows<offset_t>(f.open_dataset("features_csr/offsets"), "features_csr/offsets", 20, 1, 1, &bad);
        });
        CHECK_THROWS_WITH(read_graph(tmp / "g.h5"),
                          Catch::Contains("point outside the " + std::to_string(x.nnz()) + " stored entries"));
    }
    SECTION("a non-finite value")
    {
        edit([&](h5::file& f) {
            const float bad = std::numeric_limits<float>::quiet_NaN();
            f.write_rows<float>(f.open_dataset("features_csr/values"), "features_csr/values", static_cast<hsize_t>(e),
                                1, 1, &bad);
        });
        CHECK_THROWS_WITH(read_graph(tmp / "g.h5"), Catch::Contains("non-finite value"));
        // A block of rows names the row of the file (every row keeps an entry: e is row 5's).
        REQUIRE(x.row_nnz(5) > 0);
        CHECK_THROWS_WITH(graph_file_reader(tmp / "g.h5").read_features(4, 4),
                          Catch::Contains("g.h5: features_csr: node 5 has a non-finite value (nan) at column"));
    }
    SECTION("a shape that is not the graph's")
    {
        edit([&](h5::file& f) {
            const std::vector<std::int64_t> shape{20, 17};
            f.write_rows<std::int64_t>(f.open_dataset("features_csr/shape"), "features_csr/shape", 0, 2, 1,
                                       shape.data());
        });
        CHECK_THROWS_WITH(read_graph(tmp / "g.h5"), Catch::Contains("features_csr is 20 x 17, expected 20 x 16"));
    }
    SECTION("no features at all")
    {
        edit([&](h5::file& f) { H5Ldelete(f.id(), "features_csr", H5P_DEFAULT); });
        CHECK_THROWS_WITH(read_graph(tmp / "g.h5"), Catch::Contains("g.h5") && Catch::Contains("features"));
    }
}

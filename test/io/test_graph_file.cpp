#include "support/test_support.hpp"

#include <retexo/io/graph_file.hpp>

#include <filesystem>
#include <fstream>

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

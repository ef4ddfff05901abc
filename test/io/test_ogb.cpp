#include "support/test_support.hpp"

#include <retexo/io/graph_file.hpp>
#include <retexo/io/ogb.hpp>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

using namespace retexo;
namespace fs = std::filesystem;

TEST_CASE("OGB raw directory converts to the same graph", "[io][ogb]")
{
    test::temp_dir tmp;
    const auto g = test::make_graph(30, {{0, 1}, {1, 2}, {2, 29}, {5, 6}, {6, 7}, {7, 5}}, 4, 3);
    test::write_ogb_dir(g, tmp / "ds");
    const auto rep = convert_ogb(tmp / "ds", tmp / "g.h5");
    CHECK(rep.split == "s");
    CHECK(rep.edge_lines == 6);
    const graph h = read_graph(tmp / "g.h5");
    CHECK(h.name == "ds");
    CHECK(h.num_classes == 3);
    CHECK(h.in_edges.offsets == g.in_edges.offsets);
    CHECK(h.in_edges.sources == g.in_edges.sources);
    CHECK(h.features.dense().isApprox(g.features.dense(), 1e-6F));
    CHECK(h.labels == g.labels);
    CHECK(h.train == g.train);
    CHECK(h.test == g.test);
}

TEST_CASE("OGB directed graphs keep their direction", "[io][ogb]")
{
    test::temp_dir tmp;
    const auto g = test::make_graph(4, {{0, 1}, {1, 2}}, 2, 2);
    test::write_ogb_dir(g, tmp / "ds");
    test::write_file(tmp / "ds/meta.json", R"({"directed": true, "name": "dir", "num_classes": 5})");
    convert_ogb(tmp / "ds", tmp / "g.h5");
    const graph h = read_graph(tmp / "g.h5");
    CHECK(h.directed);
    CHECK(h.name == "dir");
    CHECK(h.num_classes == 5);
    CHECK(h.num_edges() == 2);
    CHECK(h.in_edges.sources == std::vector<node_t>{0, 1}); // 1 <- 0, 2 <- 1
}

TEST_CASE("random splits follow Planetoid(split='random') and are deterministic", "[io][ogb][split]")
{
    std::vector<std::int32_t> labels(200);
    for (std::size_t v = 0; v < labels.size(); ++v)
        labels[v] = static_cast<std::int32_t>((v * 7) % 3); // 67 / 67 / 66 nodes per class
    const random_split_spec spec{.seed = 5, .train_per_class = 10, .num_valid = 40, .num_test = 100};
    const auto s = random_split(labels, 3, spec);
    REQUIRE(s.train.size() == 30);
    CHECK(s.valid.size() == 40);
    CHECK(s.test.size() == 100);
    std::vector<int> per_class(3, 0);
    for (node_t v : s.train)
        ++per_class[labels[v]];
    CHECK(per_class == std::vector<int>{10, 10, 10});
    for (const auto* ids : {&s.train, &s.valid, &s.test})
        CHECK(std::is_sorted(ids->begin(), ids->end()));
    CHECK_NOTHROW(split_membership(200, s.train, s.valid, s.test)); // disjoint, in range
    const auto again = random_split(labels, 3, spec);
    CHECK(again.train == s.train);
    CHECK(again.valid == s.valid);
    CHECK(again.test == s.test);
    auto other_seed = spec;
    other_seed.seed = 6;
    const auto other = random_split(labels, 3, other_seed);
    CHECK(other.train != s.train);
    CHECK(other.test != s.test);

    auto too_many_train = spec;
    too_many_train.train_per_class = 67;
    CHECK_THROWS_WITH(random_split(labels, 3, too_many_train), Catch::Contains("class 2 has 66 nodes"));
    auto too_many_rest = spec;
    too_many_rest.num_test = 131;
    CHECK_THROWS_WITH(random_split(labels, 3, too_many_rest),
                      Catch::Contains("40 valid + 131 test nodes exceed the 170 nodes left"));
    auto no_train = spec;
    no_train.train_per_class = 0;
    CHECK_THROWS_WITH(random_split(labels, 3, no_train), Catch::Contains("must be positive"));

    // convert_ogb draws it instead of reading split/, and needs no split directory.
    test::temp_dir tmp;
    auto g = test::make_graph(200, {{0, 1}, {1, 2}}, 3, 3);
    g.labels = labels;
    test::write_ogb_dir(g, tmp / "ds");
    fs::remove_all(tmp / "ds/split");
    ogb_options o;
    o.random_split = spec;
    const auto rep = convert_ogb(tmp / "ds", tmp / "g.h5", o);
    CHECK(rep.split == "random-5");
    const graph h = read_graph(tmp / "g.h5");
    CHECK(h.train == s.train);
    CHECK(h.valid == s.valid);
    CHECK(h.test == s.test);
    o.split = std::string("s"); // (not = "s": GCC 12 -O3 warns falsely, -Wrestrict in string::assign)
    CHECK_THROWS_WITH(convert_ogb(tmp / "ds", tmp / "g2.h5", o), Catch::Contains("not both"));
    CHECK_FALSE(fs::exists(tmp / "g2.h5"));
}

TEST_CASE("OGB conversion rejects bad input, leaving no output", "[io][ogb][bad-input]")
{
    test::temp_dir tmp;
    const auto g = test::make_graph(10, {{0, 1}, {1, 2}, {3, 9}}, 3, 2);
    test::write_ogb_dir(g, tmp / "ds");
    const std::string out = tmp / "out.h5";
    auto fails_with = [&](const std::string& text) {
        CHECK_THROWS_WITH(convert_ogb(tmp / "ds", out), Catch::Contains(text));
        CHECK_FALSE(fs::exists(out));
    };
    SECTION("missing directory")
    {
        CHECK_THROWS_WITH(convert_ogb(tmp / "none", out), Catch::Contains("none: not a directory"));
    }
    SECTION("missing file")
    {
        fs::remove(tmp / "ds/raw/node-label.csv.gz");
        fails_with("node-label.csv.gz: missing");
    }
    SECTION("ragged feature rows")
    {
        test::write_file(tmp / "ds/raw/node-feat.csv.gz",
                         "1,2,3\n1,2,3\n1,2\n1,2,3\n1,2,3\n1,2,3\n1,2,3\n1,2,3\n1,2,3\n1,2,3\n");
        fails_with("node-feat.csv.gz:3: ragged feature rows: 2 values, expected 3");
    }
    SECTION("non-numeric feature")
    {
        test::write_file(tmp / "ds/raw/node-feat.csv.gz", "1,2,x\n");
        fails_with("node-feat.csv.gz:1: 'x' is not a valid number");
    }
    SECTION("node id out of range")
    {
        test::write_file(tmp / "ds/raw/edge.csv.gz", "0,1\n1,10\n3,9\n");
        fails_with("edge.csv.gz:2: edge 1,10 has a node id outside [0, 10)");
    }
    SECTION("label outside 0..C-1")
    {
        test::write_file(tmp / "ds/meta.json", R"({"num_classes": 2})");
        test::write_file(tmp / "ds/raw/node-label.csv.gz", "0\n1\n0\n1\n0\n1\n0\n1\n0\n7\n");
        fails_with("label 7 is outside 0..1");
    }
    SECTION("negative label")
    {
        test::write_file(tmp / "ds/raw/node-label.csv.gz", "0\n1\n0\n1\n0\n-1\n0\n1\n0\n1\n");
        fails_with("node-label.csv.gz:6: label -1 is negative");
    }
    SECTION("truncated edge file")
    {
        test::write_file(tmp / "ds/raw/num-edge-list.csv.gz", "4\n");
        fails_with("3 edge lines but num-edge-list says 4");
    }
    SECTION("too few labels")
    {
        test::write_file(tmp / "ds/raw/node-label.csv.gz", "0\n1\n");
        fails_with("2 labels for 10 nodes");
    }
    SECTION("unknown split")
    {
        CHECK_THROWS_WITH(convert_ogb(tmp / "ds", out, {.split = "nosuch"}), Catch::Contains("nosuch: no such split"));
    }
    SECTION("split id out of range")
    {
        test::write_file(tmp / "ds/split/s/test.csv.gz", "2\n11\n");
        fails_with("test.csv.gz:2: node id 11 outside [0, 10)");
    }
    SECTION("gzip file cut short")
    {
        std::string feats;
        for (int v = 0; v < 10; ++v)
            feats += "1,2,3\n";
        test::write_file(tmp / "ds/raw/node-feat.csv.gz", feats);
        const auto size = fs::file_size(tmp / "ds/raw/node-feat.csv.gz");
        fs::resize_file(tmp / "ds/raw/node-feat.csv.gz", size - 12);
        CHECK_THROWS(convert_ogb(tmp / "ds", out));
        CHECK_FALSE(fs::exists(out));
    }
    SECTION("gzip file cut short at a line's end")
    {
        // Flushed after the first test id: the file cut there decodes to whole lines, and only
        // the missing end of the gzip member tells that it is not all.
        const std::string path = tmp / "ds/split/s/test.csv.gz";
        gzFile f = gzopen(path.c_str(), "wb");
        REQUIRE(f != nullptr);
        gzputs(f, "2\n");
        gzflush(f, Z_FULL_FLUSH);
        const auto cut = fs::file_size(path);
        gzputs(f, "5\n");
        gzclose(f);
        fs::resize_file(path, cut);
        fails_with("test.csv.gz: read error after line 1: unexpected end of file");
    }
    SECTION("gzip file whose data changed (its CRC-32 no longer matches)")
    {
        const std::string path = tmp / "ds/raw/node-label.csv.gz";
        test::write_file(path, "0\n1\n0\n1\n0\n1\n0\n1\n0\n1\n");
        std::ifstream in(path, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        in.close();
        REQUIRE(bytes.size() > 8);
        bytes[bytes.size() - 8] ^= 0x01; // the trailer's CRC-32
        std::ofstream(path, std::ios::binary) << bytes;
        fails_with("node-label.csv.gz: read error after line 0: incorrect data check (the gzip data is corrupt)");
    }
}

TEST_CASE("shared datasets convert with the counts of their meta.json", "[io][ogb][datasets]")
{
    for (const std::string name : {"cora", "citeseer", "chameleon", "amazon-computers", "facebook"}) {
        const auto dir = test::dataset_dir(name);
        if (!dir) {
            WARN("SKIPPED: dataset " << name << " not found under " RETEXO_DATASETS_DIR);
            continue;
        }
        DYNAMIC_SECTION(name)
        {
            std::ifstream mf(*dir + "/meta.json");
            const auto meta = nlohmann::json::parse(mf);
            test::temp_dir tmp;
            const auto rep = convert_ogb(*dir, tmp / "g.h5", {.split = "random-paper"});
            const graph_file_reader r(tmp / "g.h5");
            CHECK(r.info().name == meta["name"].get<std::string>());
            CHECK(r.info().num_nodes == meta["num_nodes"].get<node_t>());
            CHECK(r.info().num_edges == 2 * meta["num_edges"].get<offset_t>()); // symmetrised
            CHECK(r.info().num_features == meta["num_features"].get<int>());
            CHECK(r.info().num_classes == meta["num_classes"].get<int>());
            CHECK_FALSE(r.info().directed);
            const auto& sp = meta["splits"]["random-paper"];
            CHECK(r.read_split("train").size() == sp["train"].get<std::size_t>());
            CHECK(r.read_split("valid").size() == sp["valid"].get<std::size_t>());
            CHECK(r.read_split("test").size() == sp["test"].get<std::size_t>());
            const auto labels = r.read_labels();
            std::vector<std::int64_t> counts(static_cast<std::size_t>(r.info().num_classes), 0);
            for (auto y : labels)
                ++counts[y];
            CHECK(counts == meta["class_counts"].get<std::vector<std::int64_t>>());
            CHECK(rep.self_loops_dropped == 0);
        }
    }
}

#include "support/test_support.hpp"

#include <retexo/graph/generate.hpp>
#include <retexo/io/graph_file.hpp>
#include <retexo/io/ogb.hpp>
#include <retexo/io/partition_files.hpp>
#include <retexo/partition/partitioner.hpp>

#include <filesystem>
#include <limits>
#include <set>

using namespace retexo;
namespace fs = std::filesystem;

namespace {
std::vector<node_t> counts_of(const std::vector<part_t>& a, part_t parts)
{
    std::vector<node_t> c(static_cast<std::size_t>(parts), 0);
    for (auto p : a)
        ++c[p];
    return c;
}
} // namespace

TEST_CASE("random partition is balanced and seeded", "[partition]")
{
    const auto a = partition_random(1003, 4, 7);
    const auto c = counts_of(a, 4);
    CHECK(c == std::vector<node_t>{251, 251, 251, 250});
    CHECK(partition_random(1003, 4, 7) == a);
    CHECK(partition_random(1003, 4, 8) != a);
}

TEST_CASE("random partition spans blocks, balanced, and any row range computes alone", "[partition]")
{
    const node_t n = 3 * random_partition_block + 17;
    const auto a = partition_random(n, 7, 3);
    const auto c = counts_of(a, 7);
    CHECK(*std::max_element(c.begin(), c.end()) - *std::min_element(c.begin(), c.end()) <= 1);
    std::vector<part_t> round_robin(static_cast<std::size_t>(n));
    for (node_t v = 0; v < n; ++v)
        round_robin[v] = v % 7;
    CHECK(a != round_robin); // shuffled
    for (const auto& [first, count] : std::vector<std::pair<node_t, node_t>>{
             {0, n}, {0, 1}, {n - 1, 1}, {100, random_partition_block}, {random_partition_block - 3, 6}, {n, 0}}) {
        INFO("rows [" << first << ", " << first + count << ")");
        CHECK(partition_random_rows(n, 7, 3, first, count) ==
              std::vector<part_t>(a.begin() + first, a.begin() + first + count));
    }
    CHECK_THROWS_WITH(partition_random_rows(n, 7, 3, n - 1, 2), Catch::Contains("not within the graph's"));
}

TEST_CASE("blocks partition is contiguous", "[partition]")
{
    const auto a = partition_blocks(10, 3);
    CHECK(a == std::vector<part_t>{0, 0, 0, 0, 1, 1, 1, 2, 2, 2});
}

TEST_CASE("METIS cuts fewer edges than random on a homophilous graph", "[partition]")
{
    const graph g = generate_csbm({.nodes = 3000, .avg_degree = 8, .homophily = 0.9});
    const auto rnd = compute_partition_stats(g, partition_random(g.num_nodes(), 4, 1), 4);
    for (auto obj : {metis_objective::cut, metis_objective::vol}) {
        const auto a = partition_metis(g.in_edges, false, 4, obj, 1);
        const auto s = compute_partition_stats(g, a, 4);
        CHECK(s.edge_cut < rnd.edge_cut / 2);
        CHECK(s.total_halo < rnd.total_halo);
        for (auto c : counts_of(a, 4))
            CHECK(c > 0);
    }
}

TEST_CASE("cora: METIS cut < random cut", "[partition][datasets]")
{
    RETEXO_REQUIRE_DATASET(dir, "cora");
    test::temp_dir tmp;
    convert_ogb(dir, tmp / "cora.h5", {.split = "random-paper"});
    const graph g = read_graph(tmp / "cora.h5");
    const auto metis = compute_partition_stats(g, partition_metis(g.in_edges, false, 4, metis_objective::vol, 42), 4);
    const auto rnd = compute_partition_stats(g, partition_random(g.num_nodes(), 4, 42), 4);
    INFO("metis cut " << metis.edge_cut << ", random cut " << rnd.edge_cut);
    CHECK(metis.edge_cut < rnd.edge_cut);
}

TEST_CASE("partition structure: owned rows, halo grouped by owner, local CSR", "[partition]")
{
    // Path 0-1-2-3-4-5, parts {0,1,2}->0, {3,4,5}->1 ... and node 5 to part 2.
    const auto g = test::make_graph(6, {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {0, 5}}, 2, 2);
    const std::vector<part_t> a = {0, 0, 0, 1, 1, 2};
    const auto s = build_partition_structure(g.in_edges, a, 0);
    CHECK(s.owned_global == std::vector<node_t>{0, 1, 2});
    CHECK(s.halo_global == std::vector<node_t>{3, 5});
    CHECK(s.halo_owner == std::vector<part_t>{1, 2});
    CHECK(s.halo_in_degree == std::vector<offset_t>{2, 2});
    // 0 <- {1, 5}: local {1, 4}; 1 <- {0, 2}; 2 <- {1, 3}: local {1, 3}
    CHECK(s.in_edges.offsets == std::vector<offset_t>{0, 2, 4, 6});
    CHECK(s.in_edges.sources == std::vector<node_t>{1, 4, 0, 2, 1, 3});
    // Rows keep global order even when a halo id sorts before an owned one locally.
    const std::vector<part_t> b = {1, 0, 1, 1, 1, 1}; // part 1 owns 0,2,3,4,5; halo {1}
    const auto t = build_partition_structure(g.in_edges, b, 1);
    // node 2 (local 1) <- {1 (halo, local 5), 3 (local 2)}: global order 1, 3
    CHECK(t.in_edges.sources[t.in_edges.offsets[1]] == 5);
    CHECK(t.in_edges.sources[t.in_edges.offsets[1] + 1] == 2);
}

TEST_CASE("partition structure and statistics equal a set-based reference", "[partition]")
{
    const graph g = generate_csbm({.nodes = 700, .avg_degree = 9, .power_law = 2.5, .seed = 4});
    const node_t n = g.num_nodes();
    for (part_t parts : {1, 3, 8}) {
        INFO(parts << " parts");
        const auto a = partition_random(n, parts, 5);
        const auto stats = compute_partition_stats(g, a, parts);
        for (part_t p = 0; p < parts; ++p) {
            std::vector<node_t> owned;
            std::set<std::pair<part_t, node_t>> halo; // (owner, id): the halo's order
            offset_t edges = 0, cut = 0;
            for (node_t v = 0; v < n; ++v)
                if (a[v] == p) {
                    owned.push_back(v);
                    edges += g.in_edges.degree(v);
                    for (node_t u : g.in_edges.row(v))
                        if (a[u] != p) {
                            ++cut;
                            halo.emplace(a[u], u);
                        }
                }
            const auto& ps = stats.parts[static_cast<std::size_t>(p)];
            CHECK(ps.owned == static_cast<node_t>(owned.size()));
            CHECK(ps.edges == edges);
            CHECK(ps.cut_edges == cut);
            CHECK(ps.halo == static_cast<node_t>(halo.size()));
            const auto s = build_partition_structure(g.in_edges, a, p);
            CHECK(s.owned_global == owned);
            std::vector<node_t> halo_ids;
            halo_ids.reserve(halo.size());
            for (const auto& [owner, u] : halo)
                halo_ids.push_back(u);
            CHECK(s.halo_global == halo_ids);
            // Every local in-edge names the same global source, in the global row's order.
            std::vector<node_t> local_to_global = owned;
            local_to_global.insert(local_to_global.end(), halo_ids.begin(), halo_ids.end());
            bool same_rows = true;
            for (std::size_t i = 0; i < owned.size(); ++i) {
                const auto row = g.in_edges.row(owned[i]);
                const auto local = s.in_edges.row(static_cast<node_t>(i));
                same_rows = same_rows && row.size() == local.size();
                for (std::size_t k = 0; same_rows && k < row.size(); ++k)
                    same_rows = local_to_global[static_cast<std::size_t>(local[k])] == row[k];
            }
            CHECK(same_rows);
        }
    }
    auto bad = partition_random(n, 3, 5);
    bad[7] = 3;
    CHECK_THROWS_WITH(compute_partition_stats(g, bad, 3), Catch::Contains("node 7 is in part 3 of 3"));
    bad.pop_back();
    CHECK_THROWS_WITH(compute_partition_stats(g, bad, 3), Catch::Contains("assignment has 699 entries for 700 nodes"));
}

TEST_CASE("partitioned directory: tampering is detected", "[partition][bad-input]")
{
    test::temp_dir tmp;
    const auto g = test::make_graph(30, {{0, 1}, {1, 2}, {2, 29}}, 3, 2);
    write_graph(g, tmp / "g.h5");
    const partition_options o{.method = partition_method::random, .parts = 2};
    write_partitioned(tmp / "g.h5", partition_random(30, 2, 1), o, tmp / "p1");
    write_partitioned(tmp / "g.h5", partition_random(30, 2, 2), o, tmp / "p2");
    SECTION("part file from another assignment")
    {
        fs::copy_file(tmp / "p2/part1.h5", tmp / "p1/part1.h5", fs::copy_options::overwrite_existing);
        CHECK_THROWS_WITH(load_partition(tmp / "p1", 1), Catch::Contains("does not match manifest.json"));
    }
    SECTION("missing part file")
    {
        fs::remove(tmp / "p1/part0.h5");
        CHECK_THROWS_WITH(load_partition(tmp / "p1", 0), Catch::Contains("part0.h5: cannot open"));
    }
    SECTION("truncated part file")
    {
        fs::resize_file(tmp / "p1/part0.h5", fs::file_size(tmp / "p1/part0.h5") / 3);
        CHECK_THROWS_WITH(load_partition(tmp / "p1", 0), Catch::Contains("part0.h5"));
    }
    SECTION("no manifest")
    {
        fs::remove(tmp / "p1/manifest.json");
        CHECK_THROWS_WITH(load_partition(tmp / "p1", 0), Catch::Contains("manifest.json: cannot open"));
    }
    SECTION("corrupt manifest")
    {
        test::write_file(tmp / "p1/manifest.json", "{\"format\": ");
        CHECK_THROWS_WITH(load_partition(tmp / "p1", 0), Catch::Contains("invalid manifest"));
    }
    SECTION("partition index out of range")
    {
        CHECK_THROWS_WITH(load_partition(tmp / "p1", 2), Catch::Contains("no partition 2"));
    }
    SECTION("a class count that differs from the manifest's")
    {
        h5::file::open(tmp / "p1/part1.h5", true).set_attr("num_classes", std::int64_t{9});
        CHECK_THROWS_WITH(load_partition(tmp / "p1", 1),
                          Catch::Contains("part1.h5: made for 9 classes, manifest.json says 2"));
    }
    SECTION("a halo in-degree below the halo node's edges to the part")
    {
        std::vector<std::pair<node_t, node_t>> path;
        for (node_t v = 0; v + 1 < 30; ++v)
            path.emplace_back(v, v + 1);
        write_graph(test::make_graph(30, path, 3, 2), tmp / "path.h5");
        write_partitioned(tmp / "path.h5", partition_random(30, 2, 1), o, tmp / "p3");
        REQUIRE(load_partition(tmp / "p3", 1).num_halo() > 0);
        for (const offset_t bad : {offset_t{0}, offset_t{-5}}) {
            {
                auto f = h5::file::open(tmp / "p3/part1.h5", true);
                f.write_rows<offset_t>(f.open_dataset("halo/in_degree"), "halo/in_degree", 0, 1, 1, &bad);
            }
            CHECK_THROWS_WITH(load_partition(tmp / "p3", 1),
                              Catch::Contains("part1.h5: halo/in_degree of node") &&
                                  Catch::Contains(" is " + std::to_string(bad) + ", but it has"));
        }
        {
            auto f = h5::file::open(tmp / "p3/part1.h5", true);
            const offset_t huge = offset_t{1} << 40;
            f.write_rows<offset_t>(f.open_dataset("halo/in_degree"), "halo/in_degree", 0, 1, 1, &huge);
        }
        CHECK_THROWS_WITH(load_partition(tmp / "p3", 1),
                          Catch::Contains(" is 1099511627776, more than the graph's other 29 nodes"));
    }
    SECTION("a feature that is not finite, named by its global id")
    {
        const auto ids = h5::file::open(tmp / "p1/part1.h5").read_vector<node_t>("owned/global_ids");
        REQUIRE(ids.size() > 2);
        {
            auto f = h5::file::open(tmp / "p1/part1.h5", true);
            const float bad = std::numeric_limits<float>::infinity();
            f.write_rows<float>(f.open_dataset("owned/features"), "owned/features", 2, 1, 1, &bad);
        }
        CHECK_THROWS_WITH(load_partition(tmp / "p1", 1),
                          Catch::Contains("part1.h5: owned/features: node " + std::to_string(ids[2]) +
                                          " has a non-finite value (inf) at column 0"));
    }
}

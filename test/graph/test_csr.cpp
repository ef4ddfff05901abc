#include "support/test_support.hpp"

#include <retexo/graph/graph.hpp>

using namespace retexo;

TEST_CASE("build_csr symmetrises, drops self loops and duplicates", "[graph]")
{
    const std::vector<node_t> src = {0, 1, 2, 2, 1, 3};
    const std::vector<node_t> dst = {1, 0, 2, 0, 0, 0};
    csr_build_report rep;
    const csr g = build_csr(4, src, dst, {.symmetrise = true}, &rep);
    CHECK(rep.input_edges == 6);
    CHECK(rep.self_loops_dropped == 1);
    // in-edges: 0 <- {1, 2, 3}; 1 <- {0}; 2 <- {0}; 3 <- {0}
    CHECK(g.offsets == std::vector<offset_t>{0, 3, 4, 5, 6});
    CHECK(g.sources == std::vector<node_t>{1, 2, 3, 0, 0, 0});
    CHECK(rep.duplicates_dropped == 4); // 1->0 twice and both directions of 0-1
}

TEST_CASE("build_csr keeps direction when not symmetrising", "[graph]")
{
    const std::vector<node_t> src = {0, 0, 1};
    const std::vector<node_t> dst = {1, 2, 2};
    const csr g = build_csr(3, src, dst);
    CHECK(g.offsets == std::vector<offset_t>{0, 0, 1, 3});
    CHECK(g.sources == std::vector<node_t>{0, 0, 1});
    const csr t = transpose(g, 3); // out-edges
    CHECK(t.offsets == std::vector<offset_t>{0, 2, 3, 3});
    CHECK(t.sources == std::vector<node_t>{1, 2, 2});
}

TEST_CASE("transpose reports the edge each entry came from", "[graph]")
{
    csr g; // 0 <- {1, 2}; 1 <- {}; 2 <- {0, 1}
    g.offsets = {0, 2, 2, 4};
    g.sources = {1, 2, 0, 1};
    std::vector<offset_t> edge_of;
    const csr t = transpose(g, 3, &edge_of);
    CHECK(t.offsets == std::vector<offset_t>{0, 1, 3, 4});
    CHECK(t.sources == std::vector<node_t>{2, 0, 2, 0});
    CHECK(edge_of == std::vector<offset_t>{2, 0, 3, 1});
    CHECK(t.sources == transpose(g, 3).sources);
}

TEST_CASE("in_edges_of_rows selects rows and adds missing self loops", "[graph]")
{
    csr g; // 0 <- {1, 2}; 1 <- {1}; 2 <- {0}
    g.offsets = {0, 2, 3, 4};
    g.sources = {1, 2, 1, 0};
    CHECK(rows_or_all({}, 3) == std::vector<node_t>{0, 1, 2});
    const std::vector<node_t> rows{2, 0, 1};
    CHECK(rows_or_all(rows, 3) == rows);
    const csr plain = in_edges_of_rows(g, 3, rows, false, "who");
    CHECK(plain.offsets == std::vector<offset_t>{0, 1, 3, 4});
    CHECK(plain.sources == std::vector<node_t>{0, 1, 2, 1});
    const csr self = in_edges_of_rows(g, 3, rows, true, "who");
    CHECK(self.offsets == std::vector<offset_t>{0, 2, 5, 6});
    CHECK(self.sources == std::vector<node_t>{2, 0, 0, 1, 2, 1});
    const std::vector<node_t> bad_row{3};
    CHECK_THROWS_WITH(in_edges_of_rows(g, 3, bad_row, false, "who"),
                      Catch::Contains("who: destination row 3 outside [0, 3)"));
    CHECK_THROWS_WITH(in_edges_of_rows(g, 2, rows, false, "who"), Catch::Contains("who: source id 2 outside [0, 2)"));
    const std::vector<node_t> first{0};
    CHECK_THROWS_WITH(in_edges_of_rows(g, 2, first, true, "who"),
                      Catch::Contains("who: self loops need every destination row to be a source row"));
    CHECK_THROWS_WITH(in_edges_of_rows(g, -1, first, false, "who"), Catch::Contains("who: negative source count"));
}

TEST_CASE("build_csr rejects an out-of-range node id", "[graph][bad-input]")
{
    const std::vector<node_t> src = {0, 5};
    const std::vector<node_t> dst = {1, 1};
    CHECK_THROWS_WITH(build_csr(3, src, dst), Catch::Contains("outside [0, 3)"));
}

TEST_CASE("build_csr_streamed equals build_csr on the concatenated blocks", "[graph]")
{
    const node_t n = 50;
    std::vector<node_t> src, dst;
    for (node_t e = 0; e < 400; ++e) {
        src.push_back((e * 7) % n);
        dst.push_back((e * 13 + e / 50) % n); // self loops among them
    }
    for (std::size_t e = 0; e < 30; ++e) { // and duplicates
        src.push_back(src[e]);
        dst.push_back(dst[e]);
    }
    for (const bool symmetrise : {false, true}) {
        csr_build_report a, b;
        const csr whole = build_csr(n, src, dst, {.symmetrise = symmetrise}, &a);
        int calls = 0;
        const csr streamed = build_csr_streamed(
            n,
            [&](const edge_block_visitor& visit) {
                ++calls;
                for (std::size_t i = 0; i < src.size(); i += 37) {
                    const auto k = std::min<std::size_t>(37, src.size() - i);
                    visit(std::span(src).subspan(i, k), std::span(dst).subspan(i, k));
                }
            },
            {.symmetrise = symmetrise}, &b);
        CHECK(calls == 2);
        CHECK(streamed.offsets == whole.offsets);
        CHECK(streamed.sources == whole.sources);
        CHECK(b.input_edges == a.input_edges);
        CHECK(b.self_loops_dropped == a.self_loops_dropped);
        CHECK(b.duplicates_dropped == a.duplicates_dropped);
        CHECK(a.self_loops_dropped > 0);
        CHECK(a.duplicates_dropped > 0);
    }
    // A producer that does not repeat itself is caught, not trusted.
    int pass = 0;
    CHECK_THROWS_WITH(build_csr_streamed(n,
                                         [&](const edge_block_visitor& visit) {
                                             const node_t s[] = {1, 2}, d[] = {0, pass == 0 ? 0 : 3};
                                             ++pass;
                                             visit(s, d);
                                         }),
                      Catch::Contains("the edge list changed between its two passes"));
    CHECK_THROWS_WITH(build_csr_streamed(n,
                                         [&](const edge_block_visitor& visit) {
                                             const node_t s[] = {1, 60}, d[] = {0, 0};
                                             visit(std::span(s).first(1), std::span(d).first(1));
                                             visit(std::span(s).subspan(1), std::span(d).subspan(1));
                                         }),
                      Catch::Contains("edge 1 (60 -> 0) has a node id outside [0, 50)"));
}

TEST_CASE("validate_graph catches labels, splits and sizes", "[graph][bad-input]")
{
    auto g = test::make_graph(6, {{0, 1}, {1, 2}, {3, 4}}, 3, 2);
    CHECK_NOTHROW(validate_graph(g, "g"));
    SECTION("label outside 0..C-1")
    {
        g.labels[4] = 2;
        CHECK_THROWS_WITH(validate_graph(g, "g"), Catch::Contains("label 2 of node 4 is outside 0..1"));
    }
    SECTION("node in two splits")
    {
        g.valid.push_back(g.train[0]);
        CHECK_THROWS_WITH(validate_graph(g, "g"), Catch::Contains("already in another split"));
    }
    SECTION("feature rows")
    {
        g.features.dense().conservativeResize(5, 3);
        CHECK_THROWS_WITH(validate_graph(g, "g"), Catch::Contains("5 feature rows for 6 nodes"));
    }
    SECTION("isolated nodes are fine")
    {
        const auto h = test::make_graph(4, {}, 2, 2);
        CHECK(h.num_edges() == 0);
        CHECK_NOTHROW(validate_graph(h, "h"));
    }
}

#include "support/test_support.hpp"

#include <retexo/graph/generate.hpp>
#include <retexo/io/graph_file.hpp>

#include <limits>

#include <omp.h>

using namespace retexo;

TEST_CASE("CSBM generator is deterministic whatever the thread count", "[generate]")
{
    csbm_options o;
    o.nodes = 5000;
    o.power_law = 2.5;
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const graph a = generate_csbm(o);
    omp_set_num_threads(std::max(2, threads));
    const graph b = generate_csbm(o);
    omp_set_num_threads(threads);
    CHECK(a.in_edges.sources == b.in_edges.sources);
    CHECK(a.in_edges.offsets == b.in_edges.offsets);
    CHECK(a.features == b.features);
    CHECK(a.labels == b.labels);
    CHECK(a.train == b.train);
    o.seed += 1;
    const graph c = generate_csbm(o);
    CHECK(c.in_edges.sources != a.in_edges.sources);
}

TEST_CASE("CSBM generator honours its parameters", "[generate]")
{
    const graph g = generate_csbm({.nodes = 20000, .classes = 4, .avg_degree = 10, .homophily = 0.75});
    validate_graph(g, "csbm");
    CHECK(g.num_classes == 4);
    const double avg = static_cast<double>(g.num_edges()) / g.num_nodes();
    CHECK(avg > 9.5);
    CHECK(avg <= 10.0);
    offset_t same = 0;
    for (node_t v = 0; v < g.num_nodes(); ++v)
        for (node_t u : g.in_edges.row(v))
            same += g.labels[u] == g.labels[v];
    const double h = static_cast<double>(same) / g.num_edges();
    CHECK(h == Approx(0.75).margin(0.02));
    CHECK(g.train.size() == 2000);
    CHECK(g.valid.size() == 2000);
    CHECK(g.test.size() == 16000);
    // Symmetric.
    const csr t = transpose(g.in_edges, g.num_nodes());
    CHECK(t.sources == g.in_edges.sources);
}

TEST_CASE("power-law degrees have a heavy tail", "[generate]")
{
    const graph g = generate_csbm({.nodes = 20000, .avg_degree = 10, .power_law = 2.2});
    offset_t max_deg = 0;
    for (node_t v = 0; v < g.num_nodes(); ++v)
        max_deg = std::max(max_deg, g.in_edges.degree(v));
    CHECK(max_deg > 100);
}

TEST_CASE("streamed generation equals in-memory generation", "[generate]")
{
    test::temp_dir tmp;
    csbm_options o;
    o.nodes = 70000; // more than one feature block
    o.features = 8;
    o.avg_degree = 4;
    generate_csbm_file(o, tmp / "g.h5");
    const graph a = read_graph(tmp / "g.h5");
    const graph b = generate_csbm(o);
    CHECK(a.features == b.features);
    CHECK(a.in_edges.sources == b.in_edges.sources);
}

TEST_CASE("generator options are validated", "[generate][bad-input]")
{
    csbm_options o;
    o.homophily = 1.5;
    CHECK_THROWS_WITH(generate_csbm(o), Catch::Contains("--homophily"));
    o = {};
    o.power_law = 1.5;
    CHECK_THROWS_WITH(generate_csbm(o), Catch::Contains("--power-law"));
    o = {};
    o.train_fraction = 0.7;
    o.test_fraction = 0.7;
    CHECK_THROWS_WITH(generate_csbm(o), Catch::Contains("fractions"));
    o = {};
    o.classes = 1;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--classes must be at least 2, got 1"));
    CHECK_THROWS_WITH(generate_csbm(o), Catch::Contains("--classes"));
    o.classes = 0;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--classes must be at least 2, got 0"));
    o = {};
    o.nodes = 3;
    o.avg_degree = 1;
    o.classes = 4;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--classes must be at most --nodes (3), got 4"));
    o.classes = 2;
    CHECK_NOTHROW(o.validate());
    // Options that are not finite numbers (all-infinite features, an infinite exponent).
    constexpr double inf = std::numeric_limits<double>::infinity();
    for (const double bad : {inf, -inf, std::numeric_limits<double>::quiet_NaN()}) {
        o = {};
        o.feature_signal = bad;
        CHECK_THROWS_WITH(o.validate(), Catch::Contains("--feature-signal must be a finite number >= 0"));
        o = {};
        o.power_law = bad;
        CHECK_THROWS_WITH(o.validate(), Catch::Contains("--power-law must be 0 (off) or a finite exponent > 2"));
        for (double* v : {&o.avg_degree, &o.homophily, &o.train_fraction, &o.valid_fraction, &o.test_fraction}) {
            o = {};
            *v = bad;
            CHECK_THROWS_AS(o.validate(), error);
        }
    }
}

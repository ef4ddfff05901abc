#include "support/gradcheck.hpp"
#include "support/test_support.hpp"

#include <retexo/graph/generate.hpp>
#include <retexo/kernels/aggregate.hpp>

#include <omp.h>

#include <limits>

using namespace retexo;
using test::random_matrix;

namespace {

/// 0 <- {1, 2}; 1 <- {0}; 2 <- {0, 1, 3}; 3 <- {} (isolated as a destination).
csr tiny()
{
    csr g;
    g.offsets = {0, 2, 3, 6, 6};
    g.sources = {1, 2, 0, 0, 1, 3};
    return g;
}

matrix<double> tiny_x()
{
    matrix<double> x(4, 2);
    x << 1, 2, 3, 4, 5, 6, 7, 8;
    return x;
}

/// A random graph with `halo` extra source rows beyond its rows (as a partition has).
csr random_graph(node_t rows, node_t halo, int avg_deg, std::uint64_t seed)
{
    const counter_rng rng(seed, 5);
    std::vector<node_t> src, dst;
    const std::uint64_t sources = static_cast<std::uint64_t>(rows) + static_cast<std::uint64_t>(halo);
    for (std::uint64_t e = 0; e < static_cast<std::uint64_t>(rows) * avg_deg; ++e) {
        src.push_back(static_cast<node_t>(rng.below(2 * e, sources)));
        dst.push_back(static_cast<node_t>(rng.below(2 * e + 1, static_cast<std::uint64_t>(rows))));
    }
    // Build over rows + halo nodes, keep only the first `rows` CSR rows.
    csr full = build_csr(rows + halo, src, dst);
    full.offsets.resize(static_cast<std::size_t>(rows) + 1);
    full.sources.resize(static_cast<std::size_t>(full.offsets.back()));
    return full;
}

} // namespace

// Edge weights are stored in float for every precision (one set of constants, half the
// memory), so mean and gcn values in double agree with the exact ones to float rounding.
TEST_CASE("aggregation on a 4-node graph: hand-computed values", "[kernels][aggregate]")
{
    const csr g = tiny();
    const auto x = tiny_x();
    matrix<double> out;
    std::vector<node_t> am;
    SECTION("sum")
    {
        aggregation(g, 4, {.kind = aggregator::sum}).forward(x, out);
        matrix<double> want(4, 2);
        want << 8, 10, 1, 2, 11, 14, 0, 0;
        CHECK(out == want);
    }
    SECTION("mean")
    {
        aggregation(g, 4, {.kind = aggregator::mean}).forward(x, out);
        matrix<double> want(4, 2);
        want << 4, 5, 1, 2, 11.0 / 3, 14.0 / 3, 0, 0;
        CHECK(out.isApprox(want, 1e-7));
    }
    SECTION("max with argmax")
    {
        aggregation(g, 4, {.kind = aggregator::max}).forward(x, out, &am);
        matrix<double> want(4, 2);
        want << 5, 6, 1, 2, 7, 8, 0, 0;
        CHECK(out == want);
        CHECK(am == std::vector<node_t>{2, 2, 0, 0, 3, 3, -1, -1});
    }
    SECTION("gcn: symmetric normalisation with self loops; isolated node keeps itself")
    {
        aggregation(g, 4, {.kind = aggregator::gcn}).forward(x, out);
        // degrees + 1: 3, 2, 4, 1
        matrix<double> want(4, 2);
        want.row(0) = x.row(0) / 3 + x.row(1) / std::sqrt(6.0) + x.row(2) / std::sqrt(12.0);
        want.row(1) = x.row(1) / 2 + x.row(0) / std::sqrt(6.0);
        want.row(2) = x.row(2) / 4 + x.row(0) / std::sqrt(12.0) + x.row(1) / std::sqrt(8.0) + x.row(3) / 2;
        want.row(3) = x.row(3);
        CHECK(out.isApprox(want, 1e-7));
    }
    SECTION("subset of destination rows")
    {
        const std::vector<node_t> rows = {2, 0};
        aggregation(g, 4, {.kind = aggregator::sum, .rows = rows}).forward(x, out);
        matrix<double> want(2, 2);
        want << 11, 14, 8, 10;
        CHECK(out == want);
    }
    SECTION("global degrees for halo rows")
    {
        // Rows 0..1 owned, sources 2..3 halo with global in-degrees 5 and 0.
        csr p;
        p.offsets = {0, 2, 3};
        p.sources = {1, 2, 3};
        const std::vector<offset_t> deg = {2, 1, 5, 0};
        aggregation(p, 4, {.kind = aggregator::gcn, .in_degree = deg}).forward(x, out);
        CHECK(out(0, 0) == Approx(1.0 / 3 + 3 / std::sqrt(6.0) + 5 / std::sqrt(18.0)));
        CHECK(out(1, 0) == Approx(3.0 / 2 + 7 / std::sqrt(2.0)));
    }
}

TEST_CASE("aggregation backward passes match finite differences", "[kernels][aggregate][gradcheck]")
{
    const csr g = random_graph(30, 10, 4, 3);
    const std::vector<offset_t> deg = [&] {
        std::vector<offset_t> d(40);
        for (node_t v = 0; v < 40; ++v)
            d[v] = v < 30 ? g.degree(v) : v % 7;
        return d;
    }();
    const std::vector<node_t> subset = {0, 5, 7, 29, 13};
    for (auto kind : {aggregator::sum, aggregator::mean, aggregator::gcn, aggregator::max}) {
        for (bool use_subset : {false, true}) {
            DYNAMIC_SECTION(name_of(kind) << (use_subset ? " (subset)" : ""))
            {
                const aggregation plan(
                    g, 40,
                    {.kind = kind,
                     .in_degree = deg,
                     .rows = use_subset ? std::span<const node_t>(subset) : std::span<const node_t>()});
                auto x = random_matrix(40, 3, 11);
                const auto r = random_matrix(plan.num_out(), 3, 12);
                std::vector<node_t> am;
                matrix<double> out, dx;
                plan.forward(x, out, &am);
                plan.backward(r, dx, kind == aggregator::max ? &am : nullptr);
                auto f = [&] {
                    matrix<double> o;
                    std::vector<node_t> a;
                    plan.forward(x, o, &a);
                    return (o.array() * r.array()).sum();
                };
                test::check_gradient(f, x, dx, "aggregation " + name_of(kind));
            }
        }
    }
}

TEST_CASE("fast aggregation matches the sequential reference", "[kernels][aggregate]")
{
    const csr g = random_graph(3000, 500, 12, 8);
    std::vector<offset_t> deg(3500);
    for (node_t v = 0; v < 3500; ++v)
        deg[v] = v < 3000 ? g.degree(v) : 3 + v % 11;
    for (auto kind : {aggregator::sum, aggregator::mean, aggregator::gcn, aggregator::max}) {
        const aggregation plan(g, 3500, {.kind = kind, .in_degree = deg});
        const matrix_f x = random_matrix(3500, 33, 2).cast<float>();
        const matrix_f d = random_matrix(3000, 33, 3).cast<float>();
        matrix_f fast(3000, 33), ref(3000, 33), gfast(3500, 33), gref(3500, 33);
        std::vector<node_t> am(3000 * 33), am_ref(3000 * 33);
        plan.forward(x.data(), 33, fast.data(), am.data());
        reference::aggregate_forward(plan, x.data(), 33, ref.data(), am_ref.data());
        CHECK((fast - ref).cwiseAbs().maxCoeff() <= 1e-5F * (1.0F + ref.cwiseAbs().maxCoeff()));
        CHECK(am == am_ref);
        plan.backward(d.data(), 33, gfast.data(), am.data());
        reference::aggregate_backward(plan, d.data(), 33, gref.data(), am.data());
        CHECK((gfast - gref).cwiseAbs().maxCoeff() <= 1e-5F * (1.0F + gref.cwiseAbs().maxCoeff()));
    }
}

TEST_CASE("weighted aggregation sums its terms in the plain loops' order, bit for bit", "[kernels][aggregate]")
{
    // The kernel holds up to 64 output columns in registers; each output must still be the
    // plain loop's chain of multiply-adds over a row's in-edges (forward) or a source's
    // out-edges in ascending output row (backward).  Widths cover full 64-column passes and
    // the pass after them: 16-column groups, a tail of fewer than 16, or both.
    const csr g = random_graph(400, 60, 9, 21);
    std::vector<offset_t> deg(460);
    for (node_t v = 0; v < 460; ++v)
        deg[v] = v < 400 ? g.degree(v) : 2 + v % 5;
    for (auto kind : {aggregator::sum, aggregator::mean, aggregator::gcn})
        for (int width : {1, 7, 16, 19, 64, 83, 256, 300, 531}) {
            INFO(name_of(kind) << ", width " << width);
            const aggregation plan(g, 460, {.kind = kind, .in_degree = deg});
            const csr& pe = plan.edges(); // with gcn's self loops
            const auto w = plan.weights();
            const matrix_f x = random_matrix(460, width, 22).cast<float>();
            const matrix_f d = random_matrix(400, width, 23).cast<float>();
            matrix_f want = matrix_f::Zero(400, width), want_dx = matrix_f::Zero(460, width);
            for (node_t i = 0; i < 400; ++i)
                for (offset_t e = pe.offsets[i]; e < pe.offsets[i + 1]; ++e) {
                    const float we = w[e];
                    const float* xu = x.data() + static_cast<std::ptrdiff_t>(pe.sources[e]) * width;
                    const float* di = d.data() + static_cast<std::ptrdiff_t>(i) * width;
                    float* o = want.data() + static_cast<std::ptrdiff_t>(i) * width;
                    float* gu = want_dx.data() + static_cast<std::ptrdiff_t>(pe.sources[e]) * width;
#pragma omp simd
                    for (int f = 0; f < width; ++f)
                        o[f] += we * xu[f];
#pragma omp simd
                    for (int f = 0; f < width; ++f)
                        gu[f] += we * di[f];
                }
            test::at_thread_counts([&](int t) {
                INFO(t << " threads");
                matrix_f out, dx;
                plan.forward(x, out);
                plan.backward(d, dx);
                CHECK(out == want);
                CHECK(dx == want_dx);
            });
        }
}

TEST_CASE("forward_subset: interior rows before the halo arrives, boundary rows after, equal forward",
          "[kernels][aggregate]")
{
    const csr g = random_graph(3000, 500, 12, 8);
    const auto [interior, boundary] = aggregation(g, 3500, {.kind = aggregator::sum}).rows_within(3000);
    CHECK(interior.size() > 100); // about (3000/3500)^12 of the rows
    CHECK(interior.size() + boundary.size() == 3000);
    std::vector<offset_t> deg(3500);
    for (node_t v = 0; v < 3500; ++v)
        deg[v] = v < 3000 ? g.degree(v) : 1 + v % 7;
    for (auto kind : {aggregator::sum, aggregator::mean, aggregator::gcn, aggregator::max}) {
        const aggregation plan(g, 3500, {.kind = kind, .self_loops = kind == aggregator::sum, .in_degree = deg});
        const matrix_f x = random_matrix(3500, 9, 4).cast<float>();
        matrix_f full(3000, 9), parts(3000, 9);
        std::vector<node_t> am(3000 * 9), am_parts(3000 * 9, -7);
        plan.forward(x.data(), 9, full.data(), am.data());
        // Halo rows not yet arrived: NaN, outside the checked range, never read.
        matrix_f early = x;
        early.bottomRows(500).setConstant(std::numeric_limits<float>::quiet_NaN());
        set_check_numerics(true);
        parts.setConstant(-1);
        plan.forward_subset(early.data(), 9, parts.data(), am_parts.data(), interior, 0, 3000);
        bool untouched = true;
        for (node_t i : boundary)
            untouched = untouched && (parts.row(i).array() == -1.0F).all();
        CHECK(untouched);
        CHECK_THROWS_WITH(plan.forward_subset(early.data(), 9, parts.data(), am_parts.data(), boundary, 0, 3500),
                          Catch::Contains("non-finite"));
        plan.forward_subset(x.data(), 9, parts.data(), am_parts.data(), boundary, 0, 3500);
        set_check_numerics(false);
        CHECK((parts.array() == full.array()).all());
        if (kind == aggregator::max) CHECK(am_parts == am);
    }
    const aggregation plan(g, 3500, {});
    matrix_f out(3000, 1);
    const std::vector<node_t> bad{3000};
    CHECK_THROWS_WITH(plan.forward_subset(out.data(), 1, out.data(), nullptr, bad, 0, 3000),
                      Catch::Contains("out of range"));
}

TEST_CASE("aggregation is bit-identical for 1 and 2 threads", "[kernels][aggregate][determinism]")
{
    const csr g = random_graph(20000, 2000, 15, 4);
    std::vector<offset_t> deg(22000, 7);
    const matrix_f x = random_matrix(22000, 64, 5).cast<float>();
    const matrix_f d = random_matrix(20000, 64, 6).cast<float>();
    const int saved = omp_get_max_threads();
    for (auto kind : {aggregator::sum, aggregator::gcn, aggregator::max}) {
        const aggregation plan(g, 22000, {.kind = kind, .in_degree = deg});
        matrix_f o1, o2, g1, g2;
        std::vector<node_t> am1, am2;
        omp_set_num_threads(1);
        plan.forward(x, o1, &am1);
        plan.backward(d, g1, &am1);
        omp_set_num_threads(2);
        plan.forward(x, o2, &am2);
        plan.backward(d, g2, &am2);
        CHECK(o1 == o2);
        CHECK(g1 == g2);
    }
    omp_set_num_threads(saved);
}

TEST_CASE("bf16 inputs stay within bf16 error of fp32", "[kernels][aggregate][bf16]")
{
    const csr g = random_graph(2000, 100, 10, 9);
    std::vector<offset_t> deg(2100, 10);
    const matrix_f x = random_matrix(2100, 40, 7).cast<float>();
    const matrix<bf16> xb = x.cast<bf16>();
    for (auto kind : {aggregator::sum, aggregator::mean, aggregator::gcn}) {
        const aggregation plan(g, 2100, {.kind = kind, .in_degree = deg});
        matrix_f f32, f16;
        plan.forward(x, f32);
        plan.forward(xb, f16);
        // bf16 keeps 8 significant bits: relative rounding error <= 2^-8 per input, so the
        // error of a weighted sum is bounded by 2^-8 times the sum of |w x|.
        matrix_f bound;
        const matrix_f ax = x.cwiseAbs();
        plan.forward(ax, bound);
        CHECK(((f32 - f16).cwiseAbs().array() <= bound.array() * (1.0F / 256) + 1e-5F).all());
        CHECK((f32 - f16).cwiseAbs().maxCoeff() > 0.0F); // bf16 really was used
    }
}

TEST_CASE("bf16 inputs aggregate as their float values do, bit for bit", "[kernels][aggregate][bf16]")
{
    // bf16 widens to float exactly, and the kernel sums the widened values in the float
    // kernel's order, in registers, at every width (the 16-column groups and the tail).
    const csr g = random_graph(400, 60, 9, 31);
    std::vector<offset_t> deg(460, 7);
    for (int width : {3, 16, 47, 83, 300}) {
        INFO("width " << width);
        const matrix<bf16> xb = random_matrix(460, width, 32).cast<float>().cast<bf16>();
        const matrix_f widened = xb.cast<float>();
        for (auto kind : {aggregator::sum, aggregator::mean, aggregator::gcn}) {
            const aggregation plan(g, 460, {.kind = kind, .in_degree = deg});
            matrix_f want, got;
            plan.forward(widened, want);
            test::at_thread_counts([&](int) {
                plan.forward(xb, got);
                CHECK(got == want);
            });
        }
    }
}

TEST_CASE("exact backward equals the float backward up to float rounding, for any grouping",
          "[kernels][aggregate][exact]")
{
    const csr g = random_graph(500, 100, 8, 10);
    std::vector<offset_t> deg(600, 4);
    const aggregation plan(g, 600, {.kind = aggregator::gcn, .in_degree = deg});
    const matrix_f d = random_matrix(500, 16, 1).cast<float>();
    const int k = exact::scale_exponent(static_cast<double>(plan.num_edges()) * plan.max_weight() *
                                        exact::max_abs(d.data(), static_cast<std::size_t>(d.size())));
    std::vector<std::int64_t> acc(600 * 16, 0);
    plan.backward_exact(d.data(), 16, k, acc.data());
    matrix_f viaexact(600, 16), fast(600, 16);
    exact::to_real(acc.data(), acc.size(), k, viaexact.data());
    plan.backward(d.data(), 16, fast.data());
    CHECK((viaexact - fast).cwiseAbs().maxCoeff() <= 1e-5F);
    // Two halves of the destination rows summed separately give the same integers.
    std::vector<node_t> lo, hi;
    for (node_t v = 0; v < 500; ++v)
        (v % 2 == 0 ? lo : hi).push_back(v);
    const aggregation pl(g, 600, {.kind = aggregator::gcn, .in_degree = deg, .rows = lo});
    const aggregation ph(g, 600, {.kind = aggregator::gcn, .in_degree = deg, .rows = hi});
    matrix_f dl(250, 16), dh(250, 16);
    for (int i = 0; i < 250; ++i) {
        dl.row(i) = d.row(lo[i]);
        dh.row(i) = d.row(hi[i]);
    }
    std::vector<std::int64_t> acc2(600 * 16, 0);
    ph.backward_exact(dh.data(), 16, k, acc2.data());
    pl.backward_exact(dl.data(), 16, k, acc2.data());
    CHECK(acc2 == acc);
}

TEST_CASE("aggregation rejects bad input", "[kernels][aggregate][bad-input]")
{
    const csr g = tiny();
    matrix<double> out;
    SECTION("input rows")
    {
        const aggregation plan(g, 4, {.kind = aggregator::sum});
        CHECK_THROWS_WITH(plan.forward(matrix<double>(3, 2), out), Catch::Contains("input rows is 3, expected 4"));
    }
    SECTION("source id beyond the rows of x")
    {
        CHECK_THROWS_WITH(aggregation(g, 3, {.kind = aggregator::sum}), Catch::Contains("source id 3 outside [0, 3)"));
    }
    SECTION("gcn over halo rows without degrees")
    {
        csr p;
        p.offsets = {0, 1};
        p.sources = {1};
        CHECK_THROWS_WITH(aggregation(p, 2, {.kind = aggregator::gcn}), Catch::Contains("needs in_degree"));
    }
    SECTION("max without argmax")
    {
        const aggregation plan(g, 4, {.kind = aggregator::max});
        CHECK_THROWS_WITH(plan.forward(tiny_x(), out), Catch::Contains("argmax"));
    }
    SECTION("backward of a forward-only plan")
    {
        const aggregation plan(g, 4, {.kind = aggregator::mean, .backward = false});
        plan.forward(tiny_x(), out);
        matrix<double> full;
        aggregation(g, 4, {.kind = aggregator::mean}).forward(tiny_x(), full);
        CHECK(out == full);
        matrix<double> d_x;
        CHECK_THROWS_WITH(plan.backward(out, d_x), Catch::Contains("forward-only"));
    }
    SECTION("NaN input is reported when checking is on")
    {
        set_check_numerics(true);
        auto x = tiny_x();
        x(2, 1) = std::nan("");
        const aggregation plan(g, 4, {.kind = aggregator::sum});
        CHECK_THROWS_WITH(plan.forward(x, out),
                          Catch::Contains("aggregation::forward: input holds a non-finite value"));
        x(2, 1) = INFINITY;
        CHECK_THROWS_WITH(plan.forward(x, out), Catch::Contains("non-finite"));
        set_check_numerics(false);
        CHECK_NOTHROW(plan.forward(x, out));
    }
    SECTION("empty graph")
    {
        const csr empty;
        const aggregation plan(empty, 0, {.kind = aggregator::gcn});
        plan.forward(matrix<double>(0, 3), out);
        CHECK(out.rows() == 0);
    }
    SECTION("unknown aggregator name")
    {
        CHECK_THROWS_WITH(parse_name<aggregator>("median"), Catch::Contains("unknown aggregator 'median'"));
    }
}

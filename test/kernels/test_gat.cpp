#include "support/gradcheck.hpp"
#include "support/test_support.hpp"

#include <retexo/kernels/gat.hpp>

#include <omp.h>

using namespace retexo;
using test::random_matrix;

namespace {
csr small_graph()
{
    // 0 <- {1, 2}; 1 <- {0, 4}; 2 <- {}; 3 <- {0, 1, 2, 4}; source 4 is a halo row.
    csr g;
    g.offsets = {0, 2, 4, 4, 8};
    g.sources = {1, 2, 0, 4, 0, 1, 2, 4};
    return g;
}
} // namespace

TEST_CASE("GAT forward: hand-computed attention on a tiny graph", "[kernels][gat]")
{
    // One head, width 1: node 0 attends to itself (self loop) and 1, 2.
    const csr g = small_graph();
    const gat_attention plan(g, 5, {.heads = 1, .negative_slope = 0.2});
    matrix<double> z(5, 1), el(5, 1), er(5, 1);
    z << 1, 2, 3, 4, 5;
    el << 0.5, -1.0, 2.0, 0.0, 1.0;
    er << 0.1, 0.0, 0.0, 0.3, 0.0;
    matrix<double> msg(5, 2), out(4, 1), alpha(plan.num_edges(), 1);
    msg << z, el;
    plan.forward(msg.data(), er.data(), 1, out.data(), alpha.data());
    // Row 0 sources in plan order: self 0, then 1, 2; scores LeakyReLU(el_u + er_0).
    const double s0 = 0.6, s1 = 0.2 * (-0.9), s2 = 2.1;
    const double m = std::exp(s0) + std::exp(s1) + std::exp(s2);
    CHECK(out(0, 0) == Approx((std::exp(s0) * 1 + std::exp(s1) * 2 + std::exp(s2) * 3) / m));
    CHECK(alpha(0, 0) == Approx(std::exp(s0) / m));
    // Row 2 has no in-edges: only its self loop, alpha = 1.
    CHECK(out(2, 0) == Approx(3.0));
    // Without self loops row 2 is empty and aggregates to zero.
    const gat_attention bare(g, 5, {.heads = 1, .self_loops = false});
    matrix<double> out2(4, 1), alpha2(bare.num_edges(), 1);
    bare.forward(msg.data(), er.data(), 1, out2.data(), alpha2.data());
    CHECK(out2(2, 0) == 0.0);
}

TEST_CASE("GAT backward matches finite differences", "[kernels][gat][gradcheck]")
{
    const csr g = small_graph();
    const int H = 2, D = 3;
    for (bool self : {true, false}) {
        DYNAMIC_SECTION("self loops " << self)
        {
            const gat_attention plan(g, 5, {.heads = H, .negative_slope = 0.2, .self_loops = self});
            auto msg = random_matrix(5, H * D + H, 1); // [z | el] per source row
            auto er = random_matrix(5, H, 3);
            const auto r = random_matrix(4, H * D, 4);
            auto f = [&] {
                matrix<double> out(4, H * D), alpha(plan.num_edges(), H);
                plan.forward(msg.data(), er.data(), D, out.data(), alpha.data());
                return (out.array() * r.array()).sum();
            };
            matrix<double> out(4, H * D), alpha(plan.num_edges(), H), dmsg(5, H * D + H), der(5, H),
                ds(plan.num_edges(), H);
            plan.forward(msg.data(), er.data(), D, out.data(), alpha.data());
            plan.backward(msg.data(), er.data(), alpha.data(), r.data(), D, dmsg.data(), der.data(), ds.data());
            test::check_gradient(f, msg, dmsg, "gat messages (z, el)");
            test::check_gradient(f, er, der, "gat er");
        }
    }
}

TEST_CASE("GAT over inputs: every head's message is the source row itself", "[kernels][gat]")
{
    // forward_inputs / backward_inputs against forward / backward on messages [x ... x | el]
    // (each head's slice the whole row), and el's gradient against finite differences.
    const csr g = small_graph();
    // F = 88 and 5 heads: column blocks of 64 (the last overlapping), 4 heads and 1 at a
    // time, dots in lanes of 16 and a tail; F = 4: rows narrower than a block.
    const auto shape = GENERATE(std::pair{3, 4}, std::pair{5, 88});
    const int H = shape.first, F = shape.second; // (named: clang 14 lambdas cannot capture bindings)
    CAPTURE(H, F);
    const gat_attention plan(g, 5, {.heads = H, .negative_slope = 0.2});
    auto x = random_matrix(5, F, 1);
    auto el = random_matrix(5, H, 2);
    auto er = random_matrix(5, H, 3);
    const auto r = random_matrix(H * 4, F, 4); // d_y, laid out as y (head after head)
    matrix<double> msg(5, H * F + H);
    for (int h = 0; h < H; ++h)
        msg.middleCols(h * F, F) = x;
    msg.rightCols(H) = el;
    matrix<double> out(4, H * F), alpha(plan.num_edges(), H), y(H * 4, F), alpha_y(plan.num_edges(), H);
    plan.forward(msg.data(), er.data(), F, out.data(), alpha.data());
    plan.forward_inputs(x.data(), F, el.data(), er.data(), y.data(), alpha_y.data());
    CHECK(alpha_y == alpha);
    matrix<double> d_out(4, H * F);
    for (int h = 0; h < H; ++h) {
        CHECK((y.middleRows(h * 4, 4) - out.middleCols(h * F, F)).cwiseAbs().maxCoeff() < 1e-12);
        d_out.middleCols(h * F, F) = r.middleRows(h * 4, 4);
    }
    matrix<double> dmsg(5, H * F + H), der(5, H), ds(plan.num_edges(), H), d_el(5, H), d_er(5, H);
    plan.backward(msg.data(), er.data(), alpha.data(), d_out.data(), F, dmsg.data(), der.data(), ds.data());
    plan.backward_inputs(x.data(), F, el.data(), er.data(), alpha_y.data(), r.data(), d_el.data(), d_er.data(),
                         ds.data());
    CHECK((d_el - dmsg.rightCols(H)).cwiseAbs().maxCoeff() < 1e-12);
    CHECK((d_er - der).cwiseAbs().maxCoeff() < 1e-12);
    auto f = [&] {
        matrix<double> yy(H * 4, F), a(plan.num_edges(), H);
        plan.forward_inputs(x.data(), F, el.data(), er.data(), yy.data(), a.data());
        return (yy.array() * r.array()).sum();
    };
    test::check_gradient(f, el, d_el, "gat inputs: el");
    test::check_gradient(f, er, d_er, "gat inputs: er");
}

TEST_CASE("GAT matches its reference and is thread-count independent", "[kernels][gat][determinism]")
{
    const counter_rng rng(3, 3);
    std::vector<node_t> src, dst;
    for (std::uint64_t e = 0; e < 40000; ++e) {
        src.push_back(static_cast<node_t>(rng.below(2 * e, 4000)));
        dst.push_back(static_cast<node_t>(rng.below(2 * e + 1, 4000)));
    }
    const csr g = build_csr(4000, src, dst);
    const int H = 4, D = 8;
    const gat_attention plan(g, 4000, {.heads = H});
    const matrix_f msg = random_matrix(4000, H * D + H, 1).cast<float>(); // [z | el]
    const matrix_f er = random_matrix(4000, H, 3).cast<float>();
    const matrix_f d = random_matrix(4000, H * D, 4).cast<float>();
    auto run = [&](int threads, matrix_f& out, matrix_f& dmsg) {
        omp_set_num_threads(threads);
        matrix_f alpha(plan.num_edges(), H), der(4000, H), ds(plan.num_edges(), H);
        out.resize(4000, H * D);
        dmsg.resize(4000, H * D + H);
        plan.forward(msg.data(), er.data(), D, out.data(), alpha.data());
        plan.backward(msg.data(), er.data(), alpha.data(), d.data(), D, dmsg.data(), der.data(), ds.data());
    };
    const int saved = omp_get_max_threads();
    matrix_f o1, o2, m1, m2;
    run(1, o1, m1);
    run(2, o2, m2);
    omp_set_num_threads(saved);
    CHECK(o1 == o2);
    CHECK(m1 == m2);
    // Over inputs (gat_attention::forward_inputs): 100 values per row, as every head's message.
    const int F = 100;
    const matrix_f x = random_matrix(4000, F, 5).cast<float>();
    const matrix_f el = msg.rightCols(H);
    const matrix_f dy = random_matrix(H * 4000, F, 6).cast<float>();
    auto run_inputs = [&](int threads, matrix_f& y, matrix_f& d_el) {
        omp_set_num_threads(threads);
        matrix_f alpha(plan.num_edges(), H), d_er(4000, H), ds(plan.num_edges(), H);
        y.resize(H * 4000, F);
        d_el.resize(4000, H);
        plan.forward_inputs(x.data(), F, el.data(), er.data(), y.data(), alpha.data());
        plan.backward_inputs(x.data(), F, el.data(), er.data(), alpha.data(), dy.data(), d_el.data(), d_er.data(),
                             ds.data());
    };
    matrix_f y1, y2, g1, g2;
    run_inputs(1, y1, g1);
    run_inputs(2, y2, g2);
    omp_set_num_threads(saved);
    CHECK(y1 == y2);
    CHECK(g1 == g2);
    matrix_f ref(4000, H * D);
    reference::gat_forward(plan, msg.data(), er.data(), D, 0.2, ref.data());
    CHECK((ref - o1).cwiseAbs().maxCoeff() < 1e-5F);
}

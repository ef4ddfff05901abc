#include "support/gradcheck.hpp"
#include "support/test_support.hpp"
#include "support/toy_graph.hpp"

#include <retexo/nn/layers.hpp>

#include <numeric>

using namespace retexo;
using namespace retexo::nn;
using test::random_matrix;

namespace {

/// Forward through message + combine with every local row's messages computed locally.
template <typename T>
void run_forward(const gnn_layer<T>& layer, const layer_plan& plan, const matrix<T>& x, layer_cache<T>& c,
                 matrix<T>& msg, matrix<T>& x_rows, matrix<T>& y)
{
    layer.message(x, c, msg);
    x_rows.resize(static_cast<Eigen::Index>(plan.rows.size()), x.cols());
    for (std::size_t i = 0; i < plan.rows.size(); ++i)
        x_rows.row(static_cast<Eigen::Index>(i)) = x.row(plan.rows[i]);
    layer.combine(plan, msg, x_rows, c, y);
}

void check_layer(layer_kind kind, const layer_options& o, bool subset, int in = 5, int out = 3)
{
    const test::toy_graph t;
    if (kind == layer_kind::gat && o.concat) out = 2 * o.heads;
    gnn_layer<double> layer(kind, in, out, o, 3, 1);
    std::vector<node_t> rows;
    for (node_t v = 0; v < 12; ++v)
        if (!subset || v % 3 != 1) rows.push_back(v);
    const auto plan = layer.make_plan(t.lg, rows);
    auto x = random_matrix(16, in, 1);
    const auto r = random_matrix(static_cast<Eigen::Index>(rows.size()), out, 2);
    auto f = [&] {
        layer_cache<double> cc;
        matrix<double> m, xr, y;
        run_forward(layer, plan, x, cc, m, xr, y);
        return (y.array() * r.array()).sum();
    };
    layer_cache<double> c;
    matrix<double> msg, x_rows, y, dx;
    run_forward(layer, plan, x, c, msg, x_rows, y);
    const reduce_mode mode;
    layer.combine_backward(plan, msg, x_rows, c, r, true, mode);
    layer.message_backward(x, msg, c, &dx, mode);
    layer.add_self_gradient(plan, c, dx);
    for (auto* p : layer.parameters()) {
        const matrix<double> grad = p->grad;
        test::check_gradient(f, p->value, grad, p->name);
    }
    test::check_gradient(f, x, dx, "input of " + name_of(kind));
}

} // namespace

TEST_CASE("graph layers: every gradient matches finite differences", "[nn][gradcheck]")
{
    for (bool subset : {false, true}) {
        DYNAMIC_SECTION("gcn subset=" << subset)
        {
            check_layer(layer_kind::gcn, {}, subset);
        }
        DYNAMIC_SECTION("gcn transform-first subset=" << subset)
        {
            check_layer(layer_kind::gcn, {}, subset, 3, 5);
        }
        DYNAMIC_SECTION("sage-mean subset=" << subset)
        {
            check_layer(layer_kind::sage_mean, {}, subset);
        }
        DYNAMIC_SECTION("sage-mean transform-first subset=" << subset)
        {
            check_layer(layer_kind::sage_mean, {}, subset, 3, 5);
        }
        DYNAMIC_SECTION("sage-pool subset=" << subset)
        {
            check_layer(layer_kind::sage_pool, {.pool_width = 4}, subset);
        }
        DYNAMIC_SECTION("gat concat subset=" << subset)
        {
            check_layer(layer_kind::gat, {.heads = 2, .concat = true}, subset);
        }
        DYNAMIC_SECTION("gat mean subset=" << subset)
        {
            check_layer(layer_kind::gat, {.heads = 3, .concat = false}, subset);
        }
    }
}

TEST_CASE("dense layer and layer norm gradients match finite differences", "[nn][gradcheck]")
{
    dense_layer<double> d(4, 3, 1, 1, "d");
    layer_norm<double> ln(3, "ln");
    ln.gamma.value = random_matrix(1, 3, 9);
    ln.beta.value = random_matrix(1, 3, 10);
    auto x = random_matrix(6, 4, 1);
    const auto r = random_matrix(6, 3, 2);
    auto f = [&] {
        matrix<double> h, y;
        d.forward(x, h);
        layer_norm<double> l2 = ln;
        l2.forward(h, y);
        return (y.array() * r.array()).sum();
    };
    matrix<double> h, y, dh, dx;
    d.forward(x, h);
    ln.forward(h, y);
    ln.backward(h, r, dh, {});
    d.backward(x, dh, &dx, {});
    test::check_gradient(f, d.w.value, matrix<double>(d.w.grad), "dense weight");
    test::check_gradient(f, d.b.value, matrix<double>(d.b.grad), "dense bias");
    test::check_gradient(f, ln.gamma.value, matrix<double>(ln.gamma.grad), "ln gamma");
    test::check_gradient(f, ln.beta.value, matrix<double>(ln.beta.grad), "ln beta");
    test::check_gradient(f, x, dx, "dense input");
}

TEST_CASE("exact-mode layer gradients agree with fast mode", "[nn][exact]")
{
    const test::toy_graph t;
    for (auto kind : {layer_kind::gcn, layer_kind::sage_mean, layer_kind::sage_pool, layer_kind::gat}) {
        gnn_layer<float> fast(kind, 5, 4, {.heads = 2}, 3, 1), ex(kind, 5, 4, {.heads = 2}, 3, 1);
        std::vector<node_t> rows(12);
        for (node_t v = 0; v < 12; ++v)
            rows[v] = v;
        const auto plan = fast.make_plan(t.lg, rows);
        const matrix_f x = random_matrix(16, 5, 1).cast<float>();
        const matrix_f r = random_matrix(12, 4, 2).cast<float>();
        layer_cache<float> cf, ce;
        matrix_f mf, me, xf, xe, yf, ye, dxf, dxe;
        run_forward(fast, plan, x, cf, mf, xf, yf);
        run_forward(ex, plan, x, ce, me, xe, ye);
        CHECK(yf == ye);
        reduce_mode exact_mode;
        exact_mode.exact = true;
        exact_mode.global_terms = 1000;
        fast.combine_backward(plan, mf, xf, cf, r, true, {});
        ex.combine_backward(plan, me, xe, ce, r, true, exact_mode);
        fast.message_backward(x, mf, cf, &dxf, {});
        ex.message_backward(x, me, ce, &dxe, exact_mode);
        CHECK((dxf - dxe).cwiseAbs().maxCoeff() < 1e-5F);
        const auto pf = fast.parameters();
        const auto pe = ex.parameters();
        for (std::size_t i = 0; i < pf.size(); ++i) {
            finish_exact_gradient(*pe[i]);
            INFO(name_of(kind) << " " << pf[i]->name);
            CHECK((pf[i]->grad - pe[i]->grad).cwiseAbs().maxCoeff() < 1e-4F);
        }
    }
}

TEST_CASE("layers reject bad shapes and names", "[nn][bad-input]")
{
    const test::toy_graph t;
    gnn_layer<double> l(layer_kind::gcn, 5, 3, {}, 1, 1);
    const auto plan = l.make_plan(t.lg, std::vector<node_t>{0, 1});
    layer_cache<double> c;
    matrix<double> y;
    CHECK_THROWS_WITH(l.message(matrix<double>(16, 4), c, y), Catch::Contains("input width is 4, expected 5"));
    CHECK_THROWS_WITH(l.combine(plan, matrix<double>(15, 5), matrix<double>(2, 5), c, y),
                      Catch::Contains("message rows is 15, expected 16"));
    CHECK_THROWS_WITH(gnn_layer<double>(layer_kind::gat, 5, 7, {.heads = 2}, 1, 1),
                      Catch::Contains("not divisible by 2 heads"));
    CHECK_THROWS_WITH(parse_name<layer_kind>("gin", "--model"),
                      Catch::Equals("--model: unknown model 'gin' (expected gcn, sage, sage-pool or gat)"));
    CHECK(parse_name<layer_kind>("sage-mean") == layer_kind::sage_mean); // an alias
    CHECK(name_of(layer_kind::sage_mean) == "sage");
}

TEST_CASE("a first layer on sparse inputs picks the cheaper order from shapes and density", "[nn][sparse]")
{
    // cora: 1433 bag-of-words features at 1.3%, hidden 256, mean in-degree 3.9: transform first.
    CHECK(sparse_input_transforms_first(1433, 256, 0.013, 3.9));
    // The same widths with dense-like rows: aggregating 1433 columns is cheaper than a
    // 1433 x 256 GEMM's sparse form.
    CHECK_FALSE(sparse_input_transforms_first(1433, 256, 0.5, 3.9));
    // 100 features at 5%, hidden 256, degree 20 (products-like): aggregate first.
    CHECK_FALSE(sparse_input_transforms_first(100, 256, 0.05, 20));
    // ... but so sparse and on so sparse a graph that the sparse GEMM wins even widening.
    CHECK(sparse_input_transforms_first(200, 256, 0.002, 0.5));
    // The layer follows the rule: its messages are out wide when it transforms first.
    layer_options o;
    o.sparse_input_density = 0.002;
    o.mean_in_degree = 0.5;
    CHECK(gnn_layer<float>(layer_kind::gcn, 200, 256, o, 1, 0).msg_width() == 256);
    CHECK(gnn_layer<float>(layer_kind::gcn, 200, 256, {}, 1, 0).msg_width() == 200); // dense: the narrower
    o.sparse_input_density = 0.5;
    CHECK(gnn_layer<float>(layer_kind::sage_mean, 1433, 256, o, 1, 0).msg_width() == 1433);
}

TEST_CASE("GAT sums its inputs first where that costs fewer multiply-adds", "[nn][gat]")
{
    // 100 output rows of a 3000-node graph, 40 random in-edges each: they read ~2300 rows.
    const node_t N = 3000;
    const counter_rng rng(5, 5);
    std::vector<node_t> src, dst;
    for (std::uint64_t e = 0; e < 40 * static_cast<std::uint64_t>(N); ++e) {
        src.push_back(static_cast<node_t>(rng.below(2 * e, N)));
        dst.push_back(static_cast<node_t>(e / 40));
    }
    const csr g = build_csr(N, src, dst);
    std::vector<offset_t> degree(static_cast<std::size_t>(N));
    for (node_t v = 0; v < N; ++v)
        degree[static_cast<std::size_t>(v)] = g.degree(v);
    const local_graph lg{&g, N, N, degree};
    std::vector<node_t> rows(100);
    for (node_t i = 0; i < 100; ++i)
        rows[static_cast<std::size_t>(i)] = 30 * i;
    const gnn_layer<float> hidden(layer_kind::gat, 512, 256, {.heads = 8}, 1, 1);
    const layer_plan plan = hidden.make_plan(lg, rows);
    REQUIRE(plan.att_inputs);
    CHECK(hidden.aggregates_inputs_first(plan, 512));                   // dense inputs: the sums
    CHECK_FALSE(hidden.aggregates_inputs_first(plan, 10 * 0.01 * 512)); // 1% sparse: the products
    // Logits (8 heads of 10 averaged): W is too narrow for the sums to pay.
    const gnn_layer<float> logits(layer_kind::gat, 512, 10, {.heads = 8, .concat = false}, 1, 1);
    CHECK_FALSE(logits.aggregates_inputs_first(logits.make_plan(lg, rows), 512));
    // Every row's output (the embedding pass): there is nothing to save.
    std::vector<node_t> all(static_cast<std::size_t>(N));
    std::iota(all.begin(), all.end(), 0);
    CHECK_FALSE(hidden.aggregates_inputs_first(hidden.make_plan(lg, all), 512));
    // Not GAT: never.
    const gnn_layer<float> gcn(layer_kind::gcn, 512, 256, {}, 1, 1);
    CHECK_FALSE(gcn.aggregates_inputs_first(gcn.make_plan(lg, rows), 512));
    // The inputs' width in a GEMM: sparse columns count 10 x their density.
    matrix_f one_percent = matrix_f::Zero(10, 100);
    for (Eigen::Index i = 0; i < 10; ++i)
        one_percent(i, 7 * i) = 1;
    const csr_matrix sparse = csr_matrix::from_dense(one_percent);
    CHECK(gemm_width(sparse) == Approx(10.0));
    CHECK(gemm_width(column_blocks{{matrix_f(10, 7), sparse}}) == Approx(17.0));
}

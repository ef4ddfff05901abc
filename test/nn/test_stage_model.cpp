// The RETEXO stage model: its backward pass against central differences of its forward
// pass, for dense and graph stages, with and without the head and LayerNorm.
#include "support/gradcheck.hpp"
#include "support/test_support.hpp"
#include "support/toy_graph.hpp"

#include <retexo/nn/reduce.hpp>
#include <retexo/nn/stage_model.hpp>

using namespace retexo;
using namespace retexo::nn;

namespace {

/// With `sparse`, the inputs are 2/3 zeros and stored as CSR (the sparse first-layer kernels);
/// the gradients then also match those of the same inputs stored dense, to rounding.
/// How check_stage stores the inputs: dense, sparse rows, or column blocks (sparse, two
/// dense columns, sparse).
enum class inputs { dense, sparse, blocks };

/// GAT's support-only passes take the order inputs_first asks for (gnn_layer::forward_inputs
/// or the support's messages), and are checked against the other order too.
/// every_row: the pass outputs every owned row, so that it reads every local row.
void check_stage(stage_spec spec, inputs storage = inputs::dense, bool inputs_first = false, bool every_row = false)
{
    spec.inputs_first = inputs_first;
    const bool sparse = storage != inputs::dense;
    const test::toy_graph t(5);
    stage_model model(spec);
    std::vector<node_t> rows;
    for (node_t v = 0; v < 12; ++v)
        if (v % 4 != 1 || every_row) rows.push_back(v);
    std::optional<layer_plan> plan;
    if (spec.graph) plan = model.make_plan(t.lg, rows);
    matrix_f dense_x = test::random_matrix(spec.graph ? 16 : 12, spec.in, 1).cast<float>();
    if (sparse) // two of every three zero, none of the rows all zero (its pre-activations would be the
                // bias, 0 at the start: on ReLU's kink)
        for (Eigen::Index i = 0; i < dense_x.rows(); ++i)
            for (Eigen::Index j = 0; j < dense_x.cols(); ++j)
                if ((i + j) % 3 != 0) dense_x(i, j) = 0;
    const node_features x = storage == inputs::blocks
                                ? node_features(column_blocks{{csr_matrix::from_dense(dense_x.leftCols(1)),
                                                               matrix_f(dense_x.middleCols(1, 2)),
                                                               csr_matrix::from_dense(dense_x.rightCols(spec.in - 3))}})
                            : sparse ? node_features(csr_matrix::from_dense(dense_x))
                                     : node_features(dense_x);
    const matrix<double> r = test::random_matrix(static_cast<Eigen::Index>(rows.size()), spec.classes, 2);
    auto loss = [&] { // <logits, r>
        stage_pass p;
        p.rows = rows;
        p.plan = plan ? &*plan : nullptr;
        model.forward(p, x, t.ids, true, 1);
        return (p.logits.cast<double>().array() * r.array()).sum();
    };
    stage_pass p;
    p.rows = rows;
    p.plan = plan ? &*plan : nullptr;
    model.forward(p, x, t.ids, true, 1);
    CHECK(p.used_inputs_first == (inputs_first && spec.graph && spec.kind == layer_kind::gat));
    if (plan && every_row) CHECK(plan->support.empty());
    p.d_logits = r.cast<float>();
    model.backward(p, 1, reduce_mode{}, [](std::int64_t*, int) { FAIL("no halo exchange outside exact mode"); });
    if (sparse) { // the same model on the dense storage of the inputs (the same dropout masks)
        stage_model twin(spec);
        stage_pass q;
        q.rows = rows;
        q.plan = plan ? &*plan : nullptr;
        twin.forward(q, dense_x, t.ids, true, 1);
        CHECK(q.logits.isApprox(p.logits, 1e-6F));
        q.d_logits = r.cast<float>();
        twin.backward(q, 1, reduce_mode{}, [](std::int64_t*, int) {});
        for (std::size_t i = 0; i < twin.parameters().size(); ++i)
            CHECK(twin.parameters()[i]->grad.isApprox(model.parameters()[i]->grad, 1e-5F));
    }
    if (plan && !plan->support.empty()) { // GAT: the support's messages only, against every row's
        INFO("support " << plan->support.size() << " of " << plan->num_local << " local rows");
        CHECK(plan->support.size() < static_cast<std::size_t>(plan->num_local));
        stage_model every(spec);
        stage_pass q;
        q.rows = rows;
        q.plan = &*plan;
        q.every_message = true;
        every.forward(q, x, t.ids, true, 1);
        if (inputs_first)
            CHECK(q.logits.isApprox(p.logits, 1e-5F));
        else
            CHECK(q.logits == p.logits);
        q.d_logits = r.cast<float>();
        every.backward(q, 1, reduce_mode{}, [](std::int64_t*, int) {});
        for (std::size_t i = 0; i < every.parameters().size(); ++i)
            CHECK(every.parameters()[i]->grad.isApprox(model.parameters()[i]->grad, 1e-5F));
    }
    if (plan && spec.kind == layer_kind::gat) { // the other order: the same function, rounded otherwise
        stage_spec other_spec = spec;
        other_spec.inputs_first = !inputs_first;
        stage_model other(other_spec);
        stage_pass o;
        o.rows = rows;
        o.plan = &*plan;
        other.forward(o, x, t.ids, true, 1);
        CHECK(o.logits.isApprox(p.logits, 1e-5F));
        o.d_logits = r.cast<float>();
        other.backward(o, 1, reduce_mode{}, [](std::int64_t*, int) {});
        for (std::size_t i = 0; i < other.parameters().size(); ++i) {
            INFO(other.parameters()[i]->name);
            CHECK(other.parameters()[i]->grad.isApprox(model.parameters()[i]->grad, 1e-5F));
        }
    }
    for (auto* param : model.parameters()) {
        matrix<double> value = param->value.cast<double>();
        const matrix<double> grad = param->grad.cast<double>();
        auto f = [&] {
            param->value = value.cast<float>();
            return loss();
        };
        // Single-precision forward passes: a larger step and tolerance than in double.
        test::check_gradient(f, value, grad, param->name, 1e-3, 1e-2);
        param->value = value.cast<float>();
    }
}

} // namespace

TEST_CASE("stage model: gradients match central differences", "[nn][stage]")
{
    stage_spec s{.stage = 1, .in = 6, .hidden = 4, .classes = 3, .dropout = 0.0, .seed = 9};
    SECTION("dense, head and LayerNorm")
    {
        check_stage(s);
    }
    SECTION("dense, head without LayerNorm")
    {
        s.layer_norm = false;
        check_stage(s);
    }
    SECTION("dense, the transform gives the logits")
    {
        s.head = false;
        check_stage(s);
    }
    SECTION("dense, sparse inputs, head and LayerNorm")
    {
        check_stage(s, inputs::sparse);
    }
    SECTION("dense, sparse inputs, the transform gives the logits")
    {
        s.head = false;
        check_stage(s, inputs::sparse);
    }
    SECTION("graph: GraphSAGE-pool with head")
    {
        s.graph = true;
        s.kind = layer_kind::sage_pool;
        check_stage(s);
    }
    for (bool inputs_first : {false, true})
        DYNAMIC_SECTION("graph: GAT with head and LayerNorm" << (inputs_first ? ", inputs aggregated first" : ""))
        {
            s.graph = true;
            s.kind = layer_kind::gat;
            s.heads = 2;
            check_stage(s, inputs::dense, inputs_first);
        }
    SECTION("dense, column-block inputs")
    {
        check_stage(s, inputs::blocks);
    }
    // GraphSAGE's (own, neighbours') pairs with the neighbours' weights an offset from the own.
    for (auto storage : {inputs::dense, inputs::sparse, inputs::blocks})
        for (bool head : {true, false})
            DYNAMIC_SECTION("dense, offset pairs, " << (storage == inputs::dense    ? "dense"
                                                        : storage == inputs::sparse ? "sparse"
                                                                                    : "column-block")
                                                    << " inputs" << (head ? ", head" : ", logits"))
            {
                s.offset_pairs = {{.self = 0, .neighbours = 2, .width = 2}, {.self = 5, .neighbours = 4, .width = 1}};
                s.head = head;
                // Dropout could leave a sparse row all zero: on ReLU's kink (check_stage).
                if (storage == inputs::dense) s.dropout = 0.3;
                check_stage(s, storage);
            }
    // GAT with dropout: the masks of sparse rows and column blocks are those of the dense form.
    for (auto kind : {layer_kind::gat, layer_kind::sage_pool})
        for (auto storage : {inputs::sparse, inputs::blocks})
            for (bool inputs_first : {false, true}) {
                if (inputs_first && kind != layer_kind::gat) continue;
                DYNAMIC_SECTION("graph: " << name_of(kind) << " with "
                                          << (storage == inputs::sparse ? "sparse" : "column-block") << " inputs"
                                          << (inputs_first ? ", aggregated first" : ""))
                {
                    s.graph = true;
                    s.kind = kind;
                    s.heads = 2;
                    if (kind == layer_kind::gat) s.dropout = 0.3;
                    check_stage(s, storage, inputs_first);
                }
            }
    for (bool inputs_first : {false, true})
        DYNAMIC_SECTION("graph: GAT over every local row" << (inputs_first ? ", inputs aggregated first" : ""))
        {
            s.graph = true;
            s.kind = layer_kind::gat;
            s.heads = 2;
            check_stage(s, inputs::blocks, inputs_first, true);
        }
    for (bool inputs_first : {false, true})
        DYNAMIC_SECTION("graph: GAT logits (heads averaged)" << (inputs_first ? ", inputs aggregated first" : ""))
        {
            s.graph = true;
            s.kind = layer_kind::gat;
            s.heads = 2;
            s.head = false;
            check_stage(s, inputs::dense, inputs_first);
        }
}

TEST_CASE("stage model: names, shapes and dropout keyed by global id", "[nn][stage]")
{
    const stage_spec s{.stage = 2, .in = 6, .hidden = 4, .classes = 3, .dropout = 0.5, .seed = 9};
    stage_model model(s);
    std::vector<std::string> names;
    for (auto* p : model.parameters())
        names.push_back(p->name);
    CHECK(names == std::vector<std::string>{"stage2.transform.weight", "stage2.transform.bias", "stage2.norm.gamma",
                                            "stage2.norm.beta", "stage2.head.weight", "stage2.head.bias"});
    const test::toy_graph t(5);
    const matrix_f x = test::random_matrix(12, 6, 1).cast<float>();
    stage_pass a, b;
    a.rows = {0, 1, 2, 3};
    b.rows = {3, 2, 1, 0};
    model.forward(a, x, t.ids, true, 7);
    model.forward(b, x, t.ids, true, 7);
    // The same node gets the same mask wherever it stands in the pass.
    for (int i = 0; i < 4; ++i)
        CHECK(a.logits.row(i) == b.logits.row(3 - i));
    stage_pass c = a;
    model.forward(c, x, t.ids, true, 8); // another step, other masks
    CHECK(c.logits != a.logits);
    model.forward(c, x, t.ids, false, 8); // evaluation: no dropout
    stage_pass d;
    d.rows = a.rows;
    model.forward(d, x, t.ids, false, 1);
    CHECK(c.logits == d.logits);
}

TEST_CASE("stage model: offset pairs compute independent weights W_s, W_s + D", "[nn][stage]")
{
    // The offset model against a plain one whose neighbours' rows hold W_s + D: the same
    // logits; the parameter gradients are the plain one's with d W_s += d W_n, in fast and
    // exact mode alike.
    const stage_spec plain_spec{.stage = 0, .in = 5, .hidden = 4, .classes = 3, .dropout = 0.3, .seed = 4};
    stage_spec offset_spec = plain_spec;
    offset_spec.offset_pairs = {{.self = 0, .neighbours = 2, .width = 2}};
    stage_model plain(plain_spec), offset(offset_spec);
    auto& w = offset.parameters()[0]->value;
    plain.parameters()[0]->value = w;
    plain.parameters()[0]->value.middleRows(2, 2) += w.middleRows(0, 2);
    const test::toy_graph t(5);
    const matrix_f x = test::random_matrix(12, 5, 1).cast<float>();
    const matrix_f r = test::random_matrix(6, 3, 2).cast<float>();
    reduce_mode exact_mode;
    exact_mode.exact = true;
    exact_mode.global_terms = 1000;
    std::vector<matrix_f> grads;
    for (const reduce_mode& mode : {reduce_mode{}, exact_mode})
        for (stage_model* m : {&plain, &offset}) {
            stage_pass p;
            p.rows = {0, 2, 3, 5, 8, 11};
            m->forward(p, x, t.ids, true, 3);
            stage_pass q;
            q.rows = p.rows;
            plain.forward(q, x, t.ids, true, 3);
            CHECK(p.logits.isApprox(q.logits, 1e-6F));
            p.d_logits = r;
            for (auto* param : m->parameters())
                param->zero_grad();
            m->backward(p, 3, mode, [](std::int64_t*, int) {});
            auto* weight = m->parameters()[0];
            if (mode.exact) finish_exact_gradient(*weight);
            grads.push_back(weight->grad);
        }
    for (std::size_t i : {0U, 2U}) {
        matrix_f expected = grads[i];
        expected.middleRows(0, 2) += grads[i].middleRows(2, 2);
        CHECK(grads[i + 1].isApprox(expected, 1e-5F));
    }
    CHECK((grads[2] - grads[0]).cwiseAbs().maxCoeff() < 1e-5F); // exact against fast
    CHECK((grads[3] - grads[1]).cwiseAbs().maxCoeff() < 1e-5F);
    stage_spec bad = offset_spec;
    bad.offset_pairs = {{.self = 0, .neighbours = 1, .width = 2}}; // overlapping
    CHECK_THROWS_WITH(stage_model(bad), Catch::Contains("offset pair (0, 1, 2) does not fit"));
    bad.offset_pairs = {{.self = 0, .neighbours = 4, .width = 2}}; // past the last column
    CHECK_THROWS_WITH(stage_model(bad), Catch::Contains("5 input columns"));
}

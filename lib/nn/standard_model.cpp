// The standard trainer's model: its layers, their shared plans and activation.
#include <retexo/nn/standard_model.hpp>

namespace retexo::nn {

standard_model::standard_model(const standard_model_spec& spec, const local_graph& train_graph,
                               std::span<const node_t> rows, const local_graph* eval_graph)
    : act(spec.kind == layer_kind::gat ? activation::elu : activation::relu)
{
    for (int l = 0; l < spec.layers; ++l) {
        const int in = l == 0 ? spec.in : spec.hidden;
        const bool last = l == spec.layers - 1;
        const int out = last ? spec.out : spec.hidden;
        layer_options lo;
        lo.heads = spec.heads;
        lo.concat = !last; // GAT: hidden layers concatenate heads, the output layer averages them
        if (l == 0 && spec.sparse_input_density > 0) { // sparse features: the cheaper order for these shapes
            lo.sparse_input_density = spec.sparse_input_density;
            lo.mean_in_degree = spec.mean_in_degree;
        }
        layers.emplace_back(spec.kind, in, out, lo, spec.seed, static_cast<std::uint64_t>(l));
    }
    plan = layers.front().make_plan(train_graph, rows);
    if (eval_graph != nullptr) eval_plan = layers.front().make_plan(*eval_graph, rows);
}

std::vector<parameter<float>*> standard_model::parameters()
{
    std::vector<parameter<float>*> ps;
    for (auto& l : layers)
        for (auto* p : l.parameters())
            ps.push_back(p);
    return ps;
}

} // namespace retexo::nn

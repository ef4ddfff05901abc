#pragma once
/// @file standard_model.hpp
/// The standard trainer's model (train/standard.hpp): L GNN layers of one kind, hidden layers
/// `hidden` wide and the last one out to the classes (GAT's hidden layers concatenate their
/// heads, its output layer averages them), ReLU between layers (ELU for GAT), and one
/// aggregation plan that every layer shares.

#include <retexo/kernels/dense.hpp>
#include <retexo/nn/layers.hpp>

#include <optional>
#include <span>
#include <vector>

namespace retexo::nn {

struct standard_model_spec {
    layer_kind kind = layer_kind::gcn;
    int layers = 2;
    int in = 0; ///< input features
    int hidden = 256;
    int out = 0;   ///< classes
    int heads = 8; ///< gat
    std::uint64_t seed = 42;
    /// Sparse input features: their density over the whole graph and the mean in-degree pick
    /// the first layer's cheaper order (0: dense features).
    double sparse_input_density = 0;
    double mean_in_degree = 0;
};

struct standard_model {
    std::vector<gnn_layer<float>> layers;
    // A plan depends on the layer kind, heads and graph only, all alike across layers: one
    // plan serves every layer (at products scale each costs about half a GB per rank).
    std::optional<layer_plan> plan;      ///< over the graph training sees
    std::optional<layer_plan> eval_plan; ///< over the whole graph (when it is another: inductive)
    activation act = activation::relu;

    /// Plans over `rows` of `train_graph`, and of `eval_graph` when given.
    standard_model(const standard_model_spec& spec, const local_graph& train_graph, std::span<const node_t> rows,
                   const local_graph* eval_graph);

    std::vector<parameter<float>*> parameters();
};

} // namespace retexo::nn

#pragma once
/// @file stage_model.hpp
/// The model of one RETEXO stage: a transform of the stage's inputs, then (unless it is
/// the hidden variant's last stage) LayerNorm (optional), ReLU and a linear head to the
/// classes, with dropout on the transform's input and on the hidden embedding.
///
/// Two kinds of transform:
///   dense  a linear map of each node's precomputed input row (GCN and GraphSAGE-mean
///          aggregate once per stage; the logits variant's first stage is an MLP);
///   graph  a graph layer over every local row's input (GraphSAGE-pool and GAT aggregate
///          with trained parameters, so every round).
/// Like the layers, a stage model never calls MPI; dropout masks are keyed by global node
/// id and the optimiser step, so they do not depend on how the graph is partitioned.

#include <retexo/core/sparse.hpp>
#include <retexo/kernels/dense.hpp>
#include <retexo/nn/layers.hpp>

#include <functional>

namespace retexo::nn {

/// Two column blocks of a stage's input of one width: a node's own input and its neighbours'
/// mean (GraphSAGE), at these first columns.
struct input_pair {
    int self = 0;
    int neighbours = 0;
    int width = 0;
};

/// The shape of a stage model.
struct stage_spec {
    int stage = 0; ///< k: names "stage<k>.*", initialisation and dropout streams
    layer_kind kind = layer_kind::gcn;
    bool graph = false; ///< a graph layer (aggregating every round), else dense
    int in = 0;         ///< width of an input row
    int hidden = 0;     ///< width of the hidden embedding (stages with a head)
    int classes = 0;
    bool head = true;       ///< transform -> [LayerNorm] -> ReLU -> head; else the transform gives the logits
    bool layer_norm = true; ///< LayerNorm before the ReLU
    int heads = 8;          ///< GAT attention heads
    /// Dense stages: for each pair, the transform's weights of the neighbours' block are those
    /// of the node's own block plus an offset (W_n = W_s + D), and the parameters are W_s and
    /// D: weight decay pulls a node's and its neighbours' weights together instead of both
    /// toward zero.  The same functions as independent W_s and W_n, another regulariser.
    std::vector<input_pair> offset_pairs;
    double dropout = 0;
    std::uint64_t seed = 42;
    /// Cross-fitting: which of the stage's fold models this is ("stage<k>.fold<f>.*", its own
    /// dropout masks, the same initial weights as the others); -1: the stage's only model.
    int fold = -1;
    /// GAT passes (but exact mode's training passes, which need every message): aggregate the
    /// inputs first (true), transform the rows read first (false), or whichever costs less
    /// (unset; gnn_layer::aggregates_inputs_first).
    std::optional<bool> inputs_first;
};

/// Activations of one pass over a set of rows; reused round after round (fresh large
/// allocations cost page faults).
struct stage_pass {
    std::vector<node_t> rows;         ///< the output rows (set by the caller)
    const layer_plan* plan = nullptr; ///< graph stages: a plan over rows (set by the caller)
    std::vector<node_t> ids;          ///< global ids of rows (dropout keys)
    node_features x_rows;             ///< the rows' (dropped-out) inputs, stored as the inputs are
    node_features x_all;              ///< graph stages: every local row's input (or the plan's support's)
    matrix_f msg;                     ///< graph stages: every local row's message (read: the support's)
    /// GAT passes compute the messages of the plan's support only (layer_plan::support), in
    /// its order, unless every_message: exact mode's training passes, whose owned rows take
    /// message gradients from other ranks' halo rows.
    bool every_message = false;
    matrix_f msg_support, d_msg_support; ///< the support's messages and their gradients, in its order
    /// GAT passes may aggregate their inputs first (stage_spec::inputs_first).
    bool used_inputs_first = false;       ///< the order forward() took (backward() takes the same)
    matrix_f x_dense;                     ///< ... x_all, dense, when it is stored otherwise
    std::vector<node_t> support_ids;      ///< the support's global ids (dropout keys)
    const void* undropped_from = nullptr; ///< x_rows (x_all) hold these inputs' rows, no dropout
    std::vector<node_t> undropped_rows;   ///< ... at these rows
    matrix_f t, u, h, hd;                 ///< transform, LayerNorm, ReLU, dropout
    matrix_f logits;                      ///< rows x classes
    matrix_f d_logits, d_hd, d_t;         ///< gradients (d_logits set by the caller)
    layer_cache<float> cache;
};

/// Adds the halo rows' message gradients into their owners' rows (exact mode, graph
/// stages): d_msg holds num_local rows of `width` fixed-point values.  The trainer's halo
/// exchange.
using halo_gradient_fn = std::function<void(std::int64_t* d_msg, int width)>;

class stage_model {
public:
    explicit stage_model(const stage_spec& spec);

    const stage_spec& spec() const noexcept { return spec_; }
    std::vector<parameter<float>*> parameters();
    /// Graph stages: the layer's plan over rows of g.
    layer_plan make_plan(const local_graph& g, std::span<const node_t> rows) const;

    /// p.logits (and the hidden embedding p.h) of p.rows.  x: every owned row's input
    /// (dense), or every local row's (graph), as dense rows, sparse rows or column blocks; local_ids: the global
    /// id of every local row.  Training draws the dropout masks of optimiser step `step`;
    /// otherwise no dropout.
    void forward(stage_pass& p, const node_features& x, std::span<const node_t> local_ids, bool training,
                 std::int64_t step);
    /// Parameter gradients from p.d_logits, after forward(p, ..., true, step).  Graph stages
    /// in exact mode call add_halo between the layer's two halves.
    void backward(stage_pass& p, std::int64_t step, const reduce_mode& mode, const halo_gradient_fn& add_halo);

private:
    /// The transform of forward() and backward() for dense (matrix_f), sparse or column-block inputs.
    template <typename X>
    void transform(stage_pass& p, const X& x, X& x_rows, X& x_all, std::span<const node_t> local_ids, double rate,
                   std::int64_t step);
    template <typename X>
    void transform_backward(stage_pass& p, const X& x_rows, const X& x_all, const reduce_mode& mode,
                            const halo_gradient_fn& add_halo);
    /// Whether the pass computes the messages of its plan's support only.
    static bool support_only(const stage_pass& p) { return !p.plan->support.empty() && !p.every_message; }
    dropout_key input_key(std::int64_t step) const;
    dropout_key hidden_key(std::int64_t step) const;
    std::uint64_t mask_stream(int which) const; ///< 0: input, 1: hidden
    /// The dense transform's weights as the pass multiplies them: W_s and W_s + D (offset_pairs).
    const matrix_f& transform_weights();
    /// The parameters' gradients from those of the weights multiplied (offset_pairs): d W_s
    /// += d W_n (in fixed point too; both are under 2^62, so their sum fits).
    void offset_gradients(const reduce_mode& mode);

    stage_spec spec_;
    std::optional<dense_layer<float>> dense_;
    std::optional<gnn_layer<float>> layer_;
    std::optional<layer_norm<float>> norm_;
    std::optional<dense_layer<float>> head_;
    matrix_f weights_; ///< transform_weights() (offset_pairs)
};

} // namespace retexo::nn

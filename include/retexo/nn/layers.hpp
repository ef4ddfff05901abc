#pragma once
/// @file layers.hpp
/// Graph layers shared by every trainer: GCN, GraphSAGE (mean and max-pool) and GAT.
///
/// A layer reads x_all, the input rows of every local node (owned rows first, then the halo
/// rows a trainer filled), and writes one output row per row of a plan (a set of owned
/// destination rows: all of them, or e.g. only the training nodes).  Its backward pass has
/// two phases so that trainers decide about communication:
///   backward_messages  gradients w.r.t. the per-source messages (x itself for GCN and
///                      SAGE-mean, the pooled projection for SAGE-pool, z and el for GAT)
///                      of every local row, halo rows included, plus the gradients of the
///                      parameters that only see plan rows;
///   (trainer)          optionally adds the halo rows' message gradients into their owners
///                      (halo_plan::reverse_add);
///   backward_finish    the remaining parameter gradients and the gradient w.r.t. the owned
///                      rows' inputs.
/// The layers never call MPI.

#include <retexo/graph/local_partition.hpp>
#include <retexo/kernels/aggregate.hpp>
#include <retexo/kernels/gat.hpp>
#include <retexo/kernels/linear.hpp>
#include <retexo/kernels/optim.hpp>
#include <retexo/nn/reduce.hpp>

#include <memory>
#include <optional>

namespace retexo::nn {

enum class layer_kind { gcn, sage_mean, sage_pool, gat };
/// gcn | sage (mean) | sage-pool | gat
layer_kind parse_layer_kind(const std::string& name);
std::string to_string(layer_kind k);

/// The graph a layer works on: owned rows first, then halo rows.
struct local_graph {
    const csr* in_edges = nullptr;          ///< owned rows; sources in [0, num_local)
    node_t num_owned = 0;
    node_t num_local = 0;
    std::span<const offset_t> in_degree;    ///< global in-degree of every local row
};

/// Local graph of a loaded partition (degrees: owned rows from the CSR, halo rows from the file).
local_graph make_local_graph(const local_partition& lp, std::vector<offset_t>& degree_storage);

struct layer_options {
    int heads = 8;              ///< gat
    bool concat = true;         ///< gat: concatenate heads (else average them)
    int pool_width = 0;         ///< sage-pool projection width (0: the input width)
    double negative_slope = 0.2;
};

/// The output rows of a layer and the kernel plans over them.
struct layer_plan {
    std::vector<node_t> rows;
    node_t num_owned = 0;
    node_t num_local = 0;
    std::optional<aggregation> agg;
    std::optional<gat_attention> att;
};

/// Activations kept between forward and backward.
template <typename T>
struct layer_cache {
    matrix<T> agg, cat, pre, p, el, er, alpha, d_score, att, d_er, d_self;
    std::vector<node_t> argmax;
    matrix<T> d_msg;                        ///< num_local x msg_width (fast mode)
    std::vector<std::int64_t> d_msg_exact;  ///< num_local x msg_width (exact mode)
    int msg_k = 0;
};

template <typename T>
class gnn_layer {
public:
    gnn_layer(layer_kind kind, int in, int out, const layer_options& o, std::uint64_t seed, std::uint64_t index);

    layer_kind kind() const noexcept { return kind_; }
    int in() const noexcept { return in_; }
    int out() const noexcept { return out_; }
    /// Width of one row of message gradients.
    int msg_width() const noexcept;
    /// True if parameters sit before the aggregation (SAGE-pool, GAT): their gradients need
    /// the message gradients of halo rows.
    bool params_before_aggregation() const noexcept
    {
        return kind_ == layer_kind::sage_pool || kind_ == layer_kind::gat;
    }
    std::vector<parameter<T>*> parameters();

    layer_plan make_plan(const local_graph& g, std::span<const node_t> rows) const;

    /// out (plan rows x out) from x_all (num_local x in).
    void forward(const layer_plan& plan, const matrix<T>& x_all, layer_cache<T>& c, matrix<T>& out) const;

    /// Phase 1.  need_input_grad: whether backward_finish will be asked for d_x.
    void backward_messages(const layer_plan& plan, const matrix<T>& x_all, layer_cache<T>& c,
                           const matrix<T>& d_out, bool need_input_grad, const reduce_mode& mode);

    /// Phase 2, using the message gradients of rows [0, param_rows) (num_owned after a
    /// reverse exchange, num_local when halo rows' gradients stay local).  d_x (owned rows x
    /// in), if given, receives the gradient w.r.t. the owned rows' inputs.
    void backward_finish(const layer_plan& plan, const matrix<T>& x_all, layer_cache<T>& c, node_t param_rows,
                         matrix<T>* d_x, const reduce_mode& mode);

    /// Whether phase 1 produced message gradients (false when neither d_x nor parameters
    /// before the aggregation need them).
    bool has_messages(bool need_input_grad) const noexcept { return need_input_grad || params_before_aggregation(); }

private:
    layer_kind kind_;
    int in_, out_;
    layer_options opt_;
    int heads_ = 1, head_dim_ = 0, pool_ = 0;
    parameter<T> w_, b_, w_pool_, b_pool_, a_l_, a_r_;
    std::optional<linear_kernel> lin_, lin_pool_;
};

/// A plain linear map with bias (MLP blocks of RETEXO's stage models).
template <typename T>
struct dense_layer {
    parameter<T> w, b;
    linear_kernel kernel;
    dense_layer(int in, int out, std::uint64_t seed, std::uint64_t index, const std::string& name);
    void forward(const matrix<T>& x, matrix<T>& y) const { kernel.forward(x, w.value, b.value, y); }
    /// Parameter gradients from (x, dy); dx if given.
    void backward(const matrix<T>& x, const matrix<T>& dy, matrix<T>* dx, const reduce_mode& mode);
};

/// LayerNorm with learnable gain and shift.
template <typename T>
struct layer_norm {
    parameter<T> gamma, beta;
    matrix<T> mean, rstd;
    double eps = 1e-5;
    explicit layer_norm(int width, const std::string& name);
    void forward(const matrix<T>& x, matrix<T>& y);
    void backward(const matrix<T>& x, const matrix<T>& dy, matrix<T>& dx, const reduce_mode& mode);
};

extern template class gnn_layer<float>;
extern template class gnn_layer<double>;
extern template struct dense_layer<float>;
extern template struct dense_layer<double>;
extern template struct layer_norm<float>;
extern template struct layer_norm<double>;

}  // namespace retexo::nn

#pragma once
/// @file layers.hpp
/// Graph layers shared by every trainer: GCN, GraphSAGE (mean and max-pool) and GAT, plus
/// the dense and LayerNorm blocks of RETEXO's stage models.  Layers never call MPI: local
/// rows are owned rows first, then halo rows, and trainers decide what crosses the network.

#include <retexo/core/names.hpp>
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
constexpr name_table<layer_kind, 5> names_of(layer_kind)
{
    return {"model",
            {{{layer_kind::gcn, "gcn"},
              {layer_kind::sage_mean, "sage"},
              {layer_kind::sage_mean, "sage-mean"},
              {layer_kind::sage_pool, "sage-pool"},
              {layer_kind::gat, "gat"}}}};
}

/// The graph a layer works on: owned rows first, then halo rows.
struct local_graph {
    const csr* in_edges = nullptr; ///< owned rows; sources in [0, num_local)
    node_t num_owned = 0;
    node_t num_local = 0;
    std::span<const offset_t> in_degree; ///< global in-degree of every local row
};

/// Local graph of a loaded partition (degrees: owned rows from the CSR, halo rows from the file).
local_graph make_local_graph(const local_partition& lp, std::vector<offset_t>& degree_storage);

struct layer_options {
    int heads = 8;      ///< gat
    bool concat = true; ///< gat: concatenate heads (else average them)
    int pool_width = 0; ///< sage-pool projection width (0: the input width, at most 512)
    double negative_slope = 0.2;
    /// A first layer on sparse inputs (GCN, SAGE-mean): their fraction of non-zeros and the
    /// graph's mean in-degree, from which the layer picks the cheaper order
    /// (sparse_input_transforms_first).  0: dense inputs, the narrower message goes first.
    double sparse_input_density = 0;
    double mean_in_degree = 0;
};

/// Whether a GCN / SAGE-mean layer whose inputs are sparse rows (density d, widths in -> out,
/// mean in-degree k) and need no gradient is cheaper transforming first (messages x W: sparse
/// x dense forward and weight gradient, then the out-wide aggregation forward and backward)
/// than aggregating first (the in-wide aggregation of the densified rows, then a dense GEMM
/// and its weight gradient).  Costs per row in dense multiply-adds at sgemm speed, with the
/// rates perf/bench_kernels measures here: a sparse multiply-add about 10 (measured when the
/// sparse kernel ran at ~0.1 x sgemm; at today's 0.2-0.3 x the rule leans to the dense
/// order), an aggregated element about 25 (random-row gather
/// against sgemm):  transform first 20 d in out + 50 (k + 1) out,  aggregate first
/// 2 in out + 25 (k + 1) in.
bool sparse_input_transforms_first(int in, int out, double density, double mean_in_degree) noexcept;

/// The width of inputs x as dense columns of a GEMM: a sparse multiply-add costs about 10
/// dense ones (sparse_input_transforms_first), so sparse rows count 10 x density x columns.
double gemm_width(const matrix_f& x) noexcept;
double gemm_width(const csr_matrix& x) noexcept;
double gemm_width(const column_blocks& x) noexcept;

/// The output rows of a layer and the kernel plans over them.
struct layer_plan {
    std::vector<node_t> rows;
    node_t num_owned = 0;
    node_t num_local = 0;
    std::optional<aggregation> agg;
    std::optional<gat_attention> att;
    /// agg's output rows (indices) whose neighbours are all owned, and the others: the
    /// interior rows can be aggregated while the halo rows are in flight.
    std::vector<node_t> interior, boundary;
    /// GAT: the local rows whose messages combine reads (the rows and their in-neighbours),
    /// ascending, and each plan row's position among them.  A RETEXO stage computes only
    /// these rows' messages (nn/stage_model.hpp).  Empty for the other kinds, and when the
    /// support is every local row.
    std::vector<node_t> support, row_in_support;
    /// GAT with a support: the same attention with the support's positions as sources
    /// (gnn_layer::forward_inputs).
    std::optional<gat_attention> att_inputs;
};

/// Activations kept between forward and backward.
template <typename T>
struct layer_cache {
    // message phase (rows the message was computed for)
    matrix<T> pre; ///< sage-pool: x W_pool + b_pool
    // combine phase (plan rows)
    matrix<T> agg, er, alpha, d_score, att;
    matrix<T> el, y, d_y; ///< gat over inputs: the rows' el, the attention-weighted inputs, their gradient
    matrix<T> d_self;     ///< sage: the gradient of the self term's output (plan rows x out)
    std::vector<node_t> argmax;
    // message gradients, num_local x msg_width
    matrix<T> d_msg;                       ///< fast mode
    std::vector<std::int64_t> d_msg_exact; ///< exact mode (fixed point, scale 2^msg_k)
    int msg_k = 0;
};

/// A graph layer of any kind, split at the neighbour exchange:
///   message           per-row messages from input rows (what neighbours aggregate): x or
///                     x W (GCN / SAGE-mean, whichever is narrower), ReLU(x W_pool + b)
///                     (SAGE-pool), [z = x W | el = <z, a_l>] (GAT);
///   combine           output rows of a plan from the messages of every local row (halo
///                     rows included) and the plan rows' own inputs;
///   combine_backward  combine-side parameter gradients and the message gradients of every
///                     local row;
///   (trainer)         optionally adds halo rows' message gradients into their owners;
///   message_backward  message-side parameter gradients from the message gradients of a
///                     set of rows, and the input gradient of those rows.
/// The standard trainer computes messages of owned rows and exchanges them; RETEXO
/// computes messages of all local rows from cached inputs, with no traffic.  Each kind is
/// its own class in lib/nn/layers.cpp, with only its own parameters; this one holds one.
template <typename T>
class gnn_layer {
public:
    /// Parameters are named "<name>.<tensor>" (default name: "layer<index>"); index also
    /// selects the initialisation stream.
    gnn_layer(layer_kind kind, int in, int out, const layer_options& o, std::uint64_t seed, std::uint64_t index,
              const std::string& name = {});

    layer_kind kind() const noexcept { return kind_; }
    int in() const noexcept;
    int out() const noexcept;
    int msg_width() const noexcept;
    /// Whether message() is the identity (the input itself is exchanged).
    bool message_is_input() const noexcept;
    std::vector<parameter<T>*> parameters();

    layer_plan make_plan(const local_graph& g, std::span<const node_t> rows) const;

    /// msg (rows of x) from x (any rows).  Inputs (x, x_rows) are dense rows (matrix<T>) or,
    /// for float layers, sparse rows (csr_matrix: the first layer's bag-of-words features)
    /// or column blocks (a RETEXO stage's embeddings beside them).
    template <typename X>
    void message(const X& x, layer_cache<T>& c, matrix<T>& msg) const;
    /// The neighbour aggregation of some of the plan's output rows (indices into plan.rows)
    /// from msg_all (num_local x msg_width), for layers that aggregate (GCN, GraphSAGE; GAT
    /// attends in combine instead, so this does nothing).  Rows read halo rows of msg_all
    /// only when halo_ready, so plan.interior can be aggregated while the halo rows travel
    /// (overlap_rows); every plan row must be aggregated once before combine(..., true).
    void aggregate_rows(const layer_plan& plan, const matrix<T>& msg_all, layer_cache<T>& c,
                        std::span<const node_t> rows, bool halo_ready) const;
    /// out (plan rows x out) from msg_all (num_local x msg_width) and x_rows (the plan rows'
    /// inputs, in plan order; used by SAGE's self term); aggregated: aggregate_rows() has
    /// covered every plan row (the same result, bit for bit).
    template <typename X>
    void combine(const layer_plan& plan, const matrix<T>& msg_all, const X& x_rows, layer_cache<T>& c, matrix<T>& out,
                 bool aggregated = false) const;
    /// Parameter gradients of the combine phase and message gradients of every local row
    /// (c.d_msg, or c.d_msg_exact in exact mode), when need_messages.
    template <typename X>
    void combine_backward(const layer_plan& plan, const matrix<T>& msg_all, const X& x_rows, layer_cache<T>& c,
                          const matrix<T>& d_out, bool need_messages, const reduce_mode& mode);
    /// From the message gradients of rows [0, n) (n = x.rows()) and their inputs x: message
    /// parameter gradients, and d_x (n x in) if given.  msg holds the messages of those rows.
    template <typename X>
    void message_backward(const X& x, const matrix<T>& msg, layer_cache<T>& c, matrix<T>* d_x, const reduce_mode& mode);
    /// d_x (owned rows x in) += the gradient of the self term (SAGE) for the plan rows: formed
    /// here, so that a first layer, whose input gradient nobody needs, never multiplies it out.
    void add_self_gradient(const layer_plan& plan, const layer_cache<T>& c, matrix<T>& d_x) const;
    /// Whether message_backward has parameters to update (else it only forms d_x).
    bool has_message_params() const noexcept { return !message_is_input(); }
    /// Whether the backward pass reads the messages (msg_all, msg): GAT's attention vector.
    /// Otherwise a trainer may free them after combine, or lend their storage to c.d_msg.
    bool backward_reads_messages() const noexcept { return kind_ == layer_kind::gat; }

    /// GAT aggregating its inputs first: each head's attention-weighted sum of the support's
    /// input rows, then W's slice for the head (out_v[h] = (sum_u alpha_uv[h] x_u) W_h, the
    /// scores from x W a_l and x W a_r, which are x times an in x H matrix).  The same
    /// function as message() then combine() on the plan's support, with fewer multiply-adds
    /// when the plan rows times the heads are few against the support (aggregates_inputs_first).
    /// xs: dense, the inputs of plan.support's rows in its order, or of every local row where
    /// the support is empty (every row is read); only where no input gradient is needed (a
    /// RETEXO stage's pass).
    void forward_inputs(const layer_plan& plan, const matrix<T>& xs, layer_cache<T>& c, matrix<T>& out) const;
    /// The parameter gradients of forward_inputs (not exact mode).
    void backward_inputs(const layer_plan& plan, const matrix<T>& xs, layer_cache<T>& c, const matrix<T>& d_out,
                         const reduce_mode& mode);
    /// Whether forward_inputs costs less than transforming the rows the plan reads (GAT
    /// plans), whose inputs' width counts as transform_width dense columns in a GEMM
    /// (gemm_width: sparse columns count less); see layers.cpp for the counts.
    bool aggregates_inputs_first(const layer_plan& plan, double transform_width) const noexcept;

    gnn_layer(const gnn_layer&) = delete; // as its kernels
    gnn_layer& operator=(const gnn_layer&) = delete;
    gnn_layer(gnn_layer&&) noexcept;
    gnn_layer& operator=(gnn_layer&&) noexcept;
    ~gnn_layer();

private:
    struct impl; ///< the kind's own class (lib/nn/layers.cpp)
    layer_kind kind_;
    std::unique_ptr<impl> impl_;
};

/// A plain linear map with bias (MLP blocks of RETEXO's stage models).
template <typename T>
struct dense_layer {
    parameter<T> w, b;
    linear_kernel kernel;
    dense_layer(int in, int out, std::uint64_t seed, std::uint64_t index, const std::string& name);
    /// x: dense rows, or sparse rows or column blocks for float layers.
    template <typename X>
    void forward(const X& x, matrix<T>& y) const
    {
        kernel.forward(x, w.value, b.value, y);
    }
    /// Parameter gradients from (x, dy); dx if given.
    template <typename X>
    void backward(const X& x, const matrix<T>& dy, matrix<T>* dx, const reduce_mode& mode);
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

} // namespace retexo::nn

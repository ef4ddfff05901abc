#pragma once
/// @file aggregate.hpp
/// Neighbour aggregation over a CSR of in-edges: a plan built once per graph, aggregator
/// and set of destination rows, then applied forward and backward as often as needed.
///
///   sum   out_v = sum_{u in N(v)} x_u
///   mean  out_v = (1/|N(v)|) sum_{u in N(v)} x_u           (isolated: 0)
///   gcn   out_v = sum_{u in N(v) + v} x_u / sqrt(d_u d_v),  d = in-degree + 1 (global
///         degrees, so a partition computes exactly what the whole graph would)
///   max   out_v = max_{u in N(v)} x_u per feature, argmax recorded for the backward pass
///         (isolated: 0, argmax -1)
///
/// Rows of x are contiguous feature vectors; x may hold more rows than the CSR (halo rows
/// owned by other ranks).  Destination rows may be a subset.  Each output row is reduced by
/// one thread in the CSR's row order, and the backward pass gathers over the transposed
/// plan instead of scattering, so results are bit-identical for any thread count (no
/// floating-point atomics).  bf16 inputs are accumulated in float.

#include <retexo/core/names.hpp>
#include <retexo/graph/csr.hpp>
#include <retexo/kernels/common.hpp>
#include <retexo/kernels/exact.hpp>

#include <span>
#include <string>
#include <utility>
#include <vector>

namespace retexo {

enum class aggregator { sum, mean, gcn, max };

constexpr name_table<aggregator, 4> names_of(aggregator)
{
    return {
        "aggregator",
        {{{aggregator::sum, "sum"}, {aggregator::mean, "mean"}, {aggregator::gcn, "gcn"}, {aggregator::max, "max"}}}};
}

struct aggregation_options {
    aggregator kind = aggregator::sum;
    bool self_loops = false;             ///< add v -> v to every destination row (gcn: always)
    std::span<const offset_t> in_degree; ///< in-degree (no self loop) of every source row; gcn
                                         ///< only; empty: the CSR's own row degrees
    std::span<const node_t> rows;        ///< destination rows to produce; empty: every CSR row
    bool backward = true;                ///< false: forward only (no transposed plan is built,
                                         ///< saving about half the plan's memory)
};

/// The aggregation plan.
class aggregation {
public:
    /// @param g        in-edges; row v's sources index rows of x
    /// @param num_src  rows of x (>= every source id, >= g.num_rows() for self loops / gcn)
    /// @param options  the aggregator, self loops, in-degrees, destination rows, backward plan
    aggregation(const csr& g, node_t num_src, const aggregation_options& options);

    aggregator kind() const noexcept { return kind_; }
    node_t num_out() const noexcept { return plan_.num_rows(); }
    node_t num_src() const noexcept { return num_src_; }
    offset_t num_edges() const noexcept { return plan_.num_edges(); }
    /// The plan's CSR: row i = sources of output row i (self loop first when present).
    const csr& edges() const noexcept { return plan_; }
    /// Per-edge weights (sum: 1, mean: 1/deg, gcn: 1/sqrt(d_u d_v)); parallel to edges().
    std::span<const float> weights() const noexcept { return weight_; }
    /// CSR row each output row comes from.
    std::span<const node_t> out_rows() const noexcept { return rows_; }

    /// out (num_out x width) = aggregate of x (num_src x width).  max: argmax (num_out x
    /// width) receives the winning source row per feature (-1 for none).
    template <typename T, typename In>
    void forward(const In* x, int width, T* out, node_t* argmax = nullptr) const;

    /// forward() for the output rows in subset (indices in [0, num_out)) only: their rows of
    /// out (and argmax) are written, the others left as they are, and only their sources are
    /// read.  Input checks (check_numerics) cover x's rows [check_begin, check_end) alone,
    /// so rows still being received may be excluded.  With rows_within(), the rows whose
    /// sources are all owned can be aggregated while the halo rows are in flight.
    template <typename T, typename In>
    void forward_subset(const In* x, int width, T* out, node_t* argmax, std::span<const node_t> subset,
                        node_t check_begin, node_t check_end) const;
    /// Output rows (indices) whose sources are all below `limit`, and the others.
    std::pair<std::vector<node_t>, std::vector<node_t>> rows_within(node_t limit) const;

    /// d_x (num_src x width) = gradient w.r.t. x of <d_out, forward(x)>; overwritten.
    template <typename T>
    void backward(const T* d_out, int width, T* d_x, const node_t* argmax = nullptr) const;

    /// Exact mode: acc (num_src x width) += fixed-point contributions of the backward pass.
    void backward_exact(const float* d_out, int width, int k, std::int64_t* acc, const node_t* argmax = nullptr) const;

    /// Eigen forms with dimension checks (x: num_src rows; d_out: num_out rows).
    template <typename T, typename In>
    void forward(const matrix<In>& x, matrix<T>& out, std::vector<node_t>* argmax = nullptr) const
    {
        RETEXO_ENSURE_DIMS("aggregation::forward", "input rows", x.rows(), Eigen::Index{num_src_});
        out.resize(num_out(), x.cols());
        if (argmax != nullptr) argmax->resize(static_cast<std::size_t>(num_out()) * x.cols());
        forward(x.data(), static_cast<int>(x.cols()), out.data(), argmax != nullptr ? argmax->data() : nullptr);
    }
    template <typename T>
    void backward(const matrix<T>& d_out, matrix<T>& d_x, const std::vector<node_t>* argmax = nullptr) const
    {
        RETEXO_ENSURE_DIMS("aggregation::backward", "gradient rows", d_out.rows(), Eigen::Index{num_out()});
        RETEXO_ENSURE(argmax == nullptr || argmax->size() == static_cast<std::size_t>(d_out.size()),
                      "retexo::aggregation::backward: argmax does not match the gradient's shape");
        d_x.resize(num_src_, d_out.cols());
        backward(d_out.data(), static_cast<int>(d_out.cols()), d_x.data(),
                 argmax != nullptr ? argmax->data() : nullptr);
    }

    /// Largest |edge weight| (bounds for exact mode).
    float max_weight() const noexcept { return max_weight_; }

private:
    template <typename T, typename In>
    void forward_rows(const In* x, int width, T* out, node_t* argmax, std::span<const node_t> subset,
                      node_t check_begin, node_t check_end) const;

    aggregator kind_;
    node_t num_src_;
    std::vector<node_t> rows_;
    csr plan_;                  // output rows x sources
    std::vector<float> weight_; // per plan edge
    bool has_backward_;
    csr back_; // transpose: source rows x output rows
    std::vector<float> back_weight_;
    float max_weight_ = 0;
};

/// Plain sequential versions used as test oracles.
namespace reference {
template <typename T>
void aggregate_forward(const aggregation& plan, const T* x, int width, T* out, node_t* argmax = nullptr);
/// Scatter form of the backward pass (d_x overwritten).
template <typename T>
void aggregate_backward(const aggregation& plan, const T* d_out, int width, T* d_x, const node_t* argmax = nullptr);
} // namespace reference

} // namespace retexo

#include <retexo/kernels/aggregate_impl.hpp>

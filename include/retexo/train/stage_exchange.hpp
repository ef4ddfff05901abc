#pragma once
/// @file stage_exchange.hpp
/// The one exchange of a RETEXO stage's inputs: each rank's owned rows travel once to the
/// ranks that hold them as halo rows, and nothing else crosses the network for the stage
/// but gradient all-reduces.
///
/// Wire precision: fp32, bf16 (half the bytes) or int8 with a per-row scale (about a
/// quarter).  Below fp32 every row the stage reads is rounded alike, owned rows too, so the
/// result does not depend on which rows happen to be remote.
///
/// Stages that aggregate once (GCN, GraphSAGE-mean) take aggregate(): the rows travel in
/// blocks of columns if asked (the same bytes in more messages, halo rows one block wide in
/// memory; with int8 every block has its own per-row scales), and each block's interior rows
/// are aggregated while its halo rows are in flight (overlap_rows).  Stages that aggregate
/// every round (GraphSAGE-pool, GAT) take local_rows().

#include <retexo/comm/halo_plan.hpp>
#include <retexo/core/names.hpp>
#include <retexo/core/sparse.hpp>
#include <retexo/core/timer.hpp>
#include <retexo/kernels/aggregate.hpp>
#include <retexo/kernels/quantize.hpp>
#include <retexo/nn/layers.hpp>

#include <optional>

namespace retexo::train {

enum class wire_precision { fp32, bf16, int8 };
constexpr name_table<wire_precision, 3> names_of(wire_precision)
{
    return {"exchange precision",
            {{{wire_precision::fp32, "fp32"}, {wire_precision::bf16, "bf16"}, {wire_precision::int8, "int8"}}}};
}

/// The bytes and rounding of a precision on the wire (kernels/quantize.hpp).
constexpr wire_format format_of(wire_precision p) noexcept
{
    return {.value_bytes = p == wire_precision::fp32 ? 4 : (p == wire_precision::bf16 ? 2 : 1)};
}

struct stage_exchange_options {
    wire_precision precision = wire_precision::fp32;
    std::optional<int> columns; ///< aggregate(): send this many columns at a time (0 or unset: all at once)
    bool overlap = true;        ///< aggregate(): aggregate the interior rows while the halo rows travel
    purpose traffic = purpose::halo_forward; ///< what the rows' bytes are counted as
};

/// A stage's input exchange over a halo plan.  Collective calls, in the same order on every
/// rank.  Frees the plan's buffers when destroyed: the stage exchanges nothing more.
class stage_exchange {
public:
    stage_exchange(const halo_plan& halo, const stage_exchange_options& options, phase_timer& timer);
    ~stage_exchange();
    stage_exchange(const stage_exchange&) = delete;
    stage_exchange& operator=(const stage_exchange&) = delete;

    /// Every local row of h (h: the owned rows): owned rows, then halo rows.  The local rows
    /// listed in `zero` (inductive training: evaluation nodes) are zero.  Sparse h stays
    /// sparse.
    node_features local_rows(const node_features& h, std::span<const node_t> zero) const;
    /// Every local row of dense h into x, as T (float for fp32, bf16 below), the rows listed
    /// in `zero` zero; x's storage kept when its size is: for exchanges of one shape again and
    /// again (label spreading).
    template <typename T>
    void local_rows(const matrix_f& h, matrix<T>& x, std::span<const node_t> zero = {}) const;

    /// The aggregate of h over g's in-edges (kind gcn or mean) for every owned row.  Of
    /// sparse h, sparse while its density stays below sparse_density_limit.
    node_features aggregate(const node_features& h, const nn::local_graph& g, aggregator kind,
                            std::span<const node_t> zero) const;

private:
    template <typename T>
    matrix_f aggregate_as(const matrix_f& h, const nn::local_graph& g, aggregator kind,
                          std::span<const node_t> zero) const;
    matrix_f local_rows_dense(const matrix_f& h, std::span<const node_t> zero) const;
    csr_matrix aggregate_sparse_rows(const csr_matrix& h, const nn::local_graph& g, aggregator kind,
                                     std::span<const node_t> zero) const;
    /// The aggregate of the given owned rows of x (every local row, sparse).
    csr_matrix aggregate_rows(const csr_matrix& x, const nn::local_graph& g, aggregator kind,
                              std::span<const node_t> rows) const;
    /// Sparse rows travel as column ids and values unless dense rows take fewer bytes, summed
    /// over ranks (collective: every rank takes the same decision).
    bool sparse_wire_smaller(const csr_matrix& h) const;

    const halo_plan& halo_;
    stage_exchange_options o_;
    wire_format wire_; ///< of o_.precision: every byte count and rounding of the exchange
    phase_timer& timer_;
};

} // namespace retexo::train

#pragma once
/// @file csr.hpp
/// Compressed sparse rows of in-edges: row v lists the sources u of the edges u -> v.

#include <retexo/core/error.hpp>
#include <retexo/core/types.hpp>

#include <functional>
#include <span>
#include <utility>
#include <vector>

namespace retexo {

/// CSR of in-edges.  Row v holds sources[offsets[v] .. offsets[v+1]), ascending for a whole
/// graph (a partition's local rows keep ascending global order instead).
/// Column ids index a source array that may be larger than the number of rows (halo rows).
struct csr {
    std::vector<offset_t> offsets{0}; ///< num_rows + 1 entries, offsets[0] == 0
    std::vector<node_t> sources;      ///< num_edges source ids

    node_t num_rows() const noexcept { return static_cast<node_t>(offsets.size() - 1); }
    offset_t num_edges() const noexcept { return static_cast<offset_t>(sources.size()); }
    offset_t degree(node_t v) const noexcept { return offsets[v + 1] - offsets[v]; }
    std::span<const node_t> row(node_t v) const noexcept
    {
        return {sources.data() + offsets[v], static_cast<std::size_t>(degree(v))};
    }
};

/// One rank's contiguous share of a graph's in-edge CSR: rows [first_row, first_row +
/// in_edges.num_rows()) of a num_nodes-row graph, columns global ids.  Ranks hold consecutive
/// slices in rank order (row_slice gives the usual split).
struct csr_slice {
    node_t first_row = 0;
    node_t num_nodes = 0; ///< of the whole graph
    csr in_edges;
};

/// The rows [first, first + count) that rank r of p holds when n rows are split into
/// contiguous, nearly equal slices in rank order.
inline std::pair<node_t, node_t> row_slice(node_t n, int r, int p) noexcept
{
    const auto at = [&](int k) { return static_cast<node_t>(static_cast<std::int64_t>(n) * k / p); };
    return {at(r), at(r + 1) - at(r)};
}

/// An edge list entry u -> v.
struct edge {
    node_t src;
    node_t dst;
};

/// Options for building a CSR from an edge list.
struct csr_build_options {
    bool symmetrise = false;     ///< also insert v -> u for every u -> v
    bool drop_self_loops = true; ///< remove u -> u
    bool drop_duplicates = true; ///< keep one copy of repeated edges
};

/// Counts reported by build_csr.
struct csr_build_report {
    offset_t input_edges = 0;
    offset_t self_loops_dropped = 0;
    offset_t duplicates_dropped = 0;
};

/// Build the CSR of in-edges of an n-node graph from parallel src/dst arrays (counting sort,
/// O(n + E) memory beyond the output).  Throws if an id is outside [0, n).
csr build_csr(node_t num_nodes, std::span<const node_t> src, std::span<const node_t> dst,
              const csr_build_options& options = {}, csr_build_report* report = nullptr);

/// Receives one block of an edge list: parallel source and destination ids.
using edge_block_visitor = std::function<void(std::span<const node_t> src, std::span<const node_t> dst)>;

/// build_csr over an edge list too large to hold: produce(visit) must hand every edge to
/// visit, in blocks, and is called twice (counting, then filling), delivering the same edges
/// in the same order each time.  Memory is the output plus O(num_nodes); the result and the
/// report equal build_csr's on the concatenated blocks.
csr build_csr_streamed(node_t num_nodes, const std::function<void(const edge_block_visitor&)>& produce,
                       const csr_build_options& options = {}, csr_build_report* report = nullptr);

/// The transpose (out-edges as rows).  With a CSR whose columns range over num_cols ids,
/// the result has num_cols rows; each row lists destinations ascending.  If edge_of is given,
/// it receives for each entry of the result the index of the edge of `in` it came from.
csr transpose(const csr& in, node_t num_cols, std::vector<offset_t>* edge_of = nullptr);

/// `rows` if not empty, else every row 0 .. num_rows - 1.
std::vector<node_t> rows_or_all(std::span<const node_t> rows, node_t num_rows);

/// The in-edges of the given rows of g: row i of the result lists the sources of row rows[i]
/// in g's order.  With self_loops, a row without the edge v -> v gets it first.  Throws,
/// naming `who` (e.g. "retexo::aggregation"), if num_src is negative, a row is outside g, a
/// source is outside [0, num_src), or self loops are asked for with fewer sources than rows.
csr in_edges_of_rows(const csr& g, node_t num_src, std::span<const node_t> rows, bool self_loops, const char* who);

/// The rows [first, first + count) of g with offsets from 0: their offsets alone, or the rows
/// (a copy).  The range must lie within g.
std::vector<offset_t> row_range_offsets(const csr& g, node_t first, node_t count);
csr row_range(const csr& g, node_t first, node_t count);

/// Rows whose sources are all below `limit` (e.g. a partition's rows with only owned
/// in-neighbours), and the other rows, each ascending.
std::pair<std::vector<node_t>, std::vector<node_t>> split_rows_within(const csr& g, node_t limit);

/// Verify structure: monotone offsets, columns in [0, num_cols).  Throws naming `what`.
void validate_csr(const csr& g, node_t num_cols, const std::string& what);

} // namespace retexo

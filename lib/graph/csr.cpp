// The in-edge CSR: construction from edge lists, transposes, row splits.
#include <retexo/graph/csr.hpp>

#include <algorithm>

namespace retexo {

csr build_csr(node_t num_nodes, std::span<const node_t> src, std::span<const node_t> dst,
              const csr_build_options& options, csr_build_report* report)
{
    RETEXO_ENSURE(src.size() == dst.size(),
                  "retexo::build_csr: " << src.size() << " sources but " << dst.size() << " destinations");
    return build_csr_streamed(
        num_nodes, [&](const edge_block_visitor& visit) { visit(src, dst); }, options, report);
}

csr build_csr_streamed(node_t num_nodes, const std::function<void(const edge_block_visitor&)>& produce,
                       const csr_build_options& options, csr_build_report* report)
{
    RETEXO_ENSURE(num_nodes >= 0, "retexo::build_csr: negative node count " << num_nodes);
    const auto n = static_cast<std::size_t>(num_nodes);
    csr_build_report rep;

    // Pass 1: in-degrees (and out-degrees when symmetrising) after dropping self loops.
    std::vector<offset_t> count(n + 1, 0);
    std::size_t m = 0;
    produce([&](std::span<const node_t> src, std::span<const node_t> dst) {
        RETEXO_ENSURE(src.size() == dst.size(),
                      "retexo::build_csr: " << src.size() << " sources but " << dst.size() << " destinations");
        for (std::size_t i = 0; i < src.size(); ++i) {
            const node_t u = src[i];
            const node_t v = dst[i];
            RETEXO_ENSURE(u >= 0 && u < num_nodes && v >= 0 && v < num_nodes,
                          "edge " << m + i << " (" << u << " -> " << v << ") has a node id outside [0, " << num_nodes
                                  << ")");
            if (u == v && options.drop_self_loops) {
                ++rep.self_loops_dropped;
                continue;
            }
            ++count[v + 1];
            if (options.symmetrise && u != v) ++count[u + 1];
        }
        m += src.size();
    });
    rep.input_edges = static_cast<offset_t>(m);
    for (std::size_t i = 0; i < n; ++i)
        count[i + 1] += count[i];

    // Pass 2: place the sources of each row.
    std::vector<node_t> cols(static_cast<std::size_t>(count[n]));
    std::vector<offset_t> fill(count.begin(), count.end() - 1);
    std::size_t m2 = 0;
    produce([&](std::span<const node_t> src, std::span<const node_t> dst) {
        RETEXO_ENSURE(src.size() == dst.size() && m2 + src.size() <= m,
                      "retexo::build_csr: the edge list changed between its two passes");
        for (std::size_t i = 0; i < src.size(); ++i) {
            const node_t u = src[i];
            const node_t v = dst[i];
            RETEXO_ENSURE(u >= 0 && u < num_nodes && v >= 0 && v < num_nodes,
                          "retexo::build_csr: the edge list changed between its two passes");
            if (u == v && options.drop_self_loops) continue;
            RETEXO_ENSURE(fill[v] < count[v + 1] && (!options.symmetrise || u == v || fill[u] < count[u + 1]),
                          "retexo::build_csr: the edge list changed between its two passes");
            cols[fill[v]++] = u;
            if (options.symmetrise && u != v) cols[fill[u]++] = v;
        }
        m2 += src.size();
    });
    RETEXO_ENSURE(m2 == m, "retexo::build_csr: the edge list changed between its two passes");
    release(fill);

    // Sort each row; drop duplicates by compacting in place (row order is preserved).
    std::vector<offset_t> kept(n, 0);
#pragma omp parallel for schedule(dynamic, 4096)
    for (std::int64_t v = 0; v < static_cast<std::int64_t>(n); ++v) {
        auto* first = cols.data() + count[v];
        auto* last = cols.data() + count[v + 1];
        std::sort(first, last);
        kept[v] = options.drop_duplicates ? (std::unique(first, last) - first) : (last - first);
    }
    csr out;
    out.offsets.assign(n + 1, 0);
    offset_t write = 0;
    for (std::size_t v = 0; v < n; ++v) {
        const offset_t begin = count[v];
        if (write != begin) std::copy(cols.begin() + begin, cols.begin() + begin + kept[v], cols.begin() + write);
        write += kept[v];
        out.offsets[v + 1] = write;
    }
    rep.duplicates_dropped = count[n] - write;
    cols.resize(static_cast<std::size_t>(write));
    cols.shrink_to_fit();
    out.sources = std::move(cols);
    if (report != nullptr) *report = rep;
    return out;
}

csr transpose(const csr& in, node_t num_cols, std::vector<offset_t>* edge_of)
{
    const node_t rows = in.num_rows();
    csr out;
    out.offsets.assign(static_cast<std::size_t>(num_cols) + 1, 0);
    for (node_t c : in.sources)
        ++out.offsets[c + 1];
    for (node_t c = 0; c < num_cols; ++c)
        out.offsets[c + 1] += out.offsets[c];
    out.sources.resize(in.sources.size());
    if (edge_of != nullptr) edge_of->resize(in.sources.size());
    std::vector<offset_t> fill(out.offsets.begin(), out.offsets.end() - 1);
    // Rows visited ascending, so every output row is sorted.
    for (node_t v = 0; v < rows; ++v)
        for (offset_t e = in.offsets[v]; e < in.offsets[v + 1]; ++e) {
            const offset_t t = fill[in.sources[e]]++;
            out.sources[t] = v;
            if (edge_of != nullptr) (*edge_of)[t] = e;
        }
    return out;
}

std::vector<node_t> rows_or_all(std::span<const node_t> rows, node_t num_rows)
{
    if (!rows.empty()) return {rows.begin(), rows.end()};
    std::vector<node_t> all(static_cast<std::size_t>(num_rows));
    for (node_t v = 0; v < num_rows; ++v)
        all[v] = v;
    return all;
}

std::vector<offset_t> row_range_offsets(const csr& g, node_t first, node_t count)
{
    const auto& o = g.offsets;
    std::vector<offset_t> out(o.begin() + first, o.begin() + first + count + 1);
    for (auto& e : out)
        e -= o[first];
    return out;
}

csr row_range(const csr& g, node_t first, node_t count)
{
    csr out;
    out.offsets = row_range_offsets(g, first, count);
    out.sources.assign(g.sources.begin() + g.offsets[first], g.sources.begin() + g.offsets[first + count]);
    return out;
}

csr in_edges_of_rows(const csr& g, node_t num_src, std::span<const node_t> rows, bool self_loops, const char* who)
{
    const node_t rows_in = g.num_rows();
    RETEXO_ENSURE(num_src >= 0, who << ": negative source count " << num_src);
    RETEXO_ENSURE(!self_loops || num_src >= rows_in,
                  who << ": self loops need every destination row to be a source row (" << rows_in << " rows, "
                      << num_src << " sources)");
    const auto n_out = static_cast<node_t>(rows.size());
    csr plan;
    plan.offsets.assign(static_cast<std::size_t>(n_out) + 1, 0);
    for (node_t i = 0; i < n_out; ++i) {
        const node_t v = rows[i];
        RETEXO_ENSURE(v >= 0 && v < rows_in, who << ": destination row " << v << " outside [0, " << rows_in << ")");
        bool has_self = false;
        for (node_t u : g.row(v)) {
            RETEXO_ENSURE(u >= 0 && u < num_src, who << ": source id " << u << " outside [0, " << num_src << ")");
            has_self = has_self || u == v;
        }
        plan.offsets[i + 1] = plan.offsets[i] + g.degree(v) + (self_loops && !has_self ? 1 : 0);
    }
    plan.sources.resize(static_cast<std::size_t>(plan.offsets[n_out]));
    for (node_t i = 0; i < n_out; ++i) {
        const node_t v = rows[i];
        offset_t e = plan.offsets[i];
        if (plan.offsets[i + 1] - e > g.degree(v)) plan.sources[e++] = v;
        for (node_t u : g.row(v))
            plan.sources[e++] = u;
    }
    return plan;
}

std::pair<std::vector<node_t>, std::vector<node_t>> split_rows_within(const csr& g, node_t limit)
{
    std::pair<std::vector<node_t>, std::vector<node_t>> split;
    for (node_t v = 0; v < g.num_rows(); ++v) {
        const auto src = g.row(v);
        const bool inside = std::all_of(src.begin(), src.end(), [&](node_t u) { return u < limit; });
        (inside ? split.first : split.second).push_back(v);
    }
    return split;
}

void validate_csr(const csr& g, node_t num_cols, const std::string& what)
{
    RETEXO_ENSURE(!g.offsets.empty() && g.offsets.front() == 0, what << ": CSR offsets must start at 0");
    RETEXO_ENSURE(g.offsets.back() == g.num_edges(), what << ": CSR offsets end at " << g.offsets.back()
                                                          << " but there are " << g.num_edges() << " edges");
    for (std::size_t i = 0; i + 1 < g.offsets.size(); ++i)
        RETEXO_ENSURE(g.offsets[i] <= g.offsets[i + 1], what << ": CSR offsets decrease at row " << i);
    for (std::size_t e = 0; e < g.sources.size(); ++e)
        RETEXO_ENSURE(g.sources[e] >= 0 && g.sources[e] < num_cols, what << ": edge " << e << " has source id "
                                                                         << g.sources[e] << " outside [0, " << num_cols
                                                                         << ")");
}

} // namespace retexo

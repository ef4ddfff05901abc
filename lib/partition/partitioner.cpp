// Partitioners (random, METIS, blocks) and partition statistics.
#include <retexo/core/rng.hpp>
#include <retexo/graph/local_partition.hpp>
#include <retexo/partition/partitioner.hpp>

#include <metis.h>

#include <algorithm>
#include <iomanip>
#include <numeric>
#include <sstream>

namespace retexo {

std::vector<part_t> partition_random(node_t num_nodes, part_t parts, std::uint64_t seed)
{
    return partition_random_rows(num_nodes, parts, seed, 0, num_nodes);
}

std::vector<part_t> partition_random_rows(node_t num_nodes, part_t parts, std::uint64_t seed, node_t first,
                                          node_t count)
{
    RETEXO_ENSURE(parts >= 1, "number of partitions must be positive, got " << parts);
    RETEXO_ENSURE(first >= 0 && count >= 0 && static_cast<std::int64_t>(first) + count <= num_nodes,
                  "partition_random_rows: rows [" << first << ", " << static_cast<std::int64_t>(first) + count
                                                  << ") are not within the graph's " << num_nodes << " nodes");
    const counter_rng rng(seed, rng_stream::partition_random);
    const std::int64_t end = static_cast<std::int64_t>(first) + count;
    std::vector<part_t> a(static_cast<std::size_t>(count));
    std::vector<std::int32_t> perm;
    for (std::int64_t b = first / random_partition_block; b * random_partition_block < end; ++b) {
        const std::int64_t lo = b * random_partition_block;
        const std::int64_t hi = std::min<std::int64_t>(lo + random_partition_block, num_nodes);
        perm.resize(static_cast<std::size_t>(hi - lo));
        std::iota(perm.begin(), perm.end(), 0);
        seeded_shuffle(perm.begin(), perm.end(), rng, static_cast<std::uint64_t>(b) << 32);
        for (std::int64_t i = 0; i < hi - lo; ++i) {
            const std::int64_t v = lo + perm[static_cast<std::size_t>(i)];
            if (v >= first && v < end) a[static_cast<std::size_t>(v - first)] = static_cast<part_t>((lo + i) % parts);
        }
    }
    return a;
}

std::vector<part_t> partition_blocks(node_t num_nodes, part_t parts)
{
    RETEXO_ENSURE(parts >= 1, "number of partitions must be positive, got " << parts);
    std::vector<part_t> a(static_cast<std::size_t>(num_nodes));
    for (node_t v = 0; v < num_nodes; ++v)
        a[v] = static_cast<part_t>(static_cast<std::int64_t>(v) * parts / num_nodes);
    return a;
}

std::vector<part_t> partition_metis(const csr& in_edges, bool directed, part_t parts, metis_objective objective,
                                    std::uint64_t seed)
{
    RETEXO_ENSURE(parts >= 1, "number of partitions must be positive, got " << parts);
    const node_t n = in_edges.num_rows();
    if (parts == 1 || n == 0) return std::vector<part_t>(static_cast<std::size_t>(n), 0);
    // METIS wants a symmetric adjacency without self loops.
    csr sym;
    const csr* adj = &in_edges;
    if (directed) {
        std::vector<node_t> src, dst;
        src.reserve(in_edges.sources.size());
        dst.reserve(in_edges.sources.size());
        for (node_t v = 0; v < n; ++v)
            for (node_t u : in_edges.row(v)) {
                src.push_back(u);
                dst.push_back(v);
            }
        sym = build_csr(n, src, dst, {.symmetrise = true});
        adj = &sym;
    }
    RETEXO_ENSURE(adj->num_edges() < (offset_t{1} << 31) - 1,
                  "METIS: " << adj->num_edges()
                            << " adjacency entries overflow METIS's 32-bit idx_t; use --method random or blocks");
    std::vector<idx_t> xadj(static_cast<std::size_t>(n) + 1, 0);
    std::vector<idx_t> adjncy;
    adjncy.reserve(static_cast<std::size_t>(adj->num_edges()));
    for (node_t v = 0; v < n; ++v) {
        for (node_t u : adj->row(v))
            if (u != v) adjncy.push_back(u);
        xadj[v + 1] = static_cast<idx_t>(adjncy.size());
    }
    idx_t nvtxs = n, ncon = 1, nparts = parts, edgecut = 0;
    idx_t options[METIS_NOPTIONS];
    METIS_SetDefaultOptions(options);
    options[METIS_OPTION_OBJTYPE] = objective == metis_objective::vol ? METIS_OBJTYPE_VOL : METIS_OBJTYPE_CUT;
    options[METIS_OPTION_SEED] = static_cast<idx_t>(seed % 2147483647);
    options[METIS_OPTION_NUMBERING] = 0;
    std::vector<idx_t> part(static_cast<std::size_t>(n), 0);
    const int rc = METIS_PartGraphKway(&nvtxs, &ncon, xadj.data(), adjncy.data(), nullptr, nullptr, nullptr, &nparts,
                                       nullptr, nullptr, options, &edgecut, part.data());
    RETEXO_ENSURE(rc == METIS_OK, "METIS_PartGraphKway failed with status "
                                      << rc << (rc == METIS_ERROR_MEMORY ? " (out of memory)" : ""));
    return {part.begin(), part.end()};
}

void check_no_empty_part(std::span<const part_t> assignment, part_t parts)
{
    std::vector<node_t> count(static_cast<std::size_t>(parts), 0);
    for (part_t p : assignment)
        ++count[p];
    for (part_t p = 0; p < parts; ++p)
        RETEXO_ENSURE(count[p] > 0,
                      "partition " << p << " of " << parts << " is empty (more partitions than the graph supports?)");
}

partition_stats compute_partition_stats(const csr& in_edges, std::span<const split> membership,
                                        std::span<const part_t> assignment, part_t parts)
{
    partition_stats s;
    s.parts.resize(static_cast<std::size_t>(parts));
    const node_t n = in_edges.num_rows();
    // Halo: distinct (partition, remote node) pairs, counted part by part with a stamp per
    // node (the last part that counted it): the nodes in part order, then their in-edges.
    RETEXO_ENSURE(static_cast<node_t>(assignment.size()) == n, "retexo::compute_partition_stats: assignment has "
                                                                   << assignment.size() << " entries for " << n
                                                                   << " nodes");
    std::vector<node_t> start(static_cast<std::size_t>(parts) + 1, 0), order(static_cast<std::size_t>(n));
    for (node_t v = 0; v < n; ++v) {
        RETEXO_ENSURE(assignment[v] >= 0 && assignment[v] < parts, "retexo::compute_partition_stats: node "
                                                                       << v << " is in part " << assignment[v] << " of "
                                                                       << parts);
        ++start[assignment[v] + 1];
    }
    std::partial_sum(start.begin(), start.end(), start.begin());
    {
        auto next = start;
        for (node_t v = 0; v < n; ++v)
            order[next[assignment[v]]++] = v;
    }
    std::vector<part_t> stamp(static_cast<std::size_t>(n), -1);
    for (part_t p = 0; p < parts; ++p) {
        auto& ps = s.parts[p];
        for (node_t i = start[p]; i < start[p + 1]; ++i) {
            const node_t v = order[i];
            ++ps.owned;
            if (!membership.empty()) {
                ps.train += membership[v] == split::train;
                ps.valid += membership[v] == split::valid;
                ps.test += membership[v] == split::test;
            }
            ps.edges += in_edges.degree(v);
            for (node_t u : in_edges.row(v))
                if (assignment[u] != p) {
                    ++ps.cut_edges;
                    if (stamp[u] != p) {
                        stamp[u] = p;
                        ++ps.halo;
                    }
                }
        }
    }
    node_t max_owned = 0;
    for (part_t p = 0; p < parts; ++p) {
        s.total_halo += s.parts[p].halo;
        s.edge_cut += s.parts[p].cut_edges;
        max_owned = std::max(max_owned, s.parts[p].owned);
    }
    s.balance = n > 0 ? static_cast<double>(max_owned) * parts / n : 0.0;
    return s;
}

partition_stats compute_partition_stats(const graph& g, std::span<const part_t> assignment, part_t parts)
{
    const auto membership = split_membership(g.num_nodes(), g.train, g.valid, g.test);
    return compute_partition_stats(g.in_edges, membership, assignment, parts);
}

std::string format_partition_stats(const partition_stats& s, bool directed)
{
    std::ostringstream o;
    o << "part      nodes       halo      in-edges   cut-edges    train    valid     test\n";
    for (std::size_t p = 0; p < s.parts.size(); ++p) {
        const auto& q = s.parts[p];
        o << std::setw(4) << p << std::setw(11) << q.owned << std::setw(11) << q.halo << std::setw(14) << q.edges
          << std::setw(12) << q.cut_edges << std::setw(9) << q.train << std::setw(9) << q.valid << std::setw(9)
          << q.test << "\n";
    }
    offset_t total_edges = 0;
    for (const auto& q : s.parts)
        total_edges += q.edges;
    const double pct = total_edges > 0 ? 100.0 * static_cast<double>(s.edge_cut) / total_edges : 0.0;
    o << "edge cut: " << (directed ? s.edge_cut : s.edge_cut / 2)
      << (directed ? " directed edges" : " undirected edges") << " (" << std::fixed << std::setprecision(2) << pct
      << "% of edges); halo (replicated boundary) nodes: " << s.total_halo
      << "; balance (max/mean nodes): " << std::setprecision(3) << s.balance << "\n";
    return o.str();
}

} // namespace retexo

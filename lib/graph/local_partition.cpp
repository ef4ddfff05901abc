// A rank's partition cut from a whole graph: owned rows, halo rows, local CSR.
#include <retexo/core/hash.hpp>
#include <retexo/graph/local_partition.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>

namespace retexo {

partition_structure build_partition_structure(const csr& global, std::span<const part_t> assignment, part_t part)
{
    partition_structure s;
    const node_t n = global.num_rows();
    RETEXO_ENSURE(static_cast<node_t>(assignment.size()) == n, "retexo::build_partition_structure: assignment has "
                                                                   << assignment.size() << " entries for " << n
                                                                   << " nodes");
    for (node_t v = 0; v < n; ++v)
        if (assignment[v] == part) s.owned_global.push_back(v);
    // Halo: remote sources (each marked once), ordered by (owner, global id).
    std::vector<std::uint8_t> is_remote_source(static_cast<std::size_t>(n), 0);
    for (node_t v : s.owned_global)
        for (node_t u : global.row(v))
            if (assignment[u] != part) is_remote_source[u] = 1;
    std::vector<std::pair<part_t, node_t>> remote;
    for (node_t u = 0; u < n; ++u)
        if (is_remote_source[u] != 0) remote.emplace_back(assignment[u], u);
    std::sort(remote.begin(), remote.end());
    s.halo_owner.reserve(remote.size());
    s.halo_global.reserve(remote.size());
    s.halo_in_degree.reserve(remote.size());
    for (const auto& [p, u] : remote) {
        s.halo_owner.push_back(p);
        s.halo_global.push_back(u);
        s.halo_in_degree.push_back(global.degree(u));
    }
    // Local CSR: a node's local id is its position in owned_global, or n_own plus its
    // position in the halo's (owner, id) order; one lookup per edge in a map of every node.
    const node_t n_own = s.num_owned();
    std::vector<node_t> local_of(static_cast<std::size_t>(n));
    for (node_t i = 0; i < n_own; ++i)
        local_of[s.owned_global[i]] = i;
    for (std::size_t h = 0; h < remote.size(); ++h)
        local_of[remote[h].second] = n_own + static_cast<node_t>(h);
    s.in_edges.offsets.assign(static_cast<std::size_t>(n_own) + 1, 0);
    s.in_edges.sources.reserve(
        static_cast<std::size_t>(std::accumulate(s.owned_global.begin(), s.owned_global.end(), offset_t{0},
                                                 [&](offset_t acc, node_t v) { return acc + global.degree(v); })));
    // Rows keep the global CSR's order (ascending global source id), so a row is summed in
    // the same order on every partitioning: aggregation results do not depend on the split.
    for (node_t i = 0; i < n_own; ++i) {
        for (node_t u : global.row(s.owned_global[i]))
            s.in_edges.sources.push_back(local_of[u]);
        s.in_edges.offsets[i + 1] = static_cast<offset_t>(s.in_edges.sources.size());
    }
    return s;
}

std::vector<node_t> local_partition::nodes_in(split which) const
{
    std::vector<node_t> ids;
    for (node_t i = 0; i < num_owned(); ++i)
        if (membership[i] == which) ids.push_back(i);
    return ids;
}

local_partition extract_partition(const graph& g, std::span<const part_t> assignment, part_t num_parts, part_t part)
{
    RETEXO_ENSURE(num_parts >= 1 && part >= 0 && part < num_parts, g.name << ": part " << part << " of " << num_parts
                                                                          << " parts does not exist (parts are 0 to "
                                                                          << num_parts - 1 << ")");
    local_partition lp;
    static_cast<partition_structure&>(lp) = build_partition_structure(g.in_edges, assignment, part);
    lp.part = part;
    lp.num_parts = num_parts;
    lp.assignment_hash = assignment_hash(assignment, num_parts);
    lp.global = info_of(g);
    const auto member = split_membership(g.num_nodes(), g.train, g.valid, g.test);
    const node_t n_own = lp.num_owned();
    lp.features = g.features.select_rows(lp.owned_global);
    lp.labels.resize(static_cast<std::size_t>(n_own));
    lp.membership.resize(static_cast<std::size_t>(n_own));
    for (node_t i = 0; i < n_own; ++i) {
        const node_t v = lp.owned_global[i];
        lp.labels[i] = g.labels[v];
        lp.membership[i] = member[v];
    }
    return lp;
}

} // namespace retexo

// A rank's partition cut from a whole graph: owned rows, halo rows, local CSR.
#include <retexo/core/hash.hpp>
#include <retexo/graph/local_partition.hpp>

#include <algorithm>
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
    // Halo: remote sources, ordered by (owner, global id).
    std::vector<std::pair<part_t, node_t>> remote;
    for (node_t v : s.owned_global)
        for (node_t u : global.row(v))
            if (assignment[u] != part) remote.emplace_back(assignment[u], u);
    std::sort(remote.begin(), remote.end());
    remote.erase(std::unique(remote.begin(), remote.end()), remote.end());
    s.halo_owner.reserve(remote.size());
    s.halo_global.reserve(remote.size());
    s.halo_in_degree.reserve(remote.size());
    for (const auto& [p, u] : remote) {
        s.halo_owner.push_back(p);
        s.halo_global.push_back(u);
        s.halo_in_degree.push_back(global.degree(u));
    }
    // Local CSR: owned by binary search in owned_global, halo by search in (owner, id).
    const node_t n_own = s.num_owned();
    s.in_edges.offsets.assign(static_cast<std::size_t>(n_own) + 1, 0);
    s.in_edges.sources.reserve(
        static_cast<std::size_t>(std::accumulate(s.owned_global.begin(), s.owned_global.end(), offset_t{0},
                                                 [&](offset_t acc, node_t v) { return acc + global.degree(v); })));
    // Rows keep the global CSR's order (ascending global source id), so a row is summed in
    // the same order on every partitioning: aggregation results do not depend on the split.
    for (node_t i = 0; i < n_own; ++i) {
        for (node_t u : global.row(s.owned_global[i])) {
            node_t local;
            if (assignment[u] == part) {
                local = static_cast<node_t>(std::lower_bound(s.owned_global.begin(), s.owned_global.end(), u) -
                                            s.owned_global.begin());
            } else {
                local = n_own + static_cast<node_t>(
                                    std::lower_bound(remote.begin(), remote.end(), std::make_pair(assignment[u], u)) -
                                    remote.begin());
            }
            s.in_edges.sources.push_back(local);
        }
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

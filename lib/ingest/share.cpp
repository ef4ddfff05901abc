// The loading pipeline's collective steps: agreeing on the graph, moving nodes to their
// partitions, gathering each node's in-edges at its owner, and planning the halo.
#include <retexo/core/hash.hpp>
#include <retexo/ingest/share.hpp>

#include <algorithm>
#include <numeric>
#include <sstream>

namespace retexo {

namespace {

/// Indices 0..n-1 grouped by dest[i] (stable), and the size + 1 group offsets.
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> group_by(std::span<const part_t> dest, int parts)
{
    std::vector<std::int64_t> offsets(static_cast<std::size_t>(parts) + 1, 0);
    for (part_t d : dest)
        ++offsets[d + 1];
    for (int r = 0; r < parts; ++r)
        offsets[r + 1] += offsets[r];
    std::vector<std::int64_t> order(dest.size());
    auto next = offsets;
    for (std::size_t i = 0; i < dest.size(); ++i)
        order[next[dest[i]]++] = static_cast<std::int64_t>(i);
    return {std::move(order), std::move(offsets)};
}

/// Offsets of groups whose elements have the given widths (element i of order has width w[order[i]]).
std::vector<std::int64_t> widen(std::span<const std::int64_t> offsets, std::span<const std::int64_t> order,
                                const auto& width)
{
    std::vector<std::int64_t> out(offsets.size(), 0);
    for (std::size_t r = 0; r + 1 < offsets.size(); ++r) {
        std::int64_t w = 0;
        for (auto k = offsets[r]; k < offsets[r + 1]; ++k)
            w += width(order[k]);
        out[r + 1] = out[r] + w;
    }
    return out;
}

template <typename T>
std::vector<T> pick(std::span<const T> v, std::span<const std::int64_t> order)
{
    std::vector<T> out(order.size());
    for (std::size_t k = 0; k < order.size(); ++k)
        out[k] = v[order[k]];
    return out;
}

bool ascending(std::span<const node_t> v)
{
    return std::adjacent_find(v.begin(), v.end(), std::greater_equal<>()) == v.end();
}

/// Rows of g in `order`.
csr pick_rows(const csr& g, std::span<const std::int64_t> order)
{
    csr out;
    out.offsets.reserve(order.size() + 1);
    out.sources.reserve(g.sources.size());
    for (auto i : order) {
        const auto row = g.row(static_cast<node_t>(i));
        out.sources.insert(out.sources.end(), row.begin(), row.end());
        out.offsets.push_back(static_cast<offset_t>(out.sources.size()));
    }
    return out;
}

} // namespace

graph_info agree_on_graph(const mpi::communicator& comm, const node_share& mine)
{
    std::ostringstream err;
    const auto n = static_cast<std::size_t>(mine.size());
    if (static_cast<std::size_t>(mine.features.rows()) != n || mine.labels.size() != n || mine.membership.size() != n)
        err << mine.source << ": " << n << " nodes but " << mine.features.rows() << " feature rows, "
            << mine.labels.size() << " labels and " << mine.membership.size() << " split entries";
    else if (mine.info.num_classes <= 0 || mine.info.num_features < 0 || mine.features.cols() != mine.info.num_features)
        err << mine.source << ": " << mine.features.cols() << " feature columns for " << mine.info.num_features
            << " features, " << mine.info.num_classes << " classes";
    else
        for (std::size_t i = 0; i < n; ++i)
            if (mine.labels[i] < 0 || mine.labels[i] >= mine.info.num_classes) {
                err << mine.source << ": label " << mine.labels[i] << " of node " << mine.nodes[i] << " is outside 0.."
                    << mine.info.num_classes - 1;
                break;
            }
    comm.agree(err.str(), purpose::setup);

    fnv1a name;
    for (char c : mine.info.name)
        name.feed(static_cast<std::uint8_t>(c));
    const std::int64_t facts[4] = {mine.info.num_features, mine.info.num_classes, mine.info.directed ? 1 : 0,
                                   static_cast<std::int64_t>(name.value() >> 1)};
    const auto all = comm.allgatherv(std::span<const std::int64_t>(facts, 4), purpose::setup);
    constexpr const char* what[4] = {"features per node", "classes", "directed (1) / undirected (0)", "name hash"};
    comm.checked([&] { // the same check on every rank: an agreed error
        for (int r = 1; r < comm.size(); ++r)
            for (int k = 0; k < 4; ++k)
                RETEXO_ENSURE(all[static_cast<std::size_t>(r) * 4 + k] == all[k],
                              "the ranks' data disagree: rank "
                                  << r << " has " << all[static_cast<std::size_t>(r) * 4 + k] << " " << what[k]
                                  << " but rank 0 has " << all[k]);
    });
    graph_info info = mine.info;
    const auto total = comm.allreduce<std::int64_t>(mine.size(), MPI_SUM, purpose::setup);
    comm.checked([&] {
        RETEXO_ENSURE(total < (std::int64_t{1} << 31),
                      "the ranks hold " << total << " nodes in all; retexo's node ids are 32-bit (at most 2^31 - 1)");
    });
    info.num_nodes = static_cast<node_t>(total);
    return info;
}

node_share move_nodes(const mpi::communicator& comm, std::span<const node_t> nodes, csr in_edges,
                      std::span<const part_t> dest)
{
    RETEXO_ENSURE(dest.size() == nodes.size() && in_edges.num_rows() == static_cast<node_t>(nodes.size()),
                  "retexo::move_nodes: " << dest.size() << " destinations and " << in_edges.num_rows()
                                         << " in-edge rows for " << nodes.size() << " nodes");
    const auto [order, offsets] = group_by(dest, comm.size());
    node_share out;
    out.nodes = comm.exchange<node_t>(pick<node_t>(nodes, order), offsets, purpose::setup);
    const auto edge_offsets =
        widen(offsets, order, [&](std::int64_t i) { return in_edges.degree(static_cast<node_t>(i)); });
    csr rows = pick_rows(in_edges, order);
    release(in_edges); // at most two copies of the edges at once: the rows to send and those received
    std::vector<offset_t> degrees(order.size());
    for (std::size_t k = 0; k < order.size(); ++k)
        degrees[k] = rows.offsets[k + 1] - rows.offsets[k];
    const auto got_degrees = comm.exchange<offset_t>(degrees, offsets, purpose::setup);
    out.in_edges.sources = comm.exchange<node_t>(rows.sources, edge_offsets, purpose::setup);
    out.in_edges.offsets.resize(got_degrees.size() + 1);
    for (std::size_t i = 0; i < got_degrees.size(); ++i)
        out.in_edges.offsets[i + 1] = out.in_edges.offsets[i] + got_degrees[i];
    return out;
}

csr gather_in_edges(const mpi::communicator& comm, const node_directory& dir, std::span<const node_t> nodes,
                    std::span<const node_t> src, std::span<const node_t> dst, bool directed, const std::string& source)
{
    RETEXO_ENSURE(src.size() == dst.size(),
                  source << ": " << src.size() << " edge sources but " << dst.size() << " destinations");
    std::vector<node_t> own(nodes.begin(), nodes.end());
    std::sort(own.begin(), own.end());
    const auto is_own = [&](node_t v) { return std::binary_search(own.begin(), own.end(), v); };
    // Arcs (destination, source): each edge, and its reverse in an undirected graph.
    std::vector<node_t> arc_dst, arc_src;
    arc_dst.reserve(src.size() * (directed ? 1 : 2));
    arc_src.reserve(arc_dst.capacity());
    std::ostringstream err;
    for (std::size_t e = 0; e < src.size(); ++e) {
        if (err.str().empty() && !is_own(src[e]) && !is_own(dst[e]))
            err << source << ": edge " << src[e] << " -> " << dst[e]
                << " touches none of its own nodes (a shard lists the edges incident to the nodes it holds)";
        arc_dst.push_back(dst[e]);
        arc_src.push_back(src[e]);
        if (!directed) {
            arc_dst.push_back(src[e]);
            arc_src.push_back(dst[e]);
        }
    }
    comm.agree(err.str(), purpose::setup);
    // Each arc goes to the owner of its destination.
    std::vector<node_t> remote;
    for (node_t v : arc_dst)
        if (!is_own(v)) remote.push_back(v);
    std::sort(remote.begin(), remote.end());
    remote.erase(std::unique(remote.begin(), remote.end()), remote.end());
    const auto remote_owner = dir.owners(remote);
    std::vector<part_t> dest(arc_dst.size(), static_cast<part_t>(comm.rank()));
    for (std::size_t a = 0; a < arc_dst.size(); ++a)
        if (!is_own(arc_dst[a]))
            dest[a] = remote_owner[std::lower_bound(remote.begin(), remote.end(), arc_dst[a]) - remote.begin()];
    const auto [order, offsets] = group_by(dest, comm.size());
    std::vector<node_t> pairs(2 * order.size());
    for (std::size_t k = 0; k < order.size(); ++k) {
        pairs[2 * k] = arc_dst[order[k]];
        pairs[2 * k + 1] = arc_src[order[k]];
    }
    release(arc_dst);
    release(arc_src);
    std::vector<std::int64_t> pair_offsets(offsets.begin(), offsets.end());
    for (auto& o : pair_offsets)
        o *= 2;
    const auto got = comm.exchange<node_t>(pairs, pair_offsets, purpose::setup);
    release(pairs);
    std::vector<std::pair<node_t, node_t>> arcs(got.size() / 2);
    for (std::size_t k = 0; k < arcs.size(); ++k)
        arcs[k] = {got[2 * k], got[2 * k + 1]};
    std::sort(arcs.begin(), arcs.end());
    arcs.erase(std::unique(arcs.begin(), arcs.end()), arcs.end());
    // Rows in the order of `nodes`.
    std::vector<offset_t> degree_sorted(own.size() + 1, 0);
    for (const auto& [v, u] : arcs)
        ++degree_sorted[std::lower_bound(own.begin(), own.end(), v) - own.begin() + 1];
    for (std::size_t i = 0; i < own.size(); ++i)
        degree_sorted[i + 1] += degree_sorted[i];
    csr out;
    out.offsets.assign(nodes.size() + 1, 0);
    out.sources.reserve(arcs.size());
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        const auto at = std::lower_bound(own.begin(), own.end(), nodes[i]) - own.begin();
        for (auto k = degree_sorted[at]; k < degree_sorted[at + 1]; ++k)
            out.sources.push_back(arcs[k].second);
        out.offsets[i + 1] = static_cast<offset_t>(out.sources.size());
    }
    return out;
}

namespace {

/// Put the share's nodes in ascending global id order (and every per-node array with them),
/// each in-edge row ascending.
void sort_share(node_share& s)
{
    if (!ascending(s.nodes)) {
        std::vector<std::int64_t> order(s.nodes.size());
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](auto a, auto b) { return s.nodes[a] < s.nodes[b]; });
        std::vector<node_t> rows(order.begin(), order.end());
        s.nodes = pick<node_t>(s.nodes, order);
        s.labels = pick<std::int32_t>(s.labels, order);
        s.membership = pick<split>(s.membership, order);
        s.features = s.features.select_rows(rows);
        s.in_edges = pick_rows(s.in_edges, order);
    }
    for (node_t i = 0; i < s.size(); ++i) {
        auto* row = s.in_edges.sources.data() + s.in_edges.offsets[i];
        std::sort(row, row + s.in_edges.degree(i));
    }
}

} // namespace

local_partition assemble_partition(const mpi::communicator& comm, node_share share, node_directory& dir)
{
    std::ostringstream err;
    if (share.in_edges.num_rows() != share.size())
        err << share.source << ": in-edges of " << share.in_edges.num_rows() << " nodes for " << share.size()
            << " nodes";
    else if (share.size() == 0)
        err << share.source << ": holds no node (rank " << comm.rank() << " would have an empty partition)";
    comm.agree(err.str(), purpose::setup);
    sort_share(share);
    local_partition lp;
    lp.owned_global = std::move(share.nodes);
    const auto& own = lp.owned_global;
    const node_t n_own = lp.num_owned();
    const auto is_own = [&](node_t u) { return std::binary_search(own.begin(), own.end(), u); };

    // Each node's global in-degree goes to the directory; the halo asks for its nodes'.
    std::vector<offset_t> degree(static_cast<std::size_t>(n_own));
    for (node_t i = 0; i < n_own; ++i)
        degree[i] = share.in_edges.degree(i);
    dir.set_values(own, degree);
    std::vector<node_t> remote;
    for (node_t u : share.in_edges.sources)
        if (!is_own(u)) remote.push_back(u);
    std::sort(remote.begin(), remote.end());
    remote.erase(std::unique(remote.begin(), remote.end()), remote.end());
    const auto owner = dir.owners(remote);
    const auto remote_degree = dir.values(remote);

    // Halo ordered by (owner, global id); position of each remote id (ascending) in it.
    std::vector<std::int64_t> halo_order(remote.size());
    std::iota(halo_order.begin(), halo_order.end(), 0);
    std::sort(halo_order.begin(), halo_order.end(),
              [&](auto a, auto b) { return std::pair(owner[a], remote[a]) < std::pair(owner[b], remote[b]); });
    std::vector<node_t> halo_pos(remote.size());
    for (std::size_t h = 0; h < halo_order.size(); ++h) {
        halo_pos[halo_order[h]] = static_cast<node_t>(h);
        lp.halo_global.push_back(remote[halo_order[h]]);
        lp.halo_owner.push_back(owner[halo_order[h]]);
        lp.halo_in_degree.push_back(remote_degree[halo_order[h]]);
    }
    lp.in_edges.offsets = std::move(share.in_edges.offsets);
    lp.in_edges.sources = std::move(share.in_edges.sources);
    for (auto& u : lp.in_edges.sources)
        u = is_own(u) ? static_cast<node_t>(std::lower_bound(own.begin(), own.end(), u) - own.begin())
                      : n_own + halo_pos[std::lower_bound(remote.begin(), remote.end(), u) - remote.begin()];

    lp.part = static_cast<part_t>(comm.rank());
    lp.num_parts = static_cast<part_t>(comm.size());
    lp.assignment_hash = dir.assignment_hash();
    lp.global = share.info;
    lp.global.num_nodes = dir.num_nodes();
    lp.global.num_edges = comm.allreduce<std::int64_t>(lp.in_edges.num_edges(), MPI_SUM, purpose::setup);
    lp.features = std::move(share.features);
    lp.labels = std::move(share.labels);
    lp.membership = std::move(share.membership);
    return lp;
}

} // namespace retexo

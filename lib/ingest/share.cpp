// The loading pipeline's collective steps: agreeing on the graph, moving nodes to their
// partitions, gathering each node's in-edges at its owner, and planning the halo.
#include <retexo/core/hash.hpp>
#include <retexo/ingest/id_index.hpp>
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

namespace {

/// An arc as one sortable word: destination in the high half, source in the low half.
std::uint64_t arc_key(node_t dst, node_t src)
{
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(dst)) << 32) | static_cast<std::uint32_t>(src);
}
node_t arc_dst(std::uint64_t key)
{
    return static_cast<node_t>(key >> 32);
}
node_t arc_src(std::uint64_t key)
{
    return static_cast<node_t>(key & 0xffffffffU);
}

void sort_unique(std::vector<std::uint64_t>& v)
{
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
}

} // namespace

csr gather_in_edges(const mpi::communicator& comm, const node_directory& dir, std::span<const node_t> nodes,
                    std::vector<node_t> src, std::vector<node_t> dst, bool directed, const std::string& source)
{
    std::ostringstream err;
    // (The directory holds the nodes: in range.  Unsorted, they are an error below.)
    const id_index own(ascending(nodes) ? nodes : std::span<const node_t>{}, dir.num_nodes());
    // Which ends are this rank's own (one lookup each), and so how many arcs stay and leave:
    // the arrays below are reserved at their size, never regrown.
    std::vector<bool> own_src(src.size()), own_dst(dst.size());
    std::size_t n_local = 0, n_away = 0, n_extra = 0;
    if (!ascending(nodes))
        err << "retexo::gather_in_edges: the nodes must be ascending";
    else if (src.size() != dst.size())
        err << source << ": " << src.size() << " edge sources but " << dst.size() << " destinations";
    else
        for (std::size_t e = 0; e < src.size(); ++e) {
            own_src[e] = own.contains(src[e]);
            own_dst[e] = own.contains(dst[e]);
            n_local += own_dst[e] ? 1 : 0;
            n_away += (own_dst[e] ? 0 : 1) + (!directed && !own_src[e] ? 1 : 0);
            n_extra += !directed && own_src[e] && src[e] != dst[e] ? 1 : 0;
            if (err.str().empty() && !own_src[e] && !own_dst[e])
                err << source << ": edge " << src[e] << " -> " << dst[e]
                    << " touches none of its own nodes (a shard lists the edges incident to the nodes it holds)";
        }
    comm.agree(err.str(), purpose::setup);
    // Arcs into this rank's nodes stay here (self loops dropped, as retexo_convert drops them); the others (an
    // undirected edge's reverse, or a directed edge listed by its source's owner) go to their destination's owner, who
    // may have it already (an undirected edge listed by both owners): repeats are merged there.
    std::vector<std::uint64_t> local;
    local.reserve(n_local);
    for (std::size_t e = 0; e < src.size(); ++e)
        if (own_dst[e] && src[e] != dst[e]) local.push_back(arc_key(dst[e], src[e]));
    sort_unique(local);
    // Local reverses (the merge below keeps an arc listed twice once: sorting them with what
    // is received is faster than looking each up in `local`); arcs for other ranks.
    std::vector<std::uint64_t> extra, away;
    extra.reserve(n_extra);
    away.reserve(n_away);
    const auto add = [&](node_t d, bool own_d, node_t u) { (own_d ? extra : away).push_back(arc_key(d, u)); };
    for (std::size_t e = 0; e < src.size(); ++e) {
        if (!own_dst[e]) add(dst[e], false, src[e]);
        if (!directed && src[e] != dst[e]) add(src[e], own_src[e], dst[e]);
    }
    release(src);
    release(dst);
    release(own_src);
    release(own_dst);
    sort_unique(away);
    std::vector<node_t> remote;
    for (auto k : away)
        if (remote.empty() || remote.back() != arc_dst(k)) remote.push_back(arc_dst(k));
    const auto remote_owner = dir.owners(remote);
    std::vector<part_t> dest(away.size());
    for (std::size_t k = 0, r = 0; k < away.size(); ++k) {
        while (remote[r] != arc_dst(away[k]))
            ++r;
        dest[k] = remote_owner[r];
    }
    const auto [order, offsets] = group_by(dest, comm.size());
    auto received = comm.exchange<std::uint64_t>(pick<std::uint64_t>(away, order), offsets, purpose::setup);
    release(away);
    received.reserve(received.size() + extra.size());
    received.insert(received.end(), extra.begin(), extra.end());
    release(extra);
    sort_unique(received);
    // The in-edges of each node (ascending): the merge of the two sorted lists, repeats once.
    csr out;
    out.offsets.assign(nodes.size() + 1, 0);
    out.sources.reserve(local.size() + received.size());
    std::size_t i = 0, j = 0, row = 0;
    while (i < local.size() || j < received.size()) {
        const bool from_local = j == received.size() || (i < local.size() && local[i] <= received[j]);
        const auto k = from_local ? local[i] : received[j];
        if (from_local && j < received.size() && received[j] == k) ++j; // listed on both sides
        from_local ? ++i : ++j;
        while (row < nodes.size() && nodes[row] != arc_dst(k))
            out.offsets[++row] = static_cast<offset_t>(out.sources.size());
        RETEXO_ENSURE(row < nodes.size(), "internal: arc into node " << arc_dst(k) << " reached a rank not owning it");
        out.sources.push_back(arc_src(k));
    }
    while (row < nodes.size())
        out.offsets[++row] = static_cast<offset_t>(out.sources.size());
    return out;
}

void sort_by_id(node_share& s)
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
        if (s.in_edges.num_rows() == s.size()) s.in_edges = pick_rows(s.in_edges, order);
    }
    if (s.in_edges.num_rows() != s.size()) return;
    for (node_t i = 0; i < s.size(); ++i) {
        auto* row = s.in_edges.sources.data() + s.in_edges.offsets[i];
        std::sort(row, row + s.in_edges.degree(i));
    }
}

namespace {

/// Where an undirected graph's in-edges are not symmetric, as far as a rank can tell without
/// moving a byte more: each of its nodes and halo nodes is the source of no more edges into
/// its nodes than it has in-edges (in a symmetric graph every edge out of a node is one of
/// its in-edges).  `lp` has local ids.  Empty if none is found.
std::string asymmetry(const local_partition& lp, const std::string& source)
{
    if (lp.global.directed) return {};
    const node_t n_own = lp.num_owned();
    std::vector<offset_t> out(static_cast<std::size_t>(n_own + lp.num_halo()), 0);
    for (node_t u : lp.in_edges.sources)
        ++out[static_cast<std::size_t>(u)];
    for (std::size_t u = 0; u < out.size(); ++u) {
        const bool halo = static_cast<node_t>(u) >= n_own;
        const offset_t in =
            halo ? lp.halo_in_degree[u - static_cast<std::size_t>(n_own)] : lp.in_edges.degree(static_cast<node_t>(u));
        if (out[u] > in)
            return source + ": the graph is undirected, but node " +
                   std::to_string(halo ? lp.halo_global[u - static_cast<std::size_t>(n_own)] : lp.owned_global[u]) +
                   " has " + std::to_string(in) + " in-edges and is the source of " + std::to_string(out[u]) +
                   " edges into the nodes of rank " + std::to_string(lp.part);
    }
    return {};
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
    sort_by_id(share);
    local_partition lp;
    lp.owned_global = std::move(share.nodes);
    const auto& own = lp.owned_global;
    const node_t n_own = lp.num_owned();
    const id_index own_index(own, dir.num_nodes()); // (the directory holds these ids: in range)

    // Each node's global in-degree goes to the directory; the halo asks for its nodes'.
    std::vector<offset_t> degree(static_cast<std::size_t>(n_own));
    for (node_t i = 0; i < n_own; ++i)
        degree[i] = share.in_edges.degree(i);
    dir.set_values(own, degree);
    std::vector<node_t> remote;
    for (node_t u : share.in_edges.sources)
        if (!own_index.contains(u)) remote.push_back(u);
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
    const id_index remote_index(remote, dir.num_nodes()); // (each has an owner: in range)
    for (auto& u : lp.in_edges.sources)
        u = own_index.contains(u) ? own_index.position(u) : n_own + halo_pos[remote_index.position(u)];

    lp.part = static_cast<part_t>(comm.rank());
    lp.num_parts = static_cast<part_t>(comm.size());
    lp.assignment_hash = dir.assignment_hash();
    lp.global = share.info;
    lp.global.num_nodes = dir.num_nodes();
    lp.global.num_edges = comm.allreduce<std::int64_t>(lp.in_edges.num_edges(), MPI_SUM, purpose::setup);
    lp.features = std::move(share.features);
    lp.labels = std::move(share.labels);
    lp.membership = std::move(share.membership);
    comm.agree(asymmetry(lp, share.source), purpose::setup);
    return lp;
}

} // namespace retexo

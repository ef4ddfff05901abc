// The loading pipeline's collective steps: agreeing on the graph, moving nodes to their
// partitions, gathering each node's in-edges at its owner, and planning the halo.
#include <retexo/core/hash.hpp>
#include <retexo/ingest/id_index.hpp>
#include <retexo/ingest/share.hpp>

#include <boost/sort/pdqsort/pdqsort.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <tuple>

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

row_source row_source::of(csr g)
{
    row_source s;
    s.offsets = g.offsets;
    s.rows = [held = std::make_shared<const csr>(std::move(g))](node_t first, node_t count) {
        return row_range(*held, first, count);
    };
    return s;
}

namespace {

/// Where the blocks of move_nodes start (and, last, the number of rows): consecutive rows with
/// at most `limit` in-edges, or one row with more.
std::vector<std::size_t> block_starts(std::span<const offset_t> offsets, offset_t limit)
{
    std::vector<std::size_t> starts{0};
    const std::size_t n = offsets.size() - 1;
    for (std::size_t i = 0; i < n; ++i)
        if (i > starts.back() && offsets[i + 1] - offsets[starts.back()] > limit) starts.push_back(i);
    starts.push_back(n);
    return starts;
}

/// One block of move_nodes: rows [b0, b1) read, checked against their offsets, and ordered by
/// destination, with the offsets of each destination's edges.
std::pair<std::vector<node_t>, std::vector<std::int64_t>> read_block(const mpi::communicator& comm,
                                                                     const row_source& in_edges,
                                                                     std::span<const part_t> dest, std::size_t b0,
                                                                     std::size_t b1)
{
    csr block;
    comm.checked([&] {
        if (b1 == b0) return;
        block = in_edges.rows(static_cast<node_t>(b0), static_cast<node_t>(b1 - b0));
        bool same = block.num_rows() == static_cast<node_t>(b1 - b0);
        for (std::size_t i = 0; same && i < b1 - b0; ++i)
            same = block.degree(static_cast<node_t>(i)) == in_edges.offsets[b0 + i + 1] - in_edges.offsets[b0 + i];
        RETEXO_ENSURE(same, "retexo::move_nodes: rows " << b0 << ".." << b1
                                                        << " read do not have the in-degrees of their offsets");
    });
    const auto [order, offsets] = group_by(dest.subspan(b0, b1 - b0), comm.size());
    auto edge_offsets = widen(offsets, order, [&](std::int64_t i) { return block.degree(static_cast<node_t>(i)); });
    return {pick_rows(block, order).sources, std::move(edge_offsets)};
}

} // namespace

node_share move_nodes(const mpi::communicator& comm, std::span<const node_t> nodes, const row_source& in_edges,
                      std::span<const part_t> dest, offset_t block_edges)
{
    const auto n = nodes.size();
    RETEXO_ENSURE(dest.size() == n && in_edges.offsets.size() == n + 1 && block_edges > 0,
                  "retexo::move_nodes: " << dest.size() << " destinations and " << in_edges.offsets.size()
                                         << " in-edge offsets for " << n << " nodes, blocks of " << block_edges
                                         << " in-edges");
    const auto& offs = in_edges.offsets;
    node_share out;
    std::vector<std::int64_t> from; // where each sender's nodes start in out.nodes
    {
        const auto [order, offsets] = group_by(dest, comm.size());
        out.nodes = comm.exchange<node_t>(pick<node_t>(nodes, order), offsets, purpose::setup, &from);
        std::vector<offset_t> degrees(n);
        for (std::size_t k = 0; k < n; ++k)
            degrees[k] = offs[order[k] + 1] - offs[order[k]];
        const auto got = comm.exchange<offset_t>(degrees, offsets, purpose::setup);
        out.in_edges.offsets.resize(got.size() + 1);
        std::partial_sum(got.begin(), got.end(), out.in_edges.offsets.begin() + 1);
    }
    auto& rows = out.in_edges;
    rows.sources.resize(static_cast<std::size_t>(rows.offsets.back()));
    // Each sender's rows fill their place in turn: a block holds, for each destination, the
    // next of the rows the sender sends it, in the sender's order.
    std::vector<offset_t> next(static_cast<std::size_t>(comm.size()));
    for (int r = 0; r < comm.size(); ++r)
        next[r] = rows.offsets[from[r]];
    const auto starts = block_starts(offs, block_edges);
    std::string err;
    const auto blocks =
        comm.allreduce<std::int64_t>(static_cast<std::int64_t>(starts.size()) - 1, MPI_MAX, purpose::setup);
    for (std::int64_t b = 0; b < blocks; ++b) {
        const auto k = static_cast<std::size_t>(b);
        const std::size_t b0 = k + 1 < starts.size() ? starts[k] : n, b1 = k + 1 < starts.size() ? starts[k + 1] : n;
        const auto [send, send_offsets] = read_block(comm, in_edges, dest, b0, b1);
        std::vector<std::int64_t> got_from;
        const auto got = comm.exchange<node_t>(send, send_offsets, purpose::setup, &got_from);
        for (int r = 0; r < comm.size() && err.empty(); ++r) {
            const auto count = got_from[r + 1] - got_from[r];
            if (next[r] + count > rows.offsets[from[r + 1]])
                err = "more";
            else
                std::copy(got.begin() + got_from[r], got.begin() + got_from[r + 1], rows.sources.begin() + next[r]);
            next[r] += count;
        }
    }
    for (int r = 0; r < comm.size() && err.empty(); ++r)
        if (next[r] != rows.offsets[from[r + 1]]) err = "fewer";
    comm.agree(err.empty() ? err : "internal: retexo::move_nodes: a rank sent " + err + " in-edges than their degrees",
               purpose::setup);
    return out;
}

edge_blocks edge_blocks::of(std::span<const node_t> src, std::span<const node_t> dst)
{
    return {[src, dst](const visitor& visit) { visit(src, dst); }};
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

/// Set bit `id` of a bitmap.
void set_bit(std::vector<std::uint64_t>& bits, node_t id)
{
    bits[static_cast<std::size_t>(id) / 64] |= std::uint64_t{1} << (id % 64);
}

/// The ids of a bitmap's set bits, ascending.
std::vector<node_t> set_bits(std::span<const std::uint64_t> bits)
{
    std::vector<node_t> ids;
    for (std::size_t w = 0; w < bits.size(); ++w)
        for (auto word = bits[w]; word != 0; word &= word - 1)
            ids.push_back(static_cast<node_t>(w * 64 + static_cast<std::size_t>(std::countr_zero(word))));
    return ids;
}

/// The arcs that one rank's edge list gives, and where each goes: an edge u -> v is the arc into
/// v from u and, for an undirected graph, the arc into u from v; self loops give none (as
/// retexo_convert drops them).  Reading the edges again must give the same arcs.
class arc_reader {
public:
    arc_reader(const edge_blocks& edges, std::span<const node_t> nodes, node_t n, bool directed,
               const std::string& source)
        : edges_(edges), own_(nodes, n), n_(n), directed_(directed), source_(source)
    {
    }

    const id_index& own() const noexcept { return own_; }

    /// Call arc(to, from, ours, listed) for every arc (ours: `to` is one of the rank's nodes;
    /// listed: the arc as the edge is listed, u -> v, not its reverse).  The first edge that is
    /// not valid, or an exception of the edges' reader, ends it with its message (the edges
    /// are then left unread).
    template <typename F>
    std::string visit(F&& arc) const
    {
        return visit(arc, [] {});
    }

    /// As visit(arc), and block_read() after each block of edges (its exception ends it as
    /// the arcs' do).
    template <typename F, typename G>
    std::string visit(F&& arc, G&& block_read) const
    {
        std::ostringstream err;
        try {
            edges_.for_each([&](std::span<const node_t> src, std::span<const node_t> dst) {
                if (!err.str().empty()) return;
                if (src.size() != dst.size()) {
                    err << source_ << ": " << src.size() << " edge sources but " << dst.size() << " destinations";
                    return;
                }
                for (std::size_t e = 0; e < src.size(); ++e) {
                    const node_t u = src[e], v = dst[e];
                    if (u < 0 || u >= n_ || v < 0 || v >= n_) {
                        err << source_ << ": edge " << u << " -> " << v << ": node id " << (u < 0 || u >= n_ ? u : v)
                            << " is outside [0, " << n_ << "): no owner holds it";
                        return;
                    }
                    const bool own_u = own_.contains(u), own_v = own_.contains(v);
                    if (!own_u && !own_v) {
                        err << source_ << ": edge " << u << " -> " << v
                            << " touches none of its own nodes (a shard lists the edges incident to the nodes it "
                               "holds)";
                        return;
                    }
                    if (u == v) continue;
                    arc(v, u, own_v, true);
                    if (!directed_) arc(u, v, own_u, false);
                }
                block_read();
            });
        } catch (const std::exception& e) {
            if (err.str().empty()) err << e.what();
        }
        return err.str();
    }

private:
    const edge_blocks& edges_;
    id_index own_;
    node_t n_;
    bool directed_;
    const std::string& source_;
};

/// Sort each row of g and keep each source once (the storage keeps its capacity).
void merge_repeats(csr& g)
{
    offset_t kept = 0;
    for (std::size_t r = 0; r + 1 < g.offsets.size(); ++r) {
        const auto first = g.sources.begin() + g.offsets[r], last = g.sources.begin() + g.offsets[r + 1];
        std::sort(first, last);
        g.offsets[r] = kept;
        for (auto it = first; it != last; ++it)
            if (it == first || *it != *(it - 1)) g.sources[kept++] = *it;
    }
    g.offsets.back() = kept;
    g.sources.resize(static_cast<std::size_t>(kept));
}

std::string changed(const std::string& source)
{
    return source + ": the edges changed while they were read";
}
[[noreturn]] void changed_while_read(const std::string& source)
{
    RETEXO_THROW(changed(source));
}

/// Step 2 of gather_in_edges: the arcs into other ranks' nodes (marked in `remote_bits`,
/// `count` of them) go to their owners, who may have them already (an undirected edge listed
/// by both owners).  Keyed by (slot, source), where the slots number those nodes by (owner,
/// id), sorting groups them by owner and each group as arc_key does.  Returns the arcs
/// received and the error of reading the edges again (empty if none).
std::pair<std::vector<std::uint64_t>, std::string> send_away(const mpi::communicator& comm, const node_directory& dir,
                                                             const arc_reader& arcs,
                                                             std::vector<std::uint64_t> remote_bits, std::size_t count,
                                                             const std::string& source)
{
    const auto remote = set_bits(remote_bits);
    release(remote_bits);
    const auto owner = dir.owners(remote);
    auto [by_owner, owner_slots] = group_by(owner, comm.size());
    std::vector<node_t> slot(remote.size());
    for (std::size_t k = 0; k < by_owner.size(); ++k)
        slot[static_cast<std::size_t>(by_owner[k])] = static_cast<node_t>(k);
    const id_index remote_index(remote, dir.num_nodes());
    std::vector<std::uint64_t> away;
    away.reserve(count);
    auto err = arcs.visit([&](node_t to, node_t from, bool ours, bool) {
        if (ours) return;
        if (!remote_index.contains(to)) changed_while_read(source);
        away.push_back(arc_key(slot[static_cast<std::size_t>(remote_index.position(to))], from));
    });
    if (err.empty() && away.size() != count) err = changed(source);
    boost::sort::pdqsort(away.begin(), away.end()); // 3x std::sort's speed on these words
    away.erase(std::unique(away.begin(), away.end()), away.end());
    std::vector<std::int64_t> send_offsets(owner_slots.size(), 0);
    for (std::size_t r = 1; r < owner_slots.size(); ++r)
        send_offsets[r] =
            std::lower_bound(away.begin(), away.end(), arc_key(static_cast<node_t>(owner_slots[r]), 0)) - away.begin();
    for (auto& k : away)
        k = arc_key(remote[static_cast<std::size_t>(by_owner[static_cast<std::size_t>(arc_dst(k))])], arc_src(k));
    release(slot);
    release(by_owner);
    auto received = comm.exchange<std::uint64_t>(away, send_offsets, purpose::setup);
    const auto& own = arcs.own();
    for (auto k : received)
        RETEXO_ENSURE(own.contains(arc_dst(k)),
                      "internal: arc into node " << arc_dst(k) << " reached a rank not owning it");
    return {std::move(received), std::move(err)};
}

/// Arcs keyed as arc_key(row, source), gathered into batches and handed out each batch grouped
/// by blocks of rows (a counting sort on the row's high bits): cheaper than sorting, and near
/// enough to row order for the rows' memory to be read in order.
class row_batches {
public:
    explicit row_batches(std::size_t rows)
        : shift_(static_cast<unsigned>(std::max(0, static_cast<int>(std::bit_width(rows)) - block_bits)))
    {
        keys_.reserve(batch);
    }

    /// Add an arc; true when the batch is full (flush it then).
    bool add(std::uint64_t key)
    {
        keys_.push_back(key);
        return keys_.size() == batch;
    }

    /// Call f(key) for the batch's arcs, grouped by blocks of rows, and empty it.
    template <typename F>
    void flush(F&& f)
    {
        std::array<std::size_t, (1U << block_bits) + 1> start{};
        for (auto k : keys_)
            ++start[block(k) + 1];
        std::partial_sum(start.begin(), start.end(), start.begin());
        grouped_.resize(keys_.size());
        for (auto k : keys_)
            grouped_[start[block(k)]++] = k;
        keys_.clear();
        for (auto k : grouped_)
            f(k);
    }

private:
    static constexpr int block_bits = 10;                      // 1024 blocks of rows
    static constexpr std::size_t batch = std::size_t{1} << 20; // arcs: 8 MB of keys, twice

    std::size_t block(std::uint64_t key) const noexcept { return static_cast<std::size_t>(arc_dst(key)) >> shift_; }

    unsigned shift_;
    std::vector<std::uint64_t> keys_, grouped_;
};

/// Whether every arc in `rows` between two of the rank's nodes (`nodes`, ascending) has its
/// reverse there too, but for a chance of 2^-64: the sum of a hash, keyed afresh each call,
/// over those arcs equals its sum over their reverses.  One pass through the rows in order,
/// where an exact check would jump to another row for each arc.
bool own_arcs_symmetric(const csr& rows, std::span<const node_t> nodes, const id_index& own)
{
    std::random_device seed;
    const std::uint64_t key = (static_cast<std::uint64_t>(seed()) << 32) ^ seed();
    std::uint64_t arcs = 0, reverses = 0;
    for (std::size_t r = 0; r < nodes.size(); ++r)
        for (const node_t u : rows.row(static_cast<node_t>(r)))
            if (own.contains(u)) {
                arcs += splitmix64(key ^ arc_key(nodes[r], u));
                reverses += splitmix64(key ^ arc_key(u, nodes[r]));
            }
    return arcs == reverses;
}

/// Step 4 of gather_in_edges: add to `rows` (each sorted, each source once) the arcs into
/// this rank's nodes it lacks of those received and, unless `reverses_held`, of the reverses
/// of the edges listed (an undirected graph's), two readings of the edges: to count, to add.
/// Returns the error of reading them (empty if none).
std::string add_lacking(csr& rows, std::vector<std::uint64_t> received, const arc_reader& arcs, bool reverses_held,
                        const std::string& source)
{
    const auto& own = arcs.own();
    const auto row_of = [&](node_t v) { return static_cast<std::size_t>(own.position(v)); };
    const auto lacks = [&](const csr& g, std::size_t r, offset_t end, node_t from) {
        return !std::binary_search(g.sources.begin() + g.offsets[r], g.sources.begin() + end, from);
    };
    std::vector<offset_t> more(rows.offsets.size(), 0);
    for (auto k : received) {
        const auto r = row_of(arc_dst(k));
        if (lacks(rows, r, rows.offsets[r + 1], arc_src(k))) ++more[r + 1];
    }
    // The reverses come in the order of the edges, into rows all over the rank's nodes; each
    // batch (a block of edges at most) is put in the order of its rows' blocks first, so that
    // the rows searched one after another lie near each other in memory.
    const auto each_reverse = [&](const auto& f) {
        if (reverses_held) return std::string();
        row_batches batches(rows.offsets.size() - 1);
        const auto flush = [&] {
            batches.flush([&](std::uint64_t k) { f(static_cast<std::size_t>(arc_dst(k)), arc_src(k)); });
        };
        return arcs.visit(
            [&](node_t to, node_t from, bool ours, bool listed) {
                if (ours && !listed && batches.add(arc_key(static_cast<node_t>(row_of(to)), from))) flush();
            },
            flush);
    };
    auto err = each_reverse([&](std::size_t r, node_t from) {
        if (lacks(rows, r, rows.offsets[r + 1], from)) ++more[r + 1];
    });
    if (std::all_of(more.begin(), more.end(), [](offset_t m) { return m == 0; })) {
        release(received);
        rows.sources.shrink_to_fit();
        return err;
    }
    // Each row: the rows' own sources (searched), then the arcs it lacks (repeats merged after).
    csr all;
    all.offsets.resize(rows.offsets.size(), 0);
    for (std::size_t r = 0; r + 1 < rows.offsets.size(); ++r)
        all.offsets[r + 1] = all.offsets[r] + rows.offsets[r + 1] - rows.offsets[r] + more[r + 1];
    all.sources.resize(static_cast<std::size_t>(all.offsets.back()));
    auto next = all.offsets;
    for (std::size_t r = 0; r + 1 < rows.offsets.size(); ++r) {
        std::copy(rows.sources.begin() + rows.offsets[r], rows.sources.begin() + rows.offsets[r + 1],
                  all.sources.begin() + next[r]);
        next[r] += rows.offsets[r + 1] - rows.offsets[r];
    }
    release(rows.sources);
    const auto searched_end = next; // each row's own sources end here
    const auto add = [&](std::size_t r, node_t from) {
        if (!lacks(all, r, searched_end[r], from)) return;
        if (next[r] == all.offsets[r + 1]) changed_while_read(source);
        all.sources[static_cast<std::size_t>(next[r]++)] = from;
    };
    for (auto k : received)
        add(row_of(arc_dst(k)), arc_src(k));
    release(received);
    const auto add_err = each_reverse(add);
    merge_repeats(all);
    all.sources.shrink_to_fit();
    rows = std::move(all);
    return err.empty() ? add_err : err;
}

} // namespace

csr gather_in_edges(const mpi::communicator& comm, const node_directory& dir, std::span<const node_t> nodes,
                    const edge_blocks& edges, bool directed, const std::string& source)
{
    const node_t n = dir.num_nodes();
    const bool sorted = ascending(nodes);
    // (The directory holds the nodes: in range.  Unsorted, they are an error below.)
    const arc_reader arcs(edges, sorted ? nodes : std::span<const node_t>{}, n, directed, source);
    const auto& own = arcs.own();
    // 1. Check the edges; count the arcs as listed (u -> v: into v) into each of this rank's
    //    nodes; mark the other ranks' nodes that arcs go to.  And sum a hash, keyed alike on
    //    every rank, over the arcs listed into this rank's nodes from other ranks' nodes, less
    //    its sum over the arcs into other ranks' nodes (those to send).
    std::uint64_t key = 0;
    if (comm.rank() == 0) {
        std::random_device seed;
        key = (static_cast<std::uint64_t>(seed()) << 32) ^ seed();
    }
    comm.broadcast(std::span<std::uint64_t>(&key, 1), 0, purpose::setup);
    const auto hash = [key](node_t to, node_t from) { return splitmix64(key ^ arc_key(to, from)); };
    csr out;
    out.offsets.assign(nodes.size() + 1, 0);
    std::vector<std::uint64_t> remote_bits((static_cast<std::size_t>(n) + 63) / 64, 0);
    std::size_t n_away = 0, listed_away = 0;
    std::uint64_t unheld = 0; // (modulo 2^64)
    const auto err = !sorted ? std::string("retexo::gather_in_edges: the nodes must be ascending")
                             : arcs.visit([&](node_t to, node_t from, bool ours, bool listed) {
                                   if (!ours) {
                                       set_bit(remote_bits, to);
                                       ++n_away;
                                       if (listed) ++listed_away;
                                       unheld -= hash(to, from);
                                   } else if (listed) {
                                       ++out.offsets[static_cast<std::size_t>(own.position(to)) + 1];
                                       if (!own.contains(from)) unheld += hash(to, from);
                                   }
                               });
    comm.agree(err, purpose::setup);
    // 2. The arcs into other ranks' nodes go to their owners, unless each owner lists them
    //    already (the sums over all ranks cancel: the arcs to send are those listed into
    //    their owners' nodes, but for a chance of 2^-64), as where each shard lists every
    //    in-edge of its nodes (retexo_shard writes them so): then no arc crosses.
    const bool held = comm.allreduce(unheld, MPI_SUM, purpose::setup) == 0;
    std::vector<std::uint64_t> received;
    std::string late_err;
    if (held)
        release(remote_bits);
    else
        std::tie(received, late_err) = send_away(comm, dir, arcs, std::move(remote_bits), n_away, source);
    // 3. The rows of the arcs as listed, sorted, each source once.  Shards that list every
    //    in-edge of their nodes (retexo_shard writes them so) have every row complete here.
    std::partial_sum(out.offsets.begin(), out.offsets.end(), out.offsets.begin());
    out.sources.resize(static_cast<std::size_t>(out.offsets.back()));
    auto next = out.offsets;
    auto fill_err = arcs.visit([&](node_t to, node_t from, bool ours, bool listed) {
        if (!ours || !listed) return;
        const auto row = static_cast<std::size_t>(own.position(to));
        if (next[row] == out.offsets[row + 1]) changed_while_read(source);
        out.sources[static_cast<std::size_t>(next[row]++)] = from;
    });
    for (std::size_t r = 0; r < nodes.size() && fill_err.empty(); ++r)
        if (next[r] != out.offsets[r + 1]) fill_err = changed(source); // fewer arcs than counted
    release(next);
    merge_repeats(out);
    // 4. What the rows lack of the arcs received and of the listed edges' reverses.
    //    An undirected graph's shard that lists only arcs into its nodes, each pair of its
    //    own nodes both ways (as retexo_shard writes them), holds every reverse already.
    const bool reverses_held = directed || (listed_away == 0 && own_arcs_symmetric(out, nodes, own));
    const auto add_err = add_lacking(out, std::move(received), arcs, reverses_held, source);
    comm.agree(!late_err.empty() ? late_err : !fill_err.empty() ? fill_err : add_err, purpose::setup);
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
    // The distinct in-neighbours of other ranks, ascending: an N-bit map instead of sorting
    // every cut edge.  An id outside 0..N-1 goes on to the directory, which refuses it.
    std::vector<std::uint64_t> remote_bits((static_cast<std::size_t>(dir.num_nodes()) + 63) / 64, 0);
    std::vector<node_t> stray;
    for (node_t u : share.in_edges.sources)
        if (u < 0 || u >= dir.num_nodes())
            stray.push_back(u);
        else if (!own_index.contains(u))
            set_bit(remote_bits, u);
    auto remote = set_bits(remote_bits);
    release(remote_bits);
    remote.insert(remote.end(), stray.begin(), stray.end());
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

// Getting each rank its partition: every source of data through the pipeline of share.hpp.
#include <retexo/core/hash.hpp>
#include <retexo/ingest/load.hpp>
#include <retexo/ingest/owner_shard.hpp>
#include <retexo/io/assignment.hpp>
#include <retexo/io/graph_file.hpp>
#include <retexo/io/partition_files.hpp>
#include <retexo/partition/ptscotch.hpp>

#include <filesystem>
#include <functional>
#include <iomanip>
#include <memory>
#include <numeric>
#include <sstream>

namespace fs = std::filesystem;

namespace retexo {

csbm_options data_options::embedded_graph_options()
{
    csbm_options o;
    o.name = "embedded-csbm";
    o.nodes = 20000;
    o.classes = 8;
    o.features = 64;
    o.avg_degree = 12;
    o.homophily = 0.7;
    o.power_law = 2.5;
    o.feature_signal = 1.5;
    o.train_fraction = 0.1;
    o.valid_fraction = 0.1;
    o.test_fraction = 0.8;
    o.seed = 7;
    return o;
}

namespace {

/// A whole graph that any rank can read rows of: a graph file, or the embedded graph.
struct whole_graph {
    std::string source;
    graph_info info;
    std::function<csr(node_t first, node_t count)> rows; ///< in-edges of rows [first, first + count)
    /// The CSR offsets of rows [first, first + count), from 0
    std::function<std::vector<offset_t>(node_t first, node_t count)> offsets;
    std::function<csr()> all_rows;         ///< the whole CSR (for METIS)
    std::function<void(node_share&)> fill; ///< features, labels, splits of the share's nodes
    bool dense_features = false;           ///< fill reads features stored dense
};

whole_graph graph_in_file(const std::shared_ptr<const graph_file_reader>& reader, bool read_features)
{
    whole_graph g;
    g.source = reader->path();
    g.info = reader->info();
    g.dense_features = read_features && reader->storage() == feature_storage::dense;
    g.rows = [reader](node_t first, node_t count) { return reader->read_csr_rows(first, count); };
    g.offsets = [reader](node_t first, node_t count) { return reader->read_csr_offsets(first, count); };
    g.all_rows = [reader] { return reader->read_csr(); };
    g.fill = [reader, read_features](node_share& s) {
        const auto& ids = s.nodes;
        constexpr node_t block_rows = 1 << 20;
        for (std::size_t next = 0; next < ids.size();) { // labels, by blocks of rows
            const node_t row0 = ids[next];
            const node_t rows = std::min(block_rows, reader->info().num_nodes - row0);
            const auto block = reader->read_labels(row0, rows);
            for (; next < ids.size() && ids[next] < row0 + rows; ++next)
                s.labels.push_back(block[ids[next] - row0]);
        }
        // Every node has one owner, so the owners together find each id listed twice (in one
        // split or in two), as split_membership does for a whole graph.
        s.membership.assign(ids.size(), split::none);
        for (const auto& [which, name] :
             {std::pair{split::train, "train"}, {split::valid, "valid"}, {split::test, "test"}})
            for (node_t v : reader->read_split(name))
                if (const auto it = std::lower_bound(ids.begin(), ids.end(), v); it != ids.end() && *it == v) {
                    auto& m = s.membership[it - ids.begin()];
                    RETEXO_ENSURE(m == split::none, reader->path() << ": " << name << " split: node " << v
                                                                   << " is already in another split");
                    m = which;
                }
        if (read_features) s.features = reader->read_feature_rows(ids);
    };
    return g;
}

whole_graph graph_in_memory(const std::shared_ptr<const graph>& whole)
{
    whole_graph g;
    g.source = whole->name;
    g.info = info_of(*whole);
    g.rows = [whole](node_t first, node_t count) {
        std::vector<node_t> rows(static_cast<std::size_t>(count));
        std::iota(rows.begin(), rows.end(), first);
        return in_edges_of_rows(whole->in_edges, whole->num_nodes(), rows, false, "retexo::load_rank_partition");
    };
    g.offsets = [whole](node_t first, node_t count) { return row_range_offsets(whole->in_edges, first, count); };
    g.all_rows = [whole] { return whole->in_edges; };
    g.fill = [whole](node_share& s) {
        const auto member = split_membership(whole->num_nodes(), whole->train, whole->valid, whole->test);
        for (node_t v : s.nodes) {
            s.labels.push_back(whole->labels[v]);
            s.membership.push_back(member[v]);
        }
        s.features = whole->features.select_rows(s.nodes);
    };
    return g;
}

/// The partitions of the rows [first, first + count) of g under the --partition rule.
std::vector<part_t> slice_assignment(const whole_graph& g, node_t first, node_t count, const data_options& o,
                                     part_t parts)
{
    const node_t n = g.info.num_nodes;
    const auto slice = [&](std::vector<part_t> a) {
        return std::vector<part_t>(a.begin() + first, a.begin() + first + count);
    };
    if (o.partition == "random") return partition_random_rows(n, parts, o.seed, first, count);
    if (o.partition == "metis")
        return slice(partition_metis(g.all_rows(), g.info.directed, parts, o.objective, o.seed));
    if (o.partition == "blocks") {
        std::vector<part_t> a(static_cast<std::size_t>(count));
        for (node_t i = 0; i < count; ++i)
            a[i] = static_cast<part_t>(static_cast<std::int64_t>(first + i) * parts / n);
        return a;
    }
    RETEXO_ENSURE(fs::exists(o.partition), "--partition: '"
                                               << o.partition
                                               << "' is neither random, metis, scotch, blocks nor an existing "
                                                  "assignment file");
    return read_assignment(o.partition, n, parts, first, count);
}

/// The pipeline for a whole graph: read my slice of rows, partition it, send each row's
/// structure to its partition, read my nodes' data, plan the halo.
local_partition partition_whole_graph(const mpi::communicator& comm, const whole_graph& g, const data_options& o)
{
    const part_t parts = comm.size();
    const node_t n = g.info.num_nodes;
    {
        // What a rank holds at least: its share of the in-edges (4 bytes each) and of the
        // dense feature values (4 bytes each); METIS reads the whole CSR on every rank.
        const double E = static_cast<double>(g.info.num_edges), N = n, F = g.info.num_features;
        const double need =
            (4 * E + (g.dense_features ? 4 * N * F : 0)) / parts + (o.partition == "metis" ? 4 * E + 8 * N : 0);
        std::ostringstream what;
        what << g.source << ": loading its " << n << " nodes and " << g.info.num_edges << " in-edges";
        if (g.dense_features) what << " with " << g.info.num_features << " dense features each";
        what << " on " << parts << " rank(s) (--partition " << o.partition << ")";
        mpi::ensure_memory(comm, need, what.str());
    }
    // Not a structured binding: clang 14 (the fuzz build) cannot capture those in the lambdas below.
    const std::pair<node_t, node_t> my_rows = row_slice(n, comm.rank(), parts);
    const node_t first = my_rows.first, count = my_rows.second;
    row_source rows; // read block by block as they move, but for PT-Scotch, which holds them
    std::vector<part_t> a;
    comm.checked([&] {
        if (o.partition == "scotch") return;
        rows.offsets = g.offsets(first, count);
        rows.rows = [&g, first](node_t f, node_t c) { return g.rows(first + f, c); };
        a = slice_assignment(g, first, count, o, parts);
    });
    if (o.partition == "scotch") { // collective: PT-Scotch over the slices
        csr_slice slice{first, n, {}};
        comm.checked([&] { slice.in_edges = g.rows(first, count); });
        a = partition_ptscotch(comm, slice, g.info.directed, parts, o.seed);
        rows = row_source::of(std::move(slice.in_edges));
    }
    std::vector<std::int64_t> sizes(static_cast<std::size_t>(parts), 0);
    for (part_t p : a)
        ++sizes[p];
    comm.allreduce(std::span<std::int64_t>(sizes), MPI_SUM, purpose::setup);
    comm.checked([&] {
        for (part_t p = 0; p < parts; ++p)
            RETEXO_ENSURE(sizes[p] > 0, "partition " << p << " of " << parts
                                                     << " is empty (more partitions than the graph supports?)");
    });
    node_directory dir(comm, n, a);
    std::vector<node_t> ids(static_cast<std::size_t>(count));
    std::iota(ids.begin(), ids.end(), first);
    auto share = move_nodes(comm, ids, rows, a);
    share.source = g.source;
    share.info = g.info;
    comm.checked([&] { g.fill(share); });
    return assemble_partition(comm, std::move(share), dir);
}

/// The pipeline for owner shards: rank r reads DIR/shard<r>.h5, the ranks register their
/// nodes in the directory and send each edge to its destination's owner, then plan the halo.
local_partition partition_from_owners(const mpi::communicator& comm, const std::string& dir_path)
{
    const auto path = owner_shard_path(dir_path, comm.rank());
    owner_shard_extent extent;
    comm.checked([&] {
        RETEXO_ENSURE(fs::exists(path), dir_path << ": not a partitioned directory (no manifest.json) and no owner "
                                                    "shard for rank "
                                                 << comm.rank() << ": " << path << " is missing (an owners directory "
                                                 << "holds shard0.h5 .. shard" << comm.size() - 1 << ".h5 for "
                                                 << comm.size() << " ranks)");
        const auto extra = owner_shard_path(dir_path, comm.size()); // every shard needs its rank
        RETEXO_ENSURE(comm.rank() != 0 || !fs::exists(extra), dir_path << ": holds " << extra
                                                                       << ", more shards than the job's " << comm.size()
                                                                       << " ranks (run one rank per shard)");
        extent = read_owner_shard_extent(path);
    });
    {
        // What the rank holds at least: its features (4 bytes a dense value) and, once in rows, an
        // arc (4 bytes) or a word sent away (8) for each edge its shard lists.
        const double need = 4.0 * static_cast<double>(extent.edges) +
                            (extent.dense ? 4.0 * static_cast<double>(extent.nodes) * extent.num_features : 0.0);
        std::ostringstream what;
        what << path << ": loading its " << extent.nodes << " nodes";
        if (extent.dense) what << " with " << extent.num_features << " dense features each";
        what << " and " << extent.edges << " edges";
        mpi::ensure_memory(comm, need, what.str());
    }
    node_share s;
    edge_blocks edges; // read from the file as gather_in_edges asks, never held whole
    comm.checked([&] {
        s = read_owner_shard_nodes(path);
        edges = read_owner_shard_edges(path);
    });
    const auto info = agree_on_graph(comm, s);
    node_directory dir(comm, info.num_nodes, s.nodes, path);
    sort_by_id(s);
    s.in_edges = gather_in_edges(comm, dir, s.nodes, edges, info.directed, path);
    s.info = info;
    return assemble_partition(comm, std::move(s), dir);
}

/// The part files' owned ids must partition the nodes (each part file checks its own ids
/// ascending and in range): the counts must sum to N, and a sum of the ids mixed by a hash
/// equal that of 0..N-1, which each rank computes for its slice of rows (collective, O(owned)).
void check_ownership(const mpi::communicator& comm, const local_partition& lp, const std::string& dir)
{
    const node_t n = lp.global.num_nodes;
    std::uint64_t sums[3] = {static_cast<std::uint64_t>(lp.num_owned()), 0, 0};
    for (node_t v : lp.owned_global)
        sums[1] += splitmix64(static_cast<std::uint64_t>(v));
    const auto [first, count] = row_slice(n, comm.rank(), comm.size());
    for (node_t v = first; v < first + count; ++v)
        sums[2] += splitmix64(static_cast<std::uint64_t>(v));
    comm.allreduce(std::span<std::uint64_t>(sums, 3), MPI_SUM, purpose::setup);
    // Every rank has the sums, so every rank throws the same (agreed) error.
    RETEXO_ENSURE_AGREED(
        sums[0] == static_cast<std::uint64_t>(n) && sums[1] == sums[2],
        dir << ": the part files' owned/global_ids do not partition the " << n << " nodes (" << sums[0]
            << " owned in all"
            << (sums[0] == static_cast<std::uint64_t>(n) ? ", but some node is owned twice and another by none" : "")
            << "): the part files were edited or do not belong together");
}

} // namespace

void normalize_rows(node_features& x)
{
    if (x.is_sparse()) {
        auto& s = x.sparse();
        for (std::int64_t i = 0; i < s.rows; ++i) {
            float sum = 0;
            for (float v : s.row_values(i))
                sum += std::fabs(v);
            if (sum > 0)
                for (offset_t e = s.offsets[i]; e < s.offsets[i + 1]; ++e)
                    s.values[e] /= sum;
        }
        return;
    }
    auto& d = x.dense();
    for (Eigen::Index i = 0; i < d.rows(); ++i) {
        const float sum = d.row(i).cwiseAbs().sum();
        if (sum > 0) d.row(i) /= sum;
    }
}

local_partition load_rank_partition(const mpi::communicator& comm, const data_options& o)
{
    const part_t parts = comm.size();
    local_partition lp;
    if (o.data.empty()) {
        lp = partition_whole_graph(comm, graph_in_memory(std::make_shared<const graph>(generate_csbm(o.embedded))), o);
    } else if (fs::is_directory(o.data) && !fs::exists(fs::path(o.data) / "manifest.json")) {
        lp = partition_from_owners(comm, o.data);
    } else if (fs::is_directory(o.data)) {
        comm.checked([&] {
            const auto m = read_manifest(o.data);
            RETEXO_ENSURE(m.num_parts == parts, o.data << ": holds " << m.num_parts << " partitions but the job has "
                                                       << parts
                                                       << " ranks (mpirun -np must equal the partition count)");
            lp = load_partition(o.data, comm.rank());
        });
        check_ownership(comm, lp, o.data);
    } else {
        std::shared_ptr<const graph_file_reader> reader;
        comm.checked([&] { reader = std::make_shared<const graph_file_reader>(o.data); });
        lp = partition_whole_graph(comm, graph_in_file(reader, o.read_features), o);
    }
    lp.source = o.data.empty() ? "the embedded graph" : o.data;
    if (o.normalize_features) normalize_rows(lp.features);
    // Every rank must hold a piece of the same assignment.
    const auto hashes = comm.allgather(lp.assignment_hash, purpose::setup);
    comm.checked([&] {
        for (int r = 0; r < parts; ++r)
            RETEXO_ENSURE(hashes[r] == hashes[0], "rank " << r << " loaded a partition with assignment hash "
                                                          << hash_to_hex(hashes[r]) << " but rank 0 has "
                                                          << hash_to_hex(hashes[0])
                                                          << ": the partition files do not belong together");
    });
    return lp;
}

partition_stats gather_partition_stats(const mpi::communicator& comm, const local_partition& lp)
{
    offset_t cut = 0;
    for (node_t c : lp.in_edges.sources)
        cut += c >= lp.num_owned() ? 1 : 0;
    const std::int64_t mine[7] = {lp.num_owned(),
                                  lp.num_halo(),
                                  lp.in_edges.num_edges(),
                                  cut,
                                  static_cast<std::int64_t>(lp.nodes_in(split::train).size()),
                                  static_cast<std::int64_t>(lp.nodes_in(split::valid).size()),
                                  static_cast<std::int64_t>(lp.nodes_in(split::test).size())};
    const auto all = comm.allgatherv(std::span<const std::int64_t>(mine, 7), purpose::setup);
    partition_stats s;
    node_t max_owned = 0;
    std::int64_t total_owned = 0;
    for (int r = 0; r < comm.size(); ++r) {
        const auto* v = all.data() + static_cast<std::size_t>(r) * 7;
        s.parts.push_back({static_cast<node_t>(v[0]), static_cast<node_t>(v[1]), v[2], v[3], static_cast<node_t>(v[4]),
                           static_cast<node_t>(v[5]), static_cast<node_t>(v[6])});
        s.edge_cut += v[3];
        s.total_halo += static_cast<node_t>(v[1]);
        max_owned = std::max(max_owned, static_cast<node_t>(v[0]));
        total_owned += v[0];
    }
    s.balance = total_owned > 0 ? static_cast<double>(max_owned) * comm.size() / static_cast<double>(total_owned) : 0.0;
    return s;
}

std::string gather_partition_table(const mpi::communicator& comm, const local_partition& lp)
{
    const auto s = gather_partition_stats(comm, lp);
    std::ostringstream o;
    o << "rank      nodes       halo      in-edges   cut-edges    train    valid     test\n";
    std::int64_t total[7] = {};
    const auto row = [&](const char* name, const std::int64_t(&v)[7]) {
        o << name;
        for (int k = 0; k < 7; ++k)
            o << std::setw(k == 2 ? 14 : k == 3 ? 12 : k >= 4 ? 9 : 11) << v[k];
        o << "\n";
    };
    for (int r = 0; r < comm.size(); ++r) {
        const auto& q = s.parts[r];
        const std::int64_t v[7] = {q.owned, q.halo, q.edges, q.cut_edges, q.train, q.valid, q.test};
        for (int k = 0; k < 7; ++k)
            total[k] += v[k];
        std::ostringstream name;
        name << std::setw(4) << r;
        row(name.str().c_str(), v);
    }
    row(" all", total);
    return o.str();
}

} // namespace retexo

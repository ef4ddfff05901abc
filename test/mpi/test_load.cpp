// MPI tests of loading partitions: every rank sees exactly its nodes and halo; errors are
// raised on every rank.
#include "support/test_support.hpp"

#include <retexo/core/hash.hpp>
#include <retexo/ingest/load.hpp>
#include <retexo/ingest/owner_shard.hpp>
#include <retexo/io/assignment.hpp>
#include <retexo/io/graph_file.hpp>
#include <retexo/io/ogb.hpp>
#include <retexo/io/partition_files.hpp>
#include <retexo/train/common.hpp>

#include <filesystem>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <set>

using namespace retexo;
namespace fs = std::filesystem;

namespace {

/// Check lp against the whole graph: owned set, halo = remote in-neighbours, local CSR.
void check_partition(const graph& g, const std::vector<part_t>& a, const local_partition& lp)
{
    const part_t me = lp.part;
    std::vector<node_t> owned;
    std::set<std::pair<part_t, node_t>> halo;
    for (node_t v = 0; v < g.num_nodes(); ++v) {
        if (a[v] != me) continue;
        owned.push_back(v);
        for (node_t u : g.in_edges.row(v))
            if (a[u] != me) halo.emplace(a[u], u);
    }
    CHECK(lp.owned_global == owned);
    std::vector<node_t> halo_ids;
    std::vector<part_t> halo_owner;
    for (const auto& [p, u] : halo) {
        halo_owner.push_back(p);
        halo_ids.push_back(u);
    }
    CHECK(lp.halo_global == halo_ids);
    CHECK(lp.halo_owner == halo_owner);
    const auto member = split_membership(g.num_nodes(), g.train, g.valid, g.test);
    CHECK(lp.features == g.features.select_rows(lp.owned_global)); // stored as the graph stores them
    bool rows_ok = true;
    for (node_t i = 0; i < lp.num_owned(); ++i) {
        const node_t v = lp.owned_global[i];
        rows_ok = rows_ok && lp.labels[i] == g.labels[v] && lp.membership[i] == member[v];
        std::vector<node_t> mapped;
        for (node_t c : lp.in_edges.row(i))
            mapped.push_back(c < lp.num_owned() ? lp.owned_global[c] : lp.halo_global[c - lp.num_owned()]);
        std::sort(mapped.begin(), mapped.end());
        const auto row = g.in_edges.row(v);
        rows_ok = rows_ok && std::vector<node_t>(row.begin(), row.end()) == mapped;
    }
    CHECK(rows_ok);
    for (node_t h = 0; h < lp.num_halo(); ++h)
        CHECK(lp.halo_in_degree[h] == g.in_edges.degree(lp.halo_global[h]));
}

} // namespace

TEST_CASE("every rank loads exactly its nodes and halo", "[mpi][load]")
{
    const mpi::communicator comm;
    test::shared_temp_dir tmp(comm);
    csbm_options o;
    o.nodes = 3000;
    o.features = 6;
    const graph g = generate_csbm(o);
    const auto a = partition_metis(g.in_edges, false, comm.size(), metis_objective::vol, 3);
    if (comm.rank() == 0) {
        write_graph(g, tmp / "g.h5");
        write_partitioned(tmp / "g.h5", a, {.method = partition_method::metis, .parts = comm.size()}, tmp / "parts");
        write_assignment(tmp / "a.txt", a);
    }
    comm.barrier();
    SECTION("from a partitioned directory")
    {
        const auto lp = load_rank_partition(comm, {.data = tmp / "parts"});
        CHECK(lp.part == comm.rank());
        CHECK(lp.assignment_hash == assignment_hash(a, comm.size()));
        check_partition(g, a, lp);
    }
    SECTION("from a graph file and a given assignment")
    {
        const auto lp = load_rank_partition(comm, {.data = tmp / "g.h5", .partition = tmp / "a.txt"});
        check_partition(g, a, lp);
    }
    SECTION("from a graph file, blocks and random computed slice by slice")
    {
        for (const std::string rule : {"blocks", "random"}) {
            const auto lp = load_rank_partition(comm, {.data = tmp / "g.h5", .partition = rule, .seed = 5});
            const auto b = rule == "blocks" ? partition_blocks(g.num_nodes(), comm.size())
                                            : partition_random(g.num_nodes(), comm.size(), 5);
            CHECK(lp.assignment_hash == assignment_hash(b, comm.size()));
            check_partition(g, b, lp);
        }
    }
    SECTION("from a graph file, PT-Scotch over the ranks' slices")
    {
        const auto lp = load_rank_partition(comm, {.data = tmp / "g.h5", .partition = "scotch", .seed = 5});
        // The assignment the ranks made together, from every rank's owned ids.
        const auto owned = comm.allgatherv(std::span<const node_t>(lp.owned_global), purpose::control);
        const auto counts = comm.allgather(lp.num_owned(), purpose::control);
        std::vector<part_t> b(static_cast<std::size_t>(g.num_nodes()), -1);
        std::size_t at = 0;
        for (part_t r = 0; r < comm.size(); ++r)
            for (node_t i = 0; i < counts[r]; ++i)
                b[owned[at++]] = r;
        CHECK(std::count(b.begin(), b.end(), -1) == 0);
        CHECK(lp.assignment_hash == assignment_hash(b, comm.size()));
        check_partition(g, b, lp);
        // A min-cut partition: fewer halo nodes than a random one (this graph has little locality).
        const auto halo_of = [&](const std::vector<part_t>& x) {
            return compute_partition_stats(g, x, comm.size()).total_halo;
        };
        if (comm.size() > 1) CHECK(halo_of(b) < halo_of(partition_random(g.num_nodes(), comm.size(), 5)));
    }
    SECTION("from a graph file, METIS on every rank agrees")
    {
        const auto lp = load_rank_partition(comm, {.data = tmp / "g.h5", .partition = "metis", .seed = 3});
        check_partition(g, a, lp);
    }
    comm.barrier();
}

namespace {

/// Owner shards of g under assignment a in dir, each edge listed by the owner of its
/// destination only (every_edge_once: an undirected edge by one owner only).
void write_shards(const graph& g, std::span<const part_t> a, part_t parts, const std::string& dir, bool every_edge_once)
{
    fs::create_directories(dir);
    const auto member = split_membership(g.num_nodes(), g.train, g.valid, g.test);
    for (part_t p = 0; p < parts; ++p) {
        node_share s;
        s.info = info_of(g);
        std::vector<node_t> src, dst;
        for (node_t v = g.num_nodes() - 1; v >= 0; --v) { // descending: order is the owner's business
            if (a[v] != p) continue;
            s.nodes.push_back(v);
            s.labels.push_back(g.labels[v]);
            s.membership.push_back(member[v]);
            for (node_t u : g.in_edges.row(v))
                if (!every_edge_once || a[u] != p || u < v) {
                    if (every_edge_once && a[u] != p && (a[u] < p)) continue; // the lower owner lists it
                    src.push_back(u);
                    dst.push_back(v);
                }
        }
        s.features = g.features.select_rows(s.nodes);
        write_owner_shard(owner_shard_path(dir, p), s, src, dst);
    }
}

} // namespace

TEST_CASE("owner shards: each rank reads its own shard and gets the partition of the same assignment",
          "[mpi][load][owners]")
{
    const mpi::communicator comm;
    test::shared_temp_dir tmp(comm);
    csbm_options o;
    o.nodes = 2000;
    o.features = 5;
    const graph g = generate_csbm(o);
    const auto a = partition_random(g.num_nodes(), comm.size(), 11);
    if (comm.rank() == 0) {
        write_graph(g, tmp / "g.h5");
        write_owner_shards(tmp / "g.h5", a, comm.size(), tmp / "cut");
        write_shards(g, a, comm.size(), tmp / "once", true);
        write_partitioned(tmp / "g.h5", a, {.parts = comm.size()}, tmp / "parts");
    }
    comm.barrier();
    const auto reference = load_rank_partition(comm, {.data = tmp / "parts"});
    for (const char* dir : {"cut", "once"}) {
        INFO(dir);
        const auto lp = load_rank_partition(comm, {.data = tmp / dir});
        check_partition(g, a, lp);
        CHECK(lp.assignment_hash == reference.assignment_hash);
        CHECK(lp.in_edges.offsets == reference.in_edges.offsets);
        CHECK(lp.in_edges.sources == reference.in_edges.sources);
        CHECK(lp.halo_in_degree == reference.halo_in_degree);
        CHECK(lp.global.num_nodes == reference.global.num_nodes);
        CHECK(lp.global.num_edges == reference.global.num_edges);
        CHECK(lp.global.name == reference.global.name);
    }
    comm.barrier();
}

TEST_CASE("owner shards of a directed graph: an edge listed by its source's owner reaches its destination's",
          "[mpi][load][owners]")
{
    const mpi::communicator comm;
    test::shared_temp_dir tmp(comm);
    graph g = test::make_graph(50, {}, 3, 2);
    std::vector<node_t> src, dst;
    for (node_t v = 0; v < 50; ++v) { // v -> 3v + 1 mod 50 and v -> v + 7 mod 50, one way only
        src.insert(src.end(), {v, v});
        dst.insert(dst.end(), {(3 * v + 1) % 50, (v + 7) % 50});
    }
    g.directed = true;
    g.in_edges = build_csr(50, src, dst);
    const auto a = partition_random(50, comm.size(), 2);
    if (comm.rank() == 0) {
        write_graph(g, tmp / "d.h5");
        write_partitioned(tmp / "d.h5", a, {.parts = comm.size()}, tmp / "parts");
        fs::create_directories(tmp / "owners");
        const auto member = split_membership(50, g.train, g.valid, g.test);
        for (part_t p = 0; p < comm.size(); ++p) {
            node_share s;
            s.info = info_of(g);
            std::vector<node_t> es, ed;
            for (node_t v = 0; v < 50; ++v)
                if (a[v] == p) {
                    s.nodes.push_back(v);
                    s.labels.push_back(g.labels[v]);
                    s.membership.push_back(member[v]);
                }
            for (std::size_t e = 0; e < src.size(); ++e)
                if (a[src[e]] == p && (src[e] != dst[e])) { // the source's owner lists it
                    es.push_back(src[e]);
                    ed.push_back(dst[e]);
                }
            s.features = g.features.select_rows(s.nodes);
            write_owner_shard(owner_shard_path(tmp / "owners", p), s, es, ed);
        }
    }
    comm.barrier();
    const auto lp = load_rank_partition(comm, {.data = tmp / "owners"});
    const auto reference = load_rank_partition(comm, {.data = tmp / "parts"});
    check_partition(g, a, lp);
    CHECK(lp.in_edges.sources == reference.in_edges.sources);
    CHECK(lp.halo_in_degree == reference.halo_in_degree);
    CHECK(lp.global.num_edges == g.num_edges());
    CHECK(lp.global.directed);
    comm.barrier();
}

namespace {

/// The nodes an assignment gives part p, ascending.
std::vector<node_t> nodes_of(const std::vector<part_t>& a, part_t p)
{
    std::vector<node_t> out;
    for (std::size_t v = 0; v < a.size(); ++v)
        if (a[v] == p) out.push_back(static_cast<node_t>(v));
    return out;
}

/// Edges in blocks of `block` (the last one shorter), as a file is read.
edge_blocks in_blocks(const std::vector<node_t>& src, const std::vector<node_t>& dst, std::size_t block)
{
    return {[&src, &dst, block](const edge_blocks::visitor& visit) {
        for (std::size_t at = 0; at < src.size(); at += block) {
            const auto len = std::min(block, src.size() - at);
            visit(std::span(src).subspan(at, len), std::span(dst).subspan(at, len));
        }
    }};
}

/// Whether row i of `got` holds want[mine[i]], ascending, for every i.
bool rows_are(const csr& got, std::span<const node_t> mine, const std::vector<std::set<node_t>>& want)
{
    bool ok = got.num_rows() == static_cast<node_t>(mine.size());
    for (std::size_t i = 0; ok && i < mine.size(); ++i) {
        const auto row = got.row(static_cast<node_t>(i));
        const auto& w = want[static_cast<std::size_t>(mine[i])];
        ok = std::vector<node_t>(row.begin(), row.end()) == std::vector<node_t>(w.begin(), w.end());
    }
    return ok;
}

} // namespace

TEST_CASE("the node directory answers owners and hashes the assignment slice by slice", "[mpi][load][owners]")
{
    const mpi::communicator comm;
    const node_t n = 1001;
    const auto a = partition_random(n, comm.size(), 3);
    const auto mine = nodes_of(a, comm.rank());
    node_directory dir(comm, n, mine, "test");
    std::vector<node_t> ask = {n - 1, 0, 17, 17, static_cast<node_t>(comm.rank() * 3)};
    const auto owners = dir.owners(ask);
    for (std::size_t i = 0; i < ask.size(); ++i)
        CHECK(owners[i] == a[ask[i]]);
    CHECK(dir.assignment_hash() == assignment_hash(a, comm.size()));
    const auto [first, count] = row_slice(n, comm.rank(), comm.size());
    node_directory by_slice(comm, n, std::span<const part_t>(a).subspan(first, count));
    CHECK(by_slice.owners(ask) == owners);
    CHECK(by_slice.assignment_hash() == dir.assignment_hash());
    CHECK_THROWS_WITH(dir.owners(std::vector<node_t>{comm.rank() == 0 ? n : 0}), Catch::Contains("no owner holds it"));
}

TEST_CASE("gather_in_edges gives each owner the in-edges of its nodes: against a set of all ranks' edges",
          "[mpi][load][owners]")
{
    const mpi::communicator comm;
    const node_t n = 500;
    const auto a = partition_random(n, comm.size(), 5);
    const auto mine = nodes_of(a, comm.rank());
    const node_directory dir(comm, n, mine, "test");
    // Each rank lists edges touching its nodes: repeats, both directions, self loops, hubs.
    std::mt19937 rng(static_cast<std::uint32_t>(17 + comm.rank()));
    std::vector<node_t> src, dst;
    for (int e = 0; e < 3000; ++e) {
        const node_t own = mine[rng() % mine.size()];
        const node_t other = e % 7 == 0 ? own : static_cast<node_t>(e % 5 == 0 ? rng() % 8 : rng() % n);
        const bool out = rng() % 2 == 0;
        src.push_back(out ? own : other);
        dst.push_back(out ? other : own);
        if (e % 11 == 0) { // listed twice
            src.push_back(src.back());
            dst.push_back(dst.back());
        }
    }
    const auto all_src = comm.allgatherv(std::span<const node_t>(src), purpose::setup);
    const auto all_dst = comm.allgatherv(std::span<const node_t>(dst), purpose::setup);
    for (const bool directed : {false, true}) {
        std::vector<std::set<node_t>> expected(static_cast<std::size_t>(n));
        for (std::size_t e = 0; e < all_src.size(); ++e)
            if (all_src[e] != all_dst[e]) {
                expected[all_dst[e]].insert(all_src[e]);
                if (!directed) expected[all_src[e]].insert(all_dst[e]);
            }
        for (const std::size_t block : {std::size_t{1} << 20, std::size_t{97}}) {
            INFO("directed " << directed << ", blocks of " << block);
            const csr got = gather_in_edges(comm, dir, mine, in_blocks(src, dst, block), directed, "test");
            CHECK(rows_are(got, mine, expected));
            CHECK(got.sources.capacity() == got.sources.size());
        }
    }
    SECTION("shards that list the arcs into their nodes: each pair of their own nodes both ways or not, every "
            "arc between ranks or not")
    {
        std::mt19937 same(29); // the same undirected graph on every rank
        std::vector<std::set<node_t>> in(static_cast<std::size_t>(n));
        for (int e = 0; e < 3000; ++e) {
            const auto u = static_cast<node_t>(same() % n), v = static_cast<node_t>(e % 9 == 0 ? 3 : same() % n);
            if (u == v) continue;
            in[static_cast<std::size_t>(v)].insert(u);
            in[static_cast<std::size_t>(u)].insert(v);
        }
        for (const bool both_ways : {true, false})
            for (const bool cross_left_out : {false, true}) {
                // Each rank lists the arcs into its nodes (as retexo_shard writes them); without
                // both_ways, an arc from one of its own nodes u to another v is left out when
                // u < v and u + v is even (its reverse, listed, says the edge is there); with
                // cross_left_out, rank 0 leaves out its first arc from another rank's node
                // (whose owner lists the reverse).
                std::vector<node_t> into_src, into_dst;
                bool dropped = false;
                for (const node_t v : mine)
                    for (const node_t u : in[static_cast<std::size_t>(v)]) {
                        const bool remote = a[static_cast<std::size_t>(u)] != comm.rank();
                        if (cross_left_out && comm.rank() == 0 && remote && !dropped) {
                            dropped = true;
                            continue;
                        }
                        if (both_ways || remote || u > v || (u + v) % 2 != 0) {
                            into_src.push_back(u);
                            into_dst.push_back(v);
                        }
                    }
                int reads = 0;
                const auto blocks = in_blocks(into_src, into_dst, 97);
                const edge_blocks counted{[&](const edge_blocks::visitor& visit) {
                    ++reads;
                    blocks.for_each(visit);
                }};
                INFO("both ways " << both_ways << ", an arc between ranks left out " << cross_left_out);
                CHECK(rows_are(gather_in_edges(comm, dir, mine, counted, false, "test"), mine, in));
                // Two readings (check, fill) where each rank's rows hold every arc from another
                // rank's nodes that it would be sent: then none is sent; else a third, to send
                // them.  Every pair of a rank's own nodes both ways: the rows hold every reverse;
                // else two more readings count and add what the rows lack.
                std::size_t own_in = 0, own_listed = 0;
                for (std::size_t e = 0; e < into_src.size(); ++e)
                    own_listed += a[static_cast<std::size_t>(into_src[e])] == comm.rank() ? 1 : 0;
                for (const node_t v : mine)
                    for (const node_t u : in[static_cast<std::size_t>(v)])
                        own_in += a[static_cast<std::size_t>(u)] == comm.rank() ? 1 : 0;
                const bool left_out = own_listed < own_in;
                CHECK(left_out == !both_ways); // the graph has such pairs on every rank
                const bool sent = comm.allreduce<std::int64_t>(dropped ? 1 : 0, MPI_SUM, purpose::setup) > 0;
                CHECK(sent == (cross_left_out && comm.size() > 1));
                CHECK(reads == 2 + (sent ? 1 : 0) + (left_out ? 2 : 0));
            }
    }
    SECTION("edges that read differently the second time fail every rank")
    {
        int reads = 0;
        const edge_blocks changing{[&](const edge_blocks::visitor& visit) {
            std::vector<node_t> s = src, d = dst;
            if (++reads > 1 && comm.rank() == comm.size() - 1) { // one more edge into a node of this rank
                s.push_back(mine[0] == n - 1 ? 0 : n - 1);
                d.push_back(mine[0]);
            }
            visit(s, d);
        }};
        CHECK_THROWS_WITH(gather_in_edges(comm, dir, mine, changing, false, "f.h5"),
                          Catch::Contains("f.h5: the edges changed while they were read"));
    }
    SECTION("edges that read shorter the second time fail every rank")
    {
        int reads = 0;
        const edge_blocks shrinking{[&](const edge_blocks::visitor& visit) {
            const std::size_t drop = ++reads > 1 && comm.rank() == 0 ? 1 : 0;
            visit(std::span(src).first(src.size() - drop), std::span(dst).first(dst.size() - drop));
        }};
        CHECK_THROWS_WITH(gather_in_edges(comm, dir, mine, shrinking, false, "f.h5"),
                          Catch::Contains("f.h5: the edges changed while they were read"));
    }
    SECTION("a reader's error fails every rank")
    {
        const edge_blocks failing{[&](const edge_blocks::visitor& visit) {
            visit(src, dst);
            RETEXO_ENSURE(comm.rank() != 0, "f.h5: edges/src: global id -3 (entry 9) is outside [0, 2^31)");
        }};
        CHECK_THROWS_AS(gather_in_edges(comm, dir, mine, failing, false, "f.h5"), mpi::agreed_error);
    }
}

TEST_CASE("move_nodes sends the rows block by block: the share of one exchange for any block size", "[mpi][load]")
{
    const mpi::communicator comm;
    const node_t n = 400;
    // Rank r holds rows [first, first + count) (the last rank none, at more than one rank),
    // with degrees 0..40 and a hub of 300 in-edges (a block of its own in small blocks).
    const auto [first, count] = comm.size() > 1 && comm.rank() == comm.size() - 1
                                    ? std::pair<node_t, node_t>{n, 0}
                                    : row_slice(n, comm.rank(), std::max(1, comm.size() - 1));
    std::mt19937 rng(static_cast<std::uint32_t>(3 + comm.rank()));
    std::vector<node_t> ids(static_cast<std::size_t>(count));
    std::iota(ids.begin(), ids.end(), first);
    std::vector<part_t> dest;
    csr rows;
    for (node_t i = 0; i < count; ++i) {
        dest.push_back(static_cast<part_t>(rng() % static_cast<unsigned>(comm.size())));
        const auto degree = i == 5 ? 300 : static_cast<int>(rng() % 41);
        for (int e = 0; e < degree; ++e)
            rows.sources.push_back(static_cast<node_t>(rng() % n));
        rows.offsets.push_back(static_cast<offset_t>(rows.sources.size()));
    }
    // The share expected: every rank's rows for this one, in rank order and each rank's order.
    const auto all_ids = comm.allgatherv(std::span<const node_t>(ids), purpose::setup);
    const auto all_dest = comm.allgatherv(std::span<const part_t>(dest), purpose::setup);
    std::vector<offset_t> degrees(static_cast<std::size_t>(count));
    for (node_t i = 0; i < count; ++i)
        degrees[static_cast<std::size_t>(i)] = rows.degree(i);
    const auto all_degrees = comm.allgatherv(std::span<const offset_t>(degrees), purpose::setup);
    const auto all_sources = comm.allgatherv(std::span<const node_t>(rows.sources), purpose::setup);
    std::vector<node_t> want_nodes;
    csr want;
    for (std::size_t i = 0, e = 0; i < all_ids.size(); e += static_cast<std::size_t>(all_degrees[i++]))
        if (all_dest[i] == comm.rank()) {
            want_nodes.push_back(all_ids[i]);
            want.sources.insert(want.sources.end(), all_sources.begin() + static_cast<std::ptrdiff_t>(e),
                                all_sources.begin() + static_cast<std::ptrdiff_t>(e + all_degrees[i]));
            want.offsets.push_back(static_cast<offset_t>(want.sources.size()));
        }
    const auto source = row_source::of(rows);
    for (const offset_t block : {offset_t{1} << 22, offset_t{100}, offset_t{7}, offset_t{1}}) {
        INFO("blocks of " << block << " in-edges");
        int reads = 0;
        row_source counted{source.offsets, [&](node_t f, node_t c) {
                               ++reads;
                               return source.rows(f, c);
                           }};
        const auto got = move_nodes(comm, ids, counted, dest, block);
        CHECK(got.nodes == want_nodes);
        CHECK(got.in_edges.offsets == want.offsets);
        CHECK(got.in_edges.sources == want.sources);
        const auto edged = std::count_if(degrees.begin(), degrees.end(), [](offset_t d) { return d > 0; });
        if (block == 1) CHECK(reads >= edged); // a row with in-edges a block
        if (block == 100 && count > 5) CHECK(reads < edged);
    }
    SECTION("rows that disagree with their offsets fail every rank")
    {
        const row_source wrong{source.offsets, [&](node_t f, node_t c) {
                                   auto r = source.rows(f, c);
                                   if (comm.rank() == 0 && f + c > 5) {
                                       r.sources.push_back(0);
                                       ++r.offsets.back();
                                   }
                                   return r;
                               }};
        CHECK_THROWS_WITH(move_nodes(comm, ids, wrong, dest, 100),
                          Catch::Contains("do not have the in-degrees of their offsets"));
    }
    SECTION("a reader's error fails every rank")
    {
        const row_source failing{source.offsets, [&](node_t f, node_t c) {
                                     RETEXO_ENSURE(comm.rank() != 0 || f == 0, "g.h5: csr/sources: read failed");
                                     return source.rows(f, c);
                                 }};
        CHECK_THROWS_AS(move_nodes(comm, ids, failing, dest, 100), mpi::agreed_error);
    }
}

TEST_CASE("owner shards that disagree fail on every rank and say why", "[mpi][load][owners][bad-input]")
{
    const mpi::communicator comm;
    test::shared_temp_dir tmp(comm);
    const part_t parts = comm.size();
    const auto g = test::make_graph(30, {{0, 1}, {1, 2}, {5, 29}, {3, 20}, {7, 8}}, 3, 2);
    const auto a = partition_blocks(30, parts);
    const auto last = parts - 1;
    // Each case writes the shards, then spoils the last one.
    const auto spoil = [&](const std::string& name, const std::function<void(owner_shard&)>& f) {
        if (comm.rank() == 0) {
            write_shards(g, a, parts, tmp / name, false);
            auto s = read_owner_shard(owner_shard_path(tmp / name, last));
            f(s);
            write_owner_shard(owner_shard_path(tmp / name, last), s.nodes, s.src, s.dst);
        }
        comm.barrier();
        return tmp / name;
    };
    SECTION("a node two owners claim")
    {
        const auto d = spoil("twice", [&](owner_shard& s) { s.nodes.nodes[0] = parts > 1 ? 0 : s.nodes.nodes[1]; });
        CHECK_THROWS_AS(load_rank_partition(comm, {.data = d}), mpi::agreed_error);
        CHECK_THROWS_WITH(load_rank_partition(comm, {.data = d}), Catch::Contains("is claimed twice"));
    }
    SECTION("an edge endpoint nobody owns")
    {
        const auto d = spoil("stray", [&](owner_shard& s) { s.src[0] = 30; });
        CHECK_THROWS_WITH(load_rank_partition(comm, {.data = d}), Catch::Contains("no owner holds it"));
    }
    SECTION("an edge that touches none of the shard's nodes")
    {
        if (parts > 1) { // nodes 0 and 1 belong to rank 0
            const auto d = spoil("foreign", [&](owner_shard& s) {
                s.src.push_back(0);
                s.dst.push_back(1);
            });
            CHECK_THROWS_WITH(load_rank_partition(comm, {.data = d}),
                              Catch::Contains("edge 0 -> 1 touches none of its own nodes"));
        }
    }
    SECTION("feature widths that differ")
    {
        if (parts > 1) {
            const auto d = spoil("width", [&](owner_shard& s) {
                s.nodes.info.num_features = 4;
                matrix_f x = s.nodes.features.to_dense();
                x.conservativeResize(x.rows(), 4);
                x.col(3).setZero();
                s.nodes.features = x;
            });
            CHECK_THROWS_WITH(
                load_rank_partition(comm, {.data = d}),
                Catch::Contains("rank " + std::to_string(last) + " has 4 features per node but rank 0 has 3"));
        }
    }
    SECTION("class counts that differ")
    {
        if (parts > 1) {
            const auto d = spoil("classes", [&](owner_shard& s) { s.nodes.info.num_classes = 5; });
            CHECK_THROWS_AS(load_rank_partition(comm, {.data = d}), mpi::agreed_error);
            CHECK_THROWS_WITH(load_rank_partition(comm, {.data = d}), Catch::Contains("classes but rank 0 has 2"));
        }
    }
    SECTION("ids that leave a gap")
    {
        const auto d = spoil("gap", [&](owner_shard& s) { s.nodes.nodes[0] = 31; });
        CHECK_THROWS_WITH(load_rank_partition(comm, {.data = d}), Catch::Contains("is outside [0, 30)"));
    }
    SECTION("a missing shard for a rank")
    {
        if (comm.rank() == 0) {
            write_shards(g, a, parts, tmp / "missing", false);
            fs::remove(owner_shard_path(tmp / "missing", last));
        }
        comm.barrier();
        CHECK_THROWS_AS(load_rank_partition(comm, {.data = tmp / "missing"}), mpi::agreed_error);
        CHECK_THROWS_WITH(load_rank_partition(comm, {.data = tmp / "missing"}),
                          Catch::Contains("shard" + std::to_string(last) + ".h5 is missing"));
    }
    comm.barrier();
}

TEST_CASE("cora: 4 partitions load on their ranks", "[mpi][load][datasets]")
{
    const mpi::communicator comm;
    RETEXO_REQUIRE_DATASET(dir, "cora");
    test::shared_temp_dir tmp(comm);
    if (comm.rank() == 0) convert_ogb(dir, tmp / "cora.h5", {.split = "random-paper"});
    comm.barrier();
    const graph g = read_graph(tmp / "cora.h5");
    const auto a = partition_metis(g.in_edges, false, comm.size(), metis_objective::vol, 42);
    if (comm.rank() == 0)
        write_partitioned(tmp / "cora.h5", a, {.method = partition_method::metis, .parts = comm.size()}, tmp / "parts");
    comm.barrier();
    const auto lp = load_rank_partition(comm, {.data = tmp / "parts"});
    check_partition(g, a, lp);
    comm.barrier();
}

TEST_CASE("load errors are raised on every rank", "[mpi][load][bad-input]")
{
    const mpi::communicator comm;
    test::shared_temp_dir tmp(comm);
    const auto g = test::make_graph(40, {{0, 1}, {1, 2}, {5, 30}}, 3, 2);
    if (comm.rank() == 0) {
        write_graph(g, tmp / "g.h5");
        const part_t other = comm.size() + 1;
        write_partitioned(tmp / "g.h5", partition_random(40, other, 1),
                          {.method = partition_method::random, .parts = other}, tmp / "wrong");
        write_partitioned(tmp / "g.h5", partition_random(40, comm.size(), 1),
                          {.method = partition_method::random, .parts = comm.size()}, tmp / "right");
        // Damage the last rank's part only.
        const auto last = partition_file_path(tmp / "right", comm.size() - 1);
        fs::resize_file(last, fs::file_size(last) / 3);
        // Rows 0, 1, 2, 5, 30 hold [1], [0, 2], [1], [30], [5]: node 30's in-edge from 5 becomes
        // one from 6, which has no in-edge from 30 (nor 30 from 5's reverse).
        write_graph(g, tmp / "asym.h5");
        auto f = h5::file::open(tmp / "asym.h5", true);
        const node_t six = 6;
        f.write_rows<node_t>(f.open_dataset("csr/sources"), "csr/sources", 5, 1, 1, &six);
    }
    comm.barrier();
    SECTION("partition count differs from the number of ranks")
    {
        CHECK_THROWS_AS(load_rank_partition(comm, {.data = tmp / "wrong"}), mpi::agreed_error);
        CHECK_THROWS_WITH(load_rank_partition(comm, {.data = tmp / "wrong"}),
                          Catch::Contains("mpirun -np must equal the partition count"));
    }
    SECTION("one rank's damaged file fails every rank")
    {
        CHECK_THROWS_AS(load_rank_partition(comm, {.data = tmp / "right"}), mpi::agreed_error);
    }
    SECTION("missing data")
    {
        CHECK_THROWS_WITH(load_rank_partition(comm, {.data = tmp / "none.h5"}),
                          Catch::Contains("none.h5: cannot open"));
    }
    SECTION("an undirected graph whose in-edges are not symmetric")
    {
        CHECK_THROWS_AS(load_rank_partition(comm, {.data = tmp / "asym.h5"}), mpi::agreed_error);
        CHECK_THROWS_WITH(load_rank_partition(comm, {.data = tmp / "asym.h5"}),
                          Catch::Contains("asym.h5: the graph is undirected, but node"));
    }
    SECTION("bad partition spec")
    {
        CHECK_THROWS_WITH(load_rank_partition(comm, {.data = tmp / "g.h5", .partition = "spectral"}),
                          Catch::Contains("neither random, metis, scotch, blocks nor an existing assignment file"));
    }
    SECTION("assignment with an id >= P")
    {
        if (comm.rank() == 0) {
            std::string text;
            for (int v = 0; v < 40; ++v)
                text += std::to_string(v == 7 ? comm.size() : 0) + "\n";
            test::write_file(tmp / "bad.txt", text);
        }
        comm.barrier();
        CHECK_THROWS_WITH(load_rank_partition(comm, {.data = tmp / "g.h5", .partition = tmp / "bad.txt"}),
                          Catch::Contains("bad.txt:8: partition id"));
    }
    comm.barrier();
}

TEST_CASE("a spoiled graph file read by slices fails every rank, naming global ids", "[mpi][load][bad-input]")
{
    const mpi::communicator comm;
    test::shared_temp_dir tmp(comm);
    std::vector<std::pair<node_t, node_t>> edges{{5, 30}};
    for (node_t v = 0; v + 1 < 40; ++v)
        edges.emplace_back(v, v + 1);
    const auto g = test::make_graph(40, edges, 3, 2);
    const offset_t e = g.in_edges.num_edges();
    // Rank 0 writes the graph and spoils it; then every rank loads it by slices.
    const auto spoil = [&](const std::string& name, const std::function<void(h5::file&)>& f) {
        if (comm.rank() == 0) {
            write_graph(g, tmp / name);
            auto h = h5::file::open(tmp / name, true);
            f(h);
        }
        comm.barrier();
        return tmp / name;
    };
    const auto set_offset = [](h5::file& f, node_t row, offset_t value) {
        f.write_rows<offset_t>(f.open_dataset("csr/offsets"), "csr/offsets", static_cast<hsize_t>(row), 1, 1, &value);
    };
    const auto replace = [](h5::file& f, const std::string& name, const std::vector<std::int32_t>& values,
                            std::vector<hsize_t> dims = {}) {
        REQUIRE(H5Ldelete(f.id(), name.c_str(), H5P_DEFAULT) >= 0);
        f.write<std::int32_t>(name, values, std::move(dims));
    };
    const auto fails_with = [&](const std::string& path, const std::string& what) {
        CHECK_THROWS_AS(load_rank_partition(comm, {.data = path}), mpi::agreed_error);
        CHECK_THROWS_WITH(load_rank_partition(comm, {.data = path}), Catch::Contains(path) && Catch::Contains(what));
    };
    SECTION("offsets that do not start at 0")
    {
        fails_with(spoil("first.h5", [&](h5::file& f) { set_offset(f, 0, 3); }), "CSR offsets must start at 0");
    }
    SECTION("offsets that end before the last edge")
    {
        fails_with(spoil("last.h5", [&](h5::file& f) { set_offset(f, 40, e - 5); }),
                   "CSR offsets end at " + std::to_string(e - 5) + " but there are " + std::to_string(e) + " edges");
    }
    SECTION("offsets that decrease, named by global row")
    {
        fails_with(spoil("decrease.h5", [&](h5::file& f) { set_offset(f, 31, g.in_edges.offsets[30] - 1); }),
                   "CSR offsets decrease at row 30");
    }
    SECTION("a source id out of range, named by global edge")
    {
        const offset_t at = g.in_edges.offsets[35];
        fails_with(spoil("source.h5",
                         [&](h5::file& f) {
                             const node_t bad = 999;
                             f.write_rows<node_t>(f.open_dataset("csr/sources"), "csr/sources",
                                                  static_cast<hsize_t>(at), 1, 1, &bad);
                         }),
                   "edge " + std::to_string(at) + " has source id 999 outside [0, 40)");
    }
    SECTION("a training node also listed as validation node")
    {
        auto valid = g.valid;
        valid.insert(valid.begin(), g.train[0]);
        fails_with(spoil("overlap.h5", [&](h5::file& f) { replace(f, "split/valid", valid); }),
                   "valid split: node " + std::to_string(g.train[0]) + " is already in another split");
    }
    SECTION("a node listed twice in one split")
    {
        auto train = g.train;
        train.insert(train.begin() + 2, g.train[2]);
        fails_with(spoil("twice.h5", [&](h5::file& f) { replace(f, "split/train", train); }),
                   "train split: node " + std::to_string(g.train[2]) + " is already in another split");
    }
    SECTION("labels stored as a column")
    {
        fails_with(spoil("labels.h5",
                         [&](h5::file& f) {
                             replace(f, "labels", g.labels, {40, 1});
                         }),
                   "dataset labels must be 1-D with num_nodes = 40 entries, has shape [40, 1]");
    }
    SECTION("a dense feature that is not finite, named by global node")
    {
        fails_with(spoil("nan.h5",
                         [&](h5::file& f) {
                             const float row[3] = {0.5F, std::numeric_limits<float>::quiet_NaN(), 1.0F};
                             f.write_rows<float>(f.open_dataset("features"), "features", 33, 1, 3, row);
                         }),
                   "features: node 33 has a non-finite value (nan) at column 1");
    }
    comm.barrier();
}

TEST_CASE("part files whose owned ids do not partition the nodes fail every rank", "[mpi][load][bad-input]")
{
    const mpi::communicator comm;
    if (comm.size() < 2) return; // one part file: its own checks suffice
    test::shared_temp_dir tmp(comm);
    const auto g = test::make_graph(40, {{0, 1}, {1, 2}, {5, 30}}, 3, 2);
    const part_t parts = comm.size();
    if (comm.rank() == 0) {
        write_graph(g, tmp / "g.h5");
        write_partitioned(tmp / "g.h5", partition_blocks(40, parts),
                          {.method = partition_method::blocks, .parts = parts}, tmp / "p");
        // Part 1 owns 10.. (blocks): its first node becomes node 0, which part 0 owns too.
        auto f = h5::file::open(partition_file_path(tmp / "p", 1), true);
        const node_t first = f.read_vector<node_t>("owned/global_ids")[0];
        REQUIRE(first > 0);
        const node_t bad = 0;
        f.write_rows<node_t>(f.open_dataset("owned/global_ids"), "owned/global_ids", 0, 1, 1, &bad);
    }
    comm.barrier();
    CHECK_THROWS_AS(load_rank_partition(comm, {.data = tmp / "p"}), mpi::agreed_error);
    CHECK_THROWS_WITH(load_rank_partition(comm, {.data = tmp / "p"}),
                      Catch::Contains("owned/global_ids do not partition the 40 nodes (40 owned in all, but some node "
                                      "is owned twice and another by none)"));
    CHECK_NOTHROW(load_rank_partition(comm, {.data = tmp / "g.h5"}));
    comm.barrier();
}

TEST_CASE("training refuses a graph without validation nodes on every rank", "[mpi][load][bad-input]")
{
    const mpi::communicator comm;
    test::shared_temp_dir tmp(comm);
    auto g = test::make_graph(40, {{0, 1}, {1, 2}, {5, 30}}, 3, 2);
    g.test.insert(g.test.end(), g.valid.begin(), g.valid.end());
    std::sort(g.test.begin(), g.test.end());
    g.valid.clear();
    if (comm.rank() == 0) write_graph(g, tmp / "novalid.h5");
    comm.barrier();
    const auto lp = load_rank_partition(comm, {.data = tmp / "novalid.h5"});
    CHECK_THROWS_AS(train::rank_context(comm, lp), mpi::agreed_error);
    CHECK_THROWS_WITH(train::rank_context(comm, lp),
                      Catch::Contains("novalid.h5: the graph has no validation nodes (split/valid is empty)"));
    comm.barrier();
}

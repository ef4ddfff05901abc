// MPI tests of the PT-Scotch partitioner: graphs split into row slices over the ranks give a
// valid, balanced, low-cut, reproducible assignment; a directed input gives what its
// symmetrised twin gives; bad input throws on every rank.
#include "support/test_support.hpp"

#include <retexo/partition/partitioner.hpp>
#include <retexo/partition/ptscotch.hpp>

#include <algorithm>

using namespace retexo;

namespace {

/// In-edge CSR of an undirected graph given as a list of edges.
csr undirected_csr(node_t n, const std::vector<std::pair<node_t, node_t>>& edges)
{
    std::vector<node_t> src, dst;
    for (auto [u, v] : edges) {
        src.push_back(u);
        dst.push_back(v);
    }
    return build_csr(n, src, dst, {.symmetrise = true});
}

/// A w x h grid, node (x, y) = y * w + x, 4-neighbourhood.
csr grid_csr(node_t w, node_t h)
{
    std::vector<std::pair<node_t, node_t>> e;
    for (node_t y = 0; y < h; ++y)
        for (node_t x = 0; x < w; ++x) {
            if (x + 1 < w) e.emplace_back(y * w + x, y * w + x + 1);
            if (y + 1 < h) e.emplace_back(y * w + x, (y + 1) * w + x);
        }
    return undirected_csr(w * h, e);
}

csr ring_csr(node_t n)
{
    std::vector<std::pair<node_t, node_t>> e;
    e.reserve(static_cast<std::size_t>(n));
    for (node_t v = 0; v < n; ++v)
        e.emplace_back(v, (v + 1) % n);
    return undirected_csr(n, e);
}

/// Rows [first, first + count) of g.
csr_slice slice_rows(const csr& g, node_t first, node_t count)
{
    csr_slice s;
    s.first_row = first;
    s.num_nodes = g.num_rows();
    s.in_edges.offsets.assign(1, 0);
    for (node_t v = first; v < first + count; ++v) {
        const auto row = g.row(v);
        s.in_edges.sources.insert(s.in_edges.sources.end(), row.begin(), row.end());
        s.in_edges.offsets.push_back(static_cast<offset_t>(s.in_edges.sources.size()));
    }
    return s;
}

/// This rank's row_slice of g.
csr_slice my_slice(const mpi::communicator& comm, const csr& g)
{
    const auto [first, count] = row_slice(g.num_rows(), comm.rank(), comm.size());
    return slice_rows(g, first, count);
}

/// Partition with PT-Scotch and gather the whole assignment on every rank.
std::vector<part_t> ptscotch_all(const mpi::communicator& comm, const csr_slice& s, bool directed, part_t parts,
                                 std::uint64_t seed)
{
    const auto mine = partition_ptscotch(comm, s, directed, parts, seed, {.check_graph = true});
    REQUIRE(mine.size() == static_cast<std::size_t>(s.in_edges.num_rows()));
    return comm.allgatherv<part_t>(mine, purpose::control);
}

std::vector<node_t> part_sizes(const std::vector<part_t>& a, part_t parts)
{
    REQUIRE(std::all_of(a.begin(), a.end(), [&](part_t p) { return p >= 0 && p < parts; }));
    std::vector<node_t> c(static_cast<std::size_t>(parts), 0);
    for (part_t p : a)
        ++c[p];
    return c;
}

/// Every part non-empty, and no part above (1 + tolerance) x the mean.
void check_valid_and_balanced(const std::vector<part_t>& a, part_t parts, double tolerance)
{
    const auto c = part_sizes(a, parts);
    const double mean = static_cast<double>(a.size()) / parts;
    for (part_t p = 0; p < parts; ++p) {
        INFO("part " << p << " of " << parts << " has " << c[p] << " nodes, mean " << mean);
        CHECK(c[p] > 0);
        CHECK(c[p] <= (1 + tolerance) * mean + 1);
    }
}

} // namespace

TEST_CASE("PT-Scotch: a grid in slices gets a valid, balanced assignment that cuts far less than random",
          "[mpi][ptscotch]")
{
    const mpi::communicator comm;
    const csr g = grid_csr(60, 50); // 3000 nodes, 11780 arcs
    for (part_t parts : {2, 3, 4, 8}) {
        INFO(parts << " parts on " << comm.size() << " rank(s)");
        const auto a = ptscotch_all(comm, my_slice(comm, g), false, parts, 42);
        REQUIRE(a.size() == 3000u);
        check_valid_and_balanced(a, parts, 0.05);
        const auto s = compute_partition_stats(g, {}, a, parts);
        const auto rnd = compute_partition_stats(g, {}, partition_random(g.num_rows(), parts, 42), parts);
        // A straight cut across the 50-row side of the grid crosses 50 edges = 100 arcs; random
        // cuts about (1 - 1/parts) of all 11780 arcs.
        CHECK(s.edge_cut <= 100 * parts);
        CHECK(s.edge_cut * 10 < rnd.edge_cut);
        CHECK(s.total_halo * 10 < rnd.total_halo);
    }
}

TEST_CASE("PT-Scotch: a ring is cut into few arcs", "[mpi][ptscotch]")
{
    const mpi::communicator comm;
    const csr g = ring_csr(1201);
    const part_t parts = 4;
    const auto a = ptscotch_all(comm, my_slice(comm, g), false, parts, 7);
    check_valid_and_balanced(a, parts, 0.05);
    // The best cut removes one edge (two arcs) per part; allow a few more.
    const auto s = compute_partition_stats(g, {}, a, parts);
    CHECK(s.edge_cut >= 2 * parts);
    CHECK(s.edge_cut <= 6 * parts);
}

TEST_CASE("PT-Scotch: the same seed gives the same assignment", "[mpi][ptscotch]")
{
    const mpi::communicator comm;
    const csr g = grid_csr(45, 41);
    const auto s = my_slice(comm, g);
    const auto a = ptscotch_all(comm, s, false, 5, 1234);
    const auto b = ptscotch_all(comm, s, false, 5, 1234);
    CHECK(a == b);
    // The seed is used: across a few seeds, PT-Scotch does not always return the same split.
    bool differs = false;
    for (std::uint64_t seed : {1, 2, 3, 4, 5})
        differs = differs || ptscotch_all(comm, s, false, 5, seed) != a;
    CHECK(differs);
}

TEST_CASE("PT-Scotch: a directed input gives the result of its symmetrised twin", "[mpi][ptscotch]")
{
    const mpi::communicator comm;
    // A grid with one arc per edge (right and down), plus arcs back on some edges (so both
    // directions are present), self loops and repeated arcs, which must all be merged away.
    const node_t w = 37, h = 29, n = w * h;
    std::vector<node_t> src, dst;
    for (node_t y = 0; y < h; ++y)
        for (node_t x = 0; x < w; ++x) {
            const node_t v = y * w + x;
            if (x + 1 < w) {
                src.push_back(v);
                dst.push_back(v + 1);
                if (x % 3 == 0) {
                    src.push_back(v + 1);
                    dst.push_back(v);
                }
            }
            if (y + 1 < h) {
                src.push_back(v);
                dst.push_back(v + w);
            }
            if (v % 5 == 0) {
                src.push_back(v);
                dst.push_back(v);
            }
        }
    const csr directed = build_csr(n, src, dst, {.drop_self_loops = false});
    const csr symmetric = build_csr(n, src, dst, {.symmetrise = true});
    REQUIRE(directed.num_edges() < symmetric.num_edges());
    // Repeat every source of some rows of the directed CSR (duplicates as a raw CSR can hold).
    csr noisy;
    noisy.offsets.assign(1, 0);
    for (node_t v = 0; v < n; ++v) {
        for (node_t u : directed.row(v))
            for (int k = 0; k < (v % 4 == 1 ? 2 : 1); ++k)
                noisy.sources.push_back(u);
        noisy.offsets.push_back(static_cast<offset_t>(noisy.sources.size()));
    }
    const auto before = comm.ledger().sent[static_cast<int>(purpose::setup)];
    const auto a = ptscotch_all(comm, my_slice(comm, noisy), true, 4, 99);
    const auto after = comm.ledger().sent[static_cast<int>(purpose::setup)];
    const auto b = ptscotch_all(comm, my_slice(comm, symmetric), false, 4, 99);
    CHECK(a == b);
    check_valid_and_balanced(a, 4, 0.05);
    // The reverse arcs travel as setup traffic (on one rank they stay home).
    if (comm.size() > 1) CHECK(after > before);
}

TEST_CASE("PT-Scotch: ranks may hold no rows, and one part is all nodes", "[mpi][ptscotch]")
{
    const mpi::communicator comm;
    const csr g = grid_csr(20, 10);
    // Rank 0 holds every row, the others none.
    const auto s = comm.rank() == 0 ? slice_rows(g, 0, g.num_rows()) : slice_rows(g, g.num_rows(), 0);
    const auto a = ptscotch_all(comm, s, true, 3, 5);
    REQUIRE(a.size() == 200u);
    check_valid_and_balanced(a, 3, 0.05);
    const auto one = ptscotch_all(comm, my_slice(comm, g), false, 1, 5);
    CHECK(one == std::vector<part_t>(200, 0));
}

TEST_CASE("PT-Scotch: bad input throws on every rank", "[mpi][ptscotch]")
{
    const mpi::communicator comm;
    const csr g = grid_csr(12, 10);
    const auto s = my_slice(comm, g);
    SECTION("parts < 1")
    {
        for (part_t parts : {0, -3})
            CHECK_THROWS_WITH(partition_ptscotch(comm, s, false, parts, 1),
                              Catch::Contains("the number of parts must be positive, got " + std::to_string(parts)));
    }
    SECTION("more parts than nodes")
    {
        CHECK_THROWS_WITH(partition_ptscotch(comm, s, false, 121, 1), Catch::Contains("would leave a part empty"));
    }
    SECTION("a column outside the graph on one rank only")
    {
        auto bad = s;
        if (comm.rank() == comm.size() - 1 && !bad.in_edges.sources.empty()) bad.in_edges.sources.back() = 120;
        CHECK_THROWS_AS(partition_ptscotch(comm, bad, true, 2, 1), mpi::agreed_error);
    }
    SECTION("slices that do not cover the graph")
    {
        auto bad = s;
        bad.num_nodes = g.num_rows() + 1; // the same on every rank: the last row is nobody's
        CHECK_THROWS_WITH(partition_ptscotch(comm, bad, false, 2, 1), Catch::Contains("the slices cover rows"));
    }
    SECTION("different parts on different ranks")
    {
        if (comm.size() > 1)
            CHECK_THROWS_WITH(partition_ptscotch(comm, s, false, comm.rank() == 0 ? 2 : 3, 1),
                              Catch::Contains("they must agree"));
    }
    // Every rank is still in step: a good call after the failures works.
    const auto a = ptscotch_all(comm, s, false, 2, 1);
    check_valid_and_balanced(a, 2, 0.05);
}

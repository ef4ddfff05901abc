// MPI tests of loading partitions: every rank sees exactly its nodes and halo; errors are
// raised on every rank.
#include "support/test_support.hpp"

#include <retexo/io/graph_file.hpp>
#include <retexo/ingest/load.hpp>
#include <retexo/io/ogb.hpp>
#include <retexo/io/partition_files.hpp>

#include <filesystem>
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
    SECTION("from a graph file, METIS on every rank agrees")
    {
        const auto lp = load_rank_partition(comm, {.data = tmp / "g.h5", .partition = "metis", .seed = 3});
        check_partition(g, a, lp);
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
    SECTION("bad partition spec")
    {
        CHECK_THROWS_WITH(load_rank_partition(comm, {.data = tmp / "g.h5", .partition = "spectral"}),
                          Catch::Contains("neither random, metis, blocks nor an existing assignment file"));
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

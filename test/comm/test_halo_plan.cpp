// Halo plan tests: payloads carry global node ids, so a misrouted row shows.
#include "support/test_support.hpp"

#include <retexo/comm/halo_plan.hpp>
#include <retexo/graph/generate.hpp>
#include <retexo/partition/partitioner.hpp>

#include <chrono>

using namespace retexo;

namespace {
graph test_graph()
{
    csbm_options o;
    o.nodes = 2000;
    o.avg_degree = 6;
    o.features = 2;
    return generate_csbm(o);
}
} // namespace

TEST_CASE("halo forward delivers every owner's row to the right halo slot", "[mpi][halo]")
{
    const mpi::communicator comm;
    const graph g = test_graph();
    const auto a = partition_random(g.num_nodes(), comm.size(), 5);
    const auto lp = extract_partition(g, a, comm.size(), comm.rank());
    const halo_plan plan(comm, lp);
    CHECK(plan.num_owned() == lp.num_owned());
    CHECK(plan.num_halo() == lp.num_halo());
    const int w = 3;
    matrix<double> owned(lp.num_owned(), w), halo(lp.num_halo(), w);
    for (node_t i = 0; i < lp.num_owned(); ++i)
        for (int f = 0; f < w; ++f)
            owned(i, f) = lp.owned_global[i] * 10.0 + f;
    halo.setConstant(-1);
    const auto before = comm.ledger();
    plan.forward(owned.data(), halo.data(), w);
    bool ok = true;
    for (node_t h = 0; h < lp.num_halo(); ++h)
        for (int f = 0; f < w; ++f)
            ok = ok && halo(h, f) == lp.halo_global[h] * 10.0 + f;
    CHECK(ok);
    // Exactly the sent rows are counted as halo_forward bytes.
    const auto delta = comm.ledger() - before;
    CHECK(delta.sent_for(purpose::halo_forward) ==
          static_cast<std::uint64_t>(plan.num_send_rows()) * w * sizeof(double));
    CHECK(delta.received[static_cast<int>(purpose::halo_forward)] ==
          static_cast<std::uint64_t>(lp.num_halo()) * w * sizeof(double));

    // float -> bf16 on the way (small integers are exact in bf16).
    matrix_f own_f(lp.num_owned(), 1);
    for (node_t i = 0; i < lp.num_owned(); ++i)
        own_f(i, 0) = static_cast<float>(lp.owned_global[i] % 200);
    std::vector<bf16> halo_b(static_cast<std::size_t>(lp.num_halo()));
    plan.forward(own_f.data(), halo_b.data(), 1);
    ok = true;
    for (node_t h = 0; h < lp.num_halo(); ++h)
        ok = ok && static_cast<float>(halo_b[h]) == lp.halo_global[h] % 200;
    CHECK(ok);
}

TEST_CASE("halo start_forward: rows arrive after wait, owned rows stay readable meanwhile", "[mpi][halo]")
{
    const mpi::communicator comm;
    const graph g = test_graph();
    const auto lp = extract_partition(g, partition_random(g.num_nodes(), comm.size(), 5), comm.size(), comm.rank());
    const halo_plan plan(comm, lp);
    const int w = 2;
    matrix_f owned(lp.num_owned(), w), halo(lp.num_halo(), w);
    for (node_t i = 0; i < lp.num_owned(); ++i)
        owned.row(i).setConstant(static_cast<float>(lp.owned_global[i]));
    halo.setConstant(-1);
    const auto before = comm.ledger();
    auto pending = plan.start_forward(owned.data(), halo.data(), w);
    // The bytes are counted when the exchange starts.
    CHECK((comm.ledger() - before).sent_for(purpose::halo_forward) ==
          static_cast<std::uint64_t>(plan.num_send_rows()) * w * sizeof(float));
    double sum = 0; // overlapped work on the owned rows, testing between chunks
    for (node_t i = 0; i < lp.num_owned(); ++i) {
        sum += owned(i, 0);
        if (i % 64 == 0) pending.test();
    }
    CHECK(sum == owned.col(0).cast<double>().sum());
    pending.wait();
    CHECK(pending.test());
    bool ok = true;
    for (node_t h = 0; h < lp.num_halo(); ++h)
        ok = ok && halo(h, 0) == static_cast<float>(lp.halo_global[h]) && halo(h, 1) == halo(h, 0);
    CHECK(ok);
    // Emulated network: wait() returns no earlier than the modelled transfer time.
    mpi::communicator slow;
    slow.emulate({0, 0.05});
    const halo_plan slow_plan(slow, lp);
    const auto t0 = std::chrono::steady_clock::now();
    slow_plan.start_forward(owned.data(), halo.data(), w).wait();
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >= 0.05);
}

TEST_CASE("halo reverse adds every halo gradient into its owner", "[mpi][halo]")
{
    const mpi::communicator comm;
    const graph g = test_graph();
    const auto a = partition_metis(g.in_edges, false, comm.size(), metis_objective::vol, 1);
    const auto lp = extract_partition(g, a, comm.size(), comm.rank());
    const halo_plan plan(comm, lp);
    // Every rank holding node v as a halo row sends (rank + 1) * v; the owner must receive
    // the sum over those ranks.  Expected values come from the whole graph.
    std::vector<std::int64_t> halo(static_cast<std::size_t>(lp.num_halo()) * 2),
        owned(static_cast<std::size_t>(lp.num_owned()) * 2, 0);
    for (node_t h = 0; h < lp.num_halo(); ++h) {
        halo[2 * h] = static_cast<std::int64_t>(comm.rank() + 1) * lp.halo_global[h];
        halo[2 * h + 1] = 1;
    }
    plan.reverse_add(halo.data(), owned.data(), 2);
    // Ranks with v in their halo: the owners of v's out-neighbours (g is symmetric).
    bool ok = true;
    for (node_t i = 0; i < lp.num_owned(); ++i) {
        const node_t v = lp.owned_global[i];
        std::vector<part_t> ranks;
        for (node_t u : g.in_edges.row(v))
            if (a[u] != comm.rank()) ranks.push_back(a[u]);
        std::sort(ranks.begin(), ranks.end());
        ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
        std::int64_t want = 0;
        for (auto r : ranks)
            want += static_cast<std::int64_t>(r + 1) * v;
        ok = ok && owned[2 * i] == want && owned[2 * i + 1] == static_cast<std::int64_t>(ranks.size());
    }
    CHECK(ok);
}

TEST_CASE("halo plan refuses inconsistent partitions on every rank", "[mpi][halo][bad-input]")
{
    const mpi::communicator comm;
    if (comm.size() < 2) RETEXO_SKIP("needs at least 2 ranks");
    const graph g = test_graph();
    const auto a = partition_random(g.num_nodes(), comm.size(), 5);
    auto lp = extract_partition(g, a, comm.size(), comm.rank());
    // Rank 0 claims a node that its owner does not have.
    if (comm.rank() == 0 && lp.num_halo() > 0) lp.halo_global[0] = lp.owned_global[0];
    CHECK_THROWS_AS(halo_plan(comm, lp), mpi::agreed_error);
}

TEST_CASE("rows of varying length reach their halo slots, with every byte counted", "[mpi][halo]")
{
    const mpi::communicator comm;
    const graph g = test_graph();
    const auto a = partition_random(g.num_nodes(), comm.size(), 6);
    const auto lp = extract_partition(g, a, comm.size(), comm.rank());
    const halo_plan plan(comm, lp);
    // Row of node v: v % 5 bytes, each (v + k) % 251 (rows of length 0 included).
    auto row_of = [](node_t v) {
        std::vector<std::uint8_t> r(static_cast<std::size_t>(v % 5));
        for (std::size_t k = 0; k < r.size(); ++k)
            r[k] = static_cast<std::uint8_t>((static_cast<std::size_t>(v) + k) % 251);
        return r;
    };
    byte_rows owned, halo;
    for (node_t v : lp.owned_global) {
        const auto r = row_of(v);
        owned.data.insert(owned.data.end(), r.begin(), r.end());
        owned.offsets.push_back(static_cast<std::int64_t>(owned.data.size()));
    }
    const auto before = comm.ledger();
    auto pending = plan.start_forward_rows(owned, halo);
    pending.wait();
    REQUIRE(halo.rows() == lp.num_halo());
    bool ok = true;
    for (node_t h = 0; h < lp.num_halo(); ++h) {
        const auto want = row_of(lp.halo_global[h]);
        const auto got = halo.row(h);
        ok = ok && std::equal(got.begin(), got.end(), want.begin(), want.end());
    }
    CHECK(ok);
    // Sent: 4 bytes of length and the row's bytes per row sent to another rank.
    std::uint64_t expect = 0;
    for (int q = 0; q < comm.size(); ++q)
        if (q != comm.rank())
            for (node_t r : plan.send_rows(q))
                expect += 4 + static_cast<std::uint64_t>(lp.owned_global[r] % 5);
    CHECK((comm.ledger() - before).sent_for(purpose::halo_forward) == expect);
    byte_rows wrong;
    wrong.offsets.assign(static_cast<std::size_t>(lp.num_owned()) + 2, 0);
    CHECK_THROWS_WITH((void)plan.start_forward_rows(wrong, halo), Catch::Contains("owned rows"));
}

TEST_CASE("the summed ledger adds every rank's counters, calls included", "[mpi][ledger]")
{
    const mpi::communicator comm;
    const auto before = comm.ledger();
    // Rank r makes r + 1 calls of 8 bytes: the sums are known in closed form.
    for (int i = 0; i <= comm.rank(); ++i)
        comm.charge(purpose::metrics, 8, 8, 1);
    const auto mine = comm.ledger() - before;
    const auto total = comm.sum(mine);
    const auto p = static_cast<int>(comm.size());
    const auto calls = static_cast<std::uint64_t>(p * (p + 1) / 2);
    CHECK(total.calls[static_cast<int>(purpose::metrics)] == calls);
    CHECK(total.messages[static_cast<int>(purpose::metrics)] == calls);
    CHECK(total.sent_for(purpose::metrics) == 8 * calls);
    CHECK(total.received[static_cast<int>(purpose::metrics)] == 8 * calls);
    CHECK(total.total_calls() == calls); // no other purpose charged in between
}

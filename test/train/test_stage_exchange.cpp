// A RETEXO stage's input exchange directly (train/stage_exchange.hpp), at every rank count:
// the local rows are the global rows of the partition's owned and halo nodes; the aggregate
// equals one process's over the whole graph; column blocks and the overlap change no bit;
// below fp32 owned rows are rounded as halo rows are; sparse rows stay sparse.
#include "support/test_support.hpp"

#include <retexo/graph/generate.hpp>
#include <retexo/partition/partitioner.hpp>
#include <retexo/train/common.hpp>
#include <retexo/train/retexo.hpp>
#include <retexo/train/stage_exchange.hpp>

#include <algorithm>
#include <cmath>
#include <type_traits>

using namespace retexo;
using train::stage_exchange;
using train::wire_precision;

namespace {

graph exchange_graph()
{
    return generate_csbm({.nodes = 600, .classes = 3, .features = 40, .avg_degree = 6, .seed = 5});
}

/// The global rows of every local node (owned, then halo).
std::vector<node_t> local_to_global(const local_partition& lp)
{
    std::vector<node_t> ids = lp.owned_global;
    ids.insert(ids.end(), lp.halo_global.begin(), lp.halo_global.end());
    return ids;
}

/// Aggregate of the whole graph's features in one process (MPI_COMM_SELF, one partition).
matrix_f single_process_aggregate(const graph& g, aggregator kind)
{
    const mpi::communicator self(MPI_COMM_SELF);
    const auto lp = extract_partition(g, std::vector<part_t>(static_cast<std::size_t>(g.num_nodes()), 0), 1, 0);
    const train::rank_context ctx(self, lp);
    phase_timer timer;
    const stage_exchange ex(*ctx.halo, {}, timer);
    return ex.aggregate(lp.features, ctx.graph, kind, {}).to_dense();
}

} // namespace

// A rank context keeps a reference to its partition: a temporary one does not compile.
static_assert(std::is_constructible_v<train::rank_context, const mpi::communicator&, const local_partition&>);
static_assert(!std::is_constructible_v<train::rank_context, const mpi::communicator&, local_partition&&>);

TEST_CASE("rank context: a part that is not this rank's of as many parts as ranks is refused", "[mpi][stage_exchange]")
{
    const mpi::communicator self(MPI_COMM_SELF);
    const graph g = exchange_graph();
    const auto halves = partition_random(g.num_nodes(), 2, 2);
    CHECK_THROWS_WITH(extract_partition(g, halves, 2, 2),
                      Catch::Contains("part 2 of 2 parts does not exist (parts are 0 to 1)"));
    CHECK_THROWS_WITH(extract_partition(g, halves, 2, -1), Catch::Contains("part -1 of 2 parts does not exist"));
    const auto lp = extract_partition(g, halves, 2, 1);
    CHECK_THROWS_WITH(train::rank_context(self, lp),
                      Catch::Contains("rank 0 of 1 was given part 1 of 2; each rank trains its own part"));
}

TEST_CASE("stage exchange: local rows are the partition's owned and halo rows", "[mpi][stage_exchange]")
{
    const mpi::communicator world;
    const graph g = exchange_graph();
    const matrix_f& x = g.features.dense();
    const auto lp = extract_partition(g, partition_random(g.num_nodes(), world.size(), 2), world.size(), world.rank());
    const train::rank_context ctx(world, lp);
    phase_timer timer;
    const auto ids = local_to_global(lp);
    const std::vector<node_t> zero = {0};
    {
        const stage_exchange ex(*ctx.halo, {}, timer);
        const matrix_f rows = ex.local_rows(lp.features, zero).dense();
        REQUIRE(rows.rows() == static_cast<std::int64_t>(ids.size()));
        CHECK(rows.row(0).isZero());
        std::size_t differ = 0;
        for (std::size_t i = 1; i < ids.size(); ++i)
            differ += rows.row(static_cast<std::int64_t>(i)) == x.row(ids[i]) ? 0 : 1;
        CHECK(differ == 0);
    }
    {
        // bf16: owned rows are rounded as the halo rows are, so no row depends on where it lives.
        const stage_exchange ex(*ctx.halo, {.precision = wire_precision::bf16}, timer);
        const matrix_f rows = ex.local_rows(lp.features, {}).dense();
        std::size_t differ = 0;
        for (std::size_t i = 0; i < ids.size(); ++i)
            for (std::int64_t j = 0; j < x.cols(); ++j)
                differ += rows(static_cast<std::int64_t>(i), j) == static_cast<float>(bf16(x(ids[i], j))) ? 0 : 1;
        CHECK(differ == 0);
    }
}

TEST_CASE("stage exchange: the aggregate is the single process's; blocks and overlap change no bit",
          "[mpi][stage_exchange]")
{
    const mpi::communicator world;
    const graph g = exchange_graph();
    const auto lp = extract_partition(g, partition_random(g.num_nodes(), world.size(), 2), world.size(), world.rank());
    const train::rank_context ctx(world, lp);
    phase_timer timer;
    for (auto kind : {aggregator::gcn, aggregator::mean}) {
        DYNAMIC_SECTION(name_of(kind))
        {
            const matrix_f whole = single_process_aggregate(g, kind);
            const matrix_f all =
                stage_exchange(*ctx.halo, {}, timer).aggregate(lp.features, ctx.graph, kind, {}).dense();
            REQUIRE(all.rows() == lp.num_owned());
            float worst = 0; // relative to the value's size
            for (node_t r = 0; r < lp.num_owned(); ++r)
                for (std::int64_t j = 0; j < all.cols(); ++j) {
                    const float w = whole(lp.owned_global[r], j);
                    worst = std::max(worst, std::abs(all(r, j) - w) / (1 + std::abs(w)));
                }
            CHECK(worst <= 1e-5F);
            const matrix_f blocks =
                stage_exchange(*ctx.halo, {.columns = 3}, timer).aggregate(lp.features, ctx.graph, kind, {}).dense();
            CHECK(blocks == all);
            const matrix_f waited = stage_exchange(*ctx.halo, {.overlap = false}, timer)
                                        .aggregate(lp.features, ctx.graph, kind, {})
                                        .dense();
            CHECK(waited == all);
        }
    }
}

TEST_CASE("stage exchange: sparse rows stay sparse and aggregate as dense ones do, sparse under the limit",
          "[mpi][stage_exchange]")
{
    const mpi::communicator world;
    // One value in `keep` kept: aggregates (means over about 7 rows) from 0.5% to 87% non-zero.
    const int keep = GENERATE(199, 97, 31, 23, 17, 11, 3);
    graph g = exchange_graph();
    matrix_f x = g.features.dense();
    for (std::int64_t i = 0; i < x.size(); ++i)
        if (i % keep != 0) x.data()[i] = 0;
    g.features = x;
    const auto lp = extract_partition(g, partition_random(g.num_nodes(), world.size(), 2), world.size(), world.rank());
    const train::rank_context ctx(world, lp);
    phase_timer timer;
    const node_features sparse = csr_matrix::from_dense(lp.features.dense());
    const stage_exchange ex(*ctx.halo, {}, timer);
    const node_features rows = ex.local_rows(sparse, {});
    REQUIRE(rows.is_sparse());
    CHECK(rows.to_dense() == ex.local_rows(lp.features, {}).dense());
    const node_features agg = ex.aggregate(sparse, ctx.graph, aggregator::mean, {});
    const matrix_f dense_agg = ex.aggregate(lp.features, ctx.graph, aggregator::mean, {}).dense();
    // Sparse exactly when the aggregate is under the limit over all ranks.
    std::int64_t count[2] = {(dense_agg.array() != 0).count(), dense_agg.size()};
    world.allreduce(std::span<std::int64_t>(count, 2), MPI_SUM, purpose::control);
    const double density = static_cast<double>(count[0]) / static_cast<double>(count[1]);
    INFO("one value in " << keep << ": the aggregate is " << 100 * density << "% non-zero");
    CHECK(agg.is_sparse() == (density < sparse_density_limit));
    const matrix_f a = agg.to_dense();
    REQUIRE(a.rows() == dense_agg.rows());
    CHECK((a - dense_agg).cwiseAbs().maxCoeff() <= 1e-5F * (1 + dense_agg.cwiseAbs().maxCoeff()));
}

TEST_CASE("neighbour labels: each node's labelled in-neighbours' classes, never its own, C values per halo row",
          "[mpi][stage_exchange]")
{
    const mpi::communicator world;
    const graph g = exchange_graph();
    const int C = g.num_classes;
    // Expected, from the whole graph: the training in-neighbours' class shares, or the flag.
    std::vector<char> is_train(static_cast<std::size_t>(g.num_nodes()), 0);
    for (node_t v : g.train)
        is_train[static_cast<std::size_t>(v)] = 1;
    matrix_f expected = matrix_f::Zero(g.num_nodes(), C + 1);
    for (node_t v = 0; v < g.num_nodes(); ++v) {
        for (node_t u : g.in_edges.row(v))
            if (u != v && is_train[static_cast<std::size_t>(u)] != 0)
                expected(v, g.labels[static_cast<std::size_t>(u)]) += 1;
        const float n = expected.row(v).sum();
        if (n > 0)
            expected.row(v) /= n;
        else
            expected(v, C) = 1;
    }
    REQUIRE(expected.col(C).sum() > 0);      // some nodes have no labelled neighbour
    REQUIRE(expected.leftCols(C).sum() > 0); // and some have
    const auto lp = extract_partition(g, partition_random(g.num_nodes(), world.size(), 2), world.size(), world.rank());
    const train::rank_context ctx(world, lp);
    phase_timer timer;
    const auto before = ctx.comm.ledger().sent_for(purpose::halo_forward);
    const matrix_f got = train::neighbour_labels(ctx, stage_exchange(*ctx.halo, {}, timer), ctx.graph);
    REQUIRE(got.rows() == lp.num_owned());
    REQUIRE(got.cols() == C + 1);
    float worst = 0;
    for (node_t r = 0; r < lp.num_owned(); ++r)
        worst = std::max(worst, (got.row(r) - expected.row(lp.owned_global[r])).cwiseAbs().maxCoeff());
    CHECK(worst <= 1e-6F);
    // One exchange of C floats per halo row this rank's plan receives from others.
    const auto sent = ctx.comm.ledger().sent_for(purpose::halo_forward) - before;
    const auto halo_rows = ctx.comm.allreduce(static_cast<std::int64_t>(lp.num_halo()), MPI_SUM, purpose::control);
    const auto all_sent = ctx.comm.allreduce(static_cast<std::int64_t>(sent), MPI_SUM, purpose::control);
    CHECK(all_sent == halo_rows * C * static_cast<std::int64_t>(sizeof(float)));
}

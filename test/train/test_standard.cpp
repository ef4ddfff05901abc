// The standard trainer: the distributed run equals the single-process one (exact mode),
// and the byte ledger counts what the halo exchanges move.
#include "support/test_support.hpp"

#include <retexo/graph/generate.hpp>
#include <retexo/partition/partitioner.hpp>
#include <retexo/train/standard.hpp>

#include <algorithm>
#include <limits>

using namespace retexo;

namespace {

graph small_graph()
{
    csbm_options o;
    o.nodes = 1500;
    o.classes = 4;
    o.features = 24;
    o.avg_degree = 8;
    o.homophily = 0.7;
    o.power_law = 2.5;
    o.seed = 3;
    return generate_csbm(o);
}

train::run_result run(const mpi::communicator& comm, const graph& g, const std::vector<part_t>& a,
                      const train::standard_options& o, bool inductive = false)
{
    const auto lp = extract_partition(g, a, comm.size(), comm.rank());
    const train::rank_context ctx(comm, lp, inductive);
    return train::train_standard(ctx, o);
}

} // namespace

TEST_CASE("standard trainer: every rank count reproduces the single-process run exactly", "[mpi][standard]")
{
    const mpi::communicator world;
    const mpi::communicator self(MPI_COMM_SELF);
    const graph g = small_graph();
    for (auto model :
         {nn::layer_kind::gcn, nn::layer_kind::sage_mean, nn::layer_kind::sage_pool, nn::layer_kind::gat}) {
        DYNAMIC_SECTION(name_of(model))
        {
            train::standard_options o;
            o.model = model;
            o.hidden = 16;
            o.heads = 2;
            o.epochs = 12;
            o.deterministic = true;
            o.seed = 9;
            const auto single = run(self, g, std::vector<part_t>(static_cast<std::size_t>(g.num_nodes()), 0), o);
            const auto dist = run(world, g, partition_random(g.num_nodes(), world.size(), 4), o);
            REQUIRE(single.history.size() == dist.history.size());
            for (std::size_t e = 0; e < single.history.size(); ++e) {
                INFO("epoch " << e + 1);
                CHECK(dist.history[e].loss == single.history[e].loss);
                CHECK(dist.history[e].acc.train == single.history[e].acc.train);
                CHECK(dist.history[e].acc.valid == single.history[e].acc.valid);
                CHECK(dist.history[e].acc.test == single.history[e].acc.test);
            }
            CHECK(dist.final_acc.test == single.final_acc.test);
            CHECK(single.final_acc.train > single.history.front().acc.train); // it learned something
            if (world.size() > 1) {
                CHECK(dist.bytes.sent_for(purpose::halo_forward) > 0);
                CHECK(dist.bytes.sent_for(purpose::gradients) > 0);
            }
        }
    }
}

TEST_CASE("standard trainer inductive: evaluation nodes never reach training", "[mpi][standard][inductive]")
{
    const mpi::communicator world;
    const mpi::communicator self(MPI_COMM_SELF);
    graph g = small_graph();
    train::standard_options o;
    o.hidden = 16;
    o.epochs = 6;
    o.deterministic = true;
    const auto a = partition_random(g.num_nodes(), world.size(), 4);
    const auto single = run(self, g, std::vector<part_t>(static_cast<std::size_t>(g.num_nodes()), 0), o, true);
    const auto dist = run(world, g, a, o, true);
    for (std::size_t e = 0; e < single.history.size(); ++e)
        CHECK(dist.history[e].loss == single.history[e].loss);
    graph h = g;
    for (node_t v : h.valid)
        h.features.dense().row(v).setConstant(5.0F);
    for (node_t v : h.test)
        h.features.dense().row(v).setConstant(-2.0F);
    const auto changed = run(world, h, a, o, true);
    for (std::size_t e = 0; e < dist.history.size(); ++e)
        CHECK(changed.history[e].loss == dist.history[e].loss);
}

TEST_CASE("standard trainer: overlapping the halo exchange with aggregation changes no bit", "[mpi][standard]")
{
    const mpi::communicator world;
    const graph g = small_graph();
    // METIS keeps neighbourhoods together, so ranks have interior rows to overlap with.
    const auto a = partition_metis(g.in_edges, g.directed, world.size(), metis_objective::cut, 1);
    const auto lp = extract_partition(g, a, world.size(), world.rank());
    std::int64_t interior = 0;
    for (node_t v = 0; v < lp.num_owned(); ++v) {
        const auto src = lp.in_edges.row(v);
        interior += std::all_of(src.begin(), src.end(), [&](node_t u) { return u < lp.num_owned(); }) ? 1 : 0;
    }
    CHECK(interior > 0);
    CHECK((world.size() == 1 || interior < lp.num_owned()));
    for (auto model :
         {nn::layer_kind::gcn, nn::layer_kind::sage_mean, nn::layer_kind::sage_pool, nn::layer_kind::gat}) {
        for (bool inductive : {false, true}) {
            DYNAMIC_SECTION(name_of(model) << (inductive ? " inductive" : ""))
            {
                train::standard_options o;
                o.model = model;
                o.hidden = 16;
                o.heads = 2;
                o.epochs = 6;
                const auto overlapped = run(world, g, a, o, inductive);
                o.overlap = false;
                const auto blocking = run(world, g, a, o, inductive);
                REQUIRE(overlapped.history.size() == blocking.history.size());
                for (std::size_t e = 0; e < blocking.history.size(); ++e)
                    CHECK(overlapped.history[e].loss == blocking.history[e].loss);
                CHECK(overlapped.final_acc.test == blocking.final_acc.test);
                CHECK(overlapped.bytes.total_sent() == blocking.bytes.total_sent());
            }
        }
    }
}

TEST_CASE("standard trainer: fast mode stays within 1e-5 of the single-process run", "[mpi][standard]")
{
    const mpi::communicator world;
    const mpi::communicator self(MPI_COMM_SELF);
    const graph g = small_graph();
    train::standard_options o;
    o.hidden = 32;
    o.epochs = 10;
    o.seed = 5;
    const auto single = run(self, g, std::vector<part_t>(static_cast<std::size_t>(g.num_nodes()), 0), o);
    const auto dist = run(world, g, partition_random(g.num_nodes(), world.size(), 4), o);
    for (std::size_t e = 0; e < single.history.size(); ++e)
        CHECK(dist.history[e].loss == Approx(single.history[e].loss).epsilon(1e-5));
}

TEST_CASE("standard trainer: halo bytes are exactly the exchanged rows", "[mpi][standard][bytes]")
{
    const mpi::communicator world;
    const graph g = small_graph();
    const auto a = partition_random(g.num_nodes(), world.size(), 4);
    const auto lp = extract_partition(g, a, world.size(), world.rank());
    const train::rank_context ctx(world, lp);
    train::standard_options o;
    o.hidden = 16;
    o.epochs = 3;
    o.layers = 2;
    const auto res = train::train_standard(ctx, o);
    // GCN exchanges the narrower of input and transformed input: 24 -> 16 sends 16 floats
    // per halo row, 16 -> 4 classes sends 4.  Forward: every epoch, each layer.
    const std::int64_t rows = world
                                  .sum([&] {
                                      byte_ledger l;
                                      l.sent[0] = static_cast<std::uint64_t>(ctx.halo->num_send_rows());
                                      return l;
                                  }())
                                  .sent[0];
    CHECK(res.bytes.sent_for(purpose::halo_forward) == static_cast<std::uint64_t>(rows) * (16 + 4) * 4 * 3);
    // Backward: both layers' weights sit before the aggregation, so both send message
    // gradients back to the owners.
    std::int64_t halo_rows = world.allreduce(static_cast<std::int64_t>(lp.num_halo()), MPI_SUM, purpose::control);
    CHECK(res.bytes.sent_for(purpose::halo_backward) == static_cast<std::uint64_t>(halo_rows) * (16 + 4) * 4 * 3);
    CHECK(halo_rows == rows);
    // Evaluation passes (every epoch and the final one) are counted separately.
    CHECK(res.bytes.sent_for(purpose::halo_eval) == static_cast<std::uint64_t>(rows) * (16 + 4) * 4 * 4);
    // With features narrower than the hidden width, the first layer exchanges the
    // features themselves and needs no backward exchange ...
    o.hidden = 32;
    o.resend_features = true;
    const auto wide = train::train_standard(ctx, o);
    CHECK(wide.bytes.sent_for(purpose::halo_forward) == static_cast<std::uint64_t>(rows) * (24 + 4) * 4 * 3);
    CHECK(wide.bytes.sent_for(purpose::halo_backward) == static_cast<std::uint64_t>(halo_rows) * 4 * 4 * 3);
    CHECK(wide.bytes.sent_for(purpose::halo_eval) == static_cast<std::uint64_t>(rows) * (24 + 4) * 4 * 4);
    // ... and by default sends them once: the first epoch's forward pass, for every later
    // epoch and evaluation too.
    o.resend_features = false;
    const auto once = train::train_standard(ctx, o);
    CHECK(once.bytes.sent_for(purpose::halo_forward) == static_cast<std::uint64_t>(rows) * (24 + 4 * 3) * 4);
    CHECK(once.bytes.sent_for(purpose::halo_backward) == static_cast<std::uint64_t>(halo_rows) * 4 * 4 * 3);
    CHECK(once.bytes.sent_for(purpose::halo_eval) == static_cast<std::uint64_t>(rows) * 4 * 4 * 4);
}

TEST_CASE("standard trainer: first-layer feature rows sent once give the resending run bit for bit",
          "[mpi][standard][bytes]")
{
    const mpi::communicator world;
    const graph dense = small_graph();
    const graph sparse = test::with_sparse_features(dense, 0.3);
    const auto a = partition_random(dense.num_nodes(), world.size(), 4);
    for (const graph* g : {&dense, &sparse})
        for (auto model : {nn::layer_kind::gcn, nn::layer_kind::sage_mean})
            for (bool inductive : {false, true})
                for (bool exact : {false, true}) {
                    DYNAMIC_SECTION(name_of(model) << (g == &sparse ? " sparse" : " dense")
                                                   << (inductive ? " inductive" : "") << (exact ? " exact" : ""))
                    {
                        train::standard_options o;
                        o.model = model;
                        o.hidden = 32; // wider than the 24 features: the first layer aggregates them first
                        o.epochs = 5;
                        o.deterministic = exact;
                        const auto once = run(world, *g, a, o, inductive);
                        o.resend_features = true;
                        const auto resent = run(world, *g, a, o, inductive);
                        REQUIRE(once.history.size() == resent.history.size());
                        for (std::size_t e = 0; e < once.history.size(); ++e) {
                            CHECK(once.history[e].loss == resent.history[e].loss);
                            CHECK(once.history[e].acc.valid == resent.history[e].acc.valid);
                        }
                        CHECK(once.final_acc.test == resent.final_acc.test);
                        if (world.size() > 1)
                            CHECK(once.bytes.sent_for(purpose::halo_forward) <
                                  resent.bytes.sent_for(purpose::halo_forward));
                    }
                }
}

TEST_CASE("standard trainer rejects bad options", "[mpi][standard][bad-input]")
{
    train::standard_options o;
    o.layers = 0;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--layers must be at least 1"));
    o = {};
    o.dropout = 1.0;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--std-dropout must be in [0, 1), got 1"));
    o = {};
    o.heads = 0;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--heads must be at least 1, got 0"));
    o = {};
    o.optimizer.lr = -1;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--std-lr must be positive, got -1"));
    o = {};
    o.optimizer.weight_decay = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--std-weight-decay must be >= 0"));
    o = {};
    o.model = nn::layer_kind::gat;
    o.hidden = 10;
    o.heads = 3;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("divisible by --heads"));
}

TEST_CASE("standard trainer on sparse features: the dense run to rounding, and exact at every rank count",
          "[mpi][standard][sparse]")
{
    const mpi::communicator world;
    const mpi::communicator self(MPI_COMM_SELF);
    const graph sparse = test::with_sparse_features(small_graph(), 0.1);
    const graph dense = test::dense_twin(sparse);
    REQUIRE(sparse.features.is_sparse());
    const auto a = partition_random(sparse.num_nodes(), world.size(), 4);
    for (auto model :
         {nn::layer_kind::gcn, nn::layer_kind::sage_mean, nn::layer_kind::sage_pool, nn::layer_kind::gat}) {
        for (bool inductive : {false, true}) {
            DYNAMIC_SECTION(name_of(model) << (inductive ? " inductive" : ""))
            {
                train::standard_options o;
                o.model = model;
                o.hidden = 16;
                o.heads = 2;
                o.epochs = 8;
                o.seed = 9;
                const auto s = run(world, sparse, a, o, inductive);
                const auto d = run(world, dense, a, o, inductive);
                CHECK(s.first_layer_input == "sparse");
                CHECK(d.first_layer_input == "dense, dropped out as sparse rows"); // 5% after dropout
                REQUIRE(s.history.size() == d.history.size());
                for (std::size_t e = 0; e < s.history.size(); ++e)
                    CHECK(s.history[e].loss == Approx(d.history[e].loss).epsilon(1e-4));
                CHECK(std::abs(s.final_acc.test - d.final_acc.test) <= 0.01);
                // The same parameters; the first layer's order may differ (sparse rows choose
                // it by cost: aggregating the 10%-dense 24-wide inputs first here), and with it
                // which messages cross.
                CHECK(s.bytes.sent_for(purpose::gradients) == d.bytes.sent_for(purpose::gradients));
                // Exact at every rank count: sparse features, and the dense twin, whose
                // dropped-out inputs (5% non-zero) are multiplied as sparse rows too.
                o.deterministic = true;
                for (const graph* g : {&sparse, &dense}) {
                    INFO((g == &sparse ? "sparse" : "dense") << " features");
                    const auto single =
                        run(self, *g, std::vector<part_t>(static_cast<std::size_t>(g->num_nodes()), 0), o, inductive);
                    const auto dist = run(world, *g, a, o, inductive);
                    for (std::size_t e = 0; e < single.history.size(); ++e)
                        CHECK(dist.history[e].loss == single.history[e].loss);
                    CHECK(dist.final_acc.test == single.final_acc.test);
                }
            }
        }
    }
}

TEST_CASE("initial parameters: a digest each when ranks agree, rank 0's values when one differs",
          "[mpi][parameters][bytes]")
{
    const mpi::communicator world;
    const int P = world.size();
    parameter<float> a("a", 3, 4), b("b", 1, 5);
    for (auto* p : {&a, &b})
        for (Eigen::Index i = 0; i < p->size(); ++i)
            p->value.data()[i] = 0.25F * static_cast<float>(i) - 1.0F;
    const std::vector<parameter<float>*> params{&a, &b};
    const matrix_f a0 = a.value, b0 = b.value;

    auto before = world.ledger().sent_for(purpose::parameters);
    train::agree_initial_parameters(world, params);
    CHECK(a.value == a0);
    CHECK(b.value == b0);
    CHECK(world.ledger().sent_for(purpose::parameters) - before == static_cast<std::uint64_t>(P - 1) * 8U);

    // One rank drew other values (e.g. another build): every rank ends with rank 0's.
    if (world.rank() == P - 1 && P > 1) b.value(0, 2) = 7.0F;
    before = world.ledger().sent_for(purpose::parameters);
    train::agree_initial_parameters(world, params);
    CHECK(a.value == a0);
    CHECK(b.value == b0);
    if (P > 1 && world.rank() == 0) // the broadcast's root sends the values
        CHECK(world.ledger().sent_for(purpose::parameters) - before ==
              static_cast<std::uint64_t>(P - 1) * (8U + 17U * 4U));
}

// The RETEXO trainer: partition-independent results (exact mode), one halo exchange per
// stage, the logits variant never sends raw features.
#include "support/test_support.hpp"

#include <retexo/core/hash.hpp>
#include <retexo/graph/generate.hpp>
#include <retexo/ingest/load.hpp>
#include <retexo/io/checkpoint.hpp>
#include <retexo/io/hdf5.hpp>
#include <retexo/partition/partitioner.hpp>
#include <retexo/train/retexo.hpp>

#include <array>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>

using namespace retexo;

namespace {

graph small_graph(double train_fraction = 0.1, double test_fraction = 0.8)
{
    csbm_options o;
    o.nodes = 1200;
    o.classes = 4;
    o.features = 20;
    o.avg_degree = 8;
    o.homophily = 0.75;
    o.seed = 11;
    o.train_fraction = train_fraction;
    o.test_fraction = test_fraction;
    return generate_csbm(o);
}

train::retexo_options small_options(nn::layer_kind model)
{
    train::retexo_options o;
    o.model = model;
    o.heads = 2;
    o.seed = 6;
    const auto layer = train::normalization::layer;
    o.stages = {train::stage_options{.rounds = 6, .lr = 0.01, .hidden = 16, .dropout = 0.3, .norm = layer},
                train::stage_options{.rounds = 5, .lr = 0.01, .hidden = 16, .dropout = 0.3, .norm = layer}};
    o.skip = false; // the tests that need them turn these on
    o.output = train::stage_output::last;
    o.smooth = {};
    o.search = {};
    o.replicate_train = false;
    return o;
}

/// small_options in exact mode (results independent of the partitioning).
train::retexo_options exact_options(nn::layer_kind model, train::retexo_variant variant, int batch)
{
    auto o = small_options(model);
    o.variant = variant;
    o.deterministic = true;
    o.batch_size = batch;
    return o;
}

/// exact_options with a third stage, --skip wherever it applies (the library's default),
/// pseudo-labels in the last stage and, with full batches, three cross-fitted models per stage.
train::retexo_options three_stage_options(nn::layer_kind model, train::retexo_variant variant, int batch)
{
    auto o = exact_options(model, variant, batch);
    o.cross_fit = batch == 0 ? 3 : 1;
    o.skip.reset();
    o.stages.push_back(o.stages.back());
    o.stages.back().pseudo_labels = 1;
    return o;
}

struct run_with {
    local_partition lp;
    std::unique_ptr<train::rank_context> ctx;
    train::run_result res;
    run_with(const mpi::communicator& comm, const graph& g, const std::vector<part_t>& a,
             const train::retexo_options& o, bool inductive = false)
        : lp(extract_partition(g, a, comm.size(), comm.rank()))
    {
        ctx = std::make_unique<train::rank_context>(comm, lp, inductive);
        res = train::train_retexo(*ctx, o);
    }
};

/// Two runs that must agree bit for bit: every recorded loss and the final test accuracy.
void check_identical(const train::run_result& a, const train::run_result& b)
{
    REQUIRE(a.history.size() == b.history.size());
    for (std::size_t e = 0; e < a.history.size(); ++e) {
        INFO("record " << e);
        CHECK(a.history[e].loss == b.history[e].loss);
    }
    CHECK(a.final_acc.test == b.final_acc.test);
    CHECK(a.output_stage == b.output_stage);
    CHECK(a.output_label_head == b.output_label_head);
}

/// The same run in one process and on every rank (random partitions): {single, distributed}.
std::pair<train::run_result, train::run_result> single_and_distributed(const graph& g, const train::retexo_options& o)
{
    const mpi::communicator world;
    const mpi::communicator self(MPI_COMM_SELF);
    const run_with single(self, g, std::vector<part_t>(static_cast<std::size_t>(g.num_nodes()), 0), o);
    const run_with dist(world, g, partition_random(g.num_nodes(), world.size(), 2), o);
    return {single.res, dist.res};
}

} // namespace

TEST_CASE("retexo: every rank count reproduces the single-process run exactly", "[mpi][retexo]")
{
    const graph g = small_graph();
    for (auto model :
         {nn::layer_kind::gcn, nn::layer_kind::sage_mean, nn::layer_kind::sage_pool, nn::layer_kind::gat}) {
        for (auto variant : {train::retexo_variant::hidden, train::retexo_variant::logits}) {
            for (int batch : {0, 150}) {
                // Mini-batches run with LayerNorm off in stage 0 and GraphSAGE's neighbours'
                // weights an offset from the node's own, full batches with LayerNorm on and not.
                DYNAMIC_SECTION(name_of(model) << " " << name_of(variant) << " batch " << batch)
                {
                    auto o = exact_options(model, variant, batch);
                    o.stages[0].norm = batch == 0 ? train::normalization::layer : train::normalization::none;
                    o.neighbour_offset = batch != 0;
                    const auto [single, dist] = single_and_distributed(g, o);
                    REQUIRE(single.history.size() == dist.history.size());
                    for (std::size_t e = 0; e < single.history.size(); ++e) {
                        INFO("record " << e);
                        CHECK(dist.history[e].loss == single.history[e].loss);
                        CHECK(dist.history[e].acc.valid == single.history[e].acc.valid);
                    }
                    CHECK(dist.final_acc.train == single.final_acc.train);
                    CHECK(dist.final_acc.valid == single.final_acc.valid);
                    CHECK(dist.final_acc.test == single.final_acc.test);
                }
            }
        }
    }
}

TEST_CASE("retexo cross-fitting and --skip: every rank count reproduces the single-process run exactly",
          "[mpi][retexo][cross-fit]")
{
    const graph g = small_graph();
    for (auto model :
         {nn::layer_kind::gcn, nn::layer_kind::sage_mean, nn::layer_kind::sage_pool, nn::layer_kind::gat}) {
        for (auto variant : {train::retexo_variant::hidden, train::retexo_variant::logits}) {
            DYNAMIC_SECTION(name_of(model) << " " << name_of(variant))
            {
                auto o = three_stage_options(model, variant, 0);
                o.neighbour_offset = true; // GraphSAGE: the skip's pairs too
                const auto [single, dist] = single_and_distributed(g, o);
                check_identical(single, dist);
                CHECK(dist.final_acc.valid == single.final_acc.valid);
            }
        }
    }
}

TEST_CASE("retexo --replicate-train: the single-process run at every rank count, and no gradient crosses",
          "[mpi][retexo][replicate][bytes]")
{
    const graph g = small_graph();
    const int P = mpi::communicator().size();
    for (auto model :
         {nn::layer_kind::gcn, nn::layer_kind::sage_mean, nn::layer_kind::sage_pool, nn::layer_kind::gat}) {
        for (auto variant : {train::retexo_variant::hidden, train::retexo_variant::logits}) {
            for (int batch : {0, 150}) {
                DYNAMIC_SECTION(name_of(model) << " " << name_of(variant) << " batch " << batch)
                {
                    auto o = three_stage_options(model, variant, batch);
                    const auto [single, plain] = single_and_distributed(g, o); // gradients all-reduced
                    CHECK((plain.bytes.sent_for(purpose::gradients) > 0) == (P > 1));
                    o.replicate_train = true;
                    const auto dist = run_with(mpi::communicator(), g, partition_random(g.num_nodes(), P, 2), o).res;
                    check_identical(single, dist);
                    CHECK(dist.final_acc.valid == single.final_acc.valid);
                    REQUIRE(dist.parameters.size() == single.parameters.size());
                    for (std::size_t i = 0; i < dist.parameters.size(); ++i)
                        CHECK(dist.parameters[i].value == single.parameters[i].value);
                    // Every stage gathers its training rows (graph stages: with their
                    // in-neighbours' rows and in-edges) and no gradient crosses.
                    CHECK(dist.bytes.sent_for(purpose::gradients) == 0);
                    CHECK((dist.bytes.sent_for(purpose::train_rows) > 0) == (P > 1));
                    // The same embeddings cross as without replication.
                    CHECK(dist.bytes.sent_for(purpose::halo_forward) == plain.bytes.sent_for(purpose::halo_forward));
                }
            }
        }
    }
}

TEST_CASE("retexo GAT summing inputs first: the single-process run at every rank count", "[mpi][retexo][replicate]")
{
    // Exact mode: evaluation passes sum their supports' inputs (training passes need every
    // message); fast mode with gathered training rows: training passes too.
    const graph g = small_graph();
    for (bool deterministic : {true, false})
        DYNAMIC_SECTION((deterministic ? "exact sums" : "fast sums, training rows gathered"))
        {
            auto o = three_stage_options(nn::layer_kind::gat, train::retexo_variant::hidden, 0);
            o.deterministic = deterministic;
            o.replicate_train = !deterministic;
            o.gat_inputs_first = true;
            const auto [single, dist] = single_and_distributed(g, o);
            check_identical(single, dist);
            CHECK(dist.final_acc.valid == single.final_acc.valid);
            REQUIRE(dist.parameters.size() == single.parameters.size());
            for (std::size_t i = 0; i < dist.parameters.size(); ++i)
                CHECK(dist.parameters[i].value == single.parameters[i].value);
        }
}

TEST_CASE("retexo exact sums: rows outside the training neighbourhoods do not change them", "[mpi][retexo][replicate]")
{
    // Few training nodes, and one node outside their neighbourhoods with inputs 1000 times
    // larger: the single process holds it, a gathered neighbourhood does not, a rank may. The
    // fixed-point scales must come from the rows the sums read, or the runs differ.
    graph g = small_graph();
    g.train.resize(12);
    std::vector<char> read(static_cast<std::size_t>(g.num_nodes()), 0);
    for (node_t v : g.train) {
        read[static_cast<std::size_t>(v)] = 1;
        for (node_t u : g.in_edges.row(v))
            read[static_cast<std::size_t>(u)] = 1;
    }
    const auto far =
        std::find_if(g.test.begin(), g.test.end(), [&](node_t v) { return !read[static_cast<std::size_t>(v)]; });
    REQUIRE(far != g.test.end());
    g.features.dense().row(*far) *= 1000.0F;
    const int P = mpi::communicator().size();
    for (auto model : {nn::layer_kind::gat, nn::layer_kind::sage_pool}) {
        DYNAMIC_SECTION(name_of(model))
        {
            auto o = exact_options(model, train::retexo_variant::hidden, 0);
            const auto [single, plain] = single_and_distributed(g, o); // gradients all-reduced
            check_identical(single, plain);
            o.replicate_train = true;
            const auto dist = run_with(mpi::communicator(), g, partition_random(g.num_nodes(), P, 2), o).res;
            check_identical(single, dist);
            REQUIRE(dist.parameters.size() == single.parameters.size());
            for (std::size_t i = 0; i < dist.parameters.size(); ++i)
                CHECK(dist.parameters[i].value == single.parameters[i].value);
        }
    }
}

TEST_CASE("retexo: metering the bytes of every round costs a few bytes a round", "[mpi][retexo][bytes]")
{
    const mpi::communicator world;
    const graph g = small_graph();
    auto o = small_options(nn::layer_kind::gcn);
    o.stages[0].rounds = o.stages[1].rounds = 50;
    const run_with r(world, g, partition_random(g.num_nodes(), world.size(), 2), o);
    REQUIRE(r.res.history.size() == 100);
    // Per rank and round: one 8-byte all-reduce for the running byte count and the step's
    // error agreement; the per-stage ledger sums spread over the rounds.
    const double per_round = static_cast<double>(r.res.bytes.sent_for(purpose::control)) / world.size() / 100.0;
    INFO("control bytes per rank and round: " << per_round);
    CHECK(per_round < 100.0);
}

TEST_CASE("retexo cross-fitting: training nodes take embeddings of models that never fitted them",
          "[mpi][retexo][cross-fit]")
{
    const mpi::communicator world;
    const graph g = small_graph();
    const auto a = partition_random(g.num_nodes(), world.size(), 2);
    auto o = small_options(nn::layer_kind::gcn);
    o.stages[0] = {
        .rounds = 150, .lr = 0.03, .hidden = 64, .dropout = 0, .weight_decay = 0, .norm = train::normalization::layer};
    const run_with plain(world, g, a, o);
    o.cross_fit = 2;
    const run_with crossed(world, g, a, o);
    // Stage 0's training accuracy is measured on the embeddings the next stage reads: one
    // model per stage memorises its training nodes, fold models see them as new nodes.
    const auto& p0 = plain.res.stages[0].best;
    const auto& c0 = crossed.res.stages[0].best;
    INFO("train " << p0.train << " / " << c0.train << ", valid " << p0.valid << " / " << c0.valid);
    CHECK(p0.train > p0.valid + 0.1);
    CHECK(c0.train < p0.train - 0.1);
    CHECK(std::abs(c0.train - c0.valid) < 0.1);
    // Two models of stage 0, named apart; one of the last stage.
    std::vector<std::string> names;
    for (const auto& t : crossed.res.parameters)
        names.push_back(t.name);
    CHECK(std::count(names.begin(), names.end(), "stage0.fold0.transform.weight") == 1);
    CHECK(std::count(names.begin(), names.end(), "stage0.fold1.transform.weight") == 1);
    CHECK(std::count(names.begin(), names.end(), "stage1.transform.weight") == 1);
    // Both models' gradients in one all-reduce per round: twice the payload, as many calls.
    CHECK(crossed.res.stages[0].bytes.sent_for(purpose::gradients) ==
          2 * plain.res.stages[0].bytes.sent_for(purpose::gradients));
    CHECK(crossed.res.stages[1].bytes.sent_for(purpose::gradients) ==
          plain.res.stages[1].bytes.sent_for(purpose::gradients));
}

TEST_CASE("retexo --pseudo-labels: later stages add at most the quota of unlabelled nodes, at no halo byte",
          "[mpi][retexo][bytes]")
{
    const mpi::communicator world;
    const graph g = small_graph();
    const auto a = partition_random(g.num_nodes(), world.size(), 2);
    auto o = small_options(nn::layer_kind::gcn);
    o.stages.push_back(o.stages.back());
    for (auto& st : o.stages)
        st.rounds = 30;
    const run_with plain(world, g, a, o);
    for (auto& st : o.stages)
        st.pseudo_labels = 2;
    const run_with pseudo(world, g, a, o);
    const auto n_train = plain.ctx->global_train;
    const auto unlabelled = g.num_nodes() - n_train - plain.ctx->global_valid;
    CHECK(pseudo.res.stages[0].pseudo == 0);
    for (int k : {1, 2}) {
        INFO("stage " << k << ": " << pseudo.res.stages[k].pseudo << " pseudo-labels, " << n_train << " labels");
        CHECK(pseudo.res.stages[k].pseudo > n_train / 2); // a confident, homophilous graph
        CHECK(pseudo.res.stages[k].pseudo <= 2 * n_train);
        CHECK(pseudo.res.stages[k].pseudo <= unlabelled);
        CHECK(plain.res.stages[k].pseudo == 0);
    }
    // Stage 0 is the same run; later stages train on other targets.
    CHECK(pseudo.res.history[0].loss == plain.res.history[0].loss);
    CHECK(pseudo.res.history[30].loss != plain.res.history[30].loss);
    CHECK(pseudo.res.bytes.sent_for(purpose::halo_forward) == plain.res.bytes.sent_for(purpose::halo_forward));
    CHECK(pseudo.res.bytes.sent_for(purpose::gradients) == plain.res.bytes.sent_for(purpose::gradients));
    // A quota above every class's count takes every node but the training and validation ones.
    for (auto& st : o.stages)
        st.pseudo_labels = 1e6;
    const run_with all(world, g, a, o);
    CHECK(all.res.stages[1].pseudo == unlabelled);
    CHECK(all.res.stages[2].pseudo == unlabelled);
}

TEST_CASE("retexo --skip: later stages read the previous inputs too (SAGE: not its own embedding), at no byte's cost",
          "[mpi][retexo][bytes]")
{
    const mpi::communicator world;
    const graph g = small_graph();
    const auto a = partition_random(g.num_nodes(), world.size(), 2);
    for (auto model : {nn::layer_kind::gcn, nn::layer_kind::sage_mean, nn::layer_kind::gat}) {
        DYNAMIC_SECTION(name_of(model))
        {
            auto o = small_options(model);
            o.stages.push_back(o.stages.back());
            const run_with plain(world, g, a, o);
            o.skip = true;
            const run_with skip(world, g, a, o);
            for (auto p : {purpose::halo_forward, purpose::halo_backward, purpose::halo_eval})
                CHECK(skip.res.bytes.sent_for(p) == plain.res.bytes.sent_for(p));
            auto in_width = [](const train::run_result& r, const std::string& name) {
                for (const auto& t : r.parameters)
                    if (t.name == name) return static_cast<int>(t.value.rows());
                return -1;
            };
            // The layout the options give is the width each stage's transform reads.
            auto check_layout = [&](const train::run_result& r, const train::retexo_options& opts) {
                for (int k = 0; k < 3; ++k)
                    CHECK(opts.input_layout(k, 20, 3).width ==
                          in_width(r, "stage" + std::to_string(k) + ".transform.weight"));
            };
            auto pairs = [&](const train::retexo_options& opts, int k) {
                std::vector<std::array<int, 3>> v;
                for (const auto& pr : opts.input_layout(k, 20, 3).pairs)
                    v.push_back({pr.self, pr.neighbours, pr.width});
                return v;
            };
            using pair_list = std::vector<std::array<int, 3>>;
            check_layout(skip.res, o);
            o.skip = false;
            check_layout(plain.res, o);
            o.skip = true;
            if (model == nn::layer_kind::gat) {
                // A graph stage reads every local row's [embedding | previous input].
                CHECK(in_width(skip.res, "stage1.transform.weight") == 16 + 20);
                CHECK(in_width(skip.res, "stage2.transform.weight") == 16 + 16 + 20);
            } else {
                // Stage inputs: GCN the aggregate (20 raw, then 16), SAGE [self | mean], but
                // with --skip a later SAGE stage reads its neighbours' mean embedding only
                // (the node's own inputs come with the skip).
                const int m = model == nn::layer_kind::sage_mean ? 2 : 1;
                CHECK(in_width(plain.res, "stage1.transform.weight") == m * 16);
                CHECK(in_width(skip.res, "stage1.transform.weight") == 16 + m * 20);
                CHECK(in_width(skip.res, "stage2.transform.weight") == 16 + 16 + m * 20);
                // SAGE's pairs of (own, neighbours' mean) blocks: [mean h1 | mean h0 | x | mean x].
                CHECK(pairs(o, 2) == (m == 2 ? pair_list{{32, 52, 20}} : pair_list{}));
                if (model == nn::layer_kind::sage_mean) {
                    o.own_embedding = true;
                    const run_with own(world, g, a, o);
                    for (auto p : {purpose::halo_forward, purpose::halo_backward, purpose::halo_eval})
                        CHECK(own.res.bytes.sent_for(p) == plain.res.bytes.sent_for(p));
                    CHECK(in_width(own.res, "stage1.transform.weight") == 2 * 16 + 2 * 20);
                    CHECK(in_width(own.res, "stage2.transform.weight") == 2 * 16 + 2 * 16 + 2 * 20);
                    check_layout(own.res, o);
                    // [h1 | mean h1 | h0 | mean h0 | x | mean x]
                    CHECK(pairs(o, 2) == pair_list{{0, 16, 16}, {32, 48, 16}, {64, 84, 20}});
                    CHECK(pairs(o, 0) == pair_list{{0, 20, 20}});
                }
            }
        }
    }
}

TEST_CASE("retexo: bf16 and int8 exchanges round owned rows alike, so every rank count still agrees", "[mpi][retexo]")
{
    const mpi::communicator world;
    const mpi::communicator self(MPI_COMM_SELF);
    const graph g = small_graph();
    for (auto model : {nn::layer_kind::gcn, nn::layer_kind::gat}) {
        for (auto wire : {train::wire_precision::bf16, train::wire_precision::int8}) {
            DYNAMIC_SECTION(name_of(model) << (wire == train::wire_precision::bf16 ? " bf16" : " int8"))
            {
                auto o = small_options(model);
                o.deterministic = true;
                o.exchange.precision = wire;
                o.smooth = {.alpha = {0, 0.5, 0.9}, .steps = 3}; // its rows cross at the wire's precision too
                const run_with single(self, g, std::vector<part_t>(static_cast<std::size_t>(g.num_nodes()), 0), o);
                const run_with dist(world, g, partition_random(g.num_nodes(), world.size(), 2), o);
                check_identical(dist.res, single.res);
                REQUIRE(dist.res.smoothed);
                CHECK(dist.res.smoothed->valid == single.res.smoothed->valid);
                CHECK(dist.res.smoothed->chosen == single.res.smoothed->chosen);
            }
        }
    }
}

TEST_CASE("retexo: overlapping the stage exchange with aggregation changes no bit", "[mpi][retexo]")
{
    const mpi::communicator world;
    const graph g = small_graph();
    const auto a = partition_random(g.num_nodes(), world.size(), 2);
    using wire = train::wire_precision;
    for (auto model : {nn::layer_kind::gcn, nn::layer_kind::sage_mean}) {
        for (auto w : {wire::fp32, wire::int8}) {
            for (bool inductive : {false, true}) {
                DYNAMIC_SECTION(name_of(model)
                                << (w == wire::int8 ? " int8" : " fp32") << (inductive ? " inductive" : ""))
                {
                    auto o = small_options(model);
                    o.exchange.precision = w;
                    const run_with overlapped(world, g, a, o, inductive);
                    o.exchange.overlap = false;
                    const run_with blocking(world, g, a, o, inductive);
                    check_identical(overlapped.res, blocking.res);
                    CHECK(overlapped.res.bytes.total_sent() == blocking.res.bytes.total_sent());
                }
            }
        }
    }
}

TEST_CASE("retexo: column-blocked stage exchanges send the same bytes and change no bit", "[mpi][retexo][bytes]")
{
    const mpi::communicator world;
    const mpi::communicator self(MPI_COMM_SELF);
    const graph g = small_graph(); // 20 features, hidden 16: blocks of 7 leave uneven remainders
    const auto a = partition_random(g.num_nodes(), world.size(), 2);
    using wire = train::wire_precision;
    for (auto model : {nn::layer_kind::gcn, nn::layer_kind::sage_mean}) {
        for (auto w : {wire::fp32, wire::bf16}) {
            for (bool inductive : {false, true}) {
                DYNAMIC_SECTION(name_of(model)
                                << (w == wire::bf16 ? " bf16" : " fp32") << (inductive ? " inductive" : ""))
                {
                    auto o = small_options(model);
                    o.exchange.precision = w;
                    o.exchange.columns = 0;
                    const run_with whole(world, g, a, o, inductive);
                    o.exchange.columns = 7;
                    const run_with blocked(world, g, a, o, inductive);
                    check_identical(blocked.res, whole.res);
                    CHECK(blocked.res.bytes.total_sent() == whole.res.bytes.total_sent());
                    if (world.size() > 1) CHECK(blocked.res.bytes.total_calls() > whole.res.bytes.total_calls());
                }
            }
        }
    }
    SECTION("int8: each block has its own per-row scale; every rank count still agrees")
    {
        auto o = small_options(nn::layer_kind::gcn);
        o.deterministic = true;
        o.exchange.precision = wire::int8;
        o.exchange.columns = 7;
        const run_with single(self, g, std::vector<part_t>(static_cast<std::size_t>(g.num_nodes()), 0), o);
        const run_with dist(world, g, a, o);
        check_identical(dist.res, single.res);
    }
    SECTION("a negative block width, or blocks for a graph model, are rejected")
    {
        auto o = small_options(nn::layer_kind::gcn);
        o.exchange.columns = -1;
        CHECK_THROWS_WITH(o.validate(), Catch::Contains("--exchange-columns must be >= 0"));
        o = small_options(nn::layer_kind::gat);
        o.exchange.columns = 8;
        CHECK_THROWS_WITH(o.validate(), Catch::Contains("--exchange-columns applies to gcn and sage"));
    }
    SECTION("unset, blocks of 64 columns for gcn and sage, all at once for the graph models")
    {
        for (auto model :
             {nn::layer_kind::gcn, nn::layer_kind::sage_mean, nn::layer_kind::gat, nn::layer_kind::sage_pool}) {
            auto o = small_options(model);
            o.exchange.columns.reset();
            CHECK_NOTHROW(o.validate());
            const bool blocks = model == nn::layer_kind::gcn || model == nn::layer_kind::sage_mean;
            CHECK(o.exchange_columns() == (blocks ? 64 : 0));
            CHECK(o.exchange_options().columns == o.exchange_columns());
        }
    }
}

TEST_CASE("retexo: each stage exchanges its inputs once; logits variant sends no raw features", "[mpi][retexo][bytes]")
{
    const mpi::communicator world;
    const graph g = small_graph();
    const auto a = partition_random(g.num_nodes(), world.size(), 2);
    for (auto model : {nn::layer_kind::gcn, nn::layer_kind::gat}) {
        auto o = small_options(model);
        const run_with hidden(world, g, a, o);
        const auto rows =
            static_cast<std::uint64_t>(world.allreduce(hidden.ctx->halo->num_send_rows(), MPI_SUM, purpose::control));
        // Stage 0 sends the 20 raw features, stage 1 the 16-wide hidden embedding.
        CHECK(hidden.res.bytes.sent_for(purpose::halo_forward) == rows * (20 + 16) * 4);
        CHECK(hidden.res.stages[0].bytes.sent_for(purpose::halo_forward) == rows * 20 * 4);
        CHECK(hidden.res.bytes.sent_for(purpose::halo_eval) == 0);
        CHECK(hidden.res.bytes.sent_for(purpose::halo_backward) == 0); // fast mode: no gradient crosses

        o.variant = train::retexo_variant::logits;
        o.stages.push_back(o.stages.back());
        const run_with logits(world, g, a, o);
        // Stage 0 (an MLP) sends nothing; stages 1 and 2 send the 4 class logits per row.
        CHECK(logits.res.stages[0].bytes.sent_for(purpose::halo_forward) == 0);
        CHECK(logits.res.bytes.sent_for(purpose::halo_forward) == rows * 4 * 4 * 2);

        o = small_options(model);
        o.exchange.precision = train::wire_precision::bf16;
        const run_with half(world, g, a, o);
        CHECK(half.res.bytes.sent_for(purpose::halo_forward) == rows * (20 + 16) * 2);
        o.exchange.precision = train::wire_precision::int8;
        const run_with quarter(world, g, a, o);
        CHECK(quarter.res.bytes.sent_for(purpose::halo_forward) == rows * (20 + 4 + 16 + 4));
        // Rounding the inputs costs little accuracy (6 + 5 rounds of a 16-wide model).
        CHECK(std::abs(half.res.final_acc.test - hidden.res.final_acc.test) < 0.05);
        CHECK(std::abs(quarter.res.final_acc.test - hidden.res.final_acc.test) < 0.05);
    }
}

TEST_CASE("retexo inductive: evaluation nodes never reach training; equal at every rank count",
          "[mpi][retexo][inductive]")
{
    const mpi::communicator world;
    const mpi::communicator self(MPI_COMM_SELF);
    graph g = small_graph();
    for (auto model : {nn::layer_kind::gcn, nn::layer_kind::gat}) {
        auto o = small_options(model);
        o.deterministic = true;
        const auto a = partition_random(g.num_nodes(), world.size(), 2);
        const run_with single(self, g, std::vector<part_t>(static_cast<std::size_t>(g.num_nodes()), 0), o, true);
        const run_with dist(world, g, a, o, true);
        for (std::size_t e = 0; e < single.res.history.size(); ++e)
            CHECK(dist.res.history[e].loss == single.res.history[e].loss);
        CHECK(dist.res.final_acc.test == single.res.final_acc.test);
        { // gathered training rows (GAT: and their in-neighbours'): the training graph's inputs
            auto r = o;
            r.replicate_train = true;
            check_identical(single.res, run_with(world, g, a, r, true).res);
        }
        // Changing the features of validation and test nodes leaves every training loss of
        // stage 0 as it was (later stages start from the parameters validation selected, so
        // they legitimately depend on validation nodes through that choice).
        graph h = g;
        for (node_t v : h.valid)
            h.features.dense().row(v).setConstant(7.0F);
        for (node_t v : h.test)
            h.features.dense().row(v).setConstant(-3.0F);
        const run_with changed(world, h, a, o, true);
        INFO("model " << name_of(model));
        for (std::size_t e = 0; e < dist.res.history.size(); ++e)
            if (dist.res.history[e].stage == 0) CHECK(changed.res.history[e].loss == dist.res.history[e].loss);
        // ... whereas transductive training does see them.
        const run_with trans(world, g, a, o, false);
        const run_with trans_changed(world, h, a, o, false);
        CHECK(trans_changed.res.history.back().loss != trans.res.history.back().loss);
    }
}

TEST_CASE("retexo learns a homophilous graph", "[mpi][retexo]")
{
    const mpi::communicator world;
    const graph g = small_graph();
    for (bool norm : {true, false}) {
        DYNAMIC_SECTION("LayerNorm " << (norm ? "on" : "off"))
        {
            auto o = small_options(nn::layer_kind::gcn);
            o.stages[0].rounds = o.stages[1].rounds = 40;
            o.stages[0].norm = norm ? train::normalization::layer : train::normalization::none;
            const run_with r(world, g, partition_random(g.num_nodes(), world.size(), 2), o);
            CHECK(r.res.final_acc.test > 0.5); // 4 classes: chance is 0.25
        }
    }
}

TEST_CASE("retexo: patience stops a stage early", "[mpi][retexo]")
{
    const mpi::communicator world;
    const graph g = small_graph();
    auto o = small_options(nn::layer_kind::gcn);
    o.stages[0].rounds = o.stages[1].rounds = 60;
    o.stages[0].patience = 3; // stage 1 keeps patience 0: all its rounds
    const run_with r(world, g, partition_random(g.num_nodes(), world.size(), 2), o);
    CHECK(r.res.stages[0].rounds < 60);
    CHECK(r.res.stages[0].rounds - r.res.stages[0].best_round == 3);
    CHECK(r.res.stages[1].rounds == 60);
}

TEST_CASE("retexo's default stages: the last with dropout 0.8 and every round, the others stop early", "[retexo]")
{
    const train::retexo_options o;
    REQUIRE(o.stages.size() == 3);
    CHECK(o.output == train::stage_output::best_smoothed);
    CHECK(o.smooth.alpha == std::vector<double>{0, 0.5, 0.8, 0.9});
    CHECK(o.search.dropout == std::vector<double>{0.5, 0.8});
    // The weight decays and normalisations are the model's (data/defaults.cfg's model section
    // where it has one): GCN and GAT stages choose between no normalisation and LayerNorm too,
    // GraphSAGE stages among weight decays 0, 5e-4 and 5e-3 and keep their own normalisation
    // unless the axis is set; `search = {}` is no search at all.
    CHECK_FALSE(o.search.weight_decay.has_value());
    CHECK_FALSE(o.search.norm.has_value());
    CHECK(o.searches().weight_decay_axis() == std::vector<double>{5e-4, 5e-3});
    CHECK(o.searches().norm_axis() == std::vector{train::normalization::none, train::normalization::layer});
    CHECK(o.searches().size() == 8);
    CHECK(o.label_head_applies()); // gcn, three stages, best-smoothed
    auto gat = o;
    gat.model = nn::layer_kind::gat;
    CHECK_FALSE(gat.label_head_applies());
    CHECK(gat.searches().size() == 8);
    auto sage = o;
    sage.model = nn::layer_kind::sage_mean;
    CHECK(sage.searches().weight_decay_axis() == std::vector<double>{0, 5e-4, 5e-3});
    CHECK(sage.searches().norm_axis().empty());
    CHECK(sage.searches().size() == 6);
    sage.search.norm = {train::normalization::layer, train::normalization::none};
    CHECK(sage.searches().size() == 12);
    sage.search.weight_decay.emplace(); // the stage's own weight decay
    CHECK(sage.searches().size() == 4);
    auto pool = o;
    pool.model = nn::layer_kind::sage_pool; // no line of its own: the common lists
    CHECK(pool.searches().size() == 4);
    auto none = o;
    none.search = {};
    CHECK_FALSE(none.searches().active());
    none.search.norm = std::nullopt; // the model's default again
    CHECK(none.searches().size() == 2);
    none.search.weight_decay = std::nullopt;
    CHECK(none.searches().size() == 4);
    CHECK(o.describe() != gat.describe());
    auto own = o;
    own.search.norm.emplace(); // the stage's own normalisation: four candidates
    CHECK(own.searches().size() == 4);
    CHECK(own.describe() != o.describe()); // a checkpoint of one does not resume the other
    for (int count : {1, 2, 3, 5}) {
        const auto s = train::default_stages(count);
        REQUIRE(static_cast<int>(s.size()) == count);
        for (int k = 0; k < count; ++k) {
            const bool last = k == count - 1;
            CHECK(s[k].dropout == (last ? 0.8 : 0.5));
            CHECK(s[k].patience == (last ? 0 : 50));
            CHECK(s[k].rounds == 200);
        }
    }
    // Training rows are gathered where they are fewer bytes than the gradients, never on one
    // process, always or never when set.
    CHECK(o.replicates_rows(4, 140, 1433, 1433 * 256, 200));       // cora-like: few labels, wide inputs
    CHECK_FALSE(o.replicates_rows(4, 200000, 100, 100 * 256, 10)); // many labels, few rounds
    CHECK_FALSE(o.replicates_rows(1, 140, 1433, 1433 * 256, 200));
    auto never = o;
    never.replicate_train = false;
    CHECK_FALSE(never.replicates_rows(4, 140, 1433, 1433 * 256, 200));
    never.replicate_train = true;
    CHECK(never.replicates_rows(4, 200000, 100, 100 * 256, 10));
    auto bad = o;
    bad.stages[1].patience = -1;
    CHECK_THROWS_WITH(bad.validate(), Catch::Contains("--patience: stage 1 must be >= 0, got -1"));
}

TEST_CASE("retexo: selecting by validation loss keeps the lowest-loss round, at every rank count", "[mpi][retexo]")
{
    const mpi::communicator world;
    const mpi::communicator self(MPI_COMM_SELF);
    const graph g = small_graph();
    for (auto model : {nn::layer_kind::gcn, nn::layer_kind::gat}) {
        DYNAMIC_SECTION(name_of(model))
        {
            auto o = small_options(model);
            o.deterministic = true;
            o.select = train::selection::loss;
            o.stages[0].rounds = 12;
            o.stages[0].schedule = train::lr_schedule::linear;
            const run_with single(self, g, std::vector<part_t>(static_cast<std::size_t>(g.num_nodes()), 0), o);
            const run_with dist(world, g, partition_random(g.num_nodes(), world.size(), 2), o);
            REQUIRE(single.res.history.size() == dist.res.history.size());
            for (std::size_t e = 0; e < single.res.history.size(); ++e) {
                INFO("record " << e);
                CHECK(dist.res.history[e].valid_loss == single.res.history[e].valid_loss);
                CHECK(dist.res.history[e].loss == single.res.history[e].loss);
            }
            CHECK(dist.res.final_acc.test == single.res.final_acc.test);
            // The kept round of each stage is the one with the lowest validation loss.
            for (const auto& st : dist.res.stages) {
                double lowest = std::numeric_limits<double>::infinity();
                int at = 0;
                for (const auto& rec : dist.res.history)
                    if (rec.stage == st.stage && rec.valid_loss < lowest) {
                        lowest = rec.valid_loss;
                        at = rec.epoch;
                    }
                CHECK(std::isfinite(lowest));
                CHECK(st.best_round == at);
            }
        }
    }
}

TEST_CASE("retexo rejects bad options", "[mpi][retexo][bad-input]")
{
    auto o = small_options(nn::layer_kind::gcn);
    o.stages[1].rounds = 0;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--rounds: stage 1 needs at least 1 round"));
    o = small_options(nn::layer_kind::gat);
    o.stages[0].hidden = 15;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("divisible by --heads"));
    o = small_options(nn::layer_kind::gcn);
    o.stages.clear();
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--stages must be at least 1"));
    o = small_options(nn::layer_kind::gat);
    o.heads = 0;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--heads must be at least 1, got 0"));
    o = small_options(nn::layer_kind::gcn);
    o.stages[1].weight_decay = -1;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--weight-decay: stage 1 must be >= 0, got -1"));
    o = small_options(nn::layer_kind::gcn);
    o.cross_fit = 0;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--cross-fit must be >= 1, got 0"));
    o.cross_fit = 2;
    o.batch_size = 100;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--cross-fit 2 needs full-batch training"));
    o.cross_fit = 1;
    o.stages[1].pseudo_labels = -1;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--pseudo-labels: stage 1 needs a number >= 0, got -1"));
    o.stages[1].pseudo_labels = 0;
    o.search.pseudo_labels = {0, -2};
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--search-pseudo-labels: every value must be >= 0, got -2"));
    o.search.pseudo_labels.clear();
    o = small_options(nn::layer_kind::gat);
    o.variant = train::retexo_variant::logits;
    o.skip = true;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--skip with --variant logits needs gcn or sage"));
    o = small_options(nn::layer_kind::gcn);
    o.checkpoint.dir = "ck";
    o.search_parallel = true;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--search-parallel cannot run with --checkpoint-dir"));
    o.search_parallel.reset(); // unset: one candidate after another with checkpoints
    CHECK_NOTHROW(o.validate());
    CHECK_THROWS_WITH(parse_name<train::retexo_variant>("probs", "--variant"),
                      Catch::Equals("--variant: unknown variant 'probs' (expected hidden or logits)"));
}

TEST_CASE("output-stage best-smoothed predicts with the stage that validates best after label spreading",
          "[retexo][mpi]")
{
    const graph g = small_graph();
    auto o = three_stage_options(nn::layer_kind::gcn, train::retexo_variant::hidden, 0);
    o.stages[2].lr = 1e-5; // a last stage that learns almost nothing
    o.label_head = false;  // a stage predicts (the label head's test has it predict)
    o.smooth = {.alpha = {0.0, 0.5, 0.9}, .steps = 5};
    auto smoothed = o;
    smoothed.output = train::stage_output::best_smoothed;
    const auto [single, dist] = single_and_distributed(g, smoothed);
    REQUIRE(single.smoothed.has_value());
    REQUIRE(dist.smoothed.has_value());
    CHECK(single.final_acc.test == dist.final_acc.test);
    CHECK(single.smoothed->chosen == dist.smoothed->chosen);
    // The same stages as with the other outputs; the one chosen is among them, and after
    // spreading it validates at least as well as the stage either other output picks.
    const mpi::communicator world;
    for (auto out : {train::stage_output::last, train::stage_output::best}) {
        auto other = o;
        other.output = out;
        const run_with r(world, g, partition_random(g.num_nodes(), world.size(), 2), other);
        CHECK(dist.final_acc.valid >= r.res.final_acc.valid);
        for (std::size_t k = 0; k < 3; ++k)
            CHECK(r.res.stages[k].best.test == dist.stages[k].best.test);
    }
    const auto& out = dist.stages.at(static_cast<std::size_t>(dist.output_stage));
    CHECK(out.best.valid == dist.smoothed->model.valid);
    CHECK(out.best.test == dist.smoothed->model.test);
    CHECK(out.spread.acc.test == dist.final_acc.test);
    CHECK(out.spread.alpha == dist.smoothed->chosen);
    for (const auto& st : dist.stages) // each stage spread, the output the best after it
        CHECK(st.spread.acc.valid <= out.spread.acc.valid);
}

TEST_CASE("retexo checkpoints: stop and resume reproduces the uninterrupted run exactly", "[mpi][retexo][checkpoint]")
{
    const mpi::communicator world;
    const graph g = small_graph();
    const auto a = partition_random(g.num_nodes(), world.size(), 2);
    const auto lp = extract_partition(g, a, world.size(), world.rank());
    const train::rank_context ctx(world, lp);
    const test::shared_temp_dir shared(world);
    const std::string& dir = shared.path;
    struct setup {
        nn::layer_kind model;
        bool extras, search;
    };
    for (auto [model, extras, search] :
         {setup{nn::layer_kind::gcn, false, false}, setup{nn::layer_kind::gat, false, false},
          setup{nn::layer_kind::gcn, true, false}, setup{nn::layer_kind::gat, true, false},
          setup{nn::layer_kind::sage_mean, false, true}}) {
        auto o = small_options(model);
        // A stage search: the first stop lands in stage 0's second candidate, the second
        // in stage 1's first.
        if (search) o.search.weight_decay = {5e-4, 5e-2};
        // GraphSAGE's checkpoints hold W_s and the offset D.
        o.neighbour_offset = model == nn::layer_kind::sage_mean;
        o.stages.push_back(o.stages.back());       // three stages
        o.cross_fit = extras ? 2 : 1;              // and with fold models and skipped inputs
        if (extras) o.stages[2].pseudo_labels = 1; // pseudo-labels from stage 1's logits
        o.skip = extras;
        o.replicate_train = extras;                    // and gathered training rows (GAT: with their neighbourhoods)
        o.output = !extras ? train::stage_output::last // the best stage's logits cross the checkpoints
                   : model == nn::layer_kind::gat ? train::stage_output::best_smoothed
                                                  : train::stage_output::best;
        if (extras) o.smooth = {.alpha = {0.0, 0.8}, .steps = 3}; // and label spreading at the end
        if (extras) o.stages[1].patience = 2;                     // and a stage that stops early
        const std::string tag = name_of(model) + (extras ? "-cross-fit" : "") + (search ? "-search" : "");
        o.checkpoint.dir = std::string(dir).append("/full-").append(tag);
        const auto full = train::train_retexo(ctx, o);
        REQUIRE_FALSE(full.interrupted);

        auto compare = [&](const train::run_result& r) {
            REQUIRE_FALSE(r.interrupted);
            REQUIRE(r.history.size() == full.history.size());
            for (std::size_t e = 0; e < r.history.size(); ++e) {
                CHECK(r.history[e].loss == full.history[e].loss);
                CHECK(r.history[e].acc.valid == full.history[e].acc.valid);
            }
            CHECK(r.final_acc.test == full.final_acc.test);
            // Every byte of training traffic is the same; only the checkpoints' own
            // agreement traffic depends on when the run stopped, and a stage resumed
            // inside gathers its training rows again.
            for (int p = 0; p < num_purposes; ++p) {
                const auto why = static_cast<purpose>(p);
                if (why == purpose::train_rows)
                    CHECK(r.bytes.sent[p] >= full.bytes.sent[p]);
                else if (why != purpose::checkpoint)
                    CHECK(r.bytes.sent[p] == full.bytes.sent[p]);
            }
            REQUIRE(r.parameters.size() == full.parameters.size());
            for (std::size_t i = 0; i < r.parameters.size(); ++i)
                CHECK(r.parameters[i].value == full.parameters[i].value);
            REQUIRE(r.stages.size() == full.stages.size());
            for (std::size_t i = 0; i < r.stages.size(); ++i)
                CHECK(r.stages[i].bytes.sent_for(purpose::gradients) ==
                      full.stages[i].bytes.sent_for(purpose::gradients));
        };

        // Stop after stage 1 (a stage boundary), then resume: the same checkpoints were
        // written, so every counter is the uninterrupted run's, and the label head's record
        // crosses the checkpoint.
        auto b = o;
        b.checkpoint.dir = std::string(dir).append("/boundary-").append(tag);
        b.checkpoint.stop_after_stage = 1;
        CHECK(train::train_retexo(ctx, b).interrupted);
        b.checkpoint.stop_after_stage = -1;
        b.checkpoint.resume = true;
        const auto resumed = train::train_retexo(ctx, b);
        compare(resumed);
        CHECK(resumed.bytes.sent == full.bytes.sent);
        CHECK(resumed.bytes.calls == full.bytes.calls);
        for (std::size_t e = 0; e < resumed.history.size(); ++e) {
            CHECK(resumed.history[e].bytes == full.history[e].bytes);
            CHECK(resumed.history[e].calls == full.history[e].calls);
        }
        REQUIRE(full.label_head.has_value() == (model == nn::layer_kind::gcn && extras));
        REQUIRE(resumed.label_head.has_value() == full.label_head.has_value());
        if (full.label_head) {
            CHECK(resumed.label_head->rounds == full.label_head->rounds);
            CHECK(resumed.label_head->acc.valid == full.label_head->acc.valid);
            CHECK(resumed.label_head->spread.acc.valid == full.label_head->spread.acc.valid);
            CHECK(resumed.label_head->kept == full.label_head->kept);
        }

        // Stop inside stage 1 (as SIGTERM would), resume, stop again inside stage 2, resume.
        auto c = o;
        c.checkpoint.dir = std::string(dir).append("/mid-").append(tag);
        int polls = 0;
        c.checkpoint.stop_requested = [&] { return ++polls == 9; };
        CHECK(train::train_retexo(ctx, c).interrupted);
        c.checkpoint.resume = true;
        polls = 0;
        c.checkpoint.stop_requested = [&] { return ++polls == 4; };
        CHECK(train::train_retexo(ctx, c).interrupted);
        c.checkpoint.stop_requested = {};
        compare(train::train_retexo(ctx, c));

        // A checkpoint of another configuration is refused on every rank.
        auto d = b;
        d.stages[1].lr *= 2;
        CHECK_THROWS_WITH(train::train_retexo(ctx, d), Catch::Contains("made with another model configuration"));
    }
    // ... and so is one made with another partition.
    const auto a2 = partition_random(g.num_nodes(), world.size(), 3);
    const auto lp2 = extract_partition(g, a2, world.size(), world.rank());
    const train::rank_context ctx2(world, lp2);
    auto o = small_options(nn::layer_kind::gcn);
    o.checkpoint.dir = dir + "/full-gcn";
    o.checkpoint.resume = true;
    if (world.size() > 1)
        CHECK_THROWS_WITH(train::train_retexo(ctx2, o), Catch::Contains("made with another partition"));
    // ... and so is one made from other input features (here: normalised rows).
    auto lp3 = lp;
    normalize_rows(lp3.features);
    const train::rank_context ctx3(world, lp3);
    o.checkpoint.dir = dir + "/full-gcn";
    o.stages.push_back(o.stages.back()); // the three stages of the checkpointed run
    CHECK_THROWS_WITH(train::train_retexo(ctx3, o), Catch::Contains("made with other input features"));
    // ... and resuming from nothing.
    o.checkpoint.dir = dir + "/none";
    CHECK_THROWS_WITH(train::train_retexo(ctx, o), Catch::Contains("no checkpoint to resume from"));
    world.barrier();
}

namespace {
/// What a checkpoint file says it belongs to (to rewrite it as the run wrote it).
checkpoint_identity identity_of(const std::string& path)
{
    const auto f = h5::file::open(path);
    return {.assignment_hash = hash_from_hex(f.attr_string("assignment_hash")),
            .ranks = static_cast<int>(f.attr_int("ranks")),
            .rank = static_cast<int>(f.attr_int("rank")),
            .config = f.attr_string("config"),
            .input_digest = hash_from_hex(f.attr_string("input_digest"))};
}
} // namespace

TEST_CASE("retexo checkpoints: one rank's damaged file fails every rank, naming it", "[mpi][retexo][checkpoint]")
{
    const mpi::communicator world;
    const graph g = small_graph();
    const auto lp = extract_partition(g, partition_random(g.num_nodes(), world.size(), 2), world.size(), world.rank());
    const train::rank_context ctx(world, lp);
    const test::shared_temp_dir shared(world);
    auto o = small_options(nn::layer_kind::gcn);
    o.stages.push_back(o.stages.back()); // three stages
    const auto full = train::train_retexo(ctx, o);
    // At the start of the last stage (no checkpoint after it), and inside it.
    o.checkpoint.dir = shared / "boundary";
    o.checkpoint.stop_after_stage = 1;
    REQUIRE(train::train_retexo(ctx, o).interrupted);
    o.checkpoint.stop_after_stage = -1;
    o.checkpoint.dir = shared / "inside";
    int polls = 0;
    o.checkpoint.stop_requested = [&] { return ++polls == 15; }; // round 2 of stage 2
    REQUIRE(train::train_retexo(ctx, o).interrupted);
    o.checkpoint.stop_requested = {};
    o.checkpoint.resume = true;

    const int last = world.size() - 1; // the rank whose file is damaged
    int n = 0;
    // Copy `from`, let the last rank damage its file, and resume from the copy.
    auto resume_damaged = [&](const std::string& from, const std::function<void(const std::string&)>& damage) {
        const std::string dir = shared / ("case" + std::to_string(n++));
        if (world.rank() == 0) std::filesystem::copy(shared / from, dir, std::filesystem::copy_options::recursive);
        world.barrier();
        if (world.rank() == last) damage(checkpoint_path(dir, last));
        world.barrier();
        auto r = o;
        r.checkpoint.dir = dir;
        return r;
    };
    auto attribute = [](const char* name, std::int64_t value) {
        return [=](const std::string& path) { h5::file::open(path, true).set_attr(name, value); };
    };
    auto rewrite = [](const std::function<void(retexo_checkpoint&)>& edit) {
        return [=](const std::string& path) {
            const auto id = identity_of(path);
            auto c = read_checkpoint(path, id);
            edit(c);
            write_checkpoint(path, c, id);
        };
    };
    struct damage {
        const char* what;
        const char* from;
        std::function<void(const std::string&)> f;
        bool ranks_disagree = false; // in range: only another rank's file shows it
    };
    const std::vector<damage> cases = {
        {"stage 99", "boundary", attribute("stage", 99)},
        {"stage -1", "boundary", attribute("stage", -1)},
        {"stage 1", "boundary", attribute("stage", 1)},
        {"best_stage 50", "boundary", attribute("best_stage", 50)},
        {"best_label_head 2", "boundary", attribute("best_label_head", 2)},
        {"next_round beyond the stage", "inside", attribute("next_round", 1000)},
        {"step", "boundary", attribute("step", 7), true},
        {"inputs/h of one row", "boundary",
         rewrite([](retexo_checkpoint& c) { c.carry.h.all = c.carry.h.all.to_dense().topRows(1).eval(); })},
        {"inputs/h of twice the rows", "boundary", rewrite([](retexo_checkpoint& c) {
             const matrix_f h = c.carry.h.all.to_dense();
             matrix_f twice(2 * h.rows(), h.cols());
             twice << h, h;
             c.carry.h.all = twice;
         })},
        {"NaN in finished/", "boundary",
         rewrite([](retexo_checkpoint& c) { c.finished[1].value(0, 0) = std::numeric_limits<float>::quiet_NaN(); })},
        {"finished/ cut", "boundary",
         rewrite([](retexo_checkpoint& c) { c.finished[0].value = c.finished[0].value.topRows(2).eval(); }), true},
        {"stage/params cut", "inside",
         rewrite([](retexo_checkpoint& c) { c.current.params[0] = c.current.params[0].topRows(2).eval(); })},
    };
    for (const auto& d : cases) {
        if (d.ranks_disagree && world.size() == 1) continue;
        INFO(d.what);
        const auto r = resume_damaged(d.from, d.f);
        CHECK_THROWS_WITH(train::train_retexo(ctx, r), Catch::Contains(checkpoint_path(r.checkpoint.dir, last)));
    }
    // A previous file that is not one matters only when the current ones do not agree.
    const auto r = resume_damaged("boundary", [](const std::string& path) {
        std::filesystem::remove(path + "_prev");
        std::filesystem::create_directory(path + "_prev");
    });
    const auto resumed = train::train_retexo(ctx, r);
    REQUIRE_FALSE(resumed.interrupted);
    CHECK(resumed.final_acc.test == full.final_acc.test);
    REQUIRE(resumed.parameters.size() == full.parameters.size());
    for (std::size_t i = 0; i < full.parameters.size(); ++i)
        CHECK(resumed.parameters[i].value == full.parameters[i].value);
    world.barrier();
}

TEST_CASE("retexo on sparse features: the dense run to rounding, exact at every rank count, fewer bytes",
          "[mpi][retexo][sparse]")
{
    const mpi::communicator world;
    const mpi::communicator self(MPI_COMM_SELF);
    const graph sparse = test::with_sparse_features(small_graph(), 0.1);
    const graph dense = test::dense_twin(sparse);
    const auto a = partition_random(sparse.num_nodes(), world.size(), 2);
    const std::vector<part_t> one(static_cast<std::size_t>(sparse.num_nodes()), 0);
    for (auto model :
         {nn::layer_kind::gcn, nn::layer_kind::sage_mean, nn::layer_kind::sage_pool, nn::layer_kind::gat}) {
        for (auto variant : {train::retexo_variant::hidden, train::retexo_variant::logits}) {
            for (auto wire : {train::wire_precision::fp32, train::wire_precision::int8}) {
                for (bool inductive : {false, true}) {
                    DYNAMIC_SECTION(name_of(model) << " " << name_of(variant) << " " << name_of(wire)
                                                   << (inductive ? " inductive" : ""))
                    {
                        auto o = small_options(model);
                        o.variant = variant;
                        o.exchange.precision = wire;
                        const run_with s(world, sparse, a, o, inductive);
                        const run_with d(world, dense, a, o, inductive);
                        REQUIRE(s.res.history.size() == d.res.history.size());
                        for (std::size_t e = 0; e < s.res.history.size(); ++e)
                            CHECK(s.res.history[e].loss == Approx(d.res.history[e].loss).epsilon(1e-4));
                        CHECK(std::abs(s.res.final_acc.test - d.res.final_acc.test) <= 0.01);
                        // Stage 0's inputs cross as column ids and values: fewer bytes.
                        if (world.size() > 1 && variant == train::retexo_variant::hidden)
                            CHECK(s.res.stages[0].bytes.sent_for(purpose::halo_forward) <
                                  d.res.stages[0].bytes.sent_for(purpose::halo_forward));
                        o.deterministic = true;
                        const run_with single(self, sparse, one, o, inductive);
                        const run_with dist(world, sparse, a, o, inductive);
                        check_identical(dist.res, single.res);
                    }
                }
            }
        }
    }
}

TEST_CASE("retexo checkpoints hold sparse stage inputs: stop inside stage 0 and resume", "[mpi][retexo][sparse]")
{
    const mpi::communicator world;
    const graph g = test::with_sparse_features(small_graph(), 0.1);
    const auto a = partition_random(g.num_nodes(), world.size(), 2);
    const auto lp = extract_partition(g, a, world.size(), world.rank());
    const train::rank_context ctx(world, lp);
    const test::shared_temp_dir shared(world);
    const std::string& dir = shared.path;
    auto o = small_options(nn::layer_kind::sage_mean);
    const auto full = train::train_retexo(ctx, o);
    o.checkpoint.dir = dir + "/sparse";
    int polls = 0;
    o.checkpoint.stop_requested = [&] { return ++polls == 3; };
    CHECK(train::train_retexo(ctx, o).interrupted);
    o.checkpoint.stop_requested = {};
    o.checkpoint.resume = true;
    const auto resumed = train::train_retexo(ctx, o);
    check_identical(resumed, full);
    world.barrier();
}

TEST_CASE("a stage search keeps, per stage, what its chosen settings alone compute", "[retexo][mpi]")
{
    const graph g = small_graph();
    const mpi::communicator world;
    const auto a = partition_random(g.num_nodes(), world.size(), 2);
    for (auto model : {nn::layer_kind::gcn, nn::layer_kind::gat}) {
        INFO(name_of(model));
        auto o = exact_options(model, train::retexo_variant::hidden, 0);
        o.stages[0].rounds = o.stages[1].rounds = 12;
        o.search.lr = {0.002, 0.05};
        o.search.dropout = {0.0, 0.5};
        o.search.norm = {train::normalization::none, train::normalization::layer};
        // Stage 0 has no pseudo-labels to take and stage 1 (the last, no hidden layer) nothing
        // to normalise: each trains 8 of the 16 candidates.
        o.search.pseudo_labels = {0, 2};
        o.search.patience = 4;
        const run_with searched(world, g, a, o);
        REQUIRE(searched.res.stages.size() == 2);
        auto alone = o;
        alone.search = {};
        for (std::size_t k = 0; k < 2; ++k) {
            const auto& sr = searched.res.stages[k];
            CHECK(sr.candidates == 8);
            REQUIRE(sr.chosen >= 0);
            REQUIRE(sr.chosen < (k == 0 ? 8 : 16));
            CHECK(sr.settings == o.search.describe(o.stages[k], static_cast<std::size_t>(sr.chosen)));
            alone.stages[k] = o.search.candidate(o.stages[k], static_cast<std::size_t>(sr.chosen));
            alone.stages[k].patience = o.search.patience;
            if (alone.stages[k].pseudo_labels == 0) CHECK(sr.pseudo == 0);
        }
        // The candidates differ enough that the choice matters, and the chosen one is kept.
        const run_with chosen(world, g, a, alone);
        CHECK(chosen.res.final_acc.test == searched.res.final_acc.test);
        CHECK(chosen.res.final_acc.valid == searched.res.final_acc.valid);
        REQUIRE(chosen.res.parameters.size() == searched.res.parameters.size());
        for (std::size_t i = 0; i < chosen.res.parameters.size(); ++i)
            CHECK(chosen.res.parameters[i].value == searched.res.parameters[i].value);
        for (std::size_t k = 0; k < 2; ++k)
            CHECK(chosen.res.stages[k].best_round == searched.res.stages[k].best_round);
        // Every candidate's rounds are in the history, each stopped by its patience.
        CHECK(searched.res.history.size() > chosen.res.history.size());
        // Stage 0's candidates 4-7 are 0-3 with LayerNorm: their first rounds differ.
        std::map<int, double> first_loss;
        for (const auto& r : searched.res.history)
            if (r.stage == 0 && r.epoch == 1) first_loss[r.candidate] = r.loss;
        REQUIRE(first_loss.size() == 8);
        for (int c = 0; c < 4; ++c)
            CHECK(first_loss[c] != first_loss[c + 4]);
        std::set<int> last_stage; // no LayerNorm candidate: 0-3 and, with pseudo-labels, 8-11
        for (const auto& r : searched.res.history)
            if (r.stage == 1) last_stage.insert(r.candidate);
        CHECK(last_stage == std::set<int>{0, 1, 2, 3, 8, 9, 10, 11});
        // Exact mode: one process and every rank search alike.
        const auto [single, dist] = single_and_distributed(g, o);
        check_identical(single, dist);
        for (std::size_t k = 0; k < 2; ++k)
            CHECK(single.stages[k].chosen == dist.stages[k].chosen);
    }
    auto bad = small_options(nn::layer_kind::gcn);
    bad.search.lr = {0.01, 0.02};
    bad.search.dropout = {1.5};
    CHECK_THROWS_WITH(bad.validate(), Catch::Contains("--search-dropout"));
}

TEST_CASE("label spreading after the last stage: chosen on validation, the same on every partitioning", "[retexo][mpi]")
{
    const graph g = small_graph();
    auto o = exact_options(nn::layer_kind::gcn, train::retexo_variant::hidden, 0);
    auto smoothed = o;
    smoothed.smooth.alpha = {0.0, 0.5, 0.9};
    smoothed.smooth.steps = 5;
    const auto [single, dist] = single_and_distributed(g, smoothed);
    REQUIRE(single.smoothed.has_value());
    REQUIRE(dist.smoothed.has_value());
    CHECK(single.smoothed->valid == dist.smoothed->valid);
    CHECK(single.smoothed->chosen == dist.smoothed->chosen);
    CHECK(single.final_acc.test == dist.final_acc.test);
    // The kept candidate has the best validation accuracy, and alpha 0 is the model's own.
    const auto& sm = *dist.smoothed;
    CHECK(sm.valid[0] == sm.model.valid);
    CHECK(*std::max_element(sm.valid.begin(), sm.valid.end()) == dist.final_acc.valid);
    // The model itself is untouched: the same run without smoothing gives its accuracy.
    const mpi::communicator world;
    const run_with plain(world, g, partition_random(g.num_nodes(), world.size(), 2), o);
    CHECK(plain.res.final_acc.test == sm.model.test);
    // On this homophilous graph spreading the training labels helps validation.
    CHECK(sm.chosen > 0);
    CHECK(dist.final_acc.valid > sm.model.valid);
    // Only the ranks' halo rows travel.
    if (world.size() > 1) CHECK(dist.bytes.sent[static_cast<int>(purpose::smooth)] > 0);
    CHECK(single.bytes.sent[static_cast<int>(purpose::smooth)] == 0);
    auto bad = o;
    bad.smooth.alpha = {1.0};
    CHECK_THROWS_WITH(bad.validate(), Catch::Contains("--smooth-alpha"));
}

namespace {

/// Label spreading's G0 on the whole graph as smooth_predictions makes it: the softmax of
/// logit(v, c) in float, every training node's row its one-hot label.
template <typename Logit>
matrix_f spread_start(const graph& g, Logit logit)
{
    matrix_f g0(g.num_nodes(), g.num_classes);
    for (node_t v = 0; v < g.num_nodes(); ++v)
        for (int c = 0; c < g.num_classes; ++c)
            g0(v, c) = static_cast<float>(logit(v, c));
    train::softmax_rows(g0);
    for (node_t v : g.train) {
        g0.row(v).setZero();
        g0(v, g.labels[v]) = 1;
    }
    return g0;
}

/// logit(v, c) of the partition's owned nodes.
template <typename Logit>
matrix_f owned_logits(const local_partition& lp, int classes, Logit logit)
{
    matrix_f x(lp.num_owned(), classes);
    for (node_t r = 0; r < lp.num_owned(); ++r)
        for (int c = 0; c < classes; ++c)
            x(r, c) = static_cast<float>(logit(lp.owned_global[r], c));
    return x;
}

} // namespace

TEST_CASE("label spreading equals its recurrence and sends C values per halo row and step, whatever the candidates",
          "[retexo][mpi]")
{
    const mpi::communicator world;
    const graph g = small_graph();
    const auto lp = extract_partition(g, partition_random(g.num_nodes(), world.size(), 3), world.size(), world.rank());
    const train::rank_context ctx(world, lp);
    const int C = g.num_classes;
    const node_t n = g.num_nodes();
    const int steps = 4;
    auto logit = [](node_t v, int c) { return std::sin(0.37 * v + 1.3 * c); };
    // The oracle: G <- (1 - alpha) G0 + alpha A G, steps times, on the whole graph, in double.
    auto reference = [&](double alpha) {
        const Eigen::MatrixXd g0 = spread_start(g, logit).cast<double>();
        Eigen::MatrixXd cur = g0, next(n, C);
        for (int s = 0; s < steps; ++s) {
            for (node_t v = 0; v < n; ++v) {
                const double dv = static_cast<double>(g.in_edges.degree(v) + 1);
                next.row(v) = cur.row(v) / dv;
                for (node_t u : g.in_edges.row(v))
                    next.row(v) += cur.row(u) / std::sqrt(dv * static_cast<double>(g.in_edges.degree(u) + 1));
            }
            cur = (1 - alpha) * g0 + alpha * next;
        }
        return cur;
    };
    const matrix_f logits = owned_logits(lp, C, logit);
    phase_timer timer;
    const auto smooth = static_cast<int>(purpose::smooth);
    for (const auto& alphas : {std::vector<double>{0.7}, std::vector<double>{0.0, 0.5, 0.9}}) {
        const auto before = ctx.comm.ledger().sent[smooth];
        const auto r = train::smooth_predictions(ctx, logits, {.alpha = alphas, .steps = steps}, {}, timer);
        CHECK(ctx.comm.ledger().sent[smooth] - before ==
              static_cast<std::uint64_t>(steps * C * ctx.halo->num_send_rows()) * sizeof(float));
        REQUIRE(r.alpha > 0); // spreading helps on this homophilous graph
        const auto want = reference(r.alpha);
        double err = 0;
        for (node_t row = 0; row < lp.num_owned(); ++row)
            for (int c = 0; c < C; ++c)
                err = std::max(err, std::abs(r.scores(row, c) - want(lp.owned_global[row], c)));
        CHECK(err < 1e-5);
    }
}

TEST_CASE("label spreading sends its rows at the stage inputs' wire precision, every row rounded alike",
          "[retexo][mpi]")
{
    const mpi::communicator world;
    const graph g = small_graph();
    const auto lp = extract_partition(g, partition_random(g.num_nodes(), world.size(), 5), world.size(), world.rank());
    const train::rank_context ctx(world, lp);
    const int C = g.num_classes;
    const node_t n = g.num_nodes();
    const int steps = 3;
    const double alpha = 0.8;
    auto logit = [](node_t v, int c) { return std::cos(0.41 * v - 0.9 * c); };
    for (const auto precision : {train::wire_precision::bf16, train::wire_precision::int8}) {
        const wire_format wire = train::format_of(precision);
        // The oracle: the powers P_k = A round(P_{k-1}) on the whole graph, every row rounded
        // as the wire rounds it (int8: with its own row's scale), whoever owns it; then
        // G = (1 - alpha) sum_{k<K} alpha^k P_k + alpha^K P_K.
        matrix_f p = spread_start(g, logit);
        Eigen::MatrixXd want = (1 - alpha) * p.cast<double>();
        for (int k = 1; k <= steps; ++k) {
            matrix_f sent = p;
            for (node_t v = 0; v < n; ++v) {
                const float sc = wire.scale(sent.row(v).data(), C);
                for (int c = 0; c < C; ++c)
                    sent(v, c) = wire.round(sent(v, c), sc);
            }
            for (node_t v = 0; v < n; ++v) {
                const double dv = static_cast<double>(g.in_edges.degree(v) + 1);
                Eigen::RowVectorXd row = sent.row(v).cast<double>() / dv;
                for (node_t u : g.in_edges.row(v))
                    row += sent.row(u).cast<double>() / std::sqrt(dv * static_cast<double>(g.in_edges.degree(u) + 1));
                p.row(v) = row.cast<float>();
            }
            want += std::pow(alpha, k) * (k < steps ? 1 - alpha : 1.0) * p.cast<double>();
        }
        const matrix_f logits = owned_logits(lp, C, logit);
        phase_timer timer;
        const auto smooth = static_cast<int>(purpose::smooth);
        const auto before = ctx.comm.ledger().sent[smooth];
        const auto r =
            train::smooth_predictions(ctx, logits, {.alpha = {alpha}, .steps = steps}, {.precision = precision}, timer);
        CHECK(ctx.comm.ledger().sent[smooth] - before ==
              static_cast<std::uint64_t>(steps * wire.dense_row_bytes(C) * ctx.halo->num_send_rows()));
        double err = 0;
        for (node_t row = 0; row < lp.num_owned(); ++row)
            for (int c = 0; c < C; ++c)
                err = std::max(err, std::abs(r.scores(row, c) - want(lp.owned_global[row], c)));
        CHECK(err < 1e-5);
    }
}

TEST_CASE("output-stage best predicts with the stage of the best validation accuracy", "[retexo][mpi]")
{
    const graph g = small_graph();
    auto o = three_stage_options(nn::layer_kind::gcn, train::retexo_variant::hidden, 0);
    o.stages[2].lr = 1e-5; // a last stage that learns almost nothing: an earlier one is better
    o.label_head = false;  // a stage predicts (the label head's test has it predict)
    auto best = o;
    best.output = train::stage_output::best;
    const auto [single, dist] = single_and_distributed(g, best);
    CHECK(single.final_acc.test == dist.final_acc.test);
    REQUIRE(dist.stages.size() == 3);
    double top = -1;
    std::size_t at = 0;
    for (std::size_t k = 0; k < 3; ++k)
        if (dist.stages[k].best.valid > top || (k < 2 && dist.stages[k].best.valid == top)) {
            top = dist.stages[k].best.valid;
            at = k;
        }
    CHECK(at < 2);
    CHECK(dist.output_stage == static_cast<int>(at));
    CHECK(dist.final_acc.valid == top);
    CHECK(dist.final_acc.test == dist.stages[at].best.test);
    // The stages themselves are those of the run that predicts with its last stage.
    const mpi::communicator world;
    const run_with last(world, g, partition_random(g.num_nodes(), world.size(), 2), o);
    CHECK(last.res.final_acc.valid == last.res.stages[2].best.valid);
    CHECK(last.res.stages[at].best.test == dist.stages[at].best.test);
}

TEST_CASE("retexo reports the accuracy of its own predictions, whatever predicts", "[retexo][mpi]")
{
    const mpi::communicator world;
    const graph g = small_graph();
    const auto a = partition_random(g.num_nodes(), world.size(), 2);
    for (auto model : {nn::layer_kind::gcn, nn::layer_kind::sage_mean, nn::layer_kind::gat}) {
        for (auto out : {train::stage_output::last, train::stage_output::best, train::stage_output::best_smoothed}) {
            for (bool spread : {false, true}) {
                DYNAMIC_SECTION(name_of(model) << " " << name_of(out) << (spread ? " spread" : ""))
                {
                    auto o = three_stage_options(model, train::retexo_variant::hidden, 0);
                    o.stages[2].lr = 1e-5; // an earlier stage or the label head may predict
                    o.output = out;
                    o.label_head = true;
                    if (spread) o.smooth = {.alpha = {0.0, 0.5, 0.9}, .steps = 5};
                    const run_with r(world, g, a, o);
                    const auto own = train::reduce_accuracies(*r.ctx, r.res.logits);
                    CHECK(r.res.final_acc.train == own.train);
                    CHECK(r.res.final_acc.valid == own.valid);
                    CHECK(r.res.final_acc.test == own.test);
                    REQUIRE(r.res.output_stage >= 0);
                    if (out == train::stage_output::last) CHECK((r.res.output_stage == 2 && !r.res.output_label_head));
                    if (r.res.label_head) CHECK(r.res.label_head->kept == r.res.output_label_head);
                }
            }
        }
    }
}

TEST_CASE("a stage search side by side: the one-after-another search's choice, history and model at every rank count",
          "[retexo][mpi][replicate]")
{
    const graph g = small_graph();
    const mpi::communicator world;
    const int P = world.size();
    const auto a = partition_random(g.num_nodes(), P, 2);
    for (auto [model, batch] : {std::pair{nn::layer_kind::gcn, 0}, std::pair{nn::layer_kind::gat, 0},
                                std::pair{nn::layer_kind::sage_mean, 150}}) {
        INFO(name_of(model) << " batch " << batch);
        // Stages 0 and 1 side by side (full batches: cross-fitted); stage 2 chooses
        // pseudo-labels (collective), so it trains its candidates one after another.
        auto o = three_stage_options(model, train::retexo_variant::hidden, batch);
        for (auto& st : o.stages)
            st.rounds = 10;
        o.search.lr = {0.002, 0.05};
        o.search.dropout = {0.0, 0.5};
        o.search.patience = 3;
        o.replicate_train = true;
        o.track_test = true;
        auto after = o;
        after.search_parallel = false;
        o.search_parallel = true;
        const run_with one_after_another(world, g, a, after);
        const run_with side_by_side(world, g, a, o);
        const auto& x = one_after_another.res;
        const auto& y = side_by_side.res;
        check_identical(x, y);
        REQUIRE(x.history.size() == y.history.size());
        for (std::size_t e = 0; e < x.history.size(); ++e) {
            INFO("record " << e);
            CHECK(x.history[e].candidate == y.history[e].candidate);
            CHECK(x.history[e].epoch == y.history[e].epoch);
            CHECK(x.history[e].acc.valid == y.history[e].acc.valid);
            CHECK(x.history[e].acc.test == y.history[e].acc.test);
            CHECK(x.history[e].valid_loss == y.history[e].valid_loss);
        }
        REQUIRE(x.stages.size() == y.stages.size());
        for (std::size_t k = 0; k < x.stages.size(); ++k) {
            CHECK(x.stages[k].chosen == y.stages[k].chosen);
            CHECK(x.stages[k].candidates == y.stages[k].candidates);
            CHECK(x.stages[k].best_round == y.stages[k].best_round);
            CHECK_FALSE(x.stages[k].side_by_side);
            CHECK(y.stages[k].side_by_side == (P > 1 && k < 2)); // stage 2's pseudo-labels: not
        }
        REQUIRE(x.parameters.size() == y.parameters.size());
        for (std::size_t i = 0; i < x.parameters.size(); ++i)
            CHECK(x.parameters[i].value == y.parameters[i].value);
        CHECK(y.final_acc.valid == x.final_acc.valid);
        // No gradient crosses either way; side by side gathers the evaluation rows too.
        CHECK(y.bytes.sent_for(purpose::gradients) == 0);
        if (P > 1) CHECK(y.bytes.sent_for(purpose::train_rows) > x.bytes.sent_for(purpose::train_rows));
        // And the one-process run.
        const mpi::communicator self(MPI_COMM_SELF);
        const run_with single(self, g, std::vector<part_t>(static_cast<std::size_t>(g.num_nodes()), 0), o);
        check_identical(single.res, y);
    }
}

TEST_CASE("a stage search goes side by side by default where the evaluation rows are no more than the training rows",
          "[retexo][mpi][replicate]")
{
    const graph g = small_graph(0.3, 0.6); // validation 0.1
    const mpi::communicator world;
    const int P = world.size();
    const auto a = partition_random(g.num_nodes(), P, 2);
    auto o = small_options(nn::layer_kind::gcn);
    o.search.weight_decay = {5e-4, 5e-3};
    o.replicate_train = true;
    for (bool track_test : {false, true}) {
        INFO("track_test " << track_test);
        o.track_test = track_test; // the test rows too: more than the training rows
        const run_with r(world, g, a, o);
        for (const auto& st : r.res.stages)
            CHECK(st.side_by_side == (P > 1 && !track_test));
    }
}

TEST_CASE("retexo label head: the stages unchanged, at every rank count, resumed anywhere", "[retexo][mpi][checkpoint]")
{
    const mpi::communicator world;
    const mpi::communicator self(MPI_COMM_SELF);
    const graph g = test::with_sparse_features(small_graph(), 0.1);
    const auto a = partition_random(g.num_nodes(), world.size(), 2);
    const test::shared_temp_dir shared(world);
    for (auto model : {nn::layer_kind::gcn, nn::layer_kind::sage_mean}) {
        for (bool inductive : {false, true}) {
            DYNAMIC_SECTION(name_of(model) << (inductive ? " inductive" : ""))
            {
                auto o = exact_options(model, train::retexo_variant::hidden, 0);
                o.skip.reset();
                o.output = train::stage_output::best;
                o.stages[0].rounds = o.stages[1].rounds = 8;
                o.search.lr = {0.002, 0.05};
                o.search.pseudo_labels = {0, 1}; // stage 0 has none to take: 2 candidates
                o.search.patience = 3;
                // SAGE gathers its training rows: the label inputs join and leave those too,
                // and stage 1's pseudo-labelled candidates gather theirs.
                o.replicate_train = model == nn::layer_kind::sage_mean;
                REQUIRE(o.label_head_applies());
                const run_with headed(world, g, a, o, inductive);
                REQUIRE(headed.res.label_head);
                CHECK(headed.res.label_head->candidates == 2);
                CHECK(headed.res.label_head->rounds > 0);
                // Without it, the same stages round for round; the predictions differ only
                // where it was kept.
                auto plain = o;
                plain.label_head = false;
                const run_with without(world, g, a, plain, inductive);
                CHECK_FALSE(without.res.label_head);
                REQUIRE(headed.res.history.size() == without.res.history.size()); // it is not in it
                for (std::size_t e = 0; e < headed.res.history.size(); ++e)
                    CHECK(headed.res.history[e].loss == without.res.history[e].loss);
                if (!headed.res.label_head->kept) CHECK(headed.res.final_acc.test == without.res.final_acc.test);
                CHECK(headed.res.label_head->acc.valid != without.res.stages[0].best.valid);
                // The run names what predicts, and its accuracy is that of its predictions
                // (the label head's, where it predicts).
                CHECK(headed.res.label_head->kept == headed.res.output_label_head);
                const auto& out = headed.res.output_label_head
                                      ? headed.res.label_head->acc
                                      : headed.res.stages.at(static_cast<std::size_t>(headed.res.output_stage)).best;
                const auto own = train::reduce_accuracies(*headed.ctx, headed.res.logits);
                for (const accuracies& a : {out, own}) {
                    CHECK(headed.res.final_acc.valid == a.valid);
                    CHECK(headed.res.final_acc.test == a.test);
                }
                // One process alike.
                const auto lp1 =
                    extract_partition(g, std::vector<part_t>(static_cast<std::size_t>(g.num_nodes()), 0), 1, 0);
                const train::rank_context ctx1(self, lp1, inductive);
                std::vector<epoch_record> head_rounds; // as the progress callback reports them
                const auto single = train::train_retexo(ctx1, o, [&](const epoch_record& r) {
                    if (r.label_head) head_rounds.push_back(r);
                });
                check_identical(single, headed.res);
                REQUIRE(single.label_head);
                CHECK(single.label_head->acc.valid == headed.res.label_head->acc.valid);
                // Each of its rounds reported as the label head's, naming the candidate trained.
                CHECK(static_cast<int>(head_rounds.size()) == single.label_head->rounds);
                std::set<int> head_candidates;
                for (const auto& r : head_rounds) {
                    CHECK(r.stage == 0);
                    head_candidates.insert(r.candidate);
                }
                CHECK(static_cast<int>(head_candidates.size()) == single.label_head->candidates);
                // Stopped in the second round of every candidate of both stages (stage 1's after
                // the head): resumed, the same run.
                std::vector<int> stops;
                for (std::size_t k = 0; k < headed.res.history.size(); ++k)
                    if (headed.res.history[k].epoch == 2) stops.push_back(static_cast<int>(k) + 1);
                REQUIRE(stops.size() == 6);
                stops.push_back(0); // the run without a search, stopped at its third poll (stage 0)
                const auto lp = extract_partition(g, a, world.size(), world.rank());
                const train::rank_context ctx(world, lp, inductive);
                auto lone = o;
                lone.search = {};
                const run_with uninterrupted(world, g, a, lone, inductive);
                for (int stop : stops) {
                    INFO("stop at poll " << stop);
                    auto c = o;
                    if (stop == 0) {
                        c = lone;
                        stop = 3;
                    }
                    c.checkpoint.dir = shared.path + "/head-" + std::string(name_of(model)) +
                                       (inductive ? "-i-" : "-") + std::to_string(stop) +
                                       (c.search.active() ? "" : "-lone");
                    int polls = 0;
                    c.checkpoint.stop_requested = [&] { return ++polls == stop; };
                    CHECK(train::train_retexo(ctx, c).interrupted);
                    c.checkpoint.stop_requested = {};
                    c.checkpoint.resume = true;
                    const auto resumed = train::train_retexo(ctx, c);
                    const auto& full = c.search.active() ? headed.res : uninterrupted.res;
                    check_identical(resumed, full);
                    CHECK(resumed.final_acc.valid == full.final_acc.valid);
                }
            }
        }
    }
    world.barrier();
}

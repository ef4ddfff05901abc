// RETEXO checkpoints directly (io/checkpoint.hpp): what is written is read back bit for bit,
// dense and sparse inputs alike; the previous file is kept; a checkpoint of another run is
// refused with a message naming the file and what differs.
#include "support/test_support.hpp"

#include <retexo/io/checkpoint.hpp>
#include <retexo/io/hdf5.hpp>

#include <filesystem>
#include <functional>
#include <limits>

using namespace retexo;
namespace fs = std::filesystem;

namespace {

matrix_f counting(std::int64_t rows, std::int64_t cols, float start)
{
    matrix_f m(rows, cols);
    for (std::int64_t i = 0; i < m.size(); ++i)
        m.data()[i] = start + 0.25F * static_cast<float>(i);
    return m;
}

csr_matrix sparse_rows()
{
    csr_matrix s(3, 5);
    s.offsets = {0, 2, 2, 3};
    s.indices = {1, 4, 0};
    s.values = {0.5F, -2.0F, 7.0F};
    return s;
}

retexo_checkpoint sample()
{
    retexo_checkpoint c;
    c.seq = 7;
    c.stage = 1;
    c.next_round = 12;
    c.step = 345;
    c.elapsed = 2.5;
    c.carry.h.all = counting(3, 4, 1);
    c.carry.skip.all = sparse_rows();
    c.carry.best_logits = counting(3, 2, -1);
    c.carry.best_stage = 0;
    c.carry.best_label_head = true;
    c.carry.best_acc = {.train = 0.9, .valid = 0.7, .test = 0.65};
    c.carry.best_valid = 0.75;
    c.finished = {{"stage0.w", counting(4, 4, 3)}, {"stage0.b", counting(1, 4, 0)}};
    c.history = {{.stage = 0, .epoch = 1, .loss = 1.5, .bytes = 100, .calls = 3, .seconds = 0.1},
                 {.stage = 1, .epoch = 11, .loss = 0.5, .bytes = 300, .calls = 9, .seconds = 2.4}};
    stage_record s{
        .stage = 0, .rounds = 10, .best_round = 8, .spread = {.alpha = 0.8, .acc = {1, 0.75, 0.5}}, .seconds = 1.25};
    s.bytes.add(purpose::gradients, 64, 32, 2);
    c.stages = {s};
    c.label_head = label_head_record{
        .candidates = 4, .rounds = 37, .acc = {1, 0.7, 0.6}, .spread = {.alpha = 0.5, .acc = {1, 0.8, 0.7}}};
    c.done.add(purpose::halo_forward, 1000, 900, 4);
    c.phases = {{"compute", 1.5}, {"sync", 0.25}};
    c.current.rounds_done = 11;
    c.current.best_round = 9;
    c.current.best_score = 0.8;
    c.current.best = {counting(4, 2, 5)};
    c.current.x.all = counting(3, 4, 9);
    c.current.fold_count = {5, 6};
    c.current.elapsed = 0.75;
    c.current.done.add(purpose::gradients, 10, 20, 1);
    c.current.optimizer_steps = 11;
    c.current.params = {counting(4, 2, 1)};
    c.current.first_moments = {counting(4, 2, 2)};
    c.current.second_moments = {counting(4, 2, 3)};
    c.current.best_loss = 0.625;
    c.current.search = {.candidate = 2,
                        .tried = 3,
                        .step0 = 300,
                        .top = 1,
                        .top_step = 320,
                        .top_round = 9,
                        .top_rounds_done = 12,
                        .top_score = 0.7,
                        .top_loss = 0.5,
                        .top_best = {counting(4, 2, 4)}};
    return c;
}

const checkpoint_identity identity{
    .assignment_hash = 0x1234, .ranks = 2, .rank = 1, .config = "gcn 3 stages", .input_digest = 0xabcd};

} // namespace

TEST_CASE("a checkpoint reads back what was written", "[io][checkpoint]")
{
    test::temp_dir tmp;
    const auto path = checkpoint_path(tmp.path(), 1);
    CHECK(fs::path(path).filename() == "ckpt.rank1.h5");
    const auto c = sample();
    write_checkpoint(path, c, identity);
    const auto r = read_checkpoint(path, identity);
    CHECK(r.seq == 7);
    CHECK(r.stage == 1);
    CHECK(r.next_round == 12);
    CHECK(r.step == 345);
    CHECK(r.elapsed == 2.5);
    CHECK(r.carry.h.all.dense() == c.carry.h.all.dense());
    REQUIRE(r.carry.skip.all.is_sparse());
    CHECK(r.carry.skip.all.sparse().offsets == c.carry.skip.all.sparse().offsets);
    CHECK(r.carry.skip.all.sparse().indices == c.carry.skip.all.sparse().indices);
    CHECK(r.carry.skip.all.sparse().values == c.carry.skip.all.sparse().values);
    CHECK(r.carry.best_logits == c.carry.best_logits);
    CHECK(r.carry.best_stage == 0);
    CHECK(r.carry.best_label_head);
    CHECK(r.carry.best_acc.test == 0.65);
    CHECK(r.carry.best_valid == 0.75);
    REQUIRE(r.finished.size() == 2);
    CHECK(r.finished[0].name == "stage0.w");
    CHECK(r.finished[1].value == c.finished[1].value);
    REQUIRE(r.history.size() == 2);
    CHECK(r.history[1].epoch == 11);
    CHECK(r.history[1].bytes == 300);
    REQUIRE(r.stages.size() == 1);
    CHECK(r.stages[0].best_round == 8);
    CHECK(r.stages[0].spread.alpha == 0.8);
    CHECK(r.stages[0].spread.acc.valid == 0.75);
    CHECK(r.stages[0].bytes.sent[static_cast<int>(purpose::gradients)] == 64);
    REQUIRE(r.label_head);
    CHECK(r.label_head->candidates == 4);
    CHECK(r.label_head->rounds == 37);
    CHECK(r.label_head->acc.test == 0.6);
    CHECK(r.label_head->spread.alpha == 0.5);
    CHECK(r.label_head->spread.acc.valid == 0.8);
    // Without one, none is read back.
    auto plain = c;
    plain.label_head.reset();
    write_checkpoint(path, plain, identity);
    CHECK_FALSE(read_checkpoint(path, identity).label_head);
    CHECK(r.done.sent[static_cast<int>(purpose::halo_forward)] == 1000);
    CHECK(r.phases == c.phases);
    CHECK(r.current.rounds_done == 11);
    CHECK(r.current.best_score == 0.8);
    CHECK(r.current.best[0] == c.current.best[0]);
    CHECK(r.current.x.all.dense() == c.current.x.all.dense());
    CHECK(r.current.fold_count == c.current.fold_count);
    CHECK(r.current.optimizer_steps == 11);
    CHECK(r.current.second_moments[0] == c.current.second_moments[0]);
    CHECK(r.current.best_loss == 0.625);
    const auto& rs = r.current.search;
    CHECK(rs.candidate == 2);
    CHECK(rs.tried == 3);
    CHECK(rs.step0 == 300);
    CHECK(rs.top == 1);
    CHECK(rs.top_step == 320);
    CHECK(rs.top_round == 9);
    CHECK(rs.top_rounds_done == 12);
    CHECK(rs.top_score == 0.7);
    CHECK(rs.top_loss == 0.5);
    CHECK(rs.top_best == c.current.search.top_best);
}

TEST_CASE("a new checkpoint keeps the previous one", "[io][checkpoint]")
{
    test::temp_dir tmp;
    const auto path = checkpoint_path(tmp.path(), 1);
    auto c = sample();
    write_checkpoint(path, c, identity);
    c.seq = 8;
    write_checkpoint(path, c, identity);
    CHECK(read_checkpoint(path, identity).seq == 8);
    CHECK(read_checkpoint(path + "_prev", identity).seq == 7);
}

TEST_CASE("a checkpoint of another run is refused, naming the file", "[io][checkpoint][bad-input]")
{
    test::temp_dir tmp;
    const auto path = checkpoint_path(tmp.path(), 1);
    write_checkpoint(path, sample(), identity);
    auto other = identity;
    other.ranks = 4;
    CHECK_THROWS_WITH(read_checkpoint(path, other), Catch::Contains(path + ": made by a run with 2 ranks"));
    other = identity;
    other.rank = 0;
    CHECK_THROWS_WITH(read_checkpoint(path, other), Catch::Contains("belongs to rank 1"));
    other = identity;
    other.assignment_hash = 0x4321;
    CHECK_THROWS_WITH(read_checkpoint(path, other), Catch::Contains("made with another partition"));
    other = identity;
    other.config = "gat 3 stages";
    CHECK_THROWS_WITH(read_checkpoint(path, other), Catch::Contains("made with another model configuration"));
    other = identity;
    other.input_digest = 1;
    CHECK_THROWS_WITH(read_checkpoint(path, other), Catch::Contains("made with other input features"));
    test::write_file(tmp / "junk.h5", "not HDF5");
    CHECK_THROWS_WITH(read_checkpoint(tmp / "junk.h5", identity), Catch::Contains("junk.h5"));
    // A checkpoint of another format version (an earlier retexo's) is refused, naming both.
    write_checkpoint(path, sample(), identity);
    h5::file::open(path, true).set_attr("format_version", std::int64_t{3});
    CHECK_THROWS_WITH(read_checkpoint(path, identity),
                      Catch::Contains(path + ": checkpoint format version 3, this retexo reads version 5"));
}

TEST_CASE("a checkpoint out of range or not finite is refused, naming the file and what", "[io][checkpoint][bad-input]")
{
    test::temp_dir tmp;
    const auto path = checkpoint_path(tmp.path(), 1);
    auto refused = [&](const std::function<void(retexo_checkpoint&)>& edit, const std::string& what) {
        auto c = sample();
        edit(c);
        write_checkpoint(path, c, identity);
        CHECK_THROWS_WITH(read_checkpoint(path, identity), Catch::Contains(path + ": " + what));
    };
    refused([](auto& c) { c.stage = -1; }, "attribute stage must be >= 0, got -1");
    refused([](auto& c) { c.stage = 99; }, "1 finished stages in stages/, but attribute stage is 99");
    refused([](auto& c) { c.seq = 0; }, "attribute seq must be >= 1");
    refused([](auto& c) { c.step = -3; }, "attribute step must be >= 0");
    refused([](auto& c) { c.carry.best_stage = 50; },
            "attribute best_stage must be -1 or a finished stage (0..0), got 50");
    refused([](auto& c) { c.carry.best_acc.test = std::numeric_limits<double>::quiet_NaN(); },
            "inputs/best_acc is not finite");
    refused([](auto& c) { c.next_round = 40; }, "attribute stage.rounds_done is 11, but next_round is 40");
    refused([](auto& c) { c.current.best_round = 12; }, "attribute stage.best_round must be in [0, 11], got 12");
    refused([](auto& c) { c.current.search.top = 2; }, "attribute search.top must be -1 or a candidate before");
    refused([](auto& c) { c.current.first_moments[0] = counting(3, 2, 0); },
            "stage/first_moments/0 is 3 x 2, stage/params/0 4 x 2");
    refused([](auto& c) { c.finished[1].value(0, 2) = std::numeric_limits<float>::infinity(); },
            "finished/1 holds a value that is not finite");
    refused([](auto& c) { c.carry.h.all.dense()(1, 1) = std::numeric_limits<float>::quiet_NaN(); },
            "inputs/h: row 1 has a non-finite value"); // the feature reader's own check
    refused([](auto& c) { c.carry.skip.all.sparse().values[0] = std::numeric_limits<float>::quiet_NaN(); },
            "inputs/skip"); // the sparse reader's own check
    refused([](auto& c) { c.current.params[0](0, 0) = std::numeric_limits<float>::quiet_NaN(); },
            "stage/params/0 holds a value that is not finite");
    refused([](auto& c) { c.elapsed = -1; }, "attribute elapsed must be a finite time >= 0");
    write_checkpoint(path, sample(), identity);
    h5::file::open(path, true).set_attr("num_finished", std::int64_t{-2});
    CHECK_THROWS_WITH(read_checkpoint(path, identity), Catch::Contains(path + ": attribute num_finished must be >= 0"));
    h5::file::open(path, true).set_attr("num_finished", std::int64_t{3});
    CHECK_THROWS_WITH(read_checkpoint(path, identity),
                      Catch::Contains(path + ": attribute finished_names has fewer than num_finished (3) names"));
}

// A RETEXO stage's search: every candidate setting trained on the stage's one exchange, the
// best on validation kept (one after another, or side by side, one rank each).
#include "retexo_run.hpp"

#include <algorithm>
#include <numeric>

namespace retexo::train::detail {

namespace {
/// A finished candidate of a stage search.
struct candidate_outcome {
    int candidate = 0, round = 0, rounds_done = 0;
    double score = 0, loss = 0;
    std::int64_t step = 0; ///< the run's optimiser step after it
};

/// The search keeps the best candidate so far: a higher score, or the same with a lower loss
/// (the first of equals, in candidate order).
bool keeps(stage_progress::search_state& st, const candidate_outcome& c)
{
    if (st.top >= 0 && !(c.score > st.top_score || (c.score == st.top_score && c.loss < st.top_loss))) return false;
    st.top = c.candidate;
    st.top_score = c.score;
    st.top_loss = c.loss;
    st.top_round = c.round;
    st.top_rounds_done = c.rounds_done;
    st.top_step = c.step;
    return true;
}
} // namespace

bool retexo_run::search(retexo_stage& s)
{
    const stage_options& base = o_.stages[static_cast<std::size_t>(s.index)];
    auto& st = s.search; // restored with the stage's progress when it resumes inside the search
    // Every candidate starts from the same optimiser step (it keys the dropout masks), and the
    // run goes on from the kept one's: the kept candidate's stage, and the stages after it,
    // are what a run with its settings alone (and the same patience) computes.
    if (!s.resumed) st = {.step0 = step_};
    const std::vector<std::size_t> order = o_.search.trained(s.index, has_head(s));
    int owner = -1; // side by side: the rank that trained the kept candidate
    if (searches_side_by_side(s, order)) {
        owner = search_side_by_side(s, order);
    } else {
        for (std::size_t i : order) {
            if (i < static_cast<std::size_t>(st.candidate)) continue; // finished before a checkpoint
            if (!s.resumed) { // else: the candidate a checkpoint was taken in goes on
                reset_model(s);
                step_ = st.step0;
                st.candidate = static_cast<int>(i);
                ++st.tried;
            }
            s.so = o_.search.candidate(base, i);
            build_model(s);
            if (!train_rounds(s)) return false;
            s.resumed = false;
            if (keeps(st, {.candidate = static_cast<int>(i),
                           .round = s.best_round,
                           .rounds_done = s.rounds_done,
                           .score = s.best_score,
                           .loss = s.best_loss,
                           .step = step_}))
                st.top_best = std::move(s.best);
        }
    }
    step_ = st.top_step;
    reset_model(s);
    s.so = o_.search.candidate(base, static_cast<std::size_t>(st.top));
    build_model(s);
    if (owner < 0 && resumed_ && resumed_->stage == s.index) // kept since a checkpoint, maybe
        check_tensors(resumed_->source, "search/top_best", st.top_best, s);
    if (owner >= 0) { // its selected round's parameters, to every rank
        if (ctx_.comm.rank() == owner) restore(s.params, st.top_best);
        for (auto* p : s.params)
            ctx_.comm.broadcast(std::span<float>(p->value.data(), static_cast<std::size_t>(p->value.size())), owner,
                                purpose::parameters);
        st.top_best = snapshot(s.params);
    }
    s.best_score = st.top_score;
    s.best_loss = st.top_loss;
    s.best_round = st.top_round;
    s.rounds_done = st.top_rounds_done;
    s.best = std::move(st.top_best);
    s.candidates = st.tried;
    s.chosen = st.top;
    s.side_by_side = owner >= 0;
    return true;
}

void retexo_run::share_history(std::size_t from)
{
    constexpr std::size_t fields = 11;
    std::vector<double> mine;
    for (auto r = result_.history.begin() + static_cast<std::ptrdiff_t>(from); r != result_.history.end(); ++r)
        mine.insert(mine.end(),
                    {static_cast<double>(r->stage), static_cast<double>(r->epoch), static_cast<double>(r->candidate),
                     r->loss, r->valid_loss, r->acc.train, r->acc.valid, r->acc.test, static_cast<double>(r->bytes),
                     static_cast<double>(r->calls), r->seconds});
    result_.history.resize(from);
    const auto all = ctx_.comm.allgatherv(std::span<const double>(mine), purpose::metrics);
    std::vector<epoch_record> records;
    for (std::size_t k = 0; k + fields <= all.size(); k += fields)
        records.push_back({.stage = static_cast<int>(all[k]),
                           .epoch = static_cast<int>(all[k + 1]),
                           .candidate = static_cast<int>(all[k + 2]),
                           .loss = all[k + 3],
                           .valid_loss = all[k + 4],
                           .acc = {.train = all[k + 5], .valid = all[k + 6], .test = all[k + 7]},
                           .bytes = static_cast<std::uint64_t>(all[k + 8]),
                           .calls = static_cast<std::uint64_t>(all[k + 9]),
                           .seconds = all[k + 10]});
    std::stable_sort(records.begin(), records.end(),
                     [](const auto& a, const auto& b) { return a.candidate < b.candidate; });
    result_.history.insert(result_.history.end(), records.begin(), records.end());
}

bool retexo_run::searches_side_by_side(retexo_stage& s, const std::vector<std::size_t>& order)
{
    if (s.resumed || order.size() < 2 || ctx_.comm.size() == 1 || checkpointing() || o_.search_parallel == false)
        return false;
    if (s.index > 0 && uses_pseudo_labels(s.index)) return false; // choosing them is collective
    if (!o_.search_parallel) {
        // The default: the evaluation rows a gather would send (graph stages: one more per
        // in-edge), over all ranks, are no more than the training rows.
        const auto weight = [&](const std::vector<node_t>& rows, const nn::local_graph& g) {
            return static_cast<std::int64_t>(rows.size()) + (s.graph ? in_edges_of(rows, g) : 0);
        };
        std::int64_t w[2] = {weight(ctx_.train_rows, ctx_.train_graph), weight(ctx_.valid_rows, ctx_.graph)};
        if (o_.track_test) w[1] += weight(ctx_.test_rows, ctx_.graph);
        ctx_.comm.allreduce(std::span<std::int64_t>(w, 2), MPI_SUM, purpose::control);
        if (w[1] > w[0]) return false;
    }
    // The stage's first build decides whether it gathers its training rows.
    s.so = o_.search.candidate(o_.stages[static_cast<std::size_t>(s.index)], order.front());
    build_model(s);
    reset_model(s);
    return s.all_train.has_value();
}

int retexo_run::search_side_by_side(retexo_stage& s, const std::vector<std::size_t>& order)
{
    const stage_options& base = o_.stages[static_cast<std::size_t>(s.index)];
    auto& st = s.search;
    const auto& comm = ctx_.comm;
    gather_evaluation_rows(s);
    bytes_before_alone_ = meter_.all_bytes(); // none cross until every candidate is done
    const std::size_t history0 = result_.history.size();
    // Per candidate: its outcome and its selected round's parameters.
    std::vector<double> mine;
    std::map<int, std::vector<matrix_f>> best;
    std::string err;
    alone_ = true;
    try {
        for (auto j = static_cast<std::size_t>(comm.rank()); j < order.size();
             j += static_cast<std::size_t>(comm.size())) {
            reset_model(s);
            step_ = st.step0;
            st.candidate = static_cast<int>(order[j]);
            s.so = o_.search.candidate(base, order[j]);
            build_model(s);
            train_rounds(s); // no checkpoints here: it runs to the end
            mine.insert(mine.end(),
                        {static_cast<double>(order[j]), static_cast<double>(s.best_round),
                         static_cast<double>(s.rounds_done), s.best_score, s.best_loss, static_cast<double>(step_)});
            best[static_cast<int>(order[j])] = std::move(s.best);
        }
    } catch (const std::exception& e) {
        err = e.what();
    }
    alone_ = false;
    s.all_eval.clear();
    {
        phase_timer::scope sc(meter_.timer, "sync");
        comm.idle_barrier(); // ranks done first leave the cores to those still training
        comm.agree(err);     // one rank's error: every rank's, before the next collective
    }
    // Every candidate's outcome, in candidate order: the choice of a search one after another.
    const auto all = comm.allgatherv(std::span<const double>(mine), purpose::control);
    std::vector<candidate_outcome> outcomes;
    for (std::size_t k = 0; k + 6 <= all.size(); k += 6)
        outcomes.push_back({.candidate = static_cast<int>(all[k]),
                            .round = static_cast<int>(all[k + 1]),
                            .rounds_done = static_cast<int>(all[k + 2]),
                            .score = all[k + 3],
                            .loss = all[k + 4],
                            .step = static_cast<std::int64_t>(all[k + 5])});
    std::sort(outcomes.begin(), outcomes.end(), [](const auto& a, const auto& b) { return a.candidate < b.candidate; });
    for (const auto& c : outcomes)
        keeps(st, c);
    st.tried = static_cast<int>(outcomes.size());
    const auto position = static_cast<std::size_t>(std::find(order.begin(), order.end(), st.top) - order.begin());
    const int owner = static_cast<int>(position % static_cast<std::size_t>(comm.size()));
    if (comm.rank() == owner) st.top_best = std::move(best[st.top]);
    share_history(history0);
    return owner;
}

} // namespace retexo::train::detail

// The RETEXO trainer: stages trained one after another, each on inputs exchanged once.
#include "retexo_run.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iterator>
#include <numeric>
#include <optional>
#include <span>
#include <sstream>

namespace retexo::train {

void retexo_options::validate_values() const
{
    RETEXO_ENSURE(!stages.empty(), "--stages must be at least 1");
    RETEXO_ENSURE(heads >= 1, "--heads must be at least 1, got " << heads);
    for (std::size_t stage = 0; stage < stages.size(); ++stage) {
        const auto& s = stages[stage];
        RETEXO_ENSURE(s.rounds >= 1, "--rounds: stage " << stage << " needs at least 1 round, got " << s.rounds);
        RETEXO_ENSURE(s.hidden >= 1, "--hidden: stage " << stage << " width must be positive, got " << s.hidden);
        RETEXO_ENSURE(s.dropout >= 0 && s.dropout < 1,
                      "--dropout: stage " << stage << " rate must be in [0, 1), got " << s.dropout);
        RETEXO_ENSURE(s.lr > 0 && std::isfinite(s.lr), "--lr: stage " << stage << " must be positive, got " << s.lr);
        RETEXO_ENSURE(s.weight_decay >= 0 && std::isfinite(s.weight_decay),
                      "--weight-decay: stage " << stage << " must be >= 0, got " << s.weight_decay);
        RETEXO_ENSURE(s.patience >= 0, "--patience: stage " << stage << " must be >= 0, got " << s.patience);
        RETEXO_ENSURE(s.pseudo_labels >= 0 && std::isfinite(s.pseudo_labels),
                      "--pseudo-labels: stage " << stage << " needs a number >= 0, got " << s.pseudo_labels);
    }
    RETEXO_ENSURE(batch_size >= 0, "--batch-size must be >= 0, got " << batch_size);
    RETEXO_ENSURE(cross_fit >= 1, "--cross-fit must be >= 1, got " << cross_fit);
    RETEXO_ENSURE(cross_fit == 1 || batch_size == 0,
                  "--cross-fit " << cross_fit << " needs full-batch training, not --batch-size " << batch_size);
    RETEXO_ENSURE(exchange.columns.value_or(0) >= 0, "--exchange-columns must be >= 0, got " << *exchange.columns);
    RETEXO_ENSURE(checkpoint.dir.empty() || checkpoint.every_minutes >= 0,
                  "--checkpoint-every-min must be >= 0, got " << checkpoint.every_minutes);
    RETEXO_ENSURE(checkpoint.dir.empty() || checkpoint.max_hours >= 0,
                  "--max-hours must be >= 0, got " << checkpoint.max_hours);
    RETEXO_ENSURE(!checkpoint.resume || !checkpoint.dir.empty(), "--resume needs --checkpoint-dir");
    RETEXO_ENSURE(!search_parallel.value_or(false) || checkpoint.dir.empty(),
                  "--search-parallel cannot run with --checkpoint-dir: a stop must be agreed every round, and "
                  "ranks training different candidates do not meet until the search ends");
    for (double v : search.lr)
        RETEXO_ENSURE(v > 0 && std::isfinite(v), "--search-lr: every learning rate must be positive, got " << v);
    for (double v : search.dropout)
        RETEXO_ENSURE(v >= 0 && v < 1, "--search-dropout: every rate must be in [0, 1), got " << v);
    for (double v : search.weight_decay_axis())
        RETEXO_ENSURE(v >= 0 && std::isfinite(v), "--search-weight-decay: every value must be >= 0, got " << v);
    for (double v : search.pseudo_labels)
        RETEXO_ENSURE(v >= 0 && std::isfinite(v), "--search-pseudo-labels: every value must be >= 0, got " << v);
    smooth.validate();
    RETEXO_ENSURE(search.patience >= 0, "--search-patience must be >= 0, got " << search.patience);
}

void retexo_options::validate() const
{
    validate_values();
    for (std::size_t stage = 0; stage < stages.size(); ++stage)
        RETEXO_ENSURE(model != nn::layer_kind::gat || stages[stage].hidden % heads == 0,
                      "--hidden " << stages[stage].hidden << " must be divisible by --heads " << heads << " for GAT");
    RETEXO_ENSURE(exchange.columns.value_or(0) == 0 || model == nn::layer_kind::gcn ||
                      model == nn::layer_kind::sage_mean,
                  "--exchange-columns applies to gcn and sage: " << name_of(model)
                                                                 << " trains on the exchanged rows every round");
    RETEXO_ENSURE(!skips() || variant == retexo_variant::hidden ||
                      (model != nn::layer_kind::gat && model != nn::layer_kind::sage_pool),
                  "--skip with --variant logits needs gcn or sage: a "
                      << name_of(model) << " stage would need the raw features' halo rows");
}

bool retexo_options::replicates_rows(int ranks, std::int64_t rows, std::int64_t width, std::int64_t params,
                                     int rounds) const
{
    if (replicate_train) return *replicate_train;
    if (ranks == 1) return false;
    // Summed over ranks: the gather sends each row (inputs, id, label) to the P-1 other
    // ranks; an all-reduce sends 2(P-1)/P of the payload per rank per round.
    const double gather = static_cast<double>(rows) * (4.0 * static_cast<double>(width) + 12.0);
    const double allreduce = 2.0 * 4.0 * static_cast<double>(params) * rounds;
    return gather < allreduce;
}

matrix_f neighbour_labels(const rank_context& ctx, const stage_exchange& exchange, const nn::local_graph& g)
{
    const auto own = static_cast<Eigen::Index>(ctx.part.num_owned());
    const auto C = static_cast<Eigen::Index>(ctx.part.global.num_classes);
    matrix_f y = matrix_f::Zero(own, C);
    for (node_t r : ctx.train_rows)
        y(r, ctx.part.labels[static_cast<std::size_t>(r)]) = 1.0F;
    // The mean over the in-neighbours (not the node): the labelled ones' share of each class.
    const matrix_f mean = exchange.aggregate(node_features(std::move(y)), g, aggregator::mean, {}).dense();
    matrix_f out = matrix_f::Zero(own, C + 1);
    for (Eigen::Index r = 0; r < own; ++r) {
        const float labelled = mean.row(r).sum();
        if (labelled > 0)
            out.row(r).head(C) = mean.row(r) / labelled;
        else
            out(r, C) = 1.0F;
    }
    return out;
}

std::vector<stage_options> default_stages(int count)
{
    std::vector<stage_options> stages(static_cast<std::size_t>(std::max(count, 0)),
                                      stage_options{.dropout = defaults::dropout, .patience = defaults::patience});
    if (!stages.empty())
        stages.back() =
            stage_options{.dropout = defaults::last_stage_dropout, .patience = defaults::last_stage_patience};
    return stages;
}

stage_options stage_search::candidate(const stage_options& base, std::size_t i) const
{
    stage_options s = base;
    auto pick = [&i](const auto& values, auto& out) {
        if (values.empty()) return;
        out = values[i % values.size()];
        i /= values.size();
    };
    pick(lr, s.lr);
    pick(dropout, s.dropout);
    pick(weight_decay_axis(), s.weight_decay);
    pick(norm_axis(), s.norm);
    pick(pseudo_labels, s.pseudo_labels);
    return s;
}

std::vector<std::size_t> stage_search::trained(int stage, bool normalises) const
{
    const std::size_t inner = std::max<std::size_t>(1, lr.size()) * std::max<std::size_t>(1, dropout.size()) *
                              std::max<std::size_t>(1, weight_decay_axis().size());
    const std::size_t norms = std::max<std::size_t>(1, norm_axis().size());
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < size(); ++i) {
        const std::size_t norm_index = i / inner % norms, pseudo_index = i / inner / norms;
        if ((stage > 0 || pseudo_index == 0) && (normalises || norm_index == 0)) order.push_back(i);
    }
    return order;
}

std::string stage_search::describe(const stage_options& base, std::size_t i) const
{
    const stage_options s = candidate(base, i);
    std::ostringstream d;
    d << "lr=" << s.lr << " dropout=" << s.dropout << " weight-decay=" << s.weight_decay
      << " pseudo-labels=" << s.pseudo_labels;
    if (!norm_axis().empty()) d << " norm=" << name_of(s.norm);
    return d.str();
}

namespace {
/// A default axis from the defaults table's list: one value is no search (the stage's own).
template <class T, class Item, class Convert>
std::vector<T> default_axis(std::span<const Item> table, Convert convert)
{
    std::vector<T> axis;
    if (table.size() > 1) std::ranges::transform(table, std::back_inserter(axis), convert);
    return axis;
}
} // namespace

// Checked at compile time: every section of the defaults table is a model's name (the one
// name_of gives, which searches() looks up), and every model's default normalisations are
// names of normalization.
static_assert([]() consteval {
    const auto table = names_of(nn::layer_kind{});
    for (std::string_view section : defaults::models) {
        const auto kind = named<nn::layer_kind>(section);
        if (std::ranges::find(table.entries, kind, &decltype(table.entries)::value_type::first)->second != section)
            throw "data/defaults.cfg: a model's section is not its first name";
    }
    for (const auto& [kind, model] : table.entries)
        for (std::string_view v : defaults::search_norm_for(model))
            (void)named<normalization>(v);
    return true;
}());

int retexo_options::exchange_columns() const
{
    return exchange.columns.value_or(static_cast<int>(defaults::exchange_columns_for(name_of(model)).front()));
}

stage_search retexo_options::searches() const
{
    const std::string m = name_of(model);
    stage_search s = search;
    if (!s.weight_decay) s.weight_decay = default_axis<double>(defaults::search_weight_decay_for(m), std::identity{});
    if (!s.norm)
        s.norm = default_axis<normalization>(defaults::search_norm_for(m),
                                             [](std::string_view v) { return parse_name<normalization>(v); });
    return s;
}

bool retexo_options::reads_own_input(int stage) const
{
    // GCN's aggregate includes the node itself.  The logits variant keeps it apart for every
    // model (the reference prototype's GCN: a mean of the neighbours' class probabilities;
    // GCN's symmetric weights would not keep them a distribution).
    if (mlp_only(stage) || graph_stage(stage)) return false;
    const bool logits_variant = variant == retexo_variant::logits;
    return (model != nn::layer_kind::gcn || logits_variant) && (logits_variant || stage == 0 || reads_own_embedding());
}

stage_input_layout retexo_options::input_layout(int stage, int raw_width, int classes) const
{
    RETEXO_ENSURE(stage >= 0 && static_cast<std::size_t>(stage) < stages.size(),
                  "retexo_options::input_layout: no stage " << stage << " of " << stages.size());
    // Stage k's inputs: [own | mean] or the aggregate alone of the stage before's output (of
    // width w), then with skips() stage k-1's inputs; stage 0's come from the raw features.
    stage_input_layout l;
    for (int k = stage; k >= 0; --k) {
        const int w = k == 0                              ? raw_width
                      : variant == retexo_variant::logits ? classes
                                                          : stages[static_cast<std::size_t>(k - 1)].hidden;
        const bool apart = reads_own_input(k);
        if (apart) l.pairs.push_back({.self = l.width, .neighbours = l.width + w, .width = w});
        l.width += apart ? 2 * w : w;
        if (!skips()) break;
    }
    return l;
}

std::string retexo_options::describe() const
{
    std::ostringstream d;
    d << "model=" << name_of(model) << " variant=" << name_of(variant) << " heads=" << heads << " seed=" << seed
      << " deterministic=" << deterministic << " batch-size=" << batch_size << " select=" << name_of(select)
      << " exchange-precision=" << name_of(exchange.precision) << " exchange-columns=" << exchange_columns()
      << " skip=" << skips() << " own-embedding=" << reads_own_embedding() << " neighbour-offset=" << neighbour_offset
      << " cross-fit=" << cross_fit << " label-head=" << label_head_applies()
      << " replicate-train=" << (replicate_train ? (*replicate_train ? "true" : "false") : "auto");
    if (gat_inputs_first) d << " gat-inputs-first=" << (*gat_inputs_first ? "true" : "false");
    if (const stage_search axes = searches(); axes.active()) {
        d << " search:";
        for (const auto* axis : {&axes.lr, &axes.dropout, &axes.weight_decay_axis(), &axes.pseudo_labels}) {
            d << " [";
            for (double v : *axis)
                d << v << ",";
            d << "]";
        }
        d << " [";
        for (normalization v : axes.norm_axis())
            d << name_of(v) << ",";
        d << "] search-patience=" << axes.patience;
    }
    if (output != stage_output::last) d << " output-stage=" << name_of(output);
    if (smooth.enabled()) {
        d << " smooth-alpha=";
        for (double a : smooth.alpha)
            d << a << ",";
        d << " smooth-steps=" << smooth.steps;
    }
    for (std::size_t stage = 0; stage < stages.size(); ++stage) {
        const auto& s = stages[stage];
        d << "; stage " << stage << ": rounds=" << s.rounds << " lr=" << s.lr << " hidden=" << s.hidden
          << " dropout=" << s.dropout << " weight-decay=" << s.weight_decay << " optimizer=" << name_of(s.optimizer)
          << " norm=" << name_of(s.norm) << " lr-schedule=" << name_of(s.schedule) << " patience=" << s.patience
          << " pseudo-labels=" << s.pseudo_labels;
    }
    return d.str();
}

namespace detail {

/// The in-edges of `rows` in g: the rows a graph stage's gather sends besides them, at most.
std::int64_t in_edges_of(const std::vector<node_t>& rows, const nn::local_graph& g)
{
    std::int64_t edges = 0;
    for (node_t r : rows)
        edges += g.in_edges->degree(r);
    return edges;
}

/// A checkpoint's tensors `group` fit the stage model's parameters (throws naming the file).
void check_tensors(const std::string& path, const char* group, const std::vector<matrix_f>& values,
                   const retexo_stage& s)
{
    RETEXO_ENSURE(values.size() == s.params.size(), path << ": " << group << " holds " << values.size()
                                                         << " tensors, the model of stage " << s.index << " has "
                                                         << s.params.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
        const auto& p = s.params[i]->value;
        RETEXO_ENSURE(values[i].rows() == p.rows() && values[i].cols() == p.cols(),
                      path << ": " << group << "/" << i << " is " << values[i].rows() << " x " << values[i].cols()
                           << ", the model of stage " << s.index << " has " << p.rows() << " x " << p.cols());
    }
}

std::uint64_t digest(const node_features& x)
{
    fnv1a h;
    h.feed(static_cast<std::uint32_t>(x.rows()));
    h.feed(static_cast<std::uint32_t>(x.cols()));
    const auto feed = [&]<typename X>(const X& b) {
        if constexpr (std::is_same_v<X, matrix_f>) {
            h.feed(std::span<const float>(b.data(), static_cast<std::size_t>(b.size())));
        } else { // its structure, then its values
            for (offset_t o : b.offsets)
                h.feed(static_cast<std::uint32_t>(o));
            for (std::int32_t j : b.indices)
                h.feed(static_cast<std::uint32_t>(j));
            h.feed(std::span<const float>(b.values));
        }
    };
    x.for_each_block([&](const auto& b, Eigen::Index) { feed(b); });
    return h.value();
}

namespace {

/// Refuses (every rank together), before any stage trains, stage widths this rank's node
/// cannot hold.  What a stage takes at least: its transform's and head's weights, with their
/// gradients and one optimiser moment (12 bytes each), its output over the owned rows and,
/// after the first, its inputs there (4 bytes each).  A stage's inputs are at least the
/// features, the previous stage's hidden width, or (logits variant) the classes.
void ensure_stages_fit(const rank_context& ctx, const retexo_options& o)
{
    const auto& g = ctx.part.global;
    const double own = static_cast<double>(ctx.part.num_owned());
    const bool logits = o.variant == retexo_variant::logits;
    double most = 0;
    std::size_t widest = 0;
    int widest_in = 0;
    for (std::size_t k = 0; k < o.stages.size(); ++k) {
        const int in = k == 0 ? g.num_features : logits ? g.num_classes : o.stages[k - 1].hidden;
        const bool head = logits || k + 1 < o.stages.size();
        const double H = o.stages[k].hidden, C = g.num_classes, out = head ? H : C;
        const double bytes = 12 * (in * out + (head ? H * C : 0)) + 4 * own * (out + (k > 0 ? in : 0));
        if (bytes > most) {
            most = bytes;
            widest = k;
            widest_in = in;
        }
    }
    std::ostringstream what;
    what << "--hidden " << o.stages[widest].hidden << ": RETEXO's stage " << widest << " (" << widest_in << " inputs, "
         << g.num_classes << " classes, " << ctx.part.num_owned() << " rows on this rank)";
    mpi::ensure_memory(ctx.comm, most, what.str());
}

} // namespace

retexo_run::retexo_run(const rank_context& ctx, const retexo_options& o, const progress_fn& progress)
    : ctx_(ctx), o_(o), progress_(progress), meter_(ctx), own_(ctx.part.num_owned()), C_(ctx.part.global.num_classes),
      mode_(ctx.reduce(o.deterministic)), local_mode_(mode_), loss_k_(-1),
      valid_k_(o.deterministic ? loss_exponent(ctx.global_valid) : -1)
{
    local_mode_.global_max = [](std::span<double>) {};
    RETEXO_ENSURE_AGREED(o.cross_fit <= ctx.global_train, "--cross-fit " << o.cross_fit << ": the graph has "
                                                                         << ctx.global_train
                                                                         << " training nodes, fewer than the folds");
    {
        phase_timer::scope s(meter_.timer, "setup");
        ensure_stages_fit(ctx, o);
    }
    const auto& part = ctx.part;
    local_ids_ = part.owned_global;
    local_ids_.insert(local_ids_.end(), part.halo_global.begin(), part.halo_global.end());
    result_.mode = "retexo";
    result_.model = name_of(o.model);
    result_.variant = name_of(o.variant);
    result_.ranks = ctx.comm.size();
    result_.seed = o.seed;
    carry_.h.all = part.features;
    if (ctx.inductive) {
        carry_.h.train = part.features;
        ctx.hide_evaluation_rows(carry_.h.train);
    }
    if (checkpointing()) {
        id_ = {part.assignment_hash, ctx.comm.size(), ctx.comm.rank(),
               o.describe() + "; inductive=" + (ctx.inductive ? "1" : "0"), digest(part.features)};
        if (ctx.comm.rank() == 0) std::filesystem::create_directories(o.checkpoint.dir);
        ctx.comm.barrier();
    }
    if (checkpointing() && o.checkpoint.resume) {
        // Continue where the checkpoint was taken, with everything it had counted.
        resumed_ = resume_checkpoint(ctx.comm, o.checkpoint.dir, id_);
        std::string err;
        try {
            check_resumed(*resumed_);
        } catch (const std::exception& e) {
            err = e.what();
        }
        ctx.comm.agree(err, purpose::checkpoint);
        seq_ = resumed_->seq;
        step_ = resumed_->step;
        meter_.resume(resumed_->done, resumed_->elapsed, resumed_->phases);
        result_.history = resumed_->history;
        result_.stages = resumed_->stages;
        result_.label_head = resumed_->label_head;
        result_.parameters = resumed_->finished;
        carry_ = resumed_->carry;
    }
    last_checkpoint_ = std::chrono::steady_clock::now();
}

void retexo_run::check_resumed(const retexo_checkpoint& c) const
{
    const std::string& path = c.source;
    const int stages = static_cast<int>(o_.stages.size());
    RETEXO_ENSURE(c.stage < stages, path << ": attribute stage is " << c.stage << ", but the run has " << stages
                                         << " stages (0.." << stages - 1 << ")");
    const bool inside = c.next_round > 1;
    RETEXO_ENSURE(inside || c.stage > 0, path << ": attribute stage is 0 with next_round 1 (no stage has begun)");
    const auto& search = o_.search;
    const auto n_candidates = static_cast<int>(search.size());
    // A stage's most rounds: its own, or its candidates' most.
    auto max_rounds = [&](int stage) {
        const auto& base = o_.stages[static_cast<std::size_t>(stage)];
        int most = base.rounds;
        for (std::size_t i = 0; search.active() && i < search.size(); ++i)
            most = std::max(most, search.candidate(base, i).rounds);
        return most;
    };
    for (const auto& r : c.stages)
        RETEXO_ENSURE(r.rounds <= max_rounds(r.stage) && r.candidates >= 1 && r.candidates <= n_candidates &&
                          r.chosen >= 0 && r.chosen < n_candidates,
                      path << ": stages/ entry " << r.stage << " (" << r.rounds << " rounds, candidate " << r.chosen
                           << " of " << r.candidates << ") does not fit this run (" << max_rounds(r.stage)
                           << " rounds, " << n_candidates << " candidates)");
    for (const auto& r : c.history)
        RETEXO_ENSURE(r.stage < stages && r.epoch <= max_rounds(r.stage) && r.candidate < n_candidates,
                      path << ": history/ holds round " << r.epoch << " of stage " << r.stage << ", candidate "
                           << r.candidate << ", which this run does not have");
    // The finished stages' parameters, stage by stage.
    int named = 0; // the stage of the parameters so far
    for (std::size_t i = 0; i < c.finished.size(); ++i) {
        const auto& name = c.finished[i].name;
        auto of = [&](int k) { return name.starts_with("stage" + std::to_string(k) + "."); };
        if (i > 0 && of(named + 1)) ++named;
        RETEXO_ENSURE(named < c.stage && of(named), path << ": finished/" << i << " is '" << name
                                                         << "', not a parameter of finished stage " << named
                                                         << " (attribute stage is " << c.stage << ")");
    }
    const int finished_stages = c.finished.empty() ? 0 : named + 1;
    RETEXO_ENSURE(finished_stages == c.stage, path << ": finished/ holds the parameters of " << finished_stages
                                                   << " stages, but attribute stage is " << c.stage);
    check_resumed_inputs(c);
}

void retexo_run::check_resumed_inputs(const retexo_checkpoint& c) const
{
    // Every input this rank goes on from: its rows, its columns, and the training-graph
    // form exactly with inductive runs.
    const std::string& path = c.source;
    const int stages = static_cast<int>(o_.stages.size());
    const bool inside = c.next_round > 1;
    const auto& search = o_.search;
    auto rows = [&](const char* name, const auto& x, Eigen::Index want) {
        RETEXO_ENSURE(x.rows() == want && x.cols() > 0, path << ": " << name << " is " << x.rows() << " x " << x.cols()
                                                             << ", this rank has " << want
                                                             << " rows and at least one column");
    };
    auto train_form = [&](const char* name, const node_features& train, const node_features& all) {
        if (ctx_.inductive)
            RETEXO_ENSURE(train.rows() == all.rows() && train.cols() == all.cols(),
                          path << ": " << name << " is " << train.rows() << " x " << train.cols() << ", expected "
                               << all.rows() << " x " << all.cols() << " (an inductive run)");
        else
            RETEXO_ENSURE(train.rows() == 0, path << ": " << name << " holds rows, but this run is not inductive");
    };
    const auto local = static_cast<Eigen::Index>(ctx_.part.num_local());
    const bool last = c.stage + 1 == stages;
    if (!inside || last) { // the stage's inputs (a headless last stage's output)
        rows("inputs/h", c.carry.h.all, own_);
        train_form("inputs/h_train", c.carry.h.train, c.carry.h.all);
    }
    if (!inside && o_.skips()) {
        rows("inputs/skip", c.carry.skip.all, o_.graph_stage(c.stage - 1) ? local : own_);
        train_form("inputs/skip_train", c.carry.skip.train, c.carry.skip.all);
    }
    auto logits = [&](const char* name, const matrix_f& m, bool needed) {
        if (needed || m.size() > 0)
            RETEXO_ENSURE(m.rows() == own_ && m.cols() == C_, path << ": " << name << " is " << m.rows() << " x "
                                                                   << m.cols() << ", expected " << own_ << " x " << C_
                                                                   << " (owned rows x classes)");
    };
    logits("inputs/logits", c.carry.logits, c.stage > 0 && uses_pseudo_labels(c.stage));
    const int best = c.carry.best_stage;
    RETEXO_ENSURE(best < 0 || o_.output != stage_output::last,
                  path << ": attribute best_stage is " << best << ", but this run outputs the last stage");
    logits("inputs/best_logits", c.carry.best_logits, best >= 0);
    logits("inputs/best_spread", c.carry.best_spread, best >= 0 && smooths_each_stage());
    if (!inside) return;
    const auto& cur = c.current;
    const auto& st = cur.search;
    if (search.active()) {
        RETEXO_ENSURE(st.candidate < static_cast<int>(search.size_at(c.stage)) && st.tried >= 1,
                      path << ": attributes search.candidate " << st.candidate << " and search.tried " << st.tried
                           << " do not fit the stage's " << search.size_at(c.stage) << " candidates");
    } else {
        RETEXO_ENSURE(st.candidate == 0 && st.tried == 0 && st.top == -1,
                      path << ": holds a stage search (attributes search.*), but this run has none");
    }
    const auto& base = o_.stages[static_cast<std::size_t>(c.stage)];
    const int rounds =
        search.active() ? search.candidate(base, static_cast<std::size_t>(st.candidate)).rounds : base.rounds;
    RETEXO_ENSURE(c.next_round <= rounds, path << ": attribute next_round is " << c.next_round << ", but stage "
                                               << c.stage << " has " << rounds << " rounds");
    if (st.top >= 0)
        RETEXO_ENSURE(st.top_rounds_done <= search.candidate(base, static_cast<std::size_t>(st.top)).rounds,
                      path << ": attribute search.top_rounds_done is " << st.top_rounds_done << ", more rounds than "
                           << "candidate " << st.top << " has");
    rows("stage/x", cur.x.all, o_.graph_stage(c.stage) ? local : own_);
    train_form("stage/x_train", cur.x.train, cur.x.all);
}

retexo_stage retexo_run::open_stage(int index)
{
    phase_timer::scope sc(meter_.timer, "setup");
    retexo_stage s(index, o_.stages[static_cast<std::size_t>(index)]);
    s.resumed = resumed_ && index == resumed_->stage && resumed_->next_round > 1;
    // Inside a resumed stage its traffic and time so far count too.
    s.start = ctx_.comm.ledger() - (s.resumed ? resumed_->current.done : byte_ledger{});
    s.t0 = std::chrono::steady_clock::now() -
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
               std::chrono::duration<double>(s.resumed ? resumed_->current.elapsed : 0.0));
    s.last = index + 1 == static_cast<int>(o_.stages.size());
    s.mlp_only = o_.mlp_only(index);
    s.graph = o_.graph_stage(index);
    return s;
}

void retexo_run::exchange_and_aggregate(retexo_stage& s)
{
    phase_timer::scope sc(meter_.timer, "aggregate"); // less the exchange's own time
    if (s.resumed) {
        static_cast<stage_progress&>(s) = resumed_->current;
        return;
    }
    exchange_inputs(s);
    // The stage reads only s.x now (a resumed stage its checkpointed copy): what carried it
    // here goes, but for the last stage's inputs, which a headless last stage's predictions
    // output as the embedding.
    if (!s.last) carry_.h = {};
    release_free_memory(); // the stage before's buffers, before this stage's largest

    if (o_.skips() && s.index > 0) {
        // Each block keeps its storage: sparse raw inputs (stage 0's) stay sparse beside the
        // new dense columns.  The previous inputs are consumed on the way.
        s.x.all = beside(std::move(s.x.all), std::move(carry_.skip.all));
        if (ctx_.inductive) s.x.train = beside(std::move(s.x.train), std::move(carry_.skip.train));
    }
    carry_.skip = {};
}

void retexo_run::exchange_inputs(retexo_stage& s)
{
    if (s.mlp_only) {
        s.x = carry_.h;
        return;
    }
    const stage_exchange exchange(*ctx_.halo, o_.exchange_options(), meter_.timer);
    const std::span<const node_t> hidden(ctx_.evaluation_rows); // zero in the training graph's inputs
    if (s.graph) {
        s.x.all = exchange.local_rows(carry_.h.all, {});
        if (ctx_.inductive) s.x.train = exchange.local_rows(carry_.h.train, hidden);
        return;
    }
    const bool logits_variant = o_.variant == retexo_variant::logits;
    const bool apart = o_.reads_own_input(s.index);
    const aggregator kind = o_.model == nn::layer_kind::gcn && !logits_variant ? aggregator::gcn : aggregator::mean;
    auto input = [&](const nn::local_graph& g, const node_features& h, std::span<const node_t> zero) {
        node_features a = exchange.aggregate(h, g, kind, zero);
        if (!apart) return a;
        return beside(h, std::move(a));
    };
    s.x.all = input(ctx_.graph, carry_.h.all, {});
    if (ctx_.inductive) s.x.train = input(ctx_.train_graph, carry_.h.train, hidden);
}

std::vector<nn::input_pair> retexo_run::offset_pairs(const retexo_stage& s) const
{
    if (s.graph || o_.model != nn::layer_kind::sage_mean || !o_.neighbour_offset) return {};
    return o_.input_layout(s.index, static_cast<int>(ctx_.part.features.cols()), C_).pairs;
}

namespace {
/// x without its last column block, which is returned (x holds at least two blocks).
node_features pop_last_block(node_features& x)
{
    RETEXO_ENSURE(x.is_blocks(), "label inputs: the stage inputs are not column blocks");
    auto blocks = std::move(x.storage<column_blocks>().blocks);
    auto last = std::visit([](auto& b) { return node_features(std::move(b)); }, blocks.back());
    blocks.pop_back();
    x = from_blocks(std::move(blocks));
    return last;
}
} // namespace

void retexo_run::use_label_inputs(retexo_stage& s)
{
    const bool want = s.label_head;
    if (want == s.labels_on) return;
    auto& held = s.held_labels;
    if (!want) {
        held.all = pop_last_block(s.x.all);
        if (ctx_.inductive) held.train = pop_last_block(s.x.train);
        if (s.all_train) held.gathered = pop_last_block(s.all_train->x);
    } else {
        if (held.all.cols() == 0) {
            const stage_exchange exchange(*ctx_.halo, o_.exchange_options(), meter_.timer);
            held.all = neighbour_labels(ctx_, exchange, ctx_.graph);
            if (ctx_.inductive) held.train = neighbour_labels(ctx_, exchange, ctx_.train_graph);
        }
        if (s.all_train && held.gathered.cols() == 0) { // the training rows' label inputs only
            phase_timer::scope sc(meter_.timer, "exchange");
            held.gathered = gather_rows(s, held.train.cols() > 0 ? held.train : held.all, train_rows_, labels_).x;
        }
        s.x.all = beside(std::move(s.x.all), std::move(held.all));
        if (ctx_.inductive) s.x.train = beside(std::move(s.x.train), std::move(held.train));
        if (s.all_train) s.all_train->x = beside(std::move(s.all_train->x), std::move(held.gathered));
        held = {};
    }
    s.labels_on = want;
}

matrix_f retexo_run::train_label_head(retexo_stage& s)
{
    const stage_options& base = o_.stages[static_cast<std::size_t>(s.index)];
    const std::vector<std::size_t> order = o_.search.trained(s.index, has_head(s));
    const std::int64_t step0 = step_;
    const std::size_t history0 = result_.history.size();
    auto& head = result_.label_head.emplace();
    s.resumed = false; // a stage resumed from a checkpoint has finished its own rounds
    double top_score = -std::numeric_limits<double>::infinity(), top_loss = 0;
    matrix_f top;
    s.label_head = true;
    const int searched = s.search.candidate;
    for (std::size_t i : order) {
        reset_model(s);
        step_ = step0;
        s.search.candidate = static_cast<int>(i); // what its rounds report
        s.so = o_.search.active() ? o_.search.candidate(base, i) : base;
        build_model(s); // with the label inputs
        train_rounds(s);
        head.rounds += s.rounds_done;
        ++head.candidates;
        if (s.best_score > top_score || (s.best_score == top_score && s.best_loss < top_loss)) {
            top_score = s.best_score;
            top_loss = s.best_loss;
            keep_selected_round(s);
            matrix_f hidden;
            embed_owned(s, s.x.all, ctx_.graph, top, hidden);
        }
    }
    s.label_head = false;
    s.search.candidate = searched;
    reset_model(s);
    use_label_inputs(s); // the stage's own inputs again
    step_ = step0;
    result_.history.resize(history0); // its rounds are not the stage's
    head.acc = reduce_accuracies(ctx_, top);
    return top;
}

void retexo_run::build_model(retexo_stage& s)
{
    phase_timer::scope sc(meter_.timer, "setup");
    set_targets(s);
    use_label_inputs(s); // after the targets: a gather of training rows reads them
    const auto& so = s.so;
    const int folds = o_.cross_fit > 1 && !s.last ? o_.cross_fit : 1;
    s.models.reserve(static_cast<std::size_t>(folds)); // params point into them
    for (int f = 0; f < folds; ++f)
        s.models.emplace_back(nn::stage_spec{.stage = s.index,
                                             .kind = o_.model,
                                             .graph = s.graph,
                                             .in = static_cast<int>(s.x.all.cols()),
                                             .hidden = so.hidden,
                                             .classes = C_,
                                             .head = has_head(s),
                                             .layer_norm = so.norm == normalization::layer,
                                             .heads = o_.heads,
                                             .offset_pairs = offset_pairs(s),
                                             .dropout = so.dropout,
                                             .seed = o_.seed,
                                             .fold = folds > 1 ? f : -1,
                                             .inputs_first = o_.gat_inputs_first});
    for (auto& m : s.models) {
        auto ps = m.parameters();
        s.params.insert(s.params.end(), ps.begin(), ps.end());
    }
    std::int64_t params = 0;
    for (const auto* p : s.params)
        params += p->value.size();
    if (!s.all_train) {
        // Graph stages gather the training rows' in-neighbours too: at most one row per edge.
        std::int64_t rows = global_train_;
        if (s.graph && o_.replicate_train.value_or(true)) {
            rows += ctx_.comm.allreduce(in_edges_of(train_rows_, ctx_.train_graph), MPI_SUM, purpose::train_rows);
        }
        // Every candidate of a search all-reduces its own rounds; the rows are gathered once.
        const auto candidates = static_cast<int>(o_.search.trained(s.index, has_head(s)).size());
        if (o_.replicates_rows(ctx_.comm.size(), rows, s.x.all.cols(), params, so.rounds * candidates))
            gather_training_rows(s);
    }
    assign_folds(s, folds);
    // Mini-batches: the batch of a training node is hash(global id, stage, round) mod
    // batches, the same on every partitioning.
    s.batches = o_.batch_size > 0 ? static_cast<int>((global_train_ + o_.batch_size - 1) / o_.batch_size) : 1;
    s.opt.emplace(
        optimizer_options{.kind = so.optimizer,
                          .lr = so.lr,
                          .weight_decay = so.weight_decay,
                          .decay_steps = so.schedule == lr_schedule::linear ? std::int64_t{so.rounds} * s.batches : 0},
        s.params);
    if (s.resumed) {
        const auto& cur = resumed_->current;
        // Every rank's checkpoint holds these shapes alike (resume_checkpoint): all fail together.
        check_tensors(resumed_->source, "stage/params", cur.params, s);
        restore(s.params, cur.params);
        s.opt->first_moments() = cur.first_moments;
        s.opt->second_moments() = cur.second_moments;
        s.opt->set_steps(cur.optimizer_steps); // the rest of cur was restored with the inputs
    } else {
        if (!alone_) agree_initial_parameters(ctx_.comm, s.params); // alone: seeded alike on every rank
        s.best = snapshot(s.params);
    }
    s.eval_rows = ctx_.valid_rows;
    if (o_.track_test) s.eval_rows.insert(s.eval_rows.end(), ctx_.test_rows.begin(), ctx_.test_rows.end());
    if (s.graph) {
        for (const auto& rows : s.fold_rows)
            s.plans_train.push_back(s.model().make_plan(training_graph(s), rows));
        if (alone_) {
            for (auto& e : s.all_eval)
                for (auto& c : e.chunks)
                    c.plan = s.model().make_plan(e.rows.graph(), c.rows);
        } else {
            s.plan_eval = s.model().make_plan(ctx_.graph, s.eval_rows);
        }
    }
}

void retexo_run::set_targets(retexo_stage& s)
{
    train_rows_ = ctx_.train_rows;
    labels_ = ctx_.part.labels;
    global_train_ = ctx_.global_train;
    s.pseudo = 0;
    if (pseudo_labels(s) > 0) add_pseudo_labels(s);
    // Gathered training rows hold the targets of the candidate they were gathered for.
    if (s.all_train && s.all_train->pseudo_labels != pseudo_labels(s)) s.all_train.reset();
    loss_k_ = o_.deterministic ? loss_exponent(global_train_) : -1;
}

void retexo_run::add_pseudo_labels(retexo_stage& s)
{
    const matrix_f& logits = carry_.logits;
    RETEXO_ENSURE(logits.rows() == own_ && logits.cols() == C_,
                  "pseudo-labels: stage " << s.index << " has no logits of the stage before");
    // Each candidate row's predicted class and confidence: the top logit's margin over the
    // log-sum-exp of the others, binned in 0.1 steps over [-5, 95).
    constexpr int bins = 1000;
    constexpr double lo = -5, step = 0.1;
    std::vector<char> labelled(static_cast<std::size_t>(own_), 0);
    for (const auto* rows : {&ctx_.train_rows, &ctx_.valid_rows, &ctx_.test_rows}) {
        if (rows == &ctx_.test_rows && !ctx_.inductive) continue;
        for (node_t r : *rows)
            labelled[static_cast<std::size_t>(r)] = 1;
    }
    std::vector<std::int64_t> counts(static_cast<std::size_t>(C_) * (bins + 1), 0); // bins, then training nodes
    for (node_t r : ctx_.train_rows)
        ++counts[static_cast<std::size_t>(C_) * bins + static_cast<std::size_t>(ctx_.part.labels[r])];
    std::vector<std::pair<int, int>> key(static_cast<std::size_t>(own_), {-1, 0}); // class, bin
    for (node_t r = 0; r < own_; ++r) {
        if (labelled[static_cast<std::size_t>(r)]) continue;
        Eigen::Index top = 0;
        const float m = logits.row(r).maxCoeff(&top);
        double rest = 0;
        for (int c = 0; c < C_; ++c)
            if (c != top) rest += std::exp(static_cast<double>(logits(r, c) - m));
        const double margin = rest > 0 ? -std::log(rest) : lo + bins * step;
        const int bin = static_cast<int>(std::clamp((margin - lo) / step, 0.0, bins - 1.0));
        key[static_cast<std::size_t>(r)] = {static_cast<int>(top), bin};
        ++counts[static_cast<std::size_t>(top) * bins + static_cast<std::size_t>(bin)];
    }
    ctx_.comm.allreduce(std::span<std::int64_t>(counts), MPI_SUM, purpose::control);
    // Per class, the most confident bins whose nodes fit in the quota.
    std::vector<int> first_bin(static_cast<std::size_t>(C_), bins);
    for (int c = 0; c < C_; ++c) {
        const auto quota = static_cast<std::int64_t>(
            std::llround(s.so.pseudo_labels * static_cast<double>(counts[static_cast<std::size_t>(C_) * bins + c])));
        std::int64_t taken = 0;
        for (int b = bins - 1; b >= 0; --b) {
            const auto n = counts[static_cast<std::size_t>(c) * bins + static_cast<std::size_t>(b)];
            if (taken + n > quota) break;
            taken += n;
            first_bin[static_cast<std::size_t>(c)] = b;
        }
        s.pseudo += taken;
    }
    for (node_t r = 0; r < own_; ++r) {
        const auto [c, b] = key[static_cast<std::size_t>(r)];
        if (c >= 0 && b >= first_bin[static_cast<std::size_t>(c)]) {
            train_rows_.push_back(r);
            labels_[static_cast<std::size_t>(r)] = c;
        }
    }
    global_train_ += s.pseudo;
}

void retexo_run::assign_folds(retexo_stage& s, int folds)
{
    s.fold_rows.assign(static_cast<std::size_t>(folds), {});
    if (folds == 1) {
        s.fold_rows[0] = training_rows(s);
        s.fold_count.assign(1, global_train_);
        return;
    }
    // A node's fold depends on its global id only: the same folds on every partitioning.
    const counter_rng rng(o_.seed, rng_stream::folds);
    auto fold_of = [&](node_t id) {
        return static_cast<int>(rng.below(static_cast<std::uint64_t>(id), static_cast<std::uint64_t>(folds)));
    };
    s.row_fold.assign(static_cast<std::size_t>(own_), -1);
    for (node_t r : train_rows_)
        s.row_fold[static_cast<std::size_t>(r)] = fold_of(local_ids_[r]);
    std::vector<std::int64_t> in_fold(static_cast<std::size_t>(folds));
    const auto ids = training_ids(s);
    for (node_t r : training_rows(s)) {
        const int f = fold_of(ids[static_cast<std::size_t>(r)]);
        ++in_fold[static_cast<std::size_t>(f)];
        for (int m = 0; m < folds; ++m)
            if (m != f) s.fold_rows[static_cast<std::size_t>(m)].push_back(r);
    }
    if (s.resumed) { // counted before the checkpoint, restored with the stage's progress
        RETEXO_ENSURE(static_cast<int>(s.fold_count.size()) == folds, "checkpoint: stage "
                                                                          << s.index << " has " << s.fold_count.size()
                                                                          << " fold counts, expected " << folds);
        return;
    }
    if (!s.all_train) ctx_.comm.allreduce(std::span<std::int64_t>(in_fold), MPI_SUM, purpose::control);
    s.fold_count.assign(static_cast<std::size_t>(folds), global_train_);
    for (int m = 0; m < folds; ++m)
        s.fold_count[static_cast<std::size_t>(m)] -= in_fold[static_cast<std::size_t>(m)];
}

bool retexo_run::train_rounds(retexo_stage& s)
{
    for (int round = s.resumed ? resumed_->next_round : 1; round <= s.so.rounds; ++round) {
        s.rounds_done = round;
        epoch_record rec;
        rec.stage = s.index;
        rec.epoch = round;
        rec.candidate = s.search.candidate;
        rec.label_head = s.label_head;
        rec.loss = train_round(s, round);
        evaluate(s, rec);
        const double score = o_.select == selection::loss ? -rec.valid_loss : rec.acc.valid;
        if (score > s.best_score) {
            phase_timer::scope sc(meter_.timer, "eval");
            s.best_score = score;
            s.best_round = round;
            s.best_loss = rec.valid_loss;
            s.best = snapshot(s.params);
        }
        if (alone_)
            meter_.record(rec, result_, progress_, bytes_before_alone_);
        else
            meter_.record(rec, result_, progress_);
        if (checkpointing() && checkpoint_round(s, round)) return false;
        if (patience(s) > 0 && round - s.best_round >= patience(s)) break;
    }
    return true;
}

double retexo_run::train_round(retexo_stage& s, int round)
{
    const auto& comm = ctx_.comm;
    auto sync_and_step = [&] {
        if (!s.all_train) {
            phase_timer::scope sc(meter_.timer, "sync");
            allreduce_gradients(comm, s.params, o_.deterministic); // every model's, in one call
        } else if (o_.deterministic) {
            for (auto* p : s.params) // already the whole sum
                nn::finish_exact_gradient(*p);
        }
        phase_timer::scope sc(meter_.timer, "compute");
        s.opt->step();
    };
    if (s.cross_fitted()) {
        ++step_;
        std::vector<loss_result> losses;
        for (std::size_t m = 0; m < s.models.size(); ++m)
            losses.push_back(model_step(s, s.models[m], s.fold_rows[m], s.graph ? &s.plans_train[m] : nullptr,
                                        std::max<std::int64_t>(1, s.fold_count[m])));
        sync_and_step();
        double loss = 0;
        for (std::size_t m = 0; m < s.models.size(); ++m)
            loss += step_loss(s, losses[m], std::max<std::int64_t>(1, s.fold_count[m])) /
                    static_cast<double>(s.models.size());
        return loss;
    }
    std::vector<std::vector<node_t>> batch_rows(static_cast<std::size_t>(s.batches));
    if (s.batches == 1) {
        batch_rows[0] = training_rows(s);
    } else {
        const counter_rng rng(o_.seed, rng_stream::shuffle + static_cast<std::uint64_t>(s.index) * 1000003ULL);
        const auto ids = training_ids(s);
        for (node_t r : training_rows(s))
            batch_rows[rng.below(static_cast<std::uint64_t>(ids[static_cast<std::size_t>(r)]) * 100003ULL +
                                     static_cast<std::uint64_t>(round),
                                 static_cast<std::uint64_t>(s.batches))]
                .push_back(r);
    }
    std::vector<std::int64_t> counts(static_cast<std::size_t>(s.batches));
    for (std::size_t b = 0; b < counts.size(); ++b)
        counts[b] = static_cast<std::int64_t>(batch_rows[b].size());
    // Gathered rows are every rank's already; one batch is all training rows.
    if (s.batches > 1 && !s.all_train)
        comm.allreduce(std::span<std::int64_t>(counts), MPI_SUM, purpose::control);
    else if (s.batches == 1)
        counts[0] = global_train_;

    double round_loss = 0;
    for (std::size_t b = 0; b < batch_rows.size(); ++b) {
        ++step_;
        std::optional<nn::layer_plan> batch_plan;
        if (s.graph && s.batches > 1) batch_plan = s.model().make_plan(training_graph(s), batch_rows[b]);
        const nn::layer_plan* plan = !s.graph ? nullptr : s.batches > 1 ? &*batch_plan : &s.plans_train[0];
        const auto n_global = std::max<std::int64_t>(1, counts[b]);
        const loss_result loss = model_step(s, s.model(), batch_rows[b], plan, n_global);
        sync_and_step();
        round_loss +=
            step_loss(s, loss, n_global) * static_cast<double>(counts[b]) / static_cast<double>(global_train_);
    }
    return round_loss;
}

loss_result retexo_run::model_step(retexo_stage& s, nn::stage_model& m, const std::vector<node_t>& rows,
                                   const nn::layer_plan* plan, std::int64_t n_global)
{
    phase_timer::scope sc(meter_.timer, "compute");
    auto& p = s.p;
    // A graph stage's plan over no rows would be one over every row (the kernels' "empty: all"):
    // a rank without rows in this step (a small mini-batch) runs one row without loss, so its
    // collectives (halo gradients, checks) still meet the other ranks'.
    const bool none = s.graph && rows.empty();
    std::optional<nn::layer_plan> one_row;
    if (none) {
        p.rows.assign(1, 0);
        one_row = m.make_plan(training_graph(s), p.rows);
        plan = &*one_row;
    } else {
        p.rows = rows;
    }
    p.plan = plan;
    p.every_message = (s.all_train ? local_mode_ : mode_).exact;
    const nn::halo_gradient_fn add_halo = [&](std::int64_t* d_msg, int width) {
        if (s.all_train) return; // every gathered row is this rank's
        phase_timer::scope sc(meter_.timer, "exchange");
        ctx_.halo->reverse_add(d_msg + static_cast<std::ptrdiff_t>(own_) * width, d_msg, width);
    };
    m.forward(p, training_x(s), training_ids(s), true, step_);
    p.d_logits.setZero(p.logits.rows(), C_);
    std::vector<node_t> seq(p.rows.size());
    std::vector<std::int32_t> labels(p.rows.size());
    for (std::size_t i = 0; i < seq.size(); ++i) {
        seq[i] = static_cast<node_t>(i);
        labels[i] = s.all_train ? s.all_train->labels[static_cast<std::size_t>(p.rows[i])] : labels_[p.rows[i]];
    }
    loss_result loss;
    const auto cross_entropy = [&] {
        if (none) return; // no loss: zero gradients
        loss = softmax_cross_entropy(p.logits.data(), C_, labels, seq, 1.0F / static_cast<float>(n_global),
                                     p.d_logits.data(), loss_k_);
    };
    if (alone_)
        cross_entropy(); // its errors are agreed on when the search ends
    else
        ctx_.comm.checked(cross_entropy);
    m.backward(p, step_, s.all_train ? local_mode_ : mode_, add_halo);
    return loss;
}

double retexo_run::step_loss(const retexo_stage& s, const loss_result& loss, std::int64_t n_global)
{
    phase_timer::scope sc(meter_.timer, "sync"); // an all-reduce unless the rows are gathered
    return s.all_train ? mean_loss(loss, n_global, loss_k_) : reduce_loss(ctx_.comm, loss, n_global, loss_k_);
}

void retexo_run::stage_logits(retexo_stage& s, nn::stage_pass& p, const node_features& x, std::span<const node_t> ids)
{
    if (!s.cross_fitted()) {
        s.model().forward(p, x, ids, false, 0);
        return;
    }
    matrix_f sum;
    for (auto& m : s.models) {
        m.forward(p, x, ids, false, 0);
        if (sum.size() == 0)
            sum = p.logits;
        else
            sum += p.logits;
    }
    p.logits = sum / static_cast<float>(s.models.size());
}

void retexo_run::evaluate(retexo_stage& s, epoch_record& rec)
{
    if (alone_) {
        evaluate_gathered(s, rec);
        return;
    }
    phase_timer::scope sc(meter_.timer, "eval");
    auto& pe = s.pe;
    pe.rows = s.eval_rows;
    if (s.graph) pe.plan = &*s.plan_eval;
    stage_logits(s, pe, s.x.all, local_ids_);
    std::vector<node_t> seq_valid, seq_test;
    std::vector<std::int32_t> labels(pe.rows.size());
    for (std::size_t i = 0; i < pe.rows.size(); ++i) {
        (i < ctx_.valid_rows.size() ? seq_valid : seq_test).push_back(static_cast<node_t>(i));
        labels[i] = ctx_.part.labels[pe.rows[i]];
    }
    std::int64_t correct[2] = {count_correct(pe.logits.data(), C_, labels, seq_valid),
                               count_correct(pe.logits.data(), C_, labels, seq_test)};
    ctx_.comm.allreduce(std::span<std::int64_t>(correct, o_.track_test ? 2 : 1), MPI_SUM, purpose::metrics);
    auto ratio = [](std::int64_t a, std::int64_t b) {
        return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
    };
    rec.acc.valid = ratio(correct[0], ctx_.global_valid);
    if (o_.select == selection::loss || o_.search.active()) // a search breaks ties on the loss
        rec.valid_loss = reduce_loss(ctx_.comm,
                                     softmax_cross_entropy(pe.logits.data(), C_, labels, seq_valid, 1.0F,
                                                           static_cast<float*>(nullptr), valid_k_),
                                     std::max<std::int64_t>(1, ctx_.global_valid), valid_k_);
    if (o_.track_test) rec.acc.test = ratio(correct[1], ctx_.global_test);
}

bool retexo_run::checkpoint_round(retexo_stage& s, int round)
{
    if (s.label_head) return false;                    // it runs to the end: the stage's checkpoint holds its outcome
    phase_timer::scope sc(meter_.timer, "checkpoint"); // deciding, copying and writing
    const auto& ck = o_.checkpoint;
    const double elapsed = meter_.elapsed();
    const double per_round = elapsed / static_cast<double>(std::max<std::size_t>(1, result_.history.size()));
    int flags[2] = {ck.stop_requested && ck.stop_requested() ? 1 : 0, 0}; // stop, write
    if (ck.max_hours > 0 && elapsed + 2 * per_round >= ck.max_hours * 3600) flags[0] = 1;
    if (ck.every_minutes > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_checkpoint_).count() >=
            ck.every_minutes * 60)
        flags[1] = 1;
    ctx_.comm.allreduce(std::span<int>(flags, 2), MPI_MAX, purpose::control);
    const bool stage_over = round == s.so.rounds || (patience(s) > 0 && round - s.best_round >= patience(s));
    if (stage_over || (flags[0] == 0 && flags[1] == 0)) return false;
    retexo_checkpoint c;
    c.stage = s.index;
    c.next_round = round + 1;
    c.carry = carry_;
    auto& cur = c.current;
    static_cast<stage_progress&>(cur) = s;
    cur.elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.t0).count();
    cur.done = ctx_.comm.ledger() - s.start;
    cur.optimizer_steps = s.opt->steps();
    cur.params = snapshot(s.params);
    cur.first_moments = s.opt->first_moments();
    cur.second_moments = s.opt->second_moments();
    write(std::move(c));
    return flags[0] != 0;
}

void retexo_run::write(retexo_checkpoint c)
{
    phase_timer::scope sc(meter_.timer, "checkpoint");
    c.seq = ++seq_;
    c.step = step_;
    c.history = result_.history;
    c.stages = result_.stages;
    c.label_head = result_.label_head;
    c.finished = result_.parameters;
    // The traffic so far includes the agreement that commits this checkpoint (below), as an
    // uninterrupted run's does.
    const byte_ledger commit = ctx_.comm.agreement_charge(purpose::checkpoint);
    c.done = meter_.traffic() + commit;
    if (c.next_round > 1) c.current.done += commit;
    c.elapsed = meter_.elapsed();
    c.phases = meter_.timer.seconds();
    std::string err;
    try {
        write_checkpoint(checkpoint_path(o_.checkpoint.dir, ctx_.comm.rank()), c, id_);
    } catch (const std::exception& e) {
        err = e.what();
    }
    ctx_.comm.agree(err, purpose::checkpoint);
    last_checkpoint_ = std::chrono::steady_clock::now();
}

void retexo_run::reset_model(retexo_stage& s)
{
    s.opt.reset();
    s.params.clear();
    s.models.clear();
    s.plans_train.clear();
    s.plan_eval.reset();
    s.p = nn::stage_pass();
    s.pe = nn::stage_pass();
    for (auto& e : s.all_eval) {
        for (auto& c : e.chunks)
            c.plan.reset();
        e.pass = nn::stage_pass();
    }
    s.best_score = -std::numeric_limits<double>::infinity();
    s.best_loss = std::numeric_limits<double>::infinity();
    s.best_round = s.rounds_done = 0;
    s.best.clear();
}

void retexo_run::keep_selected_round(retexo_stage& s)
{
    phase_timer::scope sc(meter_.timer, "embed");
    restore(s.params, s.best);
    s.p = nn::stage_pass();
    s.pe = nn::stage_pass();
}

void retexo_run::embed_owned(retexo_stage& s, const node_features& x, const nn::local_graph& g, matrix_f& logits,
                             matrix_f& hidden)
{
    // In chunks of rows: a few chunk-sized buffers instead of one per layer output for every
    // owned row; a graph stage's chunk computes the messages of its support only.  A row's
    // output does not depend on the rows computed with it.
    const node_t chunk = node_t{1} << 12;
    const bool head = s.model().spec().head;
    logits.resize(own_, C_);
    hidden.resize(own_, head ? s.so.hidden : 0);
    if (s.cross_fitted()) {
        logits.setZero();
        hidden.setZero();
    }
    const auto models = static_cast<float>(s.models.size());
    nn::stage_pass c;
    std::optional<nn::layer_plan> plan;
    for (node_t r0 = 0; r0 < own_; r0 += chunk) {
        const node_t n = std::min(chunk, own_ - r0);
        c.rows.assign(ctx_.owned_rows.begin() + r0, ctx_.owned_rows.begin() + r0 + n);
        if (s.graph) {
            plan = s.model().make_plan(g, c.rows);
            c.plan = &*plan;
        }
        for (std::size_t m = 0; m < s.models.size(); ++m) {
            s.models[m].forward(c, x, local_ids_, false, 0);
            if (!s.cross_fitted()) {
                logits.middleRows(r0, n) = c.logits;
                if (head) hidden.middleRows(r0, n) = c.h;
                continue;
            }
            // A training row takes its own fold's model (which never fitted it), every other
            // row the mean of the models'.
            for (node_t i = 0; i < n; ++i) {
                const int f = s.row_fold[static_cast<std::size_t>(c.rows[static_cast<std::size_t>(i)])];
                if (f >= 0 && f != static_cast<int>(m)) continue;
                const float w = f >= 0 ? 1.0F : 1.0F / models;
                logits.row(r0 + i) += w * c.logits.row(i);
                if (head) hidden.row(r0 + i) += w * c.h.row(i);
            }
        }
    }
}

bool retexo_run::smooths_each_stage() const
{
    return o_.output == stage_output::best_smoothed && o_.smooth.enabled();
}

smooth_result retexo_run::spread_labels(const matrix_f& logits)
{
    return smooth_predictions(ctx_, logits, o_.smooth, o_.exchange_options(), meter_.timer);
}

void retexo_run::finish_output(const stage_record& last, matrix_f logits)
{
    result_.final_acc = last.best;
    result_.output_stage = last.stage;
    result_.logits = std::move(logits);
    std::optional<smooth_result> sm;
    double last_score = last.best.valid;
    if (smooths_each_stage()) {
        sm = spread_labels(result_.logits);
        last_score = sm->acc.valid;
        result_.stages.back().spread = {.alpha = sm->alpha, .acc = sm->acc};
    }
    // An earlier stage (or the label head) predicts if it validated better: its head's
    // accuracy (best), or its accuracy after label spreading (best-smoothed: its spreading,
    // kept since its stage).
    const bool earlier = o_.output != stage_output::last && carry_.best_stage >= 0 && carry_.best_valid > last_score;
    result_.output_label_head = earlier && carry_.best_label_head;
    if (result_.label_head) result_.label_head->kept = result_.output_label_head;
    if (earlier) {
        result_.final_acc = carry_.best_acc;
        result_.output_stage = carry_.best_stage;
        result_.logits = std::move(carry_.best_logits);
        sm.reset();
        if (smooths_each_stage())
            sm = smooth_result{.scores = std::move(carry_.best_spread),
                               .alpha = carry_.best_alpha,
                               .acc = carry_.best_spread_acc,
                               .valid = std::move(carry_.best_alpha_valid)};
    }
    if (!o_.smooth.enabled()) return;
    if (!sm) { // the output alone is spread
        sm = spread_labels(result_.logits);
        const spread_accuracy spread{.alpha = sm->alpha, .acc = sm->acc};
        if (!result_.output_label_head)
            result_.stages[static_cast<std::size_t>(result_.output_stage)].spread = spread;
        else if (result_.label_head)
            result_.label_head->spread = spread;
    }
    result_.smoothed = run_result::smoothing{.alpha = o_.smooth.alpha,
                                             .valid = sm->valid,
                                             .chosen = sm->alpha,
                                             .steps = o_.smooth.steps,
                                             .model = result_.final_acc};
    result_.final_acc = sm->acc;
    result_.logits = std::move(sm->scores);
}

void retexo_run::offer_output(int stage, bool label_head, const matrix_f& logits, const accuracies& acc,
                              spread_accuracy& spread)
{
    std::optional<smooth_result> sm;
    if (smooths_each_stage()) {
        sm = spread_labels(logits);
        spread = {.alpha = sm->alpha, .acc = sm->acc};
    }
    const double score = sm ? sm->acc.valid : acc.valid;
    if (carry_.best_stage >= 0 && score < carry_.best_valid) return;
    carry_.best_logits = logits;
    carry_.best_stage = stage;
    carry_.best_label_head = label_head;
    carry_.best_acc = acc;
    carry_.best_valid = score;
    if (sm) {
        carry_.best_spread = std::move(sm->scores);
        carry_.best_alpha = sm->alpha;
        carry_.best_spread_acc = sm->acc;
        carry_.best_alpha_valid = std::move(sm->valid);
    }
}

bool retexo_run::embed(retexo_stage& s)
{
    phase_timer::scope sc(meter_.timer, "embed"); // less label spreading's phases
    matrix_f logits, hidden, train_logits, train_hidden;
    embed_owned(s, s.x.all, ctx_.graph, logits, hidden);
    if (ctx_.inductive && !s.last) embed_owned(s, s.x.train, ctx_.train_graph, train_logits, train_hidden);
    stage_record sr;
    sr.stage = s.index;
    sr.rounds = s.rounds_done;
    sr.best_round = s.best_round;
    sr.candidates = s.candidates;
    sr.chosen = s.chosen;
    sr.side_by_side = s.side_by_side;
    sr.pseudo = s.pseudo;
    sr.best = reduce_accuracies(ctx_, logits);
    sr.bytes = ctx_.comm.sum(ctx_.comm.ledger() - s.start);
    sr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.t0).count();
    result_.stages.push_back(sr);
    for (auto& t : named_values(s.params))
        result_.parameters.push_back(std::move(t));
    std::optional<matrix_f> head;
    if (s.index == 0 && o_.label_head_applies()) head = train_label_head(s);
    const bool logits_variant = o_.variant == retexo_variant::logits;
    carry_.logits = !s.last && uses_pseudo_labels(s.index + 1) ? logits : matrix_f();
    if (s.last) {
        finish_output(sr, std::move(logits));
        result_.embedding = s.model().spec().head ? std::move(hidden) : carry_.h.all.to_dense();
        return true;
    }
    if (o_.output != stage_output::last) {
        offer_output(s.index, false, logits, sr.best, result_.stages.back().spread);
        if (head) offer_output(s.index, true, *head, result_.label_head->acc, result_.label_head->spread);
    }
    if (logits_variant) { // what crosses: each node's class probabilities
        softmax_rows(logits);
        softmax_rows(train_logits);
    }
    carry_.h.all = logits_variant ? std::move(logits) : std::move(hidden);
    if (ctx_.inductive) {
        carry_.h.train = logits_variant ? std::move(train_logits) : std::move(train_hidden);
        ctx_.hide_evaluation_rows(carry_.h.train);
    }
    if (o_.skips()) carry_.skip = std::move(s.x);
    if (!checkpointing()) return true;
    // A finished stage is a natural restart point: the next stage's inputs.
    phase_timer::scope sc_checkpoint(meter_.timer, "checkpoint");
    const auto& ck = o_.checkpoint;
    bool stop = ck.stop_after_stage == s.index || (ck.stop_requested && ck.stop_requested());
    stop = ctx_.comm.allreduce(stop ? 1 : 0, MPI_MAX, purpose::control) != 0;
    retexo_checkpoint c;
    c.stage = s.index + 1;
    c.carry = carry_;
    write(std::move(c));
    return !stop;
}

run_result retexo_run::finish(bool interrupted)
{
    result_.interrupted = interrupted;
    for (auto& sr : result_.stages)
        if (sr.candidates > 1)
            sr.settings =
                o_.search.describe(o_.stages[static_cast<std::size_t>(sr.stage)], static_cast<std::size_t>(sr.chosen));
    return meter_.finish(std::move(result_));
}

} // namespace detail

using detail::retexo_run;
using detail::retexo_stage;

run_result train_retexo(const rank_context& ctx, const retexo_options& options, const progress_fn& progress)
{
    options.validate();
    retexo_options o = options;
    o.search = options.searches(); // the model's default axes, resolved
    retexo_run run(ctx, o, progress);
    for (int stage = run.first_stage(); stage < static_cast<int>(o.stages.size()); ++stage) {
        retexo_stage s = run.open_stage(stage);
        run.exchange_and_aggregate(s); // the stage's one exchange
        if (o.search.active()) {
            if (!run.search(s)) return run.finish(true);
        } else {
            run.build_model(s);
            if (!run.train_rounds(s)) return run.finish(true);
        }
        run.keep_selected_round(s);
        if (!run.embed(s)) return run.finish(true); // the next stage's inputs
    }
    return run.finish(false);
}

} // namespace retexo::train

#pragma once
/// @file retexo.hpp
/// RETEXO's lazy message passing (Kolluri et al., arXiv 2302.13053).  A K-stage model is
/// trained stage by stage.  Stage k has fixed inputs h_k (h_0 = the raw features):
///   1. one exchange of h_k's halo rows, the stage's only neighbour traffic
///      (stage_exchange.hpp); GCN and SAGE-mean aggregate once, SAGE-pool and GAT every
///      round over the fixed inputs, with no traffic;
///   2. the stage model (nn/stage_model.hpp): the layer's transform, then LayerNorm, ReLU and
///      a linear head to the classes (the last stage's transform outputs the logits);
///   3. R_k rounds of full-batch (or mini-batch) training on each rank's own training nodes,
///      gradients all-reduced so the update equals full-graph training; validation accuracy
///      (or loss) every round, the best round's parameters kept (identically on every rank);
///   4. h_{k+1} = the post-ReLU hidden embedding of every owned node.
/// Options against stages that memorise their few training nodes: --skip carries a stage's
/// inputs into the next one (no bytes), --cross-fit K trains K fold models per stage so that
/// a training node's next-stage input comes from a model that never fitted it.
/// The "logits" variant (fully distributed setting) makes stage 0 an MLP on raw features and
/// has later stages read the previous stage's class probabilities (softmax of its logits),
/// the node's own beside its neighbours' mean, for every model: raw features never leave
/// their rank, only C values per boundary node per stage do.

#include <retexo/defaults.hpp>
#include <retexo/nn/stage_model.hpp>
#include <retexo/train/common.hpp>
#include <retexo/train/smooth.hpp>
#include <retexo/train/stage_exchange.hpp>

#include <algorithm>
#include <optional>

namespace retexo::train {

enum class retexo_variant { hidden, logits };
constexpr name_table<retexo_variant, 2> names_of(retexo_variant)
{
    return {"variant", {{{retexo_variant::hidden, "hidden"}, {retexo_variant::logits, "logits"}}}};
}

/// A stage model's normalisation before the hidden ReLU.  Without LayerNorm the hidden
/// embedding is an affine map of the aggregate followed by ReLU, the same map for every
/// node, so averaging it over neighbours in the next stage loses less than averaging
/// per-node normalised rows.
enum class normalization { layer, none };
constexpr name_table<normalization, 2> names_of(normalization)
{
    return {"normalisation", {{{normalization::layer, "layer"}, {normalization::none, "none"}}}};
}

/// The learning rate over a stage: constant, or falling linearly to 0 over its steps.
enum class lr_schedule { constant, linear };
constexpr name_table<lr_schedule, 2> names_of(lr_schedule)
{
    return {"learning-rate schedule", {{{lr_schedule::constant, "constant"}, {lr_schedule::linear, "linear"}}}};
}

/// Which round's parameters a stage keeps: the best validation accuracy, or the lowest
/// validation loss (the reference prototype's choice).
enum class selection { accuracy, loss };
constexpr name_table<selection, 2> names_of(selection)
{
    return {"selection", {{{selection::accuracy, "accuracy"}, {selection::loss, "loss"}}}};
}

/// Which predictions a run makes: the last stage's, those of the stage whose classifier head
/// (every stage has one) had the best validation accuracy, or (best_smoothed) the stage whose
/// predictions validate best after label spreading (each stage's spread once more: label
/// spreading's bytes once per stage).  The later stage on a tie.
enum class stage_output { last, best, best_smoothed };
constexpr name_table<stage_output, 3> names_of(stage_output)
{
    return {
        "output stage",
        {{{stage_output::last, "last"}, {stage_output::best, "best"}, {stage_output::best_smoothed, "best-smoothed"}}}};
}

/// Settings of one stage.
struct stage_options {
    int rounds = defaults::rounds;
    double lr = defaults::lr;
    int hidden = defaults::hidden;
    double dropout = defaults::dropout;
    double weight_decay = defaults::weight_decay;
    optimizer_kind optimizer = named<optimizer_kind>(defaults::optimizer);
    normalization norm = named<normalization>(defaults::norm);
    lr_schedule schedule = named<lr_schedule>(defaults::lr_schedule);
    /// Stop the stage after this many rounds without improvement (0: never; default_stages
    /// sets the table's, defaults::patience and defaults::last_stage_patience).
    int patience = 0;
    /// Pseudo-labels (stages after the first): the stage also trains on unlabelled nodes
    /// (neither training nor validation nodes; in inductive runs not test nodes either) with
    /// the classes the stage before predicted for them: per class, up to `pseudo_labels`
    /// times that class's training nodes, those predicted most confidently (the margin of
    /// the top logit over the others' log-sum-exp, in 0.1 steps: a histogram of C x 1000
    /// counts per rank is all-reduced, a control byte cost; the choice is the same on any
    /// partitioning).  No halo byte more.  0: off.
    double pseudo_labels = defaults::pseudo_labels;
};

/// The default stages of a `count`-stage run (data/defaults.cfg), chosen on cora and citeseer
/// (validation) and checked on graphs held out of that choice (docs/results.md, Accuracy):
/// every stage but the last with dropout 0.5 and stopped 50 rounds after its best validation
/// round (what it passes on is the best round's embedding; its gradient all-reduce is most of
/// RETEXO's bytes), the last stage with dropout 0.8 and all its rounds (on few labels the last
/// stage fits the training nodes within a few rounds; the heavier dropout holds it back).
std::vector<stage_options> default_stages(int count);

/// The label head's inputs (retexo_options::label_head): every owned row of g's [the class
/// distribution of the training nodes among its in-neighbours in g (not the node itself, so
/// no node reads its own label), 1 where it has no labelled in-neighbour]: C + 1 columns.
/// Collective: one exchange of C values per halo row.
matrix_f neighbour_labels(const rank_context& ctx, const stage_exchange& exchange, const nn::local_graph& g);

/// Candidate settings for every stage, chosen on validation.  A stage trains each candidate
/// in turn on its one exchange of inputs (no halo byte more; a candidate's gradients are
/// all-reduced as one model's, so K candidates cost at most K times the gradient bytes of the
/// stage's full rounds, less when they stop early), each stopping after `patience` rounds
/// without improvement, and keeps
/// the candidate whose selected round scored best on validation (accuracy, or loss with
/// --select loss), ties broken by the lower validation loss.  The candidates: every
/// combination of the listed values; an empty list keeps the stage's own setting.
struct stage_search {
    std::vector<double> lr{}, dropout{}, pseudo_labels{};
    /// The weight decays and (in candidate order after them) the normalisations.  Unset: the
    /// model's default (retexo_options::searches()); set, an empty list keeps the stage's own.
    std::optional<std::vector<double>> weight_decay = std::vector<double>{};
    std::optional<std::vector<normalization>> norm = std::vector<normalization>{};
    const std::vector<double>& weight_decay_axis() const { return axis(weight_decay); }
    const std::vector<normalization>& norm_axis() const { return axis(norm); }
    int patience = 0; ///< rounds without improvement before a candidate stops (0: the stage's own)
    /// The number of candidates (1: no search).
    std::size_t size() const
    {
        return std::max<std::size_t>(1, lr.size()) * std::max<std::size_t>(1, dropout.size()) *
               std::max<std::size_t>(1, weight_decay_axis().size()) * std::max<std::size_t>(1, norm_axis().size()) *
               std::max<std::size_t>(1, pseudo_labels.size());
    }
    /// The candidates a stage trains, in order: all but those that differ from an earlier one
    /// only in what the stage does not use: pseudo-labels at stage 0 (no stage before it),
    /// the normalisation where the stage has no hidden layer to normalise (`normalises`
    /// false: the hidden variant's last stage).
    std::vector<std::size_t> trained(int stage, bool normalises) const;
    /// A bound on the candidate indices stage `stage` trains.
    std::size_t size_at(int stage) const
    {
        return stage == 0 ? size() / std::max<std::size_t>(1, pseudo_labels.size()) : size();
    }
    bool active() const { return size() > 1; }
    /// Candidate i (< size()) of a stage whose own settings are `base`.
    stage_options candidate(const stage_options& base, std::size_t i) const;
    /// "lr=... dropout=... weight-decay=... pseudo-labels=..." of candidate i (and "norm=..."
    /// with that axis).
    std::string describe(const stage_options& base, std::size_t i) const;

private:
    template <class T>
    static const std::vector<T>& axis(const std::optional<std::vector<T>>& values)
    {
        static const std::vector<T> none;
        return values ? *values : none;
    }
};

/// Checkpoints of a RETEXO run (io/checkpoint.hpp): every finished stage is a restart point,
/// and within a stage a checkpoint is written at most every `every_minutes`.  A run resumes
/// only from checkpoints of the same partition, rank count, input features and every
/// option that shapes the result.
struct checkpoint_options {
    std::string dir;                      ///< empty: no checkpoints
    double every_minutes = 0;             ///< within a stage, at most this often (0: at stage ends only)
    bool resume = false;                  ///< continue from the newest complete checkpoint in dir
    double max_hours = 0;                 ///< stop cleanly, with a checkpoint, before this wall time (0: no limit)
    std::function<bool()> stop_requested; ///< polled every round (e.g. SIGTERM / SIGUSR1 seen)
    int stop_after_stage = -1;            ///< stop cleanly after this stage (testing and staged jobs)
};

/// The columns of a RETEXO stage's inputs: `width`, and the pairs of blocks that hold a
/// node's own input and its neighbours' mean (retexo_options::input_layout).
struct stage_input_layout {
    std::vector<nn::input_pair> pairs;
    int width = 0;
};

struct retexo_options {
    nn::layer_kind model = named<nn::layer_kind>(defaults::model);
    retexo_variant variant = retexo_variant::hidden;
    std::vector<stage_options> stages = default_stages(defaults::stages);
    int heads = defaults::heads; ///< gat
    std::uint64_t seed = defaults::seed;
    bool deterministic =
        false;          ///< --deterministic: exact reductions (nn/reduce.hpp), results independent of ranks and threads
    int batch_size = 0; ///< training rows per step over all ranks (0: full batch)
    selection select = selection::accuracy;
    /// How stage inputs cross the network: wire precision; GCN / GraphSAGE-mean: in blocks
    /// of columns (exchange.columns; unset: the model's default, exchange_columns()),
    /// overlapped with the aggregation of the interior rows (the same result bit for bit
    /// either way, but that int8 rows carry a scale per block).
    stage_exchange_options exchange;
    /// The columns a stage's input exchange sends at a time (0: all at once): exchange.columns,
    /// unset: the model's in data/defaults.cfg.  64 for GCN and GraphSAGE-mean, whose one
    /// exchange and aggregation then hold a 64-column block of the halo rows at a time
    /// instead of every column of them (and as many rows packed to send); 0 for GAT and
    /// GraphSAGE-pool, which train on every column of the exchanged rows every round.
    int exchange_columns() const;
    /// `exchange` with exchange_columns().
    stage_exchange_options exchange_options() const
    {
        stage_exchange_options e = exchange;
        e.columns = exchange_columns();
        return e;
    }
    bool track_test = false; ///< also measure test accuracy every round (time to accuracy)
    /// Each stage after the first also reads the previous stage's inputs beside its own (a
    /// dense, jumping-knowledge connection): the rank already holds them, so no bytes cross.
    /// A later stage can then do at least what the one before it did.  The logits variant's
    /// GAT and SAGE-pool stages cannot (they would need the raw features' halo rows): unset,
    /// it is on wherever it can be (skips()); set true there, validate() refuses it.
    std::optional<bool> skip;
    bool skips() const
    {
        return skip.value_or(variant == retexo_variant::hidden ||
                             (model != nn::layer_kind::gat && model != nn::layer_kind::sage_pool));
    }
    /// GraphSAGE stages after the first read each node's own embedding from the stage before
    /// beside its neighbours' mean (hidden variant).  That stage fitted its training nodes'
    /// embeddings to their labels, so a later stage learns to read a training node's label
    /// from its own embedding, where another node's carries only the stage before's guess.
    /// With skips() the node's own inputs reach the stage anyway.  Unset: only without skips().
    std::optional<bool> own_embedding;
    bool reads_own_embedding() const { return own_embedding.value_or(!skips()); }
    /// The logits variant's stage 0: an MLP of the raw features, which never cross a partition.
    bool mlp_only(int stage) const { return variant == retexo_variant::logits && stage == 0; }
    /// GraphSAGE-pool and GAT stages aggregate with trained parameters, every round.
    bool graph_stage(int stage) const
    {
        return !mlp_only(stage) && (model == nn::layer_kind::sage_pool || model == nn::layer_kind::gat);
    }
    /// Whether a stage's inputs keep each node's own input beside its neighbours' aggregate
    /// (dense stages): GraphSAGE (after the first stage: with reads_own_embedding()) and the
    /// logits variant for every model.
    bool reads_own_input(int stage) const;
    /// The columns of a stage's inputs (before the label inputs), given the raw features'
    /// width and the classes.
    stage_input_layout input_layout(int stage, int raw_width, int classes) const;
    /// GraphSAGE-mean stages: the weights of each neighbours' mean block are those of the
    /// node's own block plus a trained offset (nn::stage_spec::offset_pairs), so weight decay
    /// pulls the two together.  The same functions as GraphSAGE's two independent matrices,
    /// another regulariser (docs/results.md: "The neighbours' weights as an offset").
    bool neighbour_offset = defaults::neighbour_offset;
    /// Cross-fitting: every stage but the last trains `cross_fit` models, model f on the
    /// training nodes outside fold f (folds by global id).  A training node of fold f takes
    /// model f's embedding into the next stage, one its model never fitted; every other node
    /// the mean of the models'.  All models' gradients travel in one all-reduce per round.
    /// 1: one model per stage.
    int cross_fit = defaults::cross_fit;
    /// Settings each stage chooses among on validation (default: the dropout rates of the
    /// defaults table and the model's weight decays and normalisations there, search.weight_decay
    /// and search.norm unset; every combination; `search = {}` trains the stages' own settings
    /// only).  A run searches searches().
    stage_search search{.dropout = {defaults::search_dropout.begin(), defaults::search_dropout.end()},
                        .weight_decay = std::nullopt,
                        .norm = std::nullopt};
    /// The search with search.weight_decay and search.norm resolved: unset, the defaults
    /// table's list for the model (data/defaults.cfg: its section's where it has one;
    /// a list of one value is the stage's own setting, no search on that axis).
    stage_search searches() const;
    /// The label head (GCN and GraphSAGE-mean, hidden variant, more than one stage, output
    /// best or best-smoothed): after stage 0, its candidates are trained again with label
    /// inputs beside their inputs (neighbour_labels: each node's labelled in-neighbours'
    /// class distribution, C + 1 columns, one exchange of C values per halo row).  The best
    /// of them on validation is one more candidate for the run's predictions, as a stage is;
    /// its embeddings go nowhere, so no training node's label reaches a later stage through
    /// its neighbours.  Elsewhere it is not trained.
    bool label_head = defaults::label_head;
    bool label_head_applies() const
    {
        return label_head && stages.size() > 1 && output != stage_output::last && variant == retexo_variant::hidden &&
               (model == nn::layer_kind::gcn || model == nn::layer_kind::sage_mean);
    }
    /// Label spreading of the last stage's predictions over the graph, alpha chosen on
    /// validation (train/smooth.hpp); alpha 0 is the model's own predictions, so the choice
    /// never scores lower on validation than the model.  Off when smooth.alpha is empty.
    smooth_options smooth{.alpha = {defaults::smooth_alpha.begin(), defaults::smooth_alpha.end()}};
    /// The run's predictions (before label spreading).
    stage_output output = named<stage_output>(defaults::output_stage);
    /// A stage can gather every rank's training rows (their stage inputs, ids and labels) onto
    /// every rank once per stage, in global-id order; GAT and SAGE-pool stages, which train on
    /// neighbourhoods, also gather the training rows' in-edges and their in-neighbours'
    /// inputs, each row from its owner.  Each rank then computes the whole gradient itself
    /// and no gradient crosses the network; every rank computes over all training rows.  The
    /// result is the single-process run's.  true: always; false: never; unset (the default):
    /// where it sends fewer bytes than the stage's gradient all-reduces would over all its
    /// candidates' rounds (replicates_rows(), graph stages counting one row per training
    /// in-edge), decided alike on every rank; one process: never.
    std::optional<bool> replicate_train;
    /// A stage that gathers its training rows can train its search candidates side by side,
    /// one rank each (round robin), with no collective until all are done: each rank also
    /// gathers the validation rows (and test rows with track_test; graph stages with their
    /// neighbourhoods), evaluates its candidates on them, and the kept candidate's owner
    /// broadcasts its parameters.  The result and history are the one-candidate-after-another
    /// search's; each rank trains 1/P of the candidates instead of all.  true: wherever the
    /// stage gathers its training rows; false: never; unset (the default): where it gathers
    /// them and the evaluation rows (graph stages: with their in-edges) are no more than the
    /// training rows, so the bytes added are at most those of the training rows.  Not with
    /// checkpoints (a stop must be agreed every round) or a stage's pseudo-labels.
    std::optional<bool> search_parallel;
    /// GAT stages: aggregate a pass's support inputs before multiplying by W (true), or
    /// multiply every support row first (false); unset (the default): per pass, whichever
    /// costs fewer multiply-adds (nn::gnn_layer::aggregates_inputs_first).  The same
    /// function, rounded differently.
    std::optional<bool> gat_inputs_first;
    /// Whether a stage gathers its training rows: `rows` rows to gather over `ranks` ranks,
    /// `width` input columns (dense), `params` parameters, `rounds` rounds (a search's: over
    /// all its candidates).
    bool replicates_rows(int ranks, std::int64_t rows, std::int64_t width, std::int64_t params, int rounds) const;
    checkpoint_options checkpoint;

    /// Throws a retexo::error naming the option if a value is out of its range, or if values
    /// do not go together.
    void validate() const;
    /// The values on their own, not how they combine with the model: what an application
    /// checks of the options of a mode it does not run.
    void validate_values() const;
    /// Every option that shapes the result, as text (what a checkpoint must match).
    std::string describe() const;
};

/// Train (collective).
run_result train_retexo(const rank_context& ctx, const retexo_options& options, const progress_fn& progress = {});

} // namespace retexo::train

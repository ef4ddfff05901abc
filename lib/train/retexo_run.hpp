#pragma once
// The RETEXO trainer's private types (lib/train only): one stage in progress and the run
// that carries from stage to stage.  retexo.cpp trains and embeds the stages,
// retexo_search.cpp chooses among a stage's candidate settings, retexo_gather.cpp gathers
// the rows a stage trains or evaluates on with --replicate-train and --search-parallel.
#include <retexo/core/hash.hpp>
#include <retexo/core/memory.hpp>
#include <retexo/io/checkpoint.hpp>
#include <retexo/nn/stage_model.hpp>
#include <retexo/train/retexo.hpp>

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace retexo::train::detail {

/// The in-edges of `rows` in g: the rows a graph stage's gather sends besides them, at most.
std::int64_t in_edges_of(const std::vector<node_t>& rows, const nn::local_graph& g);

/// One stage in progress; stage_progress: what a checkpoint keeps of it.
struct retexo_stage : stage_progress {
    retexo_stage(int index, const stage_options& so) : index(index), so(so) {}
    int index;
    stage_options so; ///< the stage's settings (a search's current candidate)
    bool last = false;
    bool mlp_only = false; ///< logits variant, stage 0: raw features never cross a partition
    bool graph = false;    ///< SAGE-pool / GAT: the stage aggregates every round
    bool resumed = false;  ///< continues a checkpoint taken inside this stage
    byte_ledger start;     ///< this rank's ledger at the stage's start
    std::chrono::steady_clock::time_point t0;
    // x (stage_progress): every owned row's aggregate (dense stages) or every local row
    // (graph stages), dense or sparse.
    /// One model, or one per fold (cross-fitting); params: all of theirs, in model order.
    std::vector<nn::stage_model> models;
    std::vector<parameter<float>*> params;
    /// --replicate-train: every rank's training rows, in global-id order, and for graph
    /// stages their in-neighbours too, with the in-edges of the training rows (rows: the
    /// training rows' positions; labels: by position).
    struct gathered_rows {
        node_features x;
        std::vector<node_t> ids, rows;
        std::vector<std::int32_t> labels;
        double pseudo_labels = 0;     ///< training rows: the pseudo-label ratio of their targets
        csr in_edges;                 ///< graph stages: num rows (x), edges into the training rows
        std::vector<offset_t> degree; ///< graph stages: every row's in-degree in the training graph
        nn::local_graph graph() const
        {
            const auto n = static_cast<node_t>(ids.size());
            return {.in_edges = &in_edges, .num_owned = n, .num_local = n, .in_degree = degree};
        }
    };
    std::optional<gathered_rows> all_train;
    /// A search side by side (retexo_options::search_parallel): every rank's validation rows,
    /// then test rows with track_test, gathered like the training rows.  They are evaluated
    /// in P chunks, so that a pass holds what a rank's share would (graph stages: a plan per
    /// chunk).
    struct gathered_eval {
        gathered_rows rows;
        struct chunk {
            std::vector<node_t> rows;
            std::optional<nn::layer_plan> plan;
        };
        std::vector<chunk> chunks;
        nn::stage_pass pass; ///< reused chunk after chunk, round after round
    };
    std::vector<gathered_eval> all_eval;
    /// Cross-fitting: each model's training rows on this rank and over all ranks, and the
    /// fold of every owned row (-1: not a training row).
    std::vector<std::vector<node_t>> fold_rows; // and fold_count (stage_progress)
    std::vector<int> row_fold;
    std::optional<optimizer<float>> opt;
    int batches = 1;
    std::vector<node_t> eval_rows; ///< validation rows (then test rows with track_test)
    /// Graph stages: plans over each model's training rows and eval_rows.
    std::vector<nn::layer_plan> plans_train;
    std::optional<nn::layer_plan> plan_eval;
    nn::stage_pass p, pe; ///< training and evaluation passes, reused round after round
    /// The label head (stage 0): whether the stage trains it now, whether x (and the gathered
    /// training rows' x) hold its label inputs as their last column block, and while they do
    /// not, those computed (and gathered) before; no columns: none yet.
    bool label_head = false, labels_on = false;
    struct {
        node_features all, train, gathered;
    } held_labels;
    int candidates = 1, chosen = 0;
    bool side_by_side = false; ///< the search trained its candidates one rank each
    std::int64_t pseudo = 0;   ///< pseudo-labelled training nodes, all ranks

    nn::stage_model& model() { return models.front(); }
    bool cross_fitted() const { return models.size() > 1; }
};

/// A checkpoint's tensors `group` fit the stage model's parameters (throws naming the file).
void check_tensors(const std::string& path, const char* group, const std::vector<matrix_f>& values,
                   const retexo_stage& s);

/// A RETEXO run: what carries from stage to stage (the next stage's inputs, the optimiser
/// step, the records) and the checkpoints.
class retexo_run {
public:
    retexo_run(const rank_context& ctx, const retexo_options& o, const progress_fn& progress);

    int first_stage() const { return resumed_ ? resumed_->stage : 0; }
    retexo_stage open_stage(int index);
    /// The stage's inputs: its one exchange (and aggregation), then --skip's columns.
    void exchange_and_aggregate(retexo_stage& s);
    void build_model(retexo_stage& s);
    /// False when the run stopped inside the stage with a checkpoint.
    bool train_rounds(retexo_stage& s);
    /// --search-*: train every candidate, then rebuild the stage's model as the one kept,
    /// with its selected round's parameters.  False when the run stopped inside the search
    /// with a checkpoint.
    bool search(retexo_stage& s);
    void keep_selected_round(retexo_stage& s);
    /// Whether the stage trains the search candidates `order` side by side (collective: the
    /// stage's first build decides whether it gathers its training rows).
    bool searches_side_by_side(retexo_stage& s, const std::vector<std::size_t>& order);
    /// Candidate order[j] on rank j mod P, with no collective; then every rank learns every
    /// candidate's outcome and history, and keeps the one-after-another search's choice
    /// (collective).  The rank that trained the kept candidate.
    int search_side_by_side(retexo_stage& s, const std::vector<std::size_t>& order);
    /// Every rank's records since history[from], on every rank, by candidate and round
    /// (collective).
    void share_history(std::size_t from);
    /// False when the run stopped after the stage with a checkpoint.
    bool embed(retexo_stage& s);
    /// --output-stage best / best-smoothed: stage `stage`'s logits of every owned row (its
    /// label head's if label_head; their accuracy `acc`) predict if they validate at least
    /// as well (after label spreading with best-smoothed, which also records the spreading
    /// in `spread`) as the best before them.
    void offer_output(int stage, bool label_head, const matrix_f& logits, const accuracies& acc,
                      spread_accuracy& spread);
    /// The run's predictions after the last stage: the output stage's, label spreading.
    void finish_output(const stage_record& last, matrix_f logits);
    bool smooths_each_stage() const;
    /// Label spreading of `logits` (the owned rows'), its rows at the stage inputs' wire.
    smooth_result spread_labels(const matrix_f& logits);
    run_result finish(bool interrupted);

private:
    bool checkpointing() const { return !o_.checkpoint.dir.empty(); }
    int patience(const retexo_stage& s) const
    {
        return o_.search.active() && o_.search.patience > 0 ? o_.search.patience : s.so.patience;
    }
    /// Forget the stage's model, optimiser and round selection (not its inputs).
    static void reset_model(retexo_stage& s);
    void exchange_inputs(retexo_stage& s);
    /// The (own input, neighbours' mean) pairs of stage s's inputs whose weights are an
    /// offset apart (retexo_options::neighbour_offset).
    std::vector<nn::input_pair> offset_pairs(const retexo_stage& s) const;
    /// x (and the gathered training rows) with the label inputs as the last block while the
    /// stage trains its label head, else without.  Collective where they were not computed
    /// or gathered yet (an exchange, a gather of the training rows'); else local.
    void use_label_inputs(retexo_stage& s);
    /// The label head (retexo_options::label_head): stage 0's candidates again, with label
    /// inputs; the best one's logits of every owned row (its accuracy in
    /// run_result::label_head).  The stage's inputs, run step and model are as before it
    /// after (collective).
    matrix_f train_label_head(retexo_stage& s);
    /// Every rank's rows `rows` of x with their labels, in global-id order (collective).
    retexo_stage::gathered_rows gather_rows(const retexo_stage& s, const node_features& x,
                                            const std::vector<node_t>& rows,
                                            const std::vector<std::int32_t>& labels) const;
    /// Graph stages: every rank's rows `rows`, their in-edges in g and the rows of their
    /// in-neighbours, each from its owner (collective).
    retexo_stage::gathered_rows gather_graph(const retexo_stage& s, const node_features& x,
                                             const std::vector<node_t>& rows, const std::vector<std::int32_t>& labels,
                                             const nn::local_graph& g) const;
    /// --replicate-train: gather every rank's training rows (collective).
    void gather_training_rows(retexo_stage& s)
    {
        phase_timer::scope sc(meter_.timer, "exchange");
        const auto& x = s.x.for_training(ctx_.inductive);
        s.all_train = s.graph ? gather_graph(s, x, train_rows_, labels_, ctx_.train_graph)
                              : gather_rows(s, x, train_rows_, labels_);
        s.all_train->pseudo_labels = pseudo_labels(s);
    }
    /// The validation (and test) rows for a search side by side (collective).
    void gather_evaluation_rows(retexo_stage& s);
    /// Every rank's rows `rows` of x (n over all ranks), in rank order, each block in its
    /// storage (collective).
    node_features allgather_rows(const retexo_stage& s, const node_features& x, std::span<const node_t> rows,
                                 std::int64_t n) const;
    // What the stage trains on: this rank's training rows or (gathered) every rank's.
    const node_features& training_x(const retexo_stage& s) const
    {
        return s.all_train ? s.all_train->x : s.x.for_training(ctx_.inductive);
    }
    std::span<const node_t> training_ids(const retexo_stage& s) const
    {
        return s.all_train ? std::span<const node_t>(s.all_train->ids) : local_ids_;
    }
    const std::vector<node_t>& training_rows(const retexo_stage& s) const
    {
        return s.all_train ? s.all_train->rows : train_rows_;
    }
    nn::local_graph training_graph(const retexo_stage& s) const
    {
        return s.all_train ? s.all_train->graph() : ctx_.train_graph;
    }
    /// The stage's training targets: the labelled rows and, with pseudo-labels, those chosen
    /// from the previous stage's logits (collective).
    void set_targets(retexo_stage& s);
    /// Per class, the unlabelled owned rows the previous stage predicted most confidently.
    void add_pseudo_labels(retexo_stage& s);
    /// The pseudo-label ratio the stage's current settings train with.
    static double pseudo_labels(const retexo_stage& s) { return s.index > 0 ? s.so.pseudo_labels : 0; }
    /// Whether a stage trains on pseudo-labels (its own setting or a search candidate's).
    bool uses_pseudo_labels(int stage) const
    {
        const double own = o_.stages[static_cast<std::size_t>(stage)].pseudo_labels;
        const auto& axis = o_.search.pseudo_labels;
        return own > 0 || std::any_of(axis.begin(), axis.end(), [](double v) { return v > 0; });
    }
    /// The mean loss of a step over n_global rows (an all-reduce unless gathered).
    double step_loss(const retexo_stage& s, const loss_result& loss, std::int64_t n_global);
    /// Cross-fitting: the folds of the stage's training rows and each model's share.
    void assign_folds(retexo_stage& s, int folds);
    double train_round(retexo_stage& s, int round);
    /// One model's forward and backward pass over rows; its loss.
    loss_result model_step(retexo_stage& s, nn::stage_model& m, const std::vector<node_t>& rows,
                           const nn::layer_plan* plan, std::int64_t n_global);
    /// The stage's logits of p.rows (the mean of its models' logits).
    void stage_logits(retexo_stage& s, nn::stage_pass& p, const node_features& x, std::span<const node_t> ids);
    void evaluate(retexo_stage& s, epoch_record& rec);
    /// evaluate() on the gathered evaluation rows, with no collective.
    void evaluate_gathered(retexo_stage& s, epoch_record& rec);
    /// Every owned row's logits and hidden embedding under the selected parameters; graph
    /// stages read the neighbourhoods of g.
    void embed_owned(retexo_stage& s, const node_features& x, const nn::local_graph& g, matrix_f& logits,
                     matrix_f& hidden);
    /// After a round: stop (signal, wall-time limit) and/or write a timed checkpoint, the
    /// same decision on every rank.  True: stop.
    bool checkpoint_round(retexo_stage& s, int round);
    /// Every rank writes its part (collective: errors agreed on).
    void write(retexo_checkpoint c);
    /// A resumed checkpoint fits this run and this rank's partition (throws naming the file).
    void check_resumed(const retexo_checkpoint& c) const;
    void check_resumed_inputs(const retexo_checkpoint& c) const; ///< its rows and shapes (check_resumed)
    /// Whether stage s has a hidden layer and a head (all but the hidden variant's last, whose
    /// transform gives the logits): only then does its normalisation matter.
    bool has_head(const retexo_stage& s) const { return !s.last || o_.variant == retexo_variant::logits; }

    const rank_context& ctx_;
    const retexo_options& o_;
    const progress_fn& progress_;
    run_meter meter_;
    const node_t own_;
    const int C_;
    const nn::reduce_mode mode_;
    /// Inside a search side by side: this rank trains alone, and calls no collective.
    bool alone_ = false;
    std::uint64_t bytes_before_alone_ = 0; ///< all ranks' bytes when it began (records)
    nn::reduce_mode local_mode_;           ///< mode_ within one rank (gathered training rows)
    int loss_k_;                           ///< exact mode: fixed-point exponent of the stage's training loss
    const int valid_k_;                    ///< and of the validation loss
    /// The stage's training rows and every owned row's label (pseudo-labels included), and
    /// the training rows over all ranks.
    std::vector<node_t> train_rows_;
    std::vector<std::int32_t> labels_;
    std::int64_t global_train_ = 0;
    std::vector<node_t> local_ids_; ///< global id of every local row (dropout keys, batches)
    run_result result_;
    stage_carry carry_;     ///< this stage's inputs (and --skip's)
    std::int64_t step_ = 0; ///< optimiser steps of the run (dropout masks)
    std::optional<retexo_checkpoint> resumed_;
    checkpoint_identity id_;
    std::int64_t seq_ = 0;
    std::chrono::steady_clock::time_point last_checkpoint_;
};

} // namespace retexo::train::detail

#pragma once
/// @file common.hpp
/// What every trainer shares: a rank's view of its partition (halo plan, local graph,
/// split rows, global counts), gradient synchronisation, parameter broadcast, metric
/// reduction, the run meter (traffic, time, history) and what a run reports.

#include <retexo/comm/halo_plan.hpp>
#include <retexo/core/timer.hpp>
#include <retexo/io/records.hpp>
#include <retexo/kernels/loss.hpp>
#include <retexo/nn/layers.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>

namespace retexo::train {

/// A rank's partition prepared for training (collective constructor: builds the halo plan
/// and sums the split sizes over ranks).
///
/// Inductive setting: training sees the graph without the validation and test nodes and
/// their edges (train_graph: those nodes keep their rows but have no edges in or out, and
/// degrees are those of the reduced graph); evaluation uses the whole graph.  Building it
/// exchanges each boundary node's split membership and reduced degree once (setup).
/// It keeps references to comm and part, which must outlive it (a temporary partition does
/// not compile); part must be this rank's of comm.size() parts (throws otherwise).
struct rank_context {
    rank_context(const mpi::communicator& comm, const local_partition& part, bool inductive = false);
    rank_context(const mpi::communicator& comm, local_partition&& part, bool inductive = false) = delete;

    const mpi::communicator& comm;
    const local_partition& part;
    std::vector<offset_t> degree; ///< global in-degree of every local row
    nn::local_graph graph;        ///< the whole graph (evaluation; transductive training)
    bool inductive = false;
    csr train_edges; ///< inductive: in-edges among non-evaluation nodes
    std::vector<offset_t> train_degree;
    nn::local_graph train_graph;         ///< the graph training sees (== graph when transductive)
    std::vector<node_t> evaluation_rows; ///< inductive: local rows (owned and halo) of valid/test nodes

    /// Inductive: zero the evaluation nodes' rows of a training input (owned rows, and halo
    /// rows if x has them), so nothing of them reaches training, not even a fixed-point scale.
    void hide_evaluation_rows(node_features& x) const;
    std::unique_ptr<halo_plan> halo;
    std::vector<node_t> train_rows, valid_rows, test_rows, owned_rows;
    std::int64_t global_train = 0, global_valid = 0, global_test = 0;
    std::int64_t global_nodes = 0, global_edges = 0;
    byte_ledger setup_bytes; ///< this rank's traffic while building the context (halo plan)

    /// Reduction mode whose global maximum is an all-reduce over comm (control traffic).
    nn::reduce_mode reduce(bool exact) const;
};

/// Sum the gradients of params over ranks (one all-reduce; int64 fixed point in exact
/// mode, then converted; on one rank, no call).  Collective.
void allreduce_gradients(const mpi::communicator& comm, const std::vector<parameter<float>*>& params, bool exact);
/// Make every rank's initial parameter values rank 0's.  They are drawn from the seed alike
/// on every rank, so ranks first compare an 8-byte digest of them; rank 0 broadcasts its
/// values only when some rank's differ.  Collective.
void agree_initial_parameters(const mpi::communicator& comm, const std::vector<parameter<float>*>& params);
/// Copy parameter values (best-model snapshots).
std::vector<matrix_f> snapshot(const std::vector<parameter<float>*>& params);
void restore(const std::vector<parameter<float>*>& params, const std::vector<matrix_f>& values);

/// Each row of x becomes its softmax (in place).
void softmax_rows(matrix_f& x);

/// Accuracy on the three splits, from per-rank correct counts (collective, metrics traffic).
accuracies reduce_accuracies(const rank_context& ctx, const matrix_f& logits_owned);

/// Fixed-point exponent for summing `rows` per-node losses exactly (each below 2^10).
int loss_exponent(std::int64_t rows);

/// Mean loss of rows whose losses are all in `all`: exact when exact_k >= 0.
double mean_loss(const loss_result& all, std::int64_t count, int exact_k);
/// Mean loss over all ranks' rows (collective, metrics traffic): exact when exact_k >= 0.
double reduce_loss(const mpi::communicator& comm, const loss_result& local, std::int64_t global_count, int exact_k);

/// Everything a run reports.
struct run_result {
    std::string mode, model, variant;
    /// The standard trainer: how its first layer multiplies the features in training
    /// ("dense", "sparse", or "dense, dropped out as sparse rows"); empty for RETEXO.
    std::string first_layer_input;
    int ranks = 1;
    std::uint64_t seed = 0;
    accuracies final_acc;
    /// Labelled nodes of each split over all ranks: an accuracy is a fraction of these (0 over
    /// an empty split).
    struct split_counts {
        std::int64_t train = 0, valid = 0, test = 0;
    } nodes;
    byte_ledger bytes;                     ///< summed over ranks
    std::map<std::string, double> seconds; ///< by phase, plus "total"
    std::vector<epoch_record> history;
    std::vector<stage_record> stages;
    std::uint64_t max_rank_bytes = 0;     ///< bytes sent by the busiest rank
    bool interrupted = false;             ///< stopped early with a checkpoint (resume to finish)
    std::vector<named_tensor> parameters; ///< the selected (best-validation) model
    matrix_f logits;                      ///< final logits (or smoothed class scores) of the owned rows
    /// RETEXO's label spreading after the last stage (train/smooth.hpp), when on.
    struct smoothing {
        std::vector<double> alpha, valid; ///< the candidates and their validation accuracy
        double chosen = 0;
        int steps = 0;
        accuracies model; ///< the model's own accuracy, before smoothing
    };
    std::optional<smoothing> smoothed;
    /// RETEXO: the stage whose predictions are the run's (retexo_options::output), or its
    /// label head's; -1 in a standard run or one stopped early.
    int output_stage = -1;
    bool output_label_head = false;
    std::optional<label_head_record> label_head; ///< RETEXO's (retexo_options::label_head), when trained
    matrix_f embedding;                          ///< last hidden embedding of the owned rows
};

/// Progress callback: called on every rank after every epoch / round; but in a RETEXO search
/// side by side (retexo_options::search_parallel) each rank reports the rounds of the
/// candidates it trains only (run_result::history has every candidate's).
using progress_fn = std::function<void(const epoch_record&)>;

/// What a trainer measures from its start: this rank's traffic, the wall time, and the
/// time by phase.
class run_meter {
public:
    explicit run_meter(const rank_context& ctx);
    /// Continue a run that had already moved `done` (this rank's ledger) in `elapsed`
    /// seconds, with these times by phase (a resumed checkpoint).
    void resume(const byte_ledger& done, double elapsed, const std::map<std::string, double>& phases);

    phase_timer timer;
    /// This rank's traffic since the start.
    byte_ledger traffic() const { return ctx_.comm.ledger() - start_; }
    double elapsed() const;
    /// The bytes all ranks have sent so far, setup included (collective).
    std::uint64_t all_bytes() const;
    /// Completes rec with the bytes all ranks have sent so far (all_bytes(), or `bytes` when
    /// given: then not collective), this rank's calls and the time, appends it to r.history
    /// and reports it.
    void record(epoch_record rec, run_result& r, const progress_fn& progress, std::optional<std::uint64_t> bytes = {});
    /// Fills in r's times, its bytes summed over ranks and the busiest rank's (collective).
    run_result finish(run_result r) const;

private:
    const rank_context& ctx_;
    byte_ledger start_;
    std::chrono::steady_clock::time_point t0_;
};

/// Networks of the paper's settings, for emulated times.
struct named_network {
    std::string name;
    network_model model;
};
std::vector<named_network> paper_networks();
/// Time the run would take on network m: measured time + the busiest rank's bytes over the
/// bandwidth + one latency per communication call.
double emulated_seconds(const run_result& r, const network_model& m);

/// Named copies of parameter values.
std::vector<named_tensor> named_values(const std::vector<parameter<float>*>& params, const std::string& prefix = {});

} // namespace retexo::train

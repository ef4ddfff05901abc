#pragma once
/// @file common.hpp
/// What every trainer shares: a rank's view of its partition (halo plan, local graph,
/// split rows, global counts), gradient synchronisation, parameter broadcast, metric
/// reduction, phase timers and the records a run produces.

#include <retexo/comm/halo_plan.hpp>
#include <retexo/kernels/loss.hpp>
#include <retexo/nn/layers.hpp>

#include <chrono>
#include <limits>
#include <map>
#include <memory>

namespace retexo::train {

/// A rank's partition prepared for training (collective constructor: builds the halo plan
/// and sums the split sizes over ranks).
///
/// Inductive setting: training sees the graph without the validation and test nodes and
/// their edges (train_graph: those nodes keep their rows but have no edges in or out, and
/// degrees are those of the reduced graph); evaluation uses the whole graph.  Building it
/// exchanges each boundary node's split membership and reduced degree once (setup).
struct rank_context {
    rank_context(const mpi::communicator& comm, const local_partition& part, bool inductive = false);

    const mpi::communicator& comm;
    const local_partition& part;
    std::vector<offset_t> degree; ///< global in-degree of every local row
    nn::local_graph graph;        ///< the whole graph (evaluation; transductive training)
    bool inductive = false;
    csr train_edges; ///< inductive: in-edges among non-evaluation nodes
    std::vector<offset_t> train_degree;
    nn::local_graph train_graph;         ///< the graph training sees (== graph when transductive)
    std::vector<node_t> evaluation_rows; ///< inductive: local rows (owned and halo) of valid/test nodes

    /// Inductive: zero the evaluation nodes' rows of a training input (owned rows first, then
    /// halo rows if x has them), so nothing of them reaches training, not even a
    /// fixed-point scale.
    /// Only rows in [begin, end) when given.
    template <typename T>
    void hide_evaluation_rows(matrix<T>& x, node_t begin = 0, node_t end = -1) const
    {
        const node_t stop = end < 0 ? static_cast<node_t>(x.rows()) : std::min(end, static_cast<node_t>(x.rows()));
        for (node_t u : evaluation_rows)
            if (u >= begin && u < stop) x.row(u).setZero();
    }
    std::unique_ptr<halo_plan> halo;
    std::vector<node_t> train_rows, valid_rows, test_rows, owned_rows;
    std::int64_t global_train = 0, global_valid = 0, global_test = 0;
    std::int64_t global_nodes = 0, global_edges = 0;
    byte_ledger setup_bytes; ///< this rank's traffic while building the context (halo plan)

    /// Reduction mode whose global maximum is an all-reduce over comm (control traffic).
    nn::reduce_mode reduce(bool exact) const;
};

/// Sum the gradients of params over ranks (one all-reduce; int64 fixed point in exact
/// mode, then converted).  Collective.
void allreduce_gradients(const mpi::communicator& comm, const std::vector<parameter<float>*>& params, bool exact);
/// Broadcast parameter values from rank 0.  Collective.
void broadcast_parameters(const mpi::communicator& comm, const std::vector<parameter<float>*>& params);
/// Copy parameter values (best-model snapshots).
std::vector<matrix_f> snapshot(const std::vector<parameter<float>*>& params);
void restore(const std::vector<parameter<float>*>& params, const std::vector<matrix_f>& values);

/// Accuracy on the three splits, from per-rank correct counts (collective, metrics traffic).
struct accuracies {
    double train = 0, valid = 0, test = 0;
};
accuracies reduce_accuracies(const rank_context& ctx, const matrix_f& logits_owned);

/// Mean loss over all ranks' rows (collective, metrics traffic): exact when exact_k >= 0.
double reduce_loss(const mpi::communicator& comm, const loss_result& local, std::int64_t global_count, int exact_k);

/// Wall-clock time by phase.
class phase_timer {
public:
    class scope {
    public:
        scope(phase_timer& t, const std::string& phase) : t_(t), phase_(phase), start_(std::chrono::steady_clock::now())
        {
        }
        ~scope() { t_.add(phase_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count()); }
        scope(const scope&) = delete;
        scope& operator=(const scope&) = delete;

    private:
        phase_timer& t_;
        std::string phase_;
        std::chrono::steady_clock::time_point start_;
    };
    void add(const std::string& phase, double seconds) { seconds_[phase] += seconds; }
    const std::map<std::string, double>& seconds() const noexcept { return seconds_; }

private:
    std::map<std::string, double> seconds_;
};

/// One line of training history.
struct epoch_record {
    int stage = 0;
    int epoch = 0; ///< epoch (standard) or round (retexo), 1-based
    double loss = 0;
    double valid_loss = std::numeric_limits<double>::quiet_NaN(); ///< RETEXO --select loss only
    accuracies acc;
    std::uint64_t bytes = 0; ///< total bytes sent by all ranks so far
    std::uint64_t calls = 0; ///< communication calls of this rank so far
    double seconds = 0;      ///< wall time since the start of training
};

/// Per-stage summary (RETEXO).
struct stage_record {
    int stage = 0;
    int rounds = 0;
    int best_round = 0;
    accuracies best;   ///< at the best-validation round
    byte_ledger bytes; ///< all ranks, during this stage
    double seconds = 0;
};

/// Everything a run reports.
struct run_result {
    std::string mode, model, variant;
    int ranks = 1;
    std::uint64_t seed = 0;
    accuracies final_acc;
    byte_ledger bytes;                     ///< summed over ranks
    std::map<std::string, double> seconds; ///< by phase, plus "total"
    std::vector<epoch_record> history;
    std::vector<stage_record> stages;
    std::uint64_t max_rank_bytes = 0;     ///< bytes sent by the busiest rank
    bool interrupted = false;             ///< stopped early with a checkpoint (resume to finish)
    std::vector<named_tensor> parameters; ///< the selected (best-validation) model
    matrix_f logits;                      ///< final logits of the owned rows
    matrix_f embedding;                   ///< last hidden embedding of the owned rows
};

/// The traffic of a run since `start` (this rank's ledger then): summed over ranks into
/// r.bytes, with the busiest rank's bytes in r.max_rank_bytes (collective).
void finish_bytes(const rank_context& ctx, const byte_ledger& start, run_result& r);

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

/// Progress callback: called on every rank after every epoch / round.
using progress_fn = std::function<void(const epoch_record&)>;

} // namespace retexo::train

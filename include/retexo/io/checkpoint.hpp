#pragma once
/// @file checkpoint.hpp
/// Checkpoints of a RETEXO run: one HDF5 file per rank, ckpt.rank<r>.h5 in the checkpoint
/// directory, written to a temporary name and renamed, the previous one kept as
/// ckpt.rank<r>.h5_prev (format: data/FORMAT.md).  A checkpoint is taken at the end of a
/// stage (the next stage's inputs) or inside one (the stage model, its optimiser and its
/// exchanged inputs); resuming from it reproduces the uninterrupted run bit for bit.

#include <retexo/comm/communicator.hpp>
#include <retexo/core/sparse.hpp>
#include <retexo/io/records.hpp>

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace retexo {

/// Inputs of every owned row, and the same over the graph training sees (inductive runs:
/// the validation and test nodes hidden; empty otherwise).
struct node_inputs {
    node_features all, train;
    const node_features& for_training(bool inductive) const { return inductive ? train : all; }
};

/// What carries from one RETEXO stage to the next.
struct stage_carry {
    node_inputs h;    ///< the next stage's inputs (the finished stage's embeddings)
    node_inputs skip; ///< --skip: the finished stage's own inputs
    /// --output-stage best: the logits of the finished stage with the best validation
    /// accuracy so far (owned rows), that stage (-1: none yet), whether they are its label
    /// head's, their accuracy, and the validation accuracy they were kept on (after label
    /// spreading with best-smoothed).
    matrix_f best_logits;
    int best_stage = -1;
    bool best_label_head = false;
    accuracies best_acc;
    double best_valid = 0;
    /// --output-stage best-smoothed: that stage's label spreading (scores empty: none kept),
    /// so that it is not spread again when it predicts: its scores, the alpha chosen, their
    /// accuracy and each alpha's validation accuracy.
    matrix_f best_spread;
    double best_alpha = 0;
    accuracies best_spread_acc;
    std::vector<double> best_alpha_valid;
    /// Pseudo-labels: the finished stage's logits of every owned row (empty: none used).
    matrix_f logits;
};

/// The part of a RETEXO stage in progress that outlives a process: its round selection,
/// its exchanged inputs and its cross-fitting counts.  The stage and the checkpoint hold
/// this one type, so resuming is an assignment and checkpointing a copy.
struct stage_progress {
    int rounds_done = 0, best_round = 0;
    double best_score = -std::numeric_limits<double>::infinity();
    double best_loss = std::numeric_limits<double>::infinity(); ///< validation loss at best_round (a search)
    std::vector<matrix_f> best;                                 ///< the stage model's values at best_round
    node_inputs x;                                              ///< the stage's exchanged (and aggregated) inputs
    std::vector<std::int64_t> fold_count; ///< cross-fitting: each model's training nodes, all ranks
    /// A stage search (train::stage_search): the candidate in training, and the best
    /// finished candidate so far with its round selection.
    struct search_state {
        int candidate = 0;         ///< the candidate in training
        int tried = 0;             ///< candidates begun, this one included
        std::int64_t step0 = 0;    ///< the run's optimiser step every candidate starts from
        int top = -1;              ///< the best finished candidate (-1: none yet)
        std::int64_t top_step = 0; ///< the run's optimiser step after it
        int top_round = 0, top_rounds_done = 0;
        double top_score = -std::numeric_limits<double>::infinity();
        double top_loss = std::numeric_limits<double>::infinity();
        std::vector<matrix_f> top_best; ///< its values at top_round
    } search;
};

/// One rank's part of a RETEXO run at one moment.
struct retexo_checkpoint {
    std::string source;    ///< the file it was read from (not written)
    std::int64_t seq = 0;  ///< grows with every checkpoint of a run (all ranks' files of one moment share it)
    int stage = 0;         ///< the stage to continue
    int next_round = 1;    ///< its next round; 1: the stage has not begun
    std::int64_t step = 0; ///< optimiser steps of the run so far (they key the dropout masks)
    double elapsed = 0;    ///< wall time of the run so far, seconds
    stage_carry carry;     ///< the stage's inputs (and --skip's)
    std::vector<named_tensor> finished; ///< selected parameters of the finished stages
    std::vector<epoch_record> history;
    std::vector<stage_record> stages;
    std::optional<label_head_record> label_head; ///< stage 0's, once trained
    byte_ledger done;                            ///< this rank's traffic so far
    std::map<std::string, double> phases;        ///< time by phase so far

    /// The stage in progress (next_round > 1).
    struct in_stage : stage_progress {
        double elapsed = 0; ///< wall time of the stage so far
        byte_ledger done;   ///< this rank's traffic during the stage
        std::int64_t optimizer_steps = 0;
        /// The stage model's tensors (its parameter order): values and the optimiser's first
        /// and second moments.
        std::vector<matrix_f> params, first_moments, second_moments;
    } current;
};

/// What a checkpoint must match to be resumed.
struct checkpoint_identity {
    std::uint64_t assignment_hash = 0;
    int ranks = 1, rank = 0;
    std::string config;             ///< the options that shape the result
    std::uint64_t input_digest = 0; ///< of the rank's first-stage inputs
};

/// `dir/ckpt.rank<rank>.h5`
std::string checkpoint_path(const std::string& dir, int rank);

/// Write one rank's checkpoint (atomically; the previous file becomes path_prev).
void write_checkpoint(const std::string& path, const retexo_checkpoint& c, const checkpoint_identity& id);

/// Read a checkpoint; throws naming the file when it is not a checkpoint of `id`.
retexo_checkpoint read_checkpoint(const std::string& path, const checkpoint_identity& id);

/// The newest checkpoint in dir that every rank has: the current files, or the previous ones
/// if a job died between two ranks' renames (collective; errors are agreed on).
retexo_checkpoint resume_checkpoint(const mpi::communicator& comm, const std::string& dir,
                                    const checkpoint_identity& id);

} // namespace retexo

#pragma once
/// @file records.hpp
/// What a training run records as it goes: accuracies, one line of history per epoch or
/// round, one summary per RETEXO stage.  Metrics files and checkpoints hold them.

#include <retexo/comm/ledger.hpp>

#include <cstdint>
#include <limits>

namespace retexo {

/// Accuracy on the three splits.
struct accuracies {
    double train = 0, valid = 0, test = 0;
};

/// Predictions after label spreading (train/smooth.hpp): the spreading rate chosen on
/// validation and the accuracy after it.  RETEXO spreads every stage's predictions where
/// --output-stage best-smoothed compares them so, else the run's output only.
struct spread_accuracy {
    double alpha = -1; ///< -1: not spread
    accuracies acc;
};

/// One line of training history.
struct epoch_record {
    int stage = 0;
    int epoch = 0;           ///< epoch (standard) or round (retexo), 1-based
    int candidate = 0;       ///< RETEXO stage search: the candidate trained (retexo_options::search)
    bool label_head = false; ///< RETEXO: a round of stage 0's label head (reported, not kept in the history)
    double loss = 0;
    double valid_loss = std::numeric_limits<double>::quiet_NaN(); ///< RETEXO selecting by loss only
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
    int candidates = 1;        ///< settings tried (retexo_options::search)
    int chosen = 0;            ///< the one kept
    bool side_by_side = false; ///< its candidates trained one rank each (not checkpointed: never with checkpoints)
    std::string settings;      ///< the kept candidate's settings (with candidates > 1; not checkpointed)
    std::int64_t pseudo = 0;   ///< pseudo-labelled nodes it trained on besides the labelled ones (all ranks)
    accuracies best;           ///< at the selected round
    spread_accuracy spread;    ///< its predictions after label spreading, where spread
    byte_ledger bytes;         ///< all ranks, during this stage
    double seconds = 0;
};

/// RETEXO's label head (retexo_options::label_head): its candidates, rounds, its best one's
/// accuracy (before and after label spreading), and whether its predictions are the run's.
struct label_head_record {
    int candidates = 0, rounds = 0;
    accuracies acc;
    spread_accuracy spread;
    bool kept = false; ///< set at the end of the run (not checkpointed)
};

} // namespace retexo

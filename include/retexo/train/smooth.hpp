#pragma once
/// @file smooth.hpp
/// Label spreading of a trained model's predictions (the "smooth" step of Huang et al.,
/// "Combining Label Propagation and Simple Models Out-performs Graph Neural Networks",
/// ICLR 2021): G0 = the model's class probabilities with every training node's row replaced
/// by its one-hot label; then K times G <- (1 - alpha) G0 + alpha A G, with A the GCN
/// normalisation of the graph with self loops.  It brings the labels of the few training
/// nodes to their neighbourhood, which a RETEXO stage, trained on its training nodes' own
/// rows, never sees.  Each step sends C values per halo row (purpose::smooth) at the stage
/// inputs' wire precision (--exchange-precision), shared by every candidate: with C classes
/// and K steps, K·C columns in all, against a stage's one exchange of its input width.
/// alpha is chosen among candidates on validation accuracy (0: the model's own predictions,
/// no traffic).

#include <retexo/defaults.hpp>
#include <retexo/train/common.hpp>
#include <retexo/train/stage_exchange.hpp>

#include <vector>

namespace retexo::train {

struct smooth_options {
    /// Candidates for alpha in [0, 1); empty: off.  0 keeps the model's predictions.
    std::vector<double> alpha;
    int steps = defaults::smooth_steps; ///< propagation steps per candidate
    bool enabled() const { return !alpha.empty(); }
    void validate() const;
};

struct smooth_result {
    matrix_f scores;           ///< every owned row's class scores (the chosen candidate's)
    double alpha = 0;          ///< the chosen candidate
    accuracies acc;            ///< of scores
    std::vector<double> valid; ///< each candidate's validation accuracy, in option order
};

/// Smooth the owned rows' logits (collective).  G after K steps is
/// (1 - alpha) sum_{k<K} alpha^k A^k G0 + alpha^K A^K G0, so every candidate is summed from
/// one sequence of powers A^k G0: one exchange of C columns per step, whatever the number of
/// candidates.  The rows travel as the stage inputs' exchange sends them (`wire`: bf16 or
/// int8 round every row alike, owned rows too; counted as purpose::smooth).  Ties go to the
/// earlier candidate.
smooth_result smooth_predictions(const rank_context& ctx, const matrix_f& logits_owned, const smooth_options& o,
                                 const stage_exchange_options& wire, phase_timer& timer);

} // namespace retexo::train

#pragma once
/// @file standard.hpp
/// The standard distributed full-graph trainer, the baseline RETEXO is measured against:
/// every epoch, every layer exchanges the halo rows of its input in the forward pass and
/// sends the halo rows' gradients back to their owners in the backward pass, followed by
/// the gradient all-reduce and an optimiser step.  Model selection keeps the parameters of
/// the best validation accuracy, identically on every rank.  With bns_p < 1 it is the
/// BNS-GCN baseline: each epoch each layer exchanges only a random fraction bns_p of the
/// boundary nodes (the same sample forward and backward), scaled by 1/bns_p.

#include <retexo/defaults.hpp>
#include <retexo/train/common.hpp>

namespace retexo::train {

struct standard_options {
    nn::layer_kind model = named<nn::layer_kind>(defaults::model);
    int layers = defaults::layers;
    int hidden = defaults::hidden; ///< the first RETEXO stage's
    int heads = defaults::heads;   ///< gat
    int epochs = defaults::epochs;
    double dropout = defaults::std_dropout;
    optimizer_options optimizer{.kind = named<optimizer_kind>(defaults::std_optimizer),
                                .lr = defaults::std_lr,
                                .weight_decay = defaults::std_weight_decay};
    std::uint64_t seed = defaults::seed;
    bool deterministic =
        false;          ///< --deterministic: exact reductions (nn/reduce.hpp), results independent of ranks and threads
    int eval_every = 1; ///< evaluate (and select the best model) every N epochs
    double bns_p = 1.0; ///< BNS-GCN: keep rate of boundary nodes per epoch and layer (1: standard)
    /// Aggregate the rows whose neighbours are all owned while each layer's halo rows are in
    /// flight (gcn, sage; not BNS); the same result bit for bit either way.
    bool overlap = true;
    /// When the first layer aggregates first, its messages are the raw features, which never
    /// change: their halo rows cross once and each epoch's dropout is applied to them here,
    /// keyed by global id as their owners apply it (the same result bit for bit).  true:
    /// send them every epoch, as standard distributed training does.
    bool resend_features = false;
    /// Throws a retexo::error naming the option if a value is out of its range, or if values
    /// do not go together.
    void validate() const;
    /// The values on their own, not how they combine with the model: what an application
    /// checks of the options of a mode it does not run.
    void validate_values() const;
};

/// Train (collective).  Returns the final accuracies of the best-validation model, the
/// bytes every purpose moved (summed over ranks), phase times and the history.
run_result train_standard(const rank_context& ctx, const standard_options& options, const progress_fn& progress = {});

} // namespace retexo::train

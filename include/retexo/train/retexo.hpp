#pragma once
/// @file retexo.hpp
/// RETEXO's lazy message passing (Kolluri et al., arXiv 2302.13053).  A K-stage model is
/// trained stage by stage.  Stage k has fixed inputs h_k (h_0 = the raw features):
///   1. one halo exchange of h_k, the stage's only neighbour traffic; GCN and SAGE-mean
///      aggregate once (cached), SAGE-pool and GAT aggregate every round over the fixed
///      inputs and cached halo rows, with no traffic;
///   2. the stage model: the layer's transform, then LayerNorm, ReLU and a linear head to the
///      classes (the last stage's transform outputs the logits directly);
///   3. R_k rounds of full-batch (or mini-batch) training on each rank's own training nodes,
///      gradients all-reduced so the update equals full-graph training; validation accuracy
///      every round, the best-validation parameters kept (identically on every rank);
///   4. h_{k+1} = the post-ReLU hidden embedding of every owned node.
/// The "logits" variant (fully distributed setting) makes stage 0 an MLP on raw features and
/// has later stages aggregate the previous stage's logits concatenated with the node's own:
/// raw features never leave their rank, only C values per boundary node per stage do.

#include <retexo/train/common.hpp>

namespace retexo::train {

/// Settings of one stage.
struct stage_options {
    int rounds = 200;
    double lr = 0.003;
    int hidden = 256;
    double dropout = 0.3;
    double weight_decay = 5e-4;
    optimizer_kind optimizer = optimizer_kind::adam;
    /// LayerNorm between the transform and ReLU.  Off, the hidden embedding is an affine map
    /// of the aggregate followed by ReLU, the same map for every node, so averaging it over
    /// neighbours in the next stage loses less than averaging per-node normalised rows.
    bool layer_norm = true;
    /// The learning rate falls linearly to 0 over the stage's steps (else constant).
    bool lr_decay = false;
};

enum class retexo_variant { hidden, logits };
retexo_variant parse_variant(const std::string& name);
std::string to_string(retexo_variant v);

/// Checkpoints of a RETEXO run: every finished stage is a restart point, and within a stage
/// a checkpoint is written at most every `every_minutes`.  One HDF5 file per rank in `dir`
/// (ckpt.rank<r>.h5, written to a temporary name and renamed; the previous one is kept as
/// ckpt.rank<r>.h5_prev).  Resuming produces exactly what the uninterrupted run produces.
struct checkpoint_options {
    std::string dir;                      ///< empty: no checkpoints
    double every_minutes = 0;             ///< within a stage, at most this often (0: at stage ends only)
    bool resume = false;                  ///< continue from the newest complete checkpoint in dir
    double max_hours = 0;                 ///< stop cleanly, with a checkpoint, before this wall time (0: no limit)
    std::string config;                   ///< fingerprint of the configuration; a checkpoint of another is refused
    std::function<bool()> stop_requested; ///< polled every round (e.g. SIGTERM / SIGUSR1 seen)
    int stop_after_stage = -1;            ///< stop cleanly after this stage (testing and staged jobs)
};

struct retexo_options {
    nn::layer_kind model = nn::layer_kind::gcn;
    retexo_variant variant = retexo_variant::hidden;
    std::vector<stage_options> stages{stage_options{}, stage_options{}};
    int heads = 8; ///< gat
    std::uint64_t seed = 42;
    bool exact = false; ///< results independent of the partitioning
    int batch_size = 0; ///< training rows per step over all ranks (0: full batch)
    /// Which round's parameters a stage keeps: the best validation accuracy, or the lowest
    /// validation loss (the reference prototype's choice).  Patience counts rounds without
    /// improvement in the same.
    enum class selection { accuracy, loss } select = selection::accuracy;
    int patience = 0; ///< stop a stage after this many rounds without improvement (0: never)
    /// How stage inputs cross the network: fp32, bf16 (half the bytes) or int8 with a
    /// per-row scale (about a quarter).  Below fp32 every row of the aggregation input is
    /// rounded alike, owned rows too, and stored in bf16.
    enum class wire { fp32, bf16, int8 } exchange = wire::fp32;
    /// GCN / GraphSAGE-mean: send a stage's inputs this many columns at a time (0: all at
    /// once).  The same bytes in more messages; the halo rows held at any time are one block
    /// wide, which bounds memory when most nodes are halo rows (many partitions).  With int8
    /// each block carries its own per-row scale.
    int exchange_columns = 0;
    bool track_test = false; ///< also measure test accuracy every round (time to accuracy)
    /// Aggregate the interior rows (all in-neighbours owned) while the stage's halo rows are
    /// in flight (MPI_Ialltoallv); the result is the same bit for bit either way.
    bool overlap = true;
    checkpoint_options checkpoint;
    void validate() const;
};

/// Train (collective).
run_result train_retexo(const rank_context& ctx, const retexo_options& options, const progress_fn& progress = {});

} // namespace retexo::train

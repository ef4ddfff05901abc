// retexo_mpi: train GNNs over a partitioned graph, one partition per MPI rank, with RETEXO's
// lazy message passing and/or the standard distributed trainer, side by side.
#include "mpi_main.hpp"
#include "report.hpp"

#include <retexo/comm/placement.hpp>
#include <retexo/core/atomic_file.hpp>
#include <retexo/core/hash.hpp>
#include <retexo/ingest/load.hpp>
#include <retexo/io/outputs.hpp>
#include <retexo/train/retexo.hpp>
#include <retexo/train/standard.hpp>

#include <H5public.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

namespace {

using namespace retexo;
namespace po = boost::program_options;

std::atomic<int> stop_signal{0};
extern "C" void on_stop_signal(int sig)
{
    stop_signal.store(sig);
}

std::string versions()
{
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(mpi, &len);
    std::string mpi_v(mpi, static_cast<std::size_t>(len));
    mpi_v = mpi_v.substr(0, mpi_v.find_first_of(",\n"));
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    const auto* d = dnnl::version();
    std::ostringstream o;
    o << "retexo_mpi (retexo) " << version_string << "\n"
      << "  MPI:    " << mpi_v << "\n"
      << "  oneDNN: " << d->major << "." << d->minor << "." << d->patch << "\n"
      << "  HDF5:   " << maj << "." << min << "." << rel << "\n"
      << "  Eigen:  " << EIGEN_WORLD_VERSION << "." << EIGEN_MAJOR_VERSION << "." << EIGEN_MINOR_VERSION << "\n";
    return o.str();
}

enum class run_mode { retexo, standard, bns, stats };
constexpr name_table<run_mode, 4> names_of(run_mode)
{
    return {"mode",
            {{{run_mode::retexo, "retexo"},
              {run_mode::standard, "standard"},
              {run_mode::bns, "bns"},
              {run_mode::stats, "stats"}}}};
}

/// Everything a run is asked to do, typed.
struct app_options {
    data_options data;
    std::string mode; ///< as given (or its default)
    std::vector<run_mode> modes;
    bool inductive = false;
    train::retexo_options retexo;
    train::standard_options standard;
    double bns_p = 0.1;
    network_model emulate;
    bool check_numerics = false;
    int log_every = 10;
    std::string metrics_out, save_model, predict_out;
    int kill_rank = -1, kill_round = 1; ///< failure testing
    nlohmann::json config;              ///< every option's value, for the metrics and model files

    bool wants(run_mode m) const { return std::find(modes.begin(), modes.end(), m) != modes.end(); }
};

/// Options as program_options stores them: lists ("200,200,100": one value per stage) and names
/// stay text until the stage count is known.  Defaults: the table's text (retexo/defaults.hpp),
/// which the metrics and model files record as written.
struct option_text {
    using s = std::string;
    std::string objective = "vol", mode, model = s(defaults::model_text), variant = "hidden", precision = "fp32",
                select = "accuracy";
    std::string rounds = s(defaults::rounds_text), lr = s(defaults::lr_text), hidden = s(defaults::hidden_text),
                dropout, patience, weight_decay = s(defaults::weight_decay_text),
                optimizer = s(defaults::optimizer_text), norm = s(defaults::norm_text),
                schedule = s(defaults::lr_schedule_text), std_optimizer = s(defaults::std_optimizer_text), config,
                search_lr, search_dropout, search_weight_decay, search_norm, search_pseudo_labels, smooth_alpha,
                output_stage = s(defaults::output_stage_text);
    int stages = defaults::stages;
    double pseudo_labels = defaults::pseudo_labels;
    int layers = defaults::layers;
    bool no_overlap = false;
};

/// "a,b,c" -> the values of an option (names of an enum's values, or numbers).
template <typename T>
std::vector<T> list_of(const std::string& option, const std::string& text)
{
    std::vector<T> v;
    if (text.empty() || text.back() == ',') cli::usage_error("--" + option + ": '" + text + "' ends without a value");
    const auto not_valid = [&](const std::string& item) {
        cli::usage_error("--" + option + ": '" + item + "' is not a valid value");
    };
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        T x{};
        if constexpr (named_enum<T>) {
            x = cli::option_value<T>(item, "--" + option);
        } else {
            std::istringstream is(item);
            if (!(is >> x) || !is.eof()) not_valid(item);
        }
        v.push_back(x);
    }
    return v;
}

/// One value per stage: a list of as many, or a single value for every stage.
template <typename T>
std::vector<T> per_stage(const std::string& option, const std::string& text, int stages)
{
    auto v = list_of<T>(option, text);
    if (v.size() == 1) v.assign(static_cast<std::size_t>(stages), v[0]);
    RETEXO_ENSURE(static_cast<int>(v.size()) == stages,
                  "--" << option << ": " << v.size() << " values for " << stages << " stages");
    return v;
}

/// "what (default: X, the last stage Y)": a per-stage option's help with the table's defaults.
std::string last_stage_default(std::string_view what, std::string_view inner, std::string_view last)
{
    std::ostringstream s;
    s << what << " (default: " << inner << ", the last stage " << last << ")";
    return s.str();
}

/// RETEXO's choices on validation: per-stage candidate settings, label spreading.
po::options_description selection_options(option_text& t, train::retexo_options& ro)
{
    po::options_description d("RETEXO settings chosen on validation");
    d.add_options()(
        "search-lr", po::value(&t.search_lr),
        "RETEXO: learning rates every stage tries (a,b,...), each candidate on the stage's one exchange; "
        "the best on validation is kept (with --search-dropout and --search-weight-decay: every combination)")(
        "search-dropout", po::value(&t.search_dropout),
        ("RETEXO: dropout rates every stage tries (see --search-lr; one value: no search; default: " +
         std::string(defaults::search_dropout_text) + ")")
            .c_str())("search-weight-decay", po::value(&t.search_weight_decay),
                      ("RETEXO: weight decays every stage tries (see --search-lr; one value: no search; default: " +
                       std::string(defaults::search_weight_decay_by_model_text) + ")")
                          .c_str())("search-norm", po::value(&t.search_norm),
                                    ("RETEXO: --norm settings every stage tries (see --search-lr; default: " +
                                     std::string(defaults::search_norm_by_model_text) + ")")
                                        .c_str())(
        "search-pseudo-labels", po::value(&t.search_pseudo_labels),
        "RETEXO: --pseudo-labels ratios every stage after the first tries (see --search-lr)")(
        "search-patience", po::value(&ro.search.patience)->default_value(ro.search.patience),
        "RETEXO: a search's candidate stops after N rounds without improvement (0: the stage's --patience)")(
        "search-parallel", po::value<bool>()->implicit_value(true),
        "RETEXO: where a stage gathers its training rows, its candidates train side by side, one rank each, "
        "on the validation rows gathered too (the same choice; 1/P of the candidates' compute per rank). "
        "Default: where the validation rows (with --track-test, and test) are no more than the training "
        "rows; =false: one candidate after another on every rank; not with --checkpoint-dir")(
        "smooth-alpha", po::value(&t.smooth_alpha),
        ("RETEXO: after the last stage, spread the training labels over its predictions (label spreading, "
         "C values per halo row and step, at --exchange-precision); the alpha among these candidates "
         "(a,b,...; 0 = the model's own predictions) with the best validation accuracy is kept (0 alone: off; "
         "default: " +
         std::string(defaults::smooth_alpha_text) + ")")
            .c_str())("smooth-steps", po::value(&ro.smooth.steps)->default_value(ro.smooth.steps),
                      "RETEXO: propagation steps of --smooth-alpha")(
        "output-stage", po::value(&t.output_stage)->default_value(t.output_stage),
        "RETEXO: last | best | best-smoothed: predict with the last stage, with the stage (each has a "
        "classifier head) of the best validation accuracy (before --smooth-alpha), or with the stage whose "
        "predictions validate best after --smooth-alpha (label spreading's bytes once per stage)");
    return d;
}

/// Checkpoints and failure testing.
void add_checkpoint_options(po::options_description& desc, app_options& a)
{
    auto& ro = a.retexo;
    po::options_description d_ckpt("Checkpoints (RETEXO)");
    d_ckpt.add_options()("checkpoint-dir", po::value(&ro.checkpoint.dir),
                         "write a checkpoint after every stage (one HDF5 file per rank)")(
        "checkpoint-every-min", po::value(&ro.checkpoint.every_minutes)->default_value(0.0),
        "also checkpoint inside a stage at most every M minutes (0: stage ends only)")(
        "resume", po::bool_switch(&ro.checkpoint.resume), "continue from the newest checkpoint in --checkpoint-dir")(
        "max-hours", po::value(&ro.checkpoint.max_hours)->default_value(0.0),
        "stop cleanly with a checkpoint before this many hours (0: no limit); with --checkpoint-dir, SIGTERM and "
        "SIGUSR1 do the same")("stop-after-stage", po::value(&ro.checkpoint.stop_after_stage)->default_value(-1),
                               "stop cleanly with a checkpoint after this stage (staged jobs)");
    po::options_description d_test("Failure testing");
    d_test.add_options()("kill-rank", po::value(&a.kill_rank)->default_value(-1),
                         "this rank kills itself (SIGKILL) ...")(
        "kill-at-round", po::value(&a.kill_round)->default_value(1), "... at this RETEXO round of stage 0");
    desc.add(d_ckpt).add(d_test);
}

/// The standard trainer's settings (and BNS-GCN's).
po::options_description standard_options(option_text& t, app_options& a)
{
    auto& so = a.standard;
    po::options_description d_std("Standard trainer");
    d_std.add_options()("epochs", po::value(&so.epochs)->default_value(so.epochs),
                        "epochs")("std-lr", cli::value_shown(&so.optimizer.lr), "learning rate")(
        "std-hidden", po::value(&so.hidden)->default_value(so.hidden, "the first --hidden"),
        "hidden width")("std-dropout", cli::value_shown(&so.dropout), "dropout rate")(
        "std-weight-decay", cli::value_shown(&so.optimizer.weight_decay), "weight decay")(
        "std-optimizer", po::value(&t.std_optimizer)->default_value(t.std_optimizer), "adam | adamw | sgd")(
        "eval-every", po::value(&so.eval_every)->default_value(so.eval_every),
        "evaluate every N epochs")("bns-p", cli::value_shown(&a.bns_p),
                                   "BNS-GCN (--mode bns): fraction of boundary nodes exchanged per epoch and layer")(
        "resend-features", po::bool_switch(&so.resend_features),
        "send the first layer's halo feature rows every epoch (default: once, when the layer aggregates "
        "its raw features first; same result)");
    return d_std;
}

/// RETEXO's per-stage training options (a list gives one value per stage).
po::options_description retexo_training_options(option_text& t, train::retexo_options& ro)
{
    po::options_description d_retexo("RETEXO training (a list gives one value per stage, e.g. --rounds 200,200,100)");
    d_retexo.add_options()("rounds", po::value(&t.rounds)->default_value(t.rounds),
                           "rounds per stage")("lr", po::value(&t.lr)->default_value(t.lr), "learning rate")(
        "hidden", po::value(&t.hidden)->default_value(t.hidden),
        "hidden width")("dropout", po::value(&t.dropout),
                        (last_stage_default("dropout rate", defaults::dropout_text, defaults::last_stage_dropout_text) +
                         " (given without --search-dropout: used as given, no search)")
                            .c_str())("weight-decay", po::value(&t.weight_decay)->default_value(t.weight_decay),
                                      "weight decay (given without --search-weight-decay: used as given, no search)")(
        "optimizer", po::value(&t.optimizer)->default_value(t.optimizer), "adam | adamw | sgd")(
        "norm", po::value(&t.norm)->default_value(t.norm),
        "layer | none: LayerNorm before the hidden ReLU, or none (the embedding the next stage aggregates "
        "is then the same affine map of every node's aggregate)")(
        "lr-schedule", po::value(&t.schedule)->default_value(t.schedule),
        "constant | linear (the learning rate falls linearly to 0 over the stage)")(
        "select", po::value(&t.select)->default_value(t.select),
        "accuracy | loss: keep the round with the best validation accuracy or the lowest validation loss")(
        "batch-size", po::value(&ro.batch_size)->default_value(0),
        "training rows per step over all ranks (0: full batch)")(
        "patience", po::value(&t.patience),
        last_stage_default("stop a stage after N rounds without a better validation score, see --select (0: never)",
                           defaults::patience_text, defaults::last_stage_patience_text)
            .c_str())("exchange-precision", po::value(&t.precision)->default_value(t.precision),
                      "fp32 | bf16 | int8 (per-row scale) for the stage inputs sent, and for label spreading's rows")(
        "exchange-columns", po::value<int>(),
        ("gcn, sage: send and aggregate the stage inputs this many columns at a time (0: all at once; "
         "default: " +
         std::string(defaults::exchange_columns_by_model_text) +
         "); with fp32 and bf16 the same bits and bytes (int8: per-row scales per block), halo buffers one block "
         "wide (bounds memory when most nodes are halo rows)")
            .c_str());
    return d_retexo;
}

po::options_description declare_options(option_text& t, app_options& a)
{
    auto& ro = a.retexo;
    po::options_description d_data("Data");
    d_data.add_options()("data", po::value(&a.data.data),
                         "partitioned directory (retexo_partition; rank r opens part r only), owners "
                         "directory (retexo_shard; rank r opens shard<r>.h5 only) or graph file (.h5; each "
                         "rank reads a slice of it); default: the built-in synthetic graph")(
        "partition", po::value(&a.data.partition)->default_value(a.data.partition),
        "with a graph file: random | metis | scotch (PT-Scotch over the ranks' slices) | blocks | assignment file "
        "(line i = partition of node i); a "
        "directory is partitioned already")("objective", po::value(&t.objective)->default_value(t.objective),
                                            "METIS objective: vol | cut")(
        "seed", cli::seed_value(&a.data.seed), "random seed (partitioning, initialisation, dropout)");
    po::options_description d_model("Model and mode");
    d_model.add_options()("mode", po::value(&t.mode),
                          "retexo | standard | bns | both (= retexo,standard) | a comma list such as "
                          "retexo,standard,bns | stats (load the partitions, print their statistics, stop); "
                          "default: both on the built-in graph, else retexo")(
        "model", po::value(&t.model)->default_value(t.model), "gcn | sage | sage-pool | gat")(
        "variant", po::value(&t.variant)->default_value(t.variant),
        "RETEXO: hidden (exchange hidden embeddings) | logits (stage 0 is an MLP; exchange C class probabilities)")(
        "stages", po::value(&t.stages)->default_value(t.stages),
        "RETEXO stages")("layers", po::value(&t.layers)->default_value(t.layers), "standard (and BNS) layers")(
        "heads", po::value(&ro.heads)->default_value(ro.heads), "GAT attention heads");
    po::options_description d_run("Run");
    d_run.add_options()("inductive", po::bool_switch(&a.inductive),
                        "train without the validation and test nodes and their edges; "
                        "evaluate on the whole graph (default: transductive)")(
        "deterministic", po::bool_switch(&ro.deterministic),
        "exact reductions: identical results for any number of ranks and threads")(
        "check-numerics", po::bool_switch(&a.check_numerics),
        "stop with an error at the first NaN/Inf in a kernel input")(
        "normalize-features", po::bool_switch(&a.data.normalize_features),
        "scale each node's features to sum 1 (rows with a zero sum stay zero)")(
        "log-every", po::value(&a.log_every)->default_value(a.log_every), "progress line every N rounds / epochs")(
        "track-test", po::bool_switch(&ro.track_test), "RETEXO: test accuracy every round too (time to accuracy)")(
        "cross-fit", po::value(&ro.cross_fit)->default_value(ro.cross_fit),
        "RETEXO: K models per stage but the last, model f trained without fold f of the training nodes; "
        "a training node's next-stage input comes from the model that never fitted it (1: off)")(
        "pseudo-labels", po::value(&t.pseudo_labels)->default_value(t.pseudo_labels),
        "RETEXO: stages after the first also train on unlabelled nodes with the previous stage's most "
        "confident predictions, per class up to R times its training nodes (0: off)")(
        "skip", po::value<bool>()->implicit_value(true),
        "RETEXO: each later stage also reads the previous stage's inputs (the rank's own rows: no bytes); "
        "default: on, except with --variant logits and gat or sage-pool, which cannot; --skip=false: off")(
        "own-embedding", po::value<bool>()->implicit_value(true),
        "RETEXO, sage (hidden variant): each later stage reads the node's own embedding from the stage "
        "before beside its neighbours' mean; default: only with --skip=false (the skip carries the node's "
        "own inputs, and a training node's own embedding was fitted to its label)")(
        "neighbour-offset",
        po::value(&ro.neighbour_offset)
            ->default_value(ro.neighbour_offset, ro.neighbour_offset ? "true" : "false")
            ->implicit_value(true),
        "RETEXO, sage: weight the neighbours' mean by the node's own weights plus a trained offset, "
        "so that weight decay pulls the two together (false: an independent matrix, GraphSAGE's)")(
        "label-head",
        po::value(&ro.label_head)->default_value(ro.label_head, ro.label_head ? "true" : "false")->implicit_value(true),
        "RETEXO, gcn and sage: stage 0's candidates train again with label inputs, one more output candidate")(
        "replicate-train", po::value<bool>()->implicit_value(true),
        "RETEXO: gather every training row's stage input (gat and sage-pool: and their in-neighbours' rows "
        "and in-edges) onto every rank once per stage; each rank computes the whole gradient, none crosses "
        "the network (fewer bytes when the labelled nodes are few; the single-process result). "
        "Default: where the rows are fewer bytes than the stage's gradient all-reduces; =false: never")(
        "gat-inputs-first", po::value<bool>()->implicit_value(true),
        "RETEXO GAT stages: sum each pass's neighbour inputs before multiplying by W (=true), or multiply "
        "every input row a pass reads first (=false); default: per pass, whichever costs fewer "
        "multiply-adds (dense inputs with many neighbours: the sums first)")(
        "no-overlap", po::bool_switch(&t.no_overlap),
        "wait for the halo rows before aggregating (default: aggregate the rows whose neighbours are all "
        "owned while they travel; same result)")(
        "emulate-bandwidth", po::value(&a.emulate.bandwidth_bits_per_s)->default_value(0),
        "emulate a network of this many bits/s: pause after every communication call (0: off)")(
        "emulate-latency", po::value(&a.emulate.latency_s)->default_value(0),
        "emulated latency per communication call, seconds")("metrics-out", po::value(&a.metrics_out),
                                                            "write metrics as JSON (rank 0, atomically)")(
        "save-model", po::value(&a.save_model), "write the trained parameters to an HDF5 file (rank 0)")(
        "predict-out", po::value(&a.predict_out),
        "write every node's predicted class, logits and final embedding (HDF5)")(
        "config", po::value(&t.config), "read options from a file (key = value lines); the command line wins");
    po::options_description desc;
    desc.add(d_data)
        .add(d_model)
        .add(retexo_training_options(t, a.retexo))
        .add(selection_options(t, ro))
        .add(standard_options(t, a))
        .add(d_run);
    add_checkpoint_options(desc, a);
    return desc;
}

/// The typed options from their text, checked by the library's validate().
void make_typed(const option_text& t, const po::variables_map& vm, app_options& a)
{
    auto& ro = a.retexo;
    auto& so = a.standard;
    a.mode = t.mode.empty() ? (a.data.data.empty() ? "both" : "retexo") : t.mode;
    a.modes = list_of<run_mode>("mode", a.mode == "both" ? "retexo,standard" : a.mode);
    for (std::size_t i = 0; i < a.modes.size(); ++i)
        RETEXO_ENSURE(std::find(a.modes.begin(), a.modes.begin() + static_cast<std::ptrdiff_t>(i), a.modes[i]) ==
                          a.modes.begin() + static_cast<std::ptrdiff_t>(i),
                      "--mode " << a.mode << ": " << name_of(a.modes[i]) << " is named twice");
    RETEXO_ENSURE(!a.wants(run_mode::stats) || a.modes.size() == 1, "--mode: stats runs alone");
    RETEXO_ENSURE(a.emulate.bandwidth_bits_per_s >= 0 && a.emulate.latency_s >= 0,
                  "--emulate-bandwidth and --emulate-latency must be >= 0");
    RETEXO_ENSURE(t.stages >= 1 && t.stages <= 1000, "--stages must be in [1, 1000], got " << t.stages);
    RETEXO_ENSURE(t.layers >= 1, "--layers must be at least 1, got " << t.layers);
    RETEXO_ENSURE(a.log_every >= 1, "--log-every must be positive, got " << a.log_every);
    a.data.objective = cli::option_value<metis_objective>(t.objective, "--objective");
    ro.model = so.model = cli::option_value<nn::layer_kind>(t.model, "--model");
    ro.variant = cli::option_value<train::retexo_variant>(t.variant, "--variant");
    if (vm.count("skip") != 0U) ro.skip = vm["skip"].as<bool>();
    if (vm.count("own-embedding") != 0U) ro.own_embedding = vm["own-embedding"].as<bool>();
    if (vm.count("exchange-columns") != 0U) ro.exchange.columns = vm["exchange-columns"].as<int>();
    if (vm.count("replicate-train") != 0U) ro.replicate_train = vm["replicate-train"].as<bool>();
    if (vm.count("gat-inputs-first") != 0U) ro.gat_inputs_first = vm["gat-inputs-first"].as<bool>();
    if (vm.count("search-parallel") != 0U) ro.search_parallel = vm["search-parallel"].as<bool>();
    ro.exchange.precision = cli::option_value<train::wire_precision>(t.precision, "--exchange-precision");
    ro.select = cli::option_value<train::selection>(t.select, "--select");
    ro.seed = so.seed = a.data.seed;
    ro.exchange.overlap = so.overlap = !t.no_overlap;
    so.deterministic = ro.deterministic;
    so.heads = ro.heads;
    so.layers = t.layers;
    so.optimizer.kind = cli::option_value<optimizer_kind>(t.std_optimizer, "--std-optimizer");
    const auto rounds = per_stage<int>("rounds", t.rounds, t.stages);
    const auto lr = per_stage<double>("lr", t.lr, t.stages);
    const auto hidden = per_stage<int>("hidden", t.hidden, t.stages);
    const auto defaults = train::default_stages(t.stages);
    auto or_default = [&defaults](const std::string& text, auto member) {
        if (!text.empty()) return text;
        std::string list;
        for (const auto& d : defaults)
            list += (list.empty() ? "" : ",") + std::to_string(d.*member);
        return list;
    };
    const auto dropout = per_stage<double>("dropout", or_default(t.dropout, &train::stage_options::dropout), t.stages);
    const auto patience = per_stage<int>("patience", or_default(t.patience, &train::stage_options::patience), t.stages);
    const auto wd = per_stage<double>("weight-decay", t.weight_decay, t.stages);
    const auto opt = per_stage<optimizer_kind>("optimizer", t.optimizer, t.stages);
    const auto norm = per_stage<train::normalization>("norm", t.norm, t.stages);
    const auto schedule = per_stage<train::lr_schedule>("lr-schedule", t.schedule, t.stages);
    ro.stages.clear();
    for (std::size_t stage = 0; stage < static_cast<std::size_t>(t.stages); ++stage)
        ro.stages.push_back({.rounds = rounds[stage],
                             .lr = lr[stage],
                             .hidden = hidden[stage],
                             .dropout = dropout[stage],
                             .weight_decay = wd[stage],
                             .optimizer = opt[stage],
                             .norm = norm[stage],
                             .schedule = schedule[stage],
                             .patience = patience[stage],
                             .pseudo_labels = t.pseudo_labels});
    if (vm["std-hidden"].defaulted()) so.hidden = hidden[0];
    ro.output = cli::option_value<train::stage_output>(t.output_stage, "--output-stage");
    if (!t.smooth_alpha.empty()) ro.smooth.alpha = list_of<double>("smooth-alpha", t.smooth_alpha);
    if (ro.smooth.alpha == std::vector<double>{0}) ro.smooth.alpha.clear(); // the model's own predictions
    if (!t.search_lr.empty()) ro.search.lr = list_of<double>("search-lr", t.search_lr);
    if (!t.search_dropout.empty())
        ro.search.dropout = list_of<double>("search-dropout", t.search_dropout);
    else if (vm.count("dropout") != 0U)
        ro.search.dropout.clear(); // the dropout given is the one used
    if (!t.search_weight_decay.empty())
        ro.search.weight_decay = list_of<double>("search-weight-decay", t.search_weight_decay);
    else if (!vm["weight-decay"].defaulted())
        ro.search.weight_decay.emplace(); // the weight decay given is the one used
    if (!t.search_norm.empty())
        ro.search.norm = list_of<train::normalization>("search-norm", t.search_norm);
    else if (!vm["norm"].defaulted())
        ro.search.norm.emplace(); // the normalisation given is the one used
    if (!t.search_pseudo_labels.empty())
        ro.search.pseudo_labels = list_of<double>("search-pseudo-labels", t.search_pseudo_labels);
    RETEXO_ENSURE(a.wants(run_mode::retexo) || (ro.checkpoint.dir.empty() && !ro.checkpoint.resume),
                  "--checkpoint-dir and --resume apply to --mode retexo only");
    RETEXO_ENSURE(ro.checkpoint.stop_after_stage < t.stages, "--stop-after-stage "
                                                                 << ro.checkpoint.stop_after_stage << ": there are "
                                                                 << t.stages << " stages (0-" << t.stages - 1 << ")");
    RETEXO_ENSURE(ro.checkpoint.stop_after_stage < 0 || !ro.checkpoint.dir.empty(),
                  "--stop-after-stage needs --checkpoint-dir (it stops with a checkpoint)");
    RETEXO_ENSURE(std::isfinite(ro.checkpoint.max_hours) && ro.checkpoint.max_hours >= 0,
                  "--max-hours must be >= 0, got " << ro.checkpoint.max_hours);
    // Every option's value is checked, whether its mode runs or not; how the values go
    // together with the model, only for the modes that run.
    auto b = so;
    b.bns_p = a.bns_p;
    a.wants(run_mode::retexo) ? ro.validate() : ro.validate_values();
    a.wants(run_mode::bns) ? b.validate() : b.validate_values();
    if (a.wants(run_mode::standard)) so.validate();
}

/// Every option's value (command line, config file, defaults) as JSON.
nlohmann::json config_json(const po::variables_map& vm, const std::string& mode)
{
    nlohmann::json cfg;
    for (const auto& [k, v] : vm) {
        const auto& a = v.value();
        if (a.type() == typeid(std::string))
            cfg[k] = v.as<std::string>();
        else if (a.type() == typeid(int))
            cfg[k] = v.as<int>();
        else if (a.type() == typeid(double))
            cfg[k] = v.as<double>();
        else if (a.type() == typeid(bool))
            cfg[k] = v.as<bool>();
        else if (a.type() == typeid(cli::seed))
            cfg[k] = v.as<cli::seed>().value;
    }
    cfg["mode"] = mode;
    return cfg;
}

/// Before any work: each output file can be written, and no output is the input or another
/// output.
void check_outputs(const app_options& a, const std::string& config)
{
    namespace fs = std::filesystem;
    struct named {
        std::string option;
        fs::path path; // canonical
    };
    std::vector<named> outputs, inputs;
    for (const auto& [option, path] :
         {std::pair{"--metrics-out", a.metrics_out}, std::pair{"--save-model", a.save_model},
          std::pair{"--predict-out", a.predict_out}})
        if (!path.empty()) {
            check_output_file(path, option);
            outputs.push_back({option, fs::weakly_canonical(path)});
        }
    // What the run reads (the checkpoint directory it also writes): a file, or a directory
    // no output may be written into.
    const bool assignment = fs::is_regular_file(a.data.partition); // not random, metis, ...
    for (const auto& [option, path] :
         {std::pair{"--data", a.data.data}, std::pair{"--checkpoint-dir", a.retexo.checkpoint.dir},
          std::pair{"--config", config}, std::pair{"--partition", assignment ? a.data.partition : std::string()}})
        if (!path.empty()) inputs.push_back({option, fs::weakly_canonical(path)});
    auto same = [](const named& x, const named& y) {
        RETEXO_ENSURE(x.path != y.path, x.option << " and " << y.option << " name the same path " << y.path.string());
    };
    for (std::size_t i = 0; i < outputs.size(); ++i)
        for (std::size_t j = i + 1; j < outputs.size(); ++j)
            same(outputs[i], outputs[j]);
    for (std::size_t i = 0; i < inputs.size(); ++i)
        for (std::size_t j = i + 1; j < inputs.size(); ++j)
            same(inputs[i], inputs[j]);
    for (const auto& o : outputs)
        for (const auto& in : inputs) {
            same(o, in);
            const auto rel = o.path.lexically_relative(in.path);
            RETEXO_ENSURE(rel.empty() || *rel.begin() == "..", o.option << " " << o.path.string() << ": inside "
                                                                        << in.option << " " << in.path.string()
                                                                        << ", which the run reads");
        }
}

/// Parse the command line (and --config file) on every rank alike; an error ends the job
/// cleanly everywhere.  Nothing to run after --help or --version.
std::optional<app_options> parse_options(int argc, char** argv, mpi::communicator& comm)
{
    app_options a;
    option_text t;
    const auto desc = declare_options(t, a);
    po::variables_map vm;
    int code = 0;
    // po::notify runs below, once the --config file is stored too.
    if (!cli::parse(argc, argv, "retexo_mpi", "mpirun -np P retexo_mpi [options]", desc, vm, code,
                    {.print = comm.rank() == 0,
                     .notify = false,
                     .version_help = "print versions and exit",
                     .version = versions}))
        return std::nullopt;
    cli::checked_options(comm, [&] {
        for (const char* k : {"data", "metrics-out", "save-model", "predict-out", "checkpoint-dir", "config"})
            if (vm.count(k) != 0U && vm[k].as<std::string>().empty()) // (not the built-in graph, not no file)
                cli::usage_error(std::string("--") + k + ": empty path");
        if (vm.count("config") != 0U) {
            const auto path = vm["config"].as<std::string>();
            RETEXO_ENSURE(!std::filesystem::is_directory(path), "--config " << path << ": is a directory");
            std::ifstream f(path);
            RETEXO_ENSURE(f.good(), "--config: cannot open " << path);
            try {
                po::store(po::parse_config_file(f, desc), vm);
            } catch (const po::error& e) { // unknown or repeated keys, lines that are not key = value
                RETEXO_THROW("--config " << path << ": " << e.what());
            }
        }
        po::notify(vm);
        make_typed(t, vm, a);
        RETEXO_ENSURE(a.kill_rank < comm.size(), "--kill-rank " << a.kill_rank << ": the job has " << comm.size()
                                                                << " ranks (0-" << comm.size() - 1 << ")");
        RETEXO_ENSURE(a.kill_round >= 1, "--kill-at-round must be at least 1, got " << a.kill_round);
        // Rank 0 writes them (predictions: every rank, one file).
        if (comm.rank() == 0) check_outputs(a, vm.count("config") != 0U ? vm["config"].as<std::string>() : "");
        comm.emulate(a.emulate);
        set_check_numerics(a.check_numerics);
    });
    a.config = config_json(vm, a.mode);
    a.config["std-hidden"] = a.standard.hidden; // the width used: --hidden's first value unless given
    a.config["skip"] = a.retexo.skips();        // unset: on where it can apply
    a.config["own-embedding"] = a.retexo.reads_own_embedding();
    a.config["exchange-columns"] = a.retexo.exchange_columns(); // unset: the model's default
    a.config["neighbour-offset"] = a.retexo.neighbour_offset && a.retexo.model == nn::layer_kind::sage_mean;
    a.config["label-head"] = a.retexo.label_head_applies();
    // The axes searched (unset: the model's default)
    const train::stage_search search = a.retexo.searches();
    nlohmann::json norms = nlohmann::json::array();
    for (auto v : search.norm_axis())
        norms.push_back(name_of(v));
    a.config["search-norm"] = norms;
    a.config["search-weight-decay"] = search.weight_decay_axis();
    a.config["search-lr"] = search.lr;
    a.config["search-dropout"] = search.dropout;
    a.config["search-pseudo-labels"] = search.pseudo_labels;
    // The per-stage values used (unset: train::default_stages).
    nlohmann::json dropout = nlohmann::json::array(), patience = nlohmann::json::array();
    for (const auto& st : a.retexo.stages) {
        dropout.push_back(st.dropout);
        patience.push_back(st.patience);
    }
    a.config["dropout"] = dropout;
    a.config["patience"] = patience;
    return a;
}

void print_banner(const mpi::communicator& comm, const app_options& a, const local_partition& lp)
{
    const bool from_directory = !a.data.data.empty() && std::filesystem::is_directory(a.data.data);
    std::printf("retexo %s | %d ranks x %d threads | seed %llu | %s: %d nodes, %lld in-edges, %d features, "
                "%d classes | partition %s (hash %s) | mode %s, model %s%s\n",
                version_string, comm.size(), omp_get_max_threads(), static_cast<unsigned long long>(a.data.seed),
                lp.global.name.c_str(), lp.global.num_nodes, static_cast<long long>(lp.global.num_edges),
                lp.global.num_features, lp.global.num_classes,
                from_directory ? "from directory" : a.data.partition.c_str(), hash_to_hex(lp.assignment_hash).c_str(),
                a.mode.c_str(), name_of(a.retexo.model).c_str(),
                a.mode == "standard" ? "" : (", variant " + name_of(a.retexo.variant)).c_str());
}

/// The trainers asked for, one after the other; empty when RETEXO stopped with a checkpoint.
std::vector<train::run_result> run_trainers(const train::rank_context& ctx, const app_options& a)
{
    const auto& comm = ctx.comm;
    const bool root = comm.rank() == 0;
    std::vector<train::run_result> runs;
    if (a.wants(run_mode::retexo)) {
        const auto candidates = a.retexo.searches().size();
        int total_rounds = 0, done = 0; // at most: candidates stop early
        for (const auto& st : a.retexo.stages)
            total_rounds += st.rounds * static_cast<int>(candidates);
        auto progress = [&](const epoch_record& r) {
            ++done;
            if (comm.rank() == a.kill_rank && r.stage == 0 && r.epoch == a.kill_round) std::raise(SIGKILL);
            if (!root || (r.epoch % a.log_every != 0 && r.epoch != 1)) return;
            const double eta = r.seconds / done * std::max(0, total_rounds - done);
            char which[64] = "";
            if (candidates > 1)
                std::snprintf(which, sizeof which, "%s candidate %d/%zu", r.label_head ? " label head" : "",
                              r.candidate + 1, candidates);
            std::printf("retexo   stage %d%s round %4d  loss %.4f  valid %.4f  bytes %10s  %6.1fs  ETA %.0fs\n",
                        r.stage, which, r.epoch, r.loss, r.acc.valid,
                        report::human_bytes(static_cast<double>(r.bytes)).c_str(), r.seconds, eta);
            std::fflush(stdout);
        };
        runs.push_back(train::train_retexo(ctx, a.retexo, progress));
        if (runs.back().interrupted) {
            if (root)
                std::printf("stopped after %zu rounds with a checkpoint in %s; continue with --resume\n",
                            runs.back().history.size(), a.retexo.checkpoint.dir.c_str());
            return {};
        }
    }
    for (const auto mode : {run_mode::standard, run_mode::bns}) {
        if (!a.wants(mode)) continue;
        auto opts = a.standard;
        if (mode == run_mode::bns) opts.bns_p = a.bns_p;
        const auto name = name_of(mode);
        auto progress = [&](const epoch_record& r) {
            if (!root || (r.epoch % a.log_every != 0 && r.epoch != 1)) return;
            const double eta = r.seconds / r.epoch * (opts.epochs - r.epoch);
            std::printf("%-8s epoch %4d  loss %.4f  train %.4f  valid %.4f  test %.4f  bytes %10s  %6.1fs  ETA %.0fs\n",
                        name.c_str(), r.epoch, r.loss, r.acc.train, r.acc.valid, r.acc.test,
                        report::human_bytes(static_cast<double>(r.bytes)).c_str(), r.seconds, eta);
            std::fflush(stdout);
        };
        runs.push_back(train::train_standard(ctx, opts, progress));
    }
    return runs;
}

/// Every rank's peak resident set size (collective), printed on rank 0.
std::vector<std::int64_t> peak_memory(const mpi::communicator& comm)
{
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    auto rss = comm.allgather(static_cast<std::int64_t>(usage.ru_maxrss) * 1024, purpose::control);
    std::int64_t total = 0, most = 0;
    for (auto r : rss) {
        total += r;
        most = std::max(most, r);
    }
    if (comm.rank() == 0)
        std::printf("peak memory (RSS): max rank %s, all ranks %s\n",
                    report::human_bytes(static_cast<double>(most)).c_str(),
                    report::human_bytes(static_cast<double>(total)).c_str());
    return rss;
}

/// What the metrics record of the job besides its runs.
struct job_record {
    std::vector<std::int64_t> peak_rss; ///< per rank
    nlohmann::json load;                ///< the data's loading: its time and bytes
};

/// The metrics file, the model file and the predictions, as asked.
void write_outputs(const mpi::communicator& comm, const app_options& a, const local_partition& lp,
                   const std::vector<train::run_result>& runs, const job_record& job)
{
    const bool root = comm.rank() == 0;
    // Rank 0 writes the metrics and the model; the others learn whether it could.
    if (!a.metrics_out.empty())
        comm.checked([&] {
            if (!root) return;
            nlohmann::json j;
            if (runs.size() == 1) j = report::run_json(runs[0], a.config);
            j["peak_rss_bytes"] = job.peak_rss;
            j["load"] = job.load;
            if (runs.size() > 1) {
                j["mode"] = a.mode;
                j["model"] = name_of(a.retexo.model);
                j["variant"] = name_of(a.retexo.variant);
                j["ranks"] = comm.size();
                j["seed"] = a.data.seed;
                j["runs"] = nlohmann::json::array();
                for (const auto& r : runs)
                    j["runs"].push_back(report::run_json(r, a.config));
            }
            write_text_atomic(a.metrics_out, j.dump(2) + "\n");
        });
    const auto& primary = runs.front();
    if (!a.save_model.empty())
        comm.checked([&] {
            if (!root) return;
            // The training configuration, without output paths and checkpoint controls (a resumed
            // run saves the same file as an uninterrupted one).
            nlohmann::json model_cfg = a.config;
            for (const char* k : {"metrics-out", "save-model", "predict-out", "config", "checkpoint-dir",
                                  "checkpoint-every-min", "resume", "max-hours", "stop-after-stage"})
                model_cfg.erase(k);
            save_model(a.save_model, primary.parameters,
                       {{"mode", primary.mode},
                        {"model", name_of(a.retexo.model)},
                        {"variant", name_of(a.retexo.variant)},
                        {"retexo_version", version_string},
                        {"config", model_cfg.dump()}});
        });
    if (!a.predict_out.empty()) write_predictions(comm, a.predict_out, lp, primary.logits, primary.embedding);
}

} // namespace

int main(int argc, char** argv)
{
    cli::keep_freed_buffers();
    mpi::environment env(argc, argv);
    mpi::communicator comm(MPI_COMM_WORLD);
    return cli::run("retexo_mpi", &comm, [&] {
        auto options = parse_options(argc, argv, comm);
        if (!options) return cli::exit_ok;
        auto& a = *options;
        place_threads(comm, "retexo_mpi");      // shares an oversubscribed host's CPUs out; warns on rank 0 (stderr)
        if (!a.retexo.checkpoint.dir.empty()) { // else SIGTERM ends the run at once, as by default
            std::signal(SIGTERM, on_stop_signal);
            std::signal(SIGUSR1, on_stop_signal);
            a.retexo.checkpoint.stop_requested = [] { return stop_signal.load() != 0; };
        }

        const auto t_load = std::chrono::steady_clock::now();
        const auto lp = load_rank_partition(comm, a.data);
        const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
        const byte_ledger load_bytes = comm.ledger(); // all this rank sent before training
        if (comm.rank() == 0) print_banner(comm, a, lp);
        const auto table = gather_partition_table(comm, lp);
        const nlohmann::json load = {
            {"time_s", comm.allreduce(load_s, MPI_MAX, purpose::setup)},
            {"max_rank_bytes", comm.allreduce<std::uint64_t>(load_bytes.total_sent(), MPI_MAX, purpose::setup)},
            {"bytes", report::ledger_json(comm.sum(load_bytes))}};
        if (comm.rank() == 0)
            std::cout << table << "loaded in " << load["time_s"].get<double>() << " s; the ranks sent "
                      << load["bytes"]["total"].get<std::uint64_t>() << " bytes to load (busiest rank "
                      << load["max_rank_bytes"].get<std::uint64_t>() << ")\n";
        if (a.wants(run_mode::stats)) return cli::exit_ok;
        const train::rank_context ctx(comm, lp, a.inductive);
        const auto runs = run_trainers(ctx, a);
        if (runs.empty()) return cli::exit_ok; // stopped with a checkpoint
        if (comm.rank() == 0) {
            std::cout << report::table(runs);
            for (const auto& r : runs)
                std::cout << report::stage_lines(r);
        }
        const auto rss = peak_memory(comm);
        write_outputs(comm, a, lp, runs, {rss, load});
        return cli::exit_ok;
    });
}

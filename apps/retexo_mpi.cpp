// retexo_mpi: train GNNs over a partitioned graph, one partition per MPI rank, with RETEXO's
// lazy message passing and/or the standard distributed trainer, side by side.
#include "mpi_main.hpp"
#include "report.hpp"

#include <retexo/core/atomic_file.hpp>
#include <retexo/io/load.hpp>
#include <retexo/io/outputs.hpp>
#include <retexo/train/retexo.hpp>
#include <retexo/train/standard.hpp>

#include <H5public.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <sys/resource.h>

#include <atomic>
#include <csignal>

#include <cstdio>
#include <fstream>

namespace {

using namespace retexo;

std::atomic<int> stop_signal{0};
extern "C" void on_stop_signal(int sig)
{
    stop_signal.store(sig);
}
namespace po = boost::program_options;

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

/// "a,b,c" -> one value per stage (a single value applies to every stage).
template <typename T>
std::vector<T> per_stage(const std::string& option, const std::string& text, int stages)
{
    std::vector<T> v;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        T x{};
        std::istringstream is(item);
        if constexpr (std::is_same_v<T, std::string>)
            x = item;
        else
            RETEXO_ENSURE(static_cast<bool>(is >> x) && is.eof(),
                          "--" << option << ": '" << item << "' is not a valid value");
        v.push_back(x);
    }
    RETEXO_ENSURE(!v.empty(), "--" << option << ": empty list");
    if (v.size() == 1) v.assign(static_cast<std::size_t>(stages), v[0]);
    RETEXO_ENSURE(static_cast<int>(v.size()) == stages,
                  "--" << option << ": " << v.size() << " values for " << stages << " stages");
    return v;
}

} // namespace

int main(int argc, char** argv)
{
    mpi::environment env(argc, argv);
    mpi::communicator comm(MPI_COMM_WORLD);
    const bool root = comm.rank() == 0;
    return cli::run_mpi("retexo_mpi", comm, [&] {
        data_options data;
        std::string objective = "vol", mode, model = "gcn", variant = "hidden", precision = "fp32", select = "accuracy";
        std::string rounds = "200", lr = "0.003", hidden = "256", dropout = "0.3", wd = "5e-4", opt = "adam",
                    norm = "layer", schedule = "constant";
        std::string std_opt = "adam", metrics_out, save_model_path, predict_out, config;
        int stages = 2, log_every = 10;
        train::retexo_options ro;
        train::standard_options so;
        so.hidden = 256;
        bool check = false, normalize = false, inductive = false;
        double bns_p = 0.1, emulate_bw = 0, emulate_lat = 0;
        bool no_overlap = false;
        int kill_rank = -1, kill_round = 1;

        po::options_description d_data("Data");
        d_data.add_options()("data", po::value(&data.data),
                             "partitioned directory (retexo_partition; rank r opens part r only) or graph "
                             "file (.h5); default: the built-in synthetic graph")(
            "partition", po::value(&data.partition)->default_value(data.partition),
            "with a graph file: random | metis | blocks | assignment file (line i = partition of node i)")(
            "objective", po::value(&objective)->default_value(objective),
            "METIS objective: vol | cut")("seed", po::value(&data.seed)->default_value(data.seed),
                                          "random seed (partitioning, initialisation, dropout)");
        po::options_description d_model("Model and mode");
        d_model.add_options()("mode", po::value(&mode),
                              "retexo | standard | bns | both (= retexo,standard) | a comma list such as "
                              "retexo,standard,bns | stats (load the partitions, print their statistics, stop); "
                              "default: both on the built-in graph, else retexo")(
            "model", po::value(&model)->default_value(model), "gcn | sage | sage-pool | gat")(
            "variant", po::value(&variant)->default_value(variant),
            "RETEXO: hidden (exchange hidden embeddings) | "
            "logits (stage 0 is an MLP; exchange C logits)")("stages,layers", po::value(&stages)->default_value(stages),
                                                             "RETEXO stages = standard layers")(
            "heads", po::value(&ro.heads)->default_value(ro.heads), "GAT attention heads");
        po::options_description d_retexo("RETEXO training (a list gives one value per stage, e.g. --rounds 200,100)");
        d_retexo.add_options()("rounds", po::value(&rounds)->default_value(rounds),
                               "rounds per stage")("lr", po::value(&lr)->default_value(lr), "learning rate")(
            "hidden", po::value(&hidden)->default_value(hidden),
            "hidden width")("dropout", po::value(&dropout)->default_value(dropout),
                            "dropout rate")("weight-decay", po::value(&wd)->default_value(wd), "weight decay")(
            "optimizer", po::value(&opt)->default_value(opt), "adam | adamw | sgd")(
            "norm", po::value(&norm)->default_value(norm),
            "layer | none: LayerNorm before the hidden ReLU, or none (the embedding the next stage aggregates "
            "is then the same affine map of every node's aggregate)")(
            "lr-schedule", po::value(&schedule)->default_value(schedule),
            "constant | linear (the learning rate falls linearly to 0 over the stage)")(
            "select", po::value(&select)->default_value(select),
            "accuracy | loss: keep the round with the best validation accuracy or the lowest validation "
            "loss")("batch-size", po::value(&ro.batch_size)->default_value(0),
                    "training rows per step over all ranks (0: full batch)")(
            "patience", po::value(&ro.patience)->default_value(0),
            "stop a stage after N rounds without a better "
            "validation score, see --select (0: never)")(
            "exchange-precision", po::value(&precision)->default_value(precision),
            "fp32 | bf16 | int8 (per-row scale) for the stage inputs sent")(
            "exchange-columns", po::value(&ro.exchange_columns)->default_value(0),
            "gcn, sage: send the stage inputs this many columns at a time (0: all at once); same bytes, "
            "halo buffers one block wide (bounds memory when most nodes are halo rows)");
        po::options_description d_std("Standard trainer");
        d_std.add_options()("epochs", po::value(&so.epochs)->default_value(so.epochs), "epochs")(
            "std-lr", po::value(&so.optimizer.lr)->default_value(so.optimizer.lr),
            "learning rate")("std-hidden", po::value(&so.hidden)->default_value(so.hidden), "hidden width")(
            "std-dropout", po::value(&so.dropout)->default_value(so.dropout), "dropout rate")(
            "std-weight-decay", po::value(&so.optimizer.weight_decay)->default_value(so.optimizer.weight_decay),
            "weight decay")("std-optimizer", po::value(&std_opt)->default_value(std_opt), "adam | adamw | sgd")(
            "eval-every", po::value(&so.eval_every)->default_value(so.eval_every), "evaluate every N epochs")(
            "bns-p", po::value(&bns_p)->default_value(bns_p),
            "BNS-GCN (--mode bns): fraction of boundary nodes exchanged per epoch and layer");
        po::options_description d_run("Run");
        d_run.add_options()("inductive", po::bool_switch(&inductive),
                            "train without the validation and test nodes and their edges; "
                            "evaluate on the whole graph (default: transductive)")(
            "deterministic", po::bool_switch(&ro.exact),
            "exact reductions: identical results for any number of ranks and threads")(
            "check-numerics", po::bool_switch(&check), "stop with an error at the first NaN/Inf in a kernel input")(
            "normalize-features", po::bool_switch(&normalize),
            "scale each node's features to sum 1 (rows with a zero sum stay zero)")(
            "log-every", po::value(&log_every)->default_value(log_every), "progress line every N rounds / epochs")(
            "track-test", po::bool_switch(&ro.track_test), "RETEXO: test accuracy every round too (time to accuracy)")(
            "no-overlap", po::bool_switch(&no_overlap),
            "wait for the halo rows before aggregating (default: aggregate the rows whose neighbours are all "
            "owned while they travel; same result)")("emulate-bandwidth", po::value(&emulate_bw)->default_value(0),
                                                     "emulate a network of this many bits/s: pause "
                                                     "after every communication call (0: off)")(
            "emulate-latency", po::value(&emulate_lat)->default_value(0),
            "emulated latency per communication call, seconds")("metrics-out", po::value(&metrics_out),
                                                                "write metrics as JSON (rank 0, atomically)")(
            "save-model", po::value(&save_model_path), "write the trained parameters to an HDF5 file (rank 0)")(
            "predict-out", po::value(&predict_out),
            "write every node's predicted class, logits and final embedding (HDF5)")(
            "config", po::value(&config), "read options from a file (key = value lines); the command line wins");
        po::options_description d_ckpt("Checkpoints (RETEXO)");
        d_ckpt.add_options()("checkpoint-dir", po::value(&ro.checkpoint.dir),
                             "write a checkpoint after every stage (one HDF5 file per rank)")(
            "checkpoint-every-min", po::value(&ro.checkpoint.every_minutes)->default_value(0.0),
            "also checkpoint inside a stage at most every M minutes (0: stage ends only)")(
            "resume", po::bool_switch(&ro.checkpoint.resume),
            "continue from the newest checkpoint in --checkpoint-dir")(
            "max-hours", po::value(&ro.checkpoint.max_hours)->default_value(0.0),
            "stop cleanly with a checkpoint before this many hours (0: no limit); SIGTERM and SIGUSR1 do the same")(
            "stop-after-stage", po::value(&ro.checkpoint.stop_after_stage)->default_value(-1),
            "stop cleanly with a checkpoint after this stage (staged jobs)");
        po::options_description d_test("Failure testing");
        d_test.add_options()("kill-rank", po::value(&kill_rank)->default_value(-1),
                             "this rank kills itself (SIGKILL) ...")(
            "kill-at-round", po::value(&kill_round)->default_value(1), "... at this RETEXO round of stage 0");
        po::options_description desc;
        desc.add(d_data).add(d_model).add(d_retexo).add(d_std).add(d_run).add(d_ckpt).add(d_test);

        po::variables_map vm;
        po::options_description all = desc;
        all.add_options()("help,h", "show this help and exit")("version", "print versions and exit");
        po::store(po::command_line_parser(argc, argv).options(all).run(), vm);
        if (vm.count("help") != 0U) {
            if (root) std::cout << "Usage: mpirun -np P retexo_mpi [options]\n\n" << all << "\n";
            return cli::exit_ok;
        }
        if (vm.count("version") != 0U) {
            if (root) std::cout << versions();
            return cli::exit_ok;
        }
        // Options are checked on every rank alike; an error ends the job cleanly everywhere.
        std::vector<std::string> modes;
        auto wants = [&](const char* m) { return std::find(modes.begin(), modes.end(), m) != modes.end(); };
        comm.checked([&] {
            if (vm.count("config") != 0U) {
                const auto path = vm["config"].as<std::string>();
                std::ifstream f(path);
                RETEXO_ENSURE(f.good(), "--config: cannot open " << path);
                po::store(po::parse_config_file(f, desc), vm);
            }
            po::notify(vm);

            if (mode.empty()) mode = data.data.empty() ? "both" : "retexo";
            {
                std::stringstream ss(mode == "both" ? "retexo,standard" : mode);
                std::string m;
                while (std::getline(ss, m, ',')) {
                    RETEXO_ENSURE(m == "retexo" || m == "standard" || m == "bns" || (m == "stats" && mode == "stats"),
                                  "--mode: unknown mode '" << m << "' (expected retexo, standard, bns, both or stats)");
                    modes.push_back(m);
                }
            }
            RETEXO_ENSURE(emulate_bw >= 0 && emulate_lat >= 0,
                          "--emulate-bandwidth and --emulate-latency must be >= 0");
            comm.emulate({emulate_bw, emulate_lat});
            RETEXO_ENSURE(stages >= 1, "--stages must be at least 1, got " << stages);
            RETEXO_ENSURE(log_every >= 1, "--log-every must be positive, got " << log_every);
            RETEXO_ENSURE(precision == "fp32" || precision == "bf16" || precision == "int8",
                          "--exchange-precision: expected fp32, bf16 or int8, got '" << precision << "'");
            data.objective = parse_metis_objective(objective);
            ro.model = so.model = nn::parse_layer_kind(model);
            ro.variant = train::parse_variant(variant);
            ro.seed = so.seed = data.seed;
            using wire = train::retexo_options::wire;
            ro.exchange = precision == "int8" ? wire::int8 : precision == "bf16" ? wire::bf16 : wire::fp32;
            ro.overlap = so.overlap = !no_overlap;
            so.exact = ro.exact;
            so.heads = ro.heads;
            so.layers = stages;
            so.optimizer.kind = parse_optimizer(std_opt);
            const auto r_rounds = per_stage<int>("rounds", rounds, stages);
            const auto r_lr = per_stage<double>("lr", lr, stages);
            const auto r_hidden = per_stage<int>("hidden", hidden, stages);
            const auto r_dropout = per_stage<double>("dropout", dropout, stages);
            const auto r_wd = per_stage<double>("weight-decay", wd, stages);
            const auto r_opt = per_stage<std::string>("optimizer", opt, stages);
            const auto r_norm = per_stage<std::string>("norm", norm, stages);
            const auto r_schedule = per_stage<std::string>("lr-schedule", schedule, stages);
            ro.stages.clear();
            for (int k = 0; k < stages; ++k) {
                RETEXO_ENSURE(r_norm[k] == "layer" || r_norm[k] == "none",
                              "--norm: expected layer or none, got '" << r_norm[k] << "'");
                RETEXO_ENSURE(r_schedule[k] == "constant" || r_schedule[k] == "linear",
                              "--lr-schedule: expected constant or linear, got '" << r_schedule[k] << "'");
                ro.stages.push_back({r_rounds[k], r_lr[k], r_hidden[k], r_dropout[k], r_wd[k],
                                     parse_optimizer(r_opt[k]), r_norm[k] == "layer", r_schedule[k] == "linear"});
            }
            RETEXO_ENSURE(select == "accuracy" || select == "loss",
                          "--select: expected accuracy or loss, got '" << select << "'");
            ro.select =
                select == "loss" ? train::retexo_options::selection::loss : train::retexo_options::selection::accuracy;
            if (vm["std-hidden"].defaulted()) so.hidden = r_hidden[0];
            if (wants("retexo")) ro.validate();
            if (wants("standard")) so.validate();
            if (wants("bns")) {
                auto b = so;
                b.bns_p = bns_p;
                b.validate();
            }
            set_check_numerics(check);
        });

        // Everything the run was asked to do, for the metrics file.
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
            else if (a.type() == typeid(std::uint64_t))
                cfg[k] = v.as<std::uint64_t>();
        }
        cfg["mode"] = mode;
        // What a checkpoint must agree with: everything that shapes the RETEXO model and run.
        {
            std::ostringstream f;
            f << "model=" << model << " variant=" << variant << " stages=" << stages << " heads=" << ro.heads
              << " rounds=" << rounds << " lr=" << lr << " hidden=" << hidden << " dropout=" << dropout
              << " weight-decay=" << wd << " optimizer=" << opt << " norm=" << norm << " lr-schedule=" << schedule
              << " select=" << select << " batch-size=" << ro.batch_size << " patience=" << ro.patience
              << " exchange-precision=" << precision << " exchange-columns=" << ro.exchange_columns
              << " seed=" << data.seed << " inductive=" << inductive << " deterministic=" << ro.exact
              << " normalize-features=" << normalize;
            ro.checkpoint.config = f.str();
        }
        RETEXO_ENSURE(ro.checkpoint.dir.empty() || wants("retexo"), "--checkpoint-dir applies to --mode retexo only");
        RETEXO_ENSURE(!ro.checkpoint.resume || !ro.checkpoint.dir.empty(), "--resume needs --checkpoint-dir");
        std::signal(SIGTERM, on_stop_signal);
        std::signal(SIGUSR1, on_stop_signal);
        ro.checkpoint.stop_requested = [] { return stop_signal.load() != 0; };

        auto lp = load_rank_partition(comm, data);
        if (normalize) {
            for (Eigen::Index i = 0; i < lp.features.rows(); ++i) {
                const float sum = lp.features.row(i).cwiseAbs().sum();
                if (sum > 0) lp.features.row(i) /= sum;
            }
        }
        if (root)
            std::printf("retexo %s | %d ranks x %d threads | seed %llu | %s: %d nodes, %lld in-edges, %d features, "
                        "%d classes | partition %s (hash %s) | mode %s, model %s%s\n",
                        version_string, comm.size(), omp_get_max_threads(), static_cast<unsigned long long>(data.seed),
                        lp.global.name.c_str(), lp.global.num_nodes, static_cast<long long>(lp.global.num_edges),
                        lp.global.num_features, lp.global.num_classes,
                        data.data.empty() || !std::filesystem::is_directory(data.data) ? data.partition.c_str()
                                                                                       : "from directory",
                        hash_to_hex(lp.assignment_hash).c_str(), mode.c_str(), model.c_str(),
                        mode == "standard" ? "" : (", variant " + variant).c_str());
        const auto table = gather_partition_table(comm, lp);
        if (root) std::cout << table;
        if (wants("stats")) return cli::exit_ok;
        const train::rank_context ctx(comm, lp, inductive);

        std::vector<train::run_result> runs;
        const int total_rounds = [&] {
            int s = 0;
            for (const auto& st : ro.stages)
                s += st.rounds;
            return s;
        }();
        if (wants("retexo")) {
            int done = 0;
            auto progress = [&](const train::epoch_record& r) {
                ++done;
                if (comm.rank() == kill_rank && r.stage == 0 && r.epoch == kill_round) std::raise(SIGKILL);
                if (!root || (r.epoch % log_every != 0 && r.epoch != 1)) return;
                const double eta = r.seconds / done * (total_rounds - done);
                std::printf("retexo   stage %d round %4d  loss %.4f  valid %.4f  bytes %10s  %6.1fs  ETA %.0fs\n",
                            r.stage, r.epoch, r.loss, r.acc.valid,
                            report::human_bytes(static_cast<double>(r.bytes)).c_str(), r.seconds, eta);
                std::fflush(stdout);
            };
            runs.push_back(train::train_retexo(ctx, ro, progress));
            if (runs.back().interrupted) {
                if (root)
                    std::printf("stopped after %zu rounds with a checkpoint in %s; continue with --resume\n",
                                runs.back().history.size(), ro.checkpoint.dir.c_str());
                return cli::exit_ok;
            }
        }
        for (const char* name : {"standard", "bns"}) {
            if (!wants(name)) continue;
            auto opts = so;
            if (std::string(name) == "bns") opts.bns_p = bns_p;
            auto progress = [&](const train::epoch_record& r) {
                if (!root || (r.epoch % log_every != 0 && r.epoch != 1)) return;
                const double eta = r.seconds / r.epoch * (opts.epochs - r.epoch);
                std::printf(
                    "%-8s epoch %4d  loss %.4f  train %.4f  valid %.4f  test %.4f  bytes %10s  %6.1fs  ETA %.0fs\n",
                    name, r.epoch, r.loss, r.acc.train, r.acc.valid, r.acc.test,
                    report::human_bytes(static_cast<double>(r.bytes)).c_str(), r.seconds, eta);
                std::fflush(stdout);
            };
            runs.push_back(train::train_standard(ctx, opts, progress));
        }
        if (root) std::cout << report::table(runs);
        // Peak memory: every rank's maximum resident set size.
        rusage usage{};
        getrusage(RUSAGE_SELF, &usage);
        const auto rss = comm.allgather(static_cast<std::int64_t>(usage.ru_maxrss) * 1024, purpose::control);
        std::int64_t rss_total = 0, rss_max = 0;
        for (auto r : rss) {
            rss_total += r;
            rss_max = std::max(rss_max, r);
        }
        if (root)
            std::printf("peak memory (RSS): max rank %s, all ranks %s\n",
                        report::human_bytes(static_cast<double>(rss_max)).c_str(),
                        report::human_bytes(static_cast<double>(rss_total)).c_str());

        if (!metrics_out.empty() && root) {
            nlohmann::json j;
            if (runs.size() == 1) {
                j = report::run_json(runs[0], cfg);
                j["peak_rss_bytes"] = rss;
            } else {
                j["peak_rss_bytes"] = rss;
                j["mode"] = mode;
                j["model"] = model;
                j["variant"] = variant;
                j["ranks"] = comm.size();
                j["seed"] = data.seed;
                j["runs"] = nlohmann::json::array();
                for (const auto& r : runs)
                    j["runs"].push_back(report::run_json(r, cfg));
            }
            write_text_atomic(metrics_out, j.dump(2) + "\n");
        }
        const auto& primary = runs.front();
        if (!save_model_path.empty()) {
            std::string err;
            if (root) {
                try {
                    nlohmann::json model_cfg = cfg; // the training configuration, without output paths
                    for (const char* k : {"metrics-out", "save-model", "predict-out", "config", "checkpoint-dir"})
                        model_cfg.erase(k);
                    save_model(save_model_path, primary.parameters,
                               {{"mode", primary.mode},
                                {"model", model},
                                {"variant", variant},
                                {"retexo_version", version_string},
                                {"config", model_cfg.dump()}});
                } catch (const std::exception& e) {
                    err = e.what();
                }
            }
            comm.agree(err);
        }
        if (!predict_out.empty()) write_predictions(comm, predict_out, lp, primary.logits, primary.embedding);
        return cli::exit_ok;
    });
}

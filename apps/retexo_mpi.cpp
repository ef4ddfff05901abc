// retexo_mpi: the MPI application.  Each rank owns one partition.
#include "mpi_main.hpp"

#include <retexo/io/load.hpp>
#include <retexo/train/standard.hpp>

#include <omp.h>

#include <cstdio>
#include <iomanip>

int main(int argc, char** argv)
{
    using namespace retexo;
    mpi::environment env(argc, argv);
    const mpi::communicator comm(MPI_COMM_WORLD);
    const bool root = comm.rank() == 0;
    return cli::run_mpi("retexo_mpi", comm, [&] {
        data_options data;
        std::string objective = "vol", mode = "standard", model = "gcn", optimizer = "adam";
        train::standard_options so;
        int log_every = 10;
        cli::po::options_description desc("Options");
        desc.add_options()
            ("data", cli::po::value(&data.data),
             "partitioned directory (retexo_partition) or graph file (.h5); default: the built-in synthetic graph")
            ("partition", cli::po::value(&data.partition)->default_value(data.partition),
             "with a graph file: random | metis | blocks | assignment file (line i = partition of node i)")
            ("objective", cli::po::value(&objective)->default_value(objective), "METIS objective: vol | cut")
            ("mode", cli::po::value(&mode)->default_value(mode), "standard | stats")
            ("model", cli::po::value(&model)->default_value(model), "gcn | sage | sage-pool | gat")
            ("layers", cli::po::value(&so.layers)->default_value(so.layers), "number of GNN layers")
            ("hidden", cli::po::value(&so.hidden)->default_value(so.hidden), "hidden width")
            ("heads", cli::po::value(&so.heads)->default_value(so.heads), "GAT attention heads")
            ("epochs", cli::po::value(&so.epochs)->default_value(so.epochs), "training epochs")
            ("lr", cli::po::value(&so.optimizer.lr)->default_value(so.optimizer.lr), "learning rate")
            ("weight-decay", cli::po::value(&so.optimizer.weight_decay)->default_value(so.optimizer.weight_decay), "weight decay")
            ("optimizer", cli::po::value(&optimizer)->default_value(optimizer), "adam | adamw | sgd")
            ("dropout", cli::po::value(&so.dropout)->default_value(so.dropout), "dropout rate")
            ("deterministic", cli::po::bool_switch(&so.exact),
             "exact reductions: results identical for any number of ranks and threads")
            ("eval-every", cli::po::value(&so.eval_every)->default_value(so.eval_every), "evaluate every N epochs")
            ("log-every", cli::po::value(&log_every)->default_value(log_every), "progress line every N epochs")
            ("seed", cli::po::value(&data.seed)->default_value(data.seed), "random seed");
        cli::po::variables_map vm;
        int code = 0;
        if (!cli::parse(argc, argv, "retexo_mpi", "mpirun -np P retexo_mpi [options]", desc, vm, code, root))
            return code;
        data.objective = parse_metis_objective(objective);
        so.model = nn::parse_layer_kind(model);
        so.optimizer.kind = parse_optimizer(optimizer);
        so.seed = data.seed;
        if (root)
            std::cout << "retexo " << version_string << ": " << comm.size() << " ranks x "
                      << omp_get_max_threads() << " threads, seed " << data.seed << ", data "
                      << (data.data.empty() ? "built-in synthetic graph" : data.data) << "\n";
        const auto lp = load_rank_partition(comm, data);
        const auto table = gather_partition_table(comm, lp);
        if (root)
            std::cout << "graph " << lp.global.name << ": " << lp.global.num_nodes << " nodes, "
                      << lp.global.num_edges << " in-edges, " << lp.global.num_features
                      << " features, " << lp.global.num_classes << " classes; assignment hash "
                      << hash_to_hex(lp.assignment_hash) << "\n"
                      << table;
        if (mode == "stats") return cli::exit_ok;
        RETEXO_ENSURE(mode == "standard", "--mode: unknown mode '" << mode << "'");
        const train::rank_context ctx(comm, lp);
        auto progress = [&](const train::epoch_record& r) {
            if (root && (r.epoch % log_every == 0 || r.epoch == 1))
                std::printf("epoch %4d  loss %.4f  train %.4f  valid %.4f  test %.4f  bytes %.3e  %.1fs\n", r.epoch, r.loss,
                            r.acc.train, r.acc.valid, r.acc.test, static_cast<double>(r.bytes), r.seconds);
        };
        const auto res = train::train_standard(ctx, so, progress);
        if (root) {
            std::printf("final (best valid): train %.4f valid %.4f test %.4f; bytes sent %.4e\n", res.final_acc.train,
                        res.final_acc.valid, res.final_acc.test, static_cast<double>(res.bytes.total_sent()));
            for (int p = 0; p < num_purposes; ++p)
                std::printf("  %-14s %.4e\n", to_string(static_cast<purpose>(p)), static_cast<double>(res.bytes.sent[p]));
        }
        return cli::exit_ok;
    });
}

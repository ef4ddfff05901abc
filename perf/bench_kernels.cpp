// Kernel throughput as ratios of this machine's limits, measured in the same run:
//   aggregation (sum / mean / gcn, bf16 input,  bytes necessarily moved / time vs triad GB/s
//   class-count widths 7 and 47)                and vs a random row gather of the same width
//   linear forward + backward                   GFLOP/s vs oneDNN sgemm GFLOP/s
//   GAT forward + backward                      time per edge vs GCN aggregation fwd + bwd
//   GAT over inputs (forward + edge dots)       GFLOP/s vs sgemm; per summed input element in
//                                               sgemm multiply-adds (the GAT layer's cost model)
//   sparse linear forward + weight gradient     GFLOP/s on the non-zeros vs sgemm, and time vs
//   (bag-of-words rows, 0.3% to 26% non-zero)   the dense kernel on the same rows (the crossover)
//   Adam step (every RETEXO round's update)     bytes necessarily moved / time vs triad GB/s:
//                                               per parameter, read value, gradient and both
//                                               moments, write value and moments (28 B)
//   dropout of dense input rows                 bytes read and written (8 B a value) vs triad;
//                                               into sparse rows (35% non-zero): 4 B a value
//                                               read, 8 B a kept non-zero written
//   a RETEXO stage's round (amazon-computers'   GFLOP/s of its products vs sgemm: the rest is
//   SAGE stage 0: train, Adam step, validate)   what the round spends outside its GEMMs
// "Bytes necessarily moved" by a gather-based aggregation with no cache reuse: every edge
// reads its source row once, every output row is written once, plus the CSR (8 B offset per
// row, 4 B id and 4 B weight per edge).  Also the cost of an empty OpenMP parallel region.
// Options: --nodes N --degree D --quick --json FILE.
#include "machine_limits.hpp"

#include <retexo/core/rng.hpp>
#include <retexo/kernels/aggregate.hpp>
#include <retexo/kernels/gat.hpp>
#include <retexo/kernels/linear.hpp>
#include <retexo/kernels/optim.hpp>
#include <retexo/kernels/sparse.hpp>
#include <retexo/nn/stage_model.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <string>

using namespace retexo;

namespace {

csr random_graph(node_t n, int degree, std::uint64_t seed)
{
    const counter_rng rng(seed, 77);
    const auto m = static_cast<std::size_t>(n) * degree;
    std::vector<node_t> src(m), dst(m);
#pragma omp parallel for schedule(static)
    for (std::size_t e = 0; e < m; ++e) {
        src[e] = static_cast<node_t>(rng.below(2 * e, static_cast<std::uint64_t>(n)));
        dst[e] = static_cast<node_t>(e / static_cast<std::size_t>(degree)); // exactly `degree` in-edges
    }
    return build_csr(n, src, dst, {.drop_self_loops = false, .drop_duplicates = false});
}

void fill(matrix_f& m, std::uint64_t seed)
{
    const counter_rng rng(seed, 1);
#pragma omp parallel for schedule(static)
    for (Eigen::Index i = 0; i < m.size(); ++i)
        m.data()[i] = rng.uniform(static_cast<std::uint64_t>(i)) - 0.5F;
}

/// One round of a small RETEXO stage, as amazon-computers' SAGE stage 0 trains: inputs in two
/// dense blocks 767 wide (a node's features beside its neighbours' mean), 200 training rows
/// forward (dropout 0.5) and backward, an Adam step, then 500 validation rows forward; hidden
/// 256, 10 classes.  Its time against the time its products take at sgemm's rate: the rest is
/// what a round spends outside them (parallel regions, gathers, dropout, Adam, the head).
void stage_round(double sgemm, nlohmann::json& report)
{
    constexpr Eigen::Index nodes = 13752;
    constexpr int half = 767, hidden = 256, classes = 10, train_rows = 200, valid_rows = 500, rounds = 50;
    column_blocks blocks;
    for (std::uint64_t b = 0; b < 2; ++b) {
        matrix_f m(nodes, half);
        fill(m, 20 + b);
        blocks.blocks.emplace_back(std::move(m));
    }
    const node_features x(std::move(blocks));
    std::vector<node_t> ids(static_cast<std::size_t>(nodes));
    std::iota(ids.begin(), ids.end(), node_t{0});
    nn::stage_model model({.in = 2 * half, .hidden = hidden, .classes = classes, .layer_norm = false, .dropout = 0.5});
    optimizer<float> opt({.kind = optimizer_kind::adam, .lr = 0.01, .weight_decay = 5e-4}, model.parameters());
    nn::stage_pass train, valid;
    for (node_t i = 0; i < train_rows; ++i)
        train.rows.push_back(i * 61);
    for (node_t i = 0; i < valid_rows; ++i)
        valid.rows.push_back(i * 27 + 5);
    const nn::reduce_mode mode;
    std::int64_t step = 0;
    const auto round = [&] {
        ++step;
        model.forward(train, x, ids, true, step);
        train.d_logits.setConstant(train.logits.rows(), classes, 1e-3F);
        model.backward(train, step, mode, [](std::int64_t*, int) {});
        opt.step();
        model.forward(valid, x, ids, false, 0);
    };
    const double t = perf::best_time([&] {
                         for (int r = 0; r < rounds; ++r)
                             round();
                     }) /
                     rounds;
    // Forward and weight gradient on the training rows, forward on the validation rows; the
    // head's forward, weight and input gradients.
    const double macs =
        (2.0 * train_rows + valid_rows) * 2 * half * hidden + (3.0 * train_rows + valid_rows) * hidden * classes;
    const double gf = 2 * macs / t * 1e-9;
    std::printf("stage round (%d + %d rows, %d -> %d -> %d): %.2f ms, %.1f GFLOP/s = %.2f x sgemm\n", train_rows,
                valid_rows, 2 * half, hidden, classes, t * 1e3, gf, gf / sgemm);
    report["stage_round"] = {{"ms", t * 1e3}, {"gflops", gf}, {"ratio_sgemm", gf / sgemm}};
}
} // namespace

int main(int argc, char** argv)
{
    node_t nodes = 1000000;
    int degree = 20;
    std::string json_out;
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--nodes" && i + 1 < argc)
            nodes = std::stoi(argv[++i]);
        else if (a == "--degree" && i + 1 < argc)
            degree = std::stoi(argv[++i]);
        else if (a == "--json" && i + 1 < argc)
            json_out = argv[++i];
        else if (a == "--quick")
            quick = true;
        else {
            std::cerr << "usage: bench_kernels [--nodes N] [--degree D] [--quick] [--json FILE]\n";
            return 2;
        }
    }
    if (quick) nodes = std::min(nodes, node_t{100000});
    if (const auto dir = std::filesystem::path(json_out).parent_path();
        !dir.empty() && !std::filesystem::is_directory(dir)) {
        std::cerr << "bench_kernels: --json " << json_out << ": " << dir.string() << " is not a directory\n";
        return 2;
    }
    nlohmann::json report;
    const int threads = omp_get_max_threads();
    const double triad = perf::measure_triad_gbs();
    const double sgemm = measure_sgemm_gflops(2048, 2048, 2048, 5);
    std::printf("machine: %d threads, triad %.2f GB/s, oneDNN sgemm %.1f GFLOP/s\n", threads, triad, sgemm);
    report["threads"] = threads;
    report["triad_gbs"] = triad;
    report["sgemm_gflops"] = sgemm;
    const auto [region_paused, region_back_to_back] = perf::measure_region_us();
    // What waiting threads do between regions (libgomp: spin a while, then sleep; passive:
    // sleep at once) sets the cost of a region, and so of the small products of a stage round.
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    const std::string waiting = policy != nullptr ? policy : "libgomp's default";
    std::printf("machine: an OpenMP parallel region costs %.1f us after a 1 ms pause, %.1f us back to back; "
                "OMP_WAIT_POLICY %s\n",
                region_paused, region_back_to_back, waiting.c_str());
    report["region_us"] = {
        {"after_pause", region_paused}, {"back_to_back", region_back_to_back}, {"wait_policy", waiting}};

    const csr g = random_graph(nodes, degree, 1);
    const auto e = static_cast<double>(g.num_edges());
    std::printf("graph: %d nodes, %.0f edges (in-degree %d)\n", nodes, e, degree);
    double gather[2];
    for (int k = 0; k < 2; ++k) {
        gather[k] = perf::measure_gather_gbs(nodes, k == 0 ? 128 : 256);
        std::printf("machine: random row gather (width %d) %.2f GB/s = %.2f x triad\n", k == 0 ? 128 : 256, gather[k],
                    gather[k] / triad);
        report["gather_gbs"][k == 0 ? "128" : "256"] = gather[k];
    }
    std::printf("%-26s %6s %10s %10s %8s %9s\n", "kernel", "width", "time ms", "GB/s", "x triad", "x gather");
    double gcn_fb_time[2] = {0, 0};
    for (int width : {128, 256}) {
        matrix_f x(nodes, width), out(nodes, width), dx(nodes, width);
        fill(x, 2);
        const double csr_bytes = 8.0 * nodes + 8.0 * e;
        const double moved = (e + nodes) * width * 4.0 + csr_bytes;
        for (auto kind : {aggregator::sum, aggregator::mean, aggregator::gcn}) {
            const aggregation plan(g, nodes, {.kind = kind});
            const double t = perf::best_time([&] { plan.forward(x.data(), width, out.data()); });
            const double gbs = moved / t * 1e-9;
            const double gl = gather[width == 256 ? 1 : 0];
            std::printf("%-26s %6d %10.1f %10.2f %8.2f %9.2f\n", ("aggregate " + name_of(kind)).c_str(), width, t * 1e3,
                        gbs, gbs / triad, gbs / gl);
            report["aggregate"][name_of(kind)][std::to_string(width)] = {
                {"ms", t * 1e3}, {"gbs", gbs}, {"ratio_triad", gbs / triad}, {"ratio_gather", gbs / gl}};
            if (kind == aggregator::gcn) {
                const double tb = perf::best_time([&] { plan.backward(out.data(), width, dx.data()); });
                const double gbb = moved / tb * 1e-9;
                std::printf("%-26s %6d %10.1f %10.2f %8.2f %9.2f\n", "aggregate gcn backward", width, tb * 1e3, gbb,
                            gbb / triad, gbb / gl);
                report["aggregate"]["gcn_backward"][std::to_string(width)] = {
                    {"ms", tb * 1e3}, {"gbs", gbb}, {"ratio_triad", gbb / triad}, {"ratio_gather", gbb / gl}};
                gcn_fb_time[width == 256 ? 1 : 0] = t + tb;
            }
        }
        {
            const aggregation plan(g, nodes, {.kind = aggregator::gcn});
            const matrix<bf16> xb = x.cast<bf16>();
            const double t = perf::best_time([&] { plan.forward(xb.data(), width, out.data()); });
            const double moved16 = (e * width * 2.0) + nodes * width * 4.0 + csr_bytes;
            const double gbs = moved16 / t * 1e-9;
            std::printf("%-26s %6d %10.1f %10.2f %8.2f %9.2f\n", "aggregate gcn (bf16 in)", width, t * 1e3, gbs,
                        gbs / triad, gbs / gather[width == 256 ? 1 : 0]);
            report["aggregate"]["gcn_bf16"][std::to_string(width)] = {
                {"ms", t * 1e3}, {"gbs", gbs}, {"ratio_triad", gbs / triad}};
        }
    }

    // Label spreading aggregates as many columns as there are classes (7 for cora, 47 for
    // products): rows narrower than a cache line or not a multiple of 16 floats.
    for (int width : {7, 47}) {
        matrix_f x(nodes, width), out(nodes, width);
        fill(x, 2);
        const aggregation plan(g, nodes, {.kind = aggregator::gcn, .backward = false});
        const double t = perf::best_time([&] { plan.forward(x.data(), width, out.data()); });
        const double gbs = ((e + nodes) * width * 4.0 + 8.0 * nodes + 8.0 * e) / t * 1e-9;
        const double gl = perf::measure_gather_gbs(nodes, width);
        std::printf("%-26s %6d %10.1f %10.2f %8.2f %9.2f\n", "aggregate gcn", width, t * 1e3, gbs, gbs / triad,
                    gbs / gl);
        report["aggregate"]["gcn"][std::to_string(width)] = {
            {"ms", t * 1e3}, {"gbs", gbs}, {"ratio_triad", gbs / triad}, {"ratio_gather", gbs / gl}};
    }

    // GAT at width 256 = 8 heads x 32 and width 128 = 4 x 32, forward + backward.
    for (int width : {128, 256}) {
        const int heads = width / 32, hd = 32;
        const gat_attention plan(g, nodes, {.heads = heads, .self_loops = false});
        // The layer's messages: [z | el] per row.
        matrix_f msg(nodes, width + heads), er(nodes, heads), out(nodes, width), d_msg(nodes, width + heads),
            der(nodes, heads);
        matrix_f alpha(plan.num_edges(), heads), ds(plan.num_edges(), heads);
        fill(msg, 3);
        fill(er, 5);
        const double tf =
            perf::best_time([&] { plan.forward(msg.data(), er.data(), hd, out.data(), alpha.data()); }, 2);
        const double tb = perf::best_time(
            [&] {
                plan.backward(msg.data(), er.data(), alpha.data(), out.data(), hd, d_msg.data(), der.data(), ds.data());
            },
            2);
        const double ratio = (tf + tb) / gcn_fb_time[width == 256 ? 1 : 0];
        std::printf("GAT fwd+bwd width %d (%d heads): %.1f ms, %.2f ns/edge, %.2f x GCN aggregation fwd+bwd\n", width,
                    heads, (tf + tb) * 1e3, (tf + tb) / e * 1e9, ratio);
        report["gat"][std::to_string(width)] = {
            {"ms", (tf + tb) * 1e3}, {"ns_per_edge", (tf + tb) / e * 1e9}, {"ratio_gcn", ratio}};
    }

    // GAT over inputs (a RETEXO stage's pass, gnn_layer::forward_inputs): 8 heads summing the
    // 512-wide input rows of the in-neighbours of 4000 destination rows, forward + the edges'
    // dots; per input element summed over an edge, in sgemm multiply-adds (the layer's cost
    // model weighs the sums against transforming the support with this).
    {
        const int heads = 8, width = 512;
        std::vector<node_t> rows(4000);
        for (std::size_t i = 0; i < rows.size(); ++i)
            rows[i] = static_cast<node_t>(i * (nodes / rows.size()));
        const gat_attention plan(g, nodes, {.heads = heads, .rows = rows});
        const auto n = static_cast<Eigen::Index>(rows.size());
        matrix_f x(nodes, width), el(nodes, heads), er(nodes, heads), y(heads * n, width), d_el(nodes, heads),
            d_er(nodes, heads);
        matrix_f alpha(plan.num_edges(), heads), ds(plan.num_edges(), heads);
        fill(x, 12);
        fill(el, 13);
        fill(er, 14);
        const double t = perf::best_time([&] {
            plan.forward_inputs(x.data(), width, el.data(), er.data(), y.data(), alpha.data());
            plan.backward_inputs(x.data(), width, el.data(), er.data(), alpha.data(), y.data(), d_el.data(),
                                 d_er.data(), ds.data());
        });
        const double elements = 2.0 * static_cast<double>(plan.num_edges()) * width; // forward and dots
        const double macs = elements * heads;
        const double per_element = t / elements * sgemm * 1e9 / 2; // sgemm multiply-adds in that time
        std::printf("GAT over inputs width %d (%d heads): %.1f ms, %.1f GFLOP/s = %.2f x sgemm, %.0f sgemm "
                    "multiply-adds per summed input element\n",
                    width, heads, t * 1e3, 2 * macs / t * 1e-9, 2 * macs / t * 1e-9 / sgemm, per_element);
        report["gat_inputs"] = {{"ms", t * 1e3},
                                {"gflops", 2 * macs / t * 1e-9},
                                {"ratio_sgemm", 2 * macs / t * 1e-9 / sgemm},
                                {"sgemm_macs_per_element", per_element}};
    }

    // Linear forward + backward, N x F . F x 256; N = 500: a RETEXO stage's validation rows.
    std::printf("%-26s %8s %10s %10s %8s\n", "linear fwd+bwd", "N", "time ms", "GFLOP/s", "x sgemm");
    for (int f : {128, 256}) {
        for (std::int64_t n : {std::int64_t{100000}, std::int64_t{nodes}, std::int64_t{500}}) {
            const int out = 256;
            const linear_kernel k(f, out);
            matrix_f x(n, f), w(f, out), b(1, out), y(n, out), dx(n, f), dw(f, out), db(1, out);
            fill(x, 6);
            fill(w, 7);
            fill(b, 8);
            const double t = perf::best_time([&] {
                k.forward(x.data(), n, w.data(), b.data(), y.data());
                k.backward_weights(x.data(), y.data(), n, dw.data(), db.data());
                k.backward_data(y.data(), n, w.data(), dx.data());
            });
            const double gf = 3 * 2.0 * static_cast<double>(n) * f * out / t * 1e-9;
            std::printf("%-26s %8lld %10.1f %10.1f %8.2f\n", ("F=" + std::to_string(f)).c_str(),
                        static_cast<long long>(n), t * 1e3, gf, gf / sgemm);
            report["linear"]["F" + std::to_string(f)][std::to_string(n)] = {
                {"ms", t * 1e3}, {"gflops", gf}, {"ratio_sgemm", gf / sgemm}};
        }
    }

    // Sparse x dense: bag-of-words rows (N x 4096, uniform random columns) times 4096 x 256,
    // forward and weight gradient, against the dense kernel's forward and weight gradient on
    // the same rows stored dense (retexo keeps rows sparse below sparse_density_limit).
    std::printf("%-26s %8s %10s %10s %8s %10s\n", "sparse linear fwd+dW", "density", "time ms", "GFLOP/s", "x sgemm",
                "x dense");
    {
        const std::int64_t n = quick ? 5000 : 20000;
        const int f = 4096, out = 256;
        const linear_kernel k(f, out);
        matrix_f w(f, out), y(n, out), dw(f, out), db(1, out);
        fill(w, 9);
        fill(y, 10);
        const counter_rng rng(11, 3);
        for (double density : {0.003, 0.01, 0.03, 0.1, 0.2, 0.3}) {
            matrix_f x = matrix_f::Zero(n, f);
            const auto per_row = static_cast<std::uint64_t>(density * f);
            for (std::int64_t i = 0; i < n; ++i)
                for (std::uint64_t t = 0; t < per_row; ++t)
                    x(i, static_cast<Eigen::Index>(rng.below(static_cast<std::uint64_t>(i) * f + t, f))) =
                        rng.uniform(static_cast<std::uint64_t>(i) * f + t);
            const csr_matrix xs = csr_matrix::from_dense(x);
            const double ts = perf::best_time([&] {
                sparse_linear_forward(xs, w.data(), out, nullptr, y.data());
                sparse_linear_backward_weights(xs, y.data(), out, dw.data());
            });
            const double td = perf::best_time([&] {
                k.forward<float>(x.data(), n, w.data(), nullptr, y.data());
                k.backward_weights(x.data(), y.data(), n, dw.data(), db.data());
            });
            const double gf = 2 * 2.0 * static_cast<double>(xs.nnz()) * out / ts * 1e-9;
            const double real = static_cast<double>(xs.nnz()) / static_cast<double>(n * f);
            std::printf("%-26s %7.2f%% %10.2f %10.1f %8.2f %10.1f\n", ("N=" + std::to_string(n)).c_str(), 100 * real,
                        ts * 1e3, gf, gf / sgemm, td / ts);
            report["sparse_linear"][std::to_string(density)] = {{"density", real},      {"ms", ts * 1e3},
                                                                {"gflops", gf},         {"ratio_sgemm", gf / sgemm},
                                                                {"dense_ms", td * 1e3}, {"speedup_vs_dense", td / ts}};
        }
    }
    // Adam (L2 weight decay, as RETEXO's stages) over one F x 256 weight: a stage's first
    // layer on F input columns (citeseer's SAGE stage 0: 2 x 3703).
    std::printf("%-26s %8s %10s %10s %8s\n", "adam step", "params", "time ms", "GB/s", "x triad");
    for (const Eigen::Index f : {Eigen::Index{1024}, Eigen::Index{7406}, Eigen::Index{quick ? 16384 : 65536}}) {
        parameter<float> p("w", f, 256);
        fill(p.value, 12);
        fill(p.grad, 13);
        optimizer<float> opt({.kind = optimizer_kind::adam, .lr = 0.01, .weight_decay = 5e-4}, {&p});
        const double t = perf::best_time([&] { opt.step(); });
        const double gbs = 28.0 * static_cast<double>(p.value.size()) / t * 1e-9;
        std::printf("%-26s %8lld %10.2f %10.2f %8.2f\n", ("F=" + std::to_string(f)).c_str(),
                    static_cast<long long>(p.value.size()), t * 1e3, gbs, gbs / triad);
        report["adam"][std::to_string(f)] = {
            {"params", p.value.size()}, {"ms", t * 1e3}, {"gbs", gbs}, {"ratio_triad", gbs / triad}};
    }
    // Dropout (p = 0.5) of a standard model's dense input features, 767 wide (amazon-computers):
    // read and write every value (8 B).
    std::printf("%-26s %8s %10s %10s %8s\n", "dropout", "values", "time ms", "GB/s", "x triad");
    {
        const std::int64_t n = quick ? 20000 : 100000;
        const int w = 767;
        matrix_f x(n, w), y(n, w);
        fill(x, 14);
        std::vector<node_t> ids(static_cast<std::size_t>(n));
        std::iota(ids.begin(), ids.end(), node_t{0});
        const dropout_key key{42, 0, 1};
        const double t = perf::best_time([&] { dropout_forward(x.data(), ids, w, 0.5, key, y.data()); });
        const double gbs = 8.0 * static_cast<double>(x.size()) / t * 1e-9;
        std::printf("%-26s %8lld %10.2f %10.2f %8.2f\n", ("N=" + std::to_string(n)).c_str(),
                    static_cast<long long>(x.size()), t * 1e3, gbs, gbs / triad);
        report["dropout"] = {{"values", x.size()}, {"ms", t * 1e3}, {"gbs", gbs}, {"ratio_triad", gbs / triad}};
        // Into sparse rows, rows 35% non-zero (amazon-computers' 34.8%): read every value, write
        // each kept non-zero's column id and value (8 B).
        const counter_rng rng(15, 1);
        for (Eigen::Index i = 0; i < x.size(); ++i)
            if (rng.uniform(static_cast<std::uint64_t>(i)) >= 0.35F) x.data()[i] = 0;
        csr_matrix ys;
        const double ts = perf::best_time([&] { dropout_rows(x, ids, 0.5, key, ys); });
        const double bytes = 4.0 * static_cast<double>(x.size()) + 8.0 * static_cast<double>(ys.nnz());
        std::printf("%-26s %8lld %10.2f %10.2f %8.2f\n", "into sparse rows", static_cast<long long>(x.size()), ts * 1e3,
                    bytes / ts * 1e-9, bytes / ts * 1e-9 / triad);
        report["dropout_into_sparse"] = {{"values", x.size()},
                                         {"ms", ts * 1e3},
                                         {"gbs", bytes / ts * 1e-9},
                                         {"ratio_triad", bytes / ts * 1e-9 / triad}};
    }
    stage_round(sgemm, report);
    if (!json_out.empty()) {
        std::ofstream f(json_out);
        f << report.dump(2) << "\n";
        if (!f.flush()) {
            std::cerr << "bench_kernels: --json " << json_out << ": cannot write\n";
            return 1;
        }
    }
    return 0;
}

// Label spreading over the last stage's predictions, alpha chosen on validation.
#include <retexo/kernels/aggregate.hpp>
#include <retexo/train/smooth.hpp>

#include <algorithm>
#include <cmath>

namespace retexo::train {

void smooth_options::validate() const
{
    for (double a : alpha)
        RETEXO_ENSURE(a >= 0 && a < 1, "--smooth-alpha: every value must be in [0, 1), got " << a);
    RETEXO_ENSURE(!enabled() || steps >= 1, "--smooth-steps must be at least 1, got " << steps);
}

namespace {

/// add(k, P_k) for the powers P_k = A^k P_0, k = 1..steps (the owned rows): each step
/// exchanges the last power's rows, rounded to the wire as T, then aggregates them.
template <typename T, typename Add>
void propagate(const stage_exchange& exchange, const aggregation& agg, matrix_f p, int steps, phase_timer& timer,
               Add&& add)
{
    matrix<T> local; // every local row of the last power, kept from step to step
    for (int step = 1; step <= steps; ++step) {
        exchange.local_rows(p, local);
        phase_timer::scope sc(timer, "aggregate");
        agg.forward(local.data(), static_cast<int>(p.cols()), p.data());
        add(step, p);
    }
}

} // namespace

smooth_result smooth_predictions(const rank_context& ctx, const matrix_f& logits_owned, const smooth_options& o,
                                 const stage_exchange_options& wire, phase_timer& timer)
{
    o.validate();
    RETEXO_ENSURE(o.enabled(), "smooth_predictions: no alpha candidates");
    const auto own = static_cast<Eigen::Index>(ctx.part.num_owned());
    RETEXO_ENSURE_DIMS("smooth_predictions", "logits rows", logits_owned.rows(), own);
    std::vector<double> active; // nonzero candidates, each summed from the same powers
    for (double a : o.alpha)
        if (a > 0 && std::find(active.begin(), active.end(), a) == active.end()) active.push_back(a);
    const auto m = static_cast<Eigen::Index>(active.size());

    matrix_f g0 = logits_owned;
    softmax_rows(g0);
    for (node_t r : ctx.train_rows) {
        g0.row(r).setZero();
        g0(r, ctx.part.labels[r]) = 1.0F;
    }
    // G_K = (1 - alpha) sum_{k<K} alpha^k A^k G0 + alpha^K A^K G0, so one sequence of powers
    // P_k = A^k G0 (C columns) serves every candidate: each step sends C values per halo row,
    // whatever the number of candidates.
    std::vector<matrix_f> sums(static_cast<std::size_t>(m));     // each candidate's G_K
    std::vector<float> power(static_cast<std::size_t>(m), 1.0F); // alpha^k
    for (Eigen::Index j = 0; j < m; ++j)
        sums[static_cast<std::size_t>(j)] = (1 - static_cast<float>(active[static_cast<std::size_t>(j)])) * g0;
    if (m > 0) {
        stage_exchange_options e = wire;
        e.traffic = purpose::smooth;
        const stage_exchange exchange(*ctx.halo, e, timer);
        const aggregation agg(
            *ctx.graph.in_edges, ctx.graph.num_local,
            aggregation_options{.kind = aggregator::gcn, .in_degree = ctx.graph.in_degree, .backward = false});
        auto add = [&](int step, const matrix_f& next) {
            for (std::size_t j = 0; j < sums.size(); ++j) {
                const auto a = static_cast<float>(active[j]);
                power[j] *= a;
                sums[j] += (step < o.steps ? (1 - a) * power[j] : power[j]) * next;
            }
        };
        if (format_of(wire.precision).value_bytes == 4)
            propagate<float>(exchange, agg, g0, o.steps, timer, add);
        else
            propagate<bf16>(exchange, agg, g0, o.steps, timer, add);
    }
    phase_timer::scope sc(timer, "eval");
    smooth_result best;
    for (double a : o.alpha) {
        const auto j = static_cast<Eigen::Index>(std::find(active.begin(), active.end(), a) - active.begin());
        matrix_f scores = a > 0 ? sums[static_cast<std::size_t>(j)] : logits_owned;
        const accuracies acc = reduce_accuracies(ctx, scores);
        best.valid.push_back(acc.valid);
        if (best.valid.size() == 1 || acc.valid > best.acc.valid) {
            best.alpha = a;
            best.acc = acc;
            best.scores = std::move(scores);
        }
    }
    return best;
}

} // namespace retexo::train

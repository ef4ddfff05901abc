// The RETEXO stage model: the layer's transform, LayerNorm, ReLU and the classifier head.
#include <retexo/kernels/sparse.hpp>
#include <retexo/nn/stage_model.hpp>

#include <algorithm>
#include <functional>

namespace retexo::nn {

namespace {
/// The support's inputs as dense rows: x_all itself, or its dense copy in p.x_dense.
template <typename X>
const matrix_f& dense_support(const stage_pass& p, const X& x_all)
{
    if constexpr (std::is_same_v<X, matrix_f>)
        return x_all;
    else
        return p.x_dense;
}
} // namespace

stage_model::stage_model(const stage_spec& s) : spec_(s)
{
    // Initialisation streams 1000 + 10 stage (transform) and + 1 (head): apart from the
    // standard trainer's layers 0, 1, ...
    const std::uint64_t init = 1000 + 10 * static_cast<std::uint64_t>(s.stage);
    const std::string name = "stage" + std::to_string(s.stage) + (s.fold >= 0 ? ".fold" + std::to_string(s.fold) : "");
    const int out = s.head ? s.hidden : s.classes;
    if (s.graph) {
        layer_options lo;
        lo.heads = s.heads;
        lo.concat = s.head; // GAT: a hidden embedding concatenates heads, logits average them
        layer_.emplace(s.kind, s.in, out, lo, s.seed, init, name + ".transform");
    } else {
        dense_.emplace(s.in, out, s.seed, init, name + ".transform");
    }
    for (const auto& pr : s.offset_pairs)
        RETEXO_ENSURE(!s.graph && pr.width > 0 && pr.self >= 0 && pr.neighbours >= 0 &&
                          std::max(pr.self, pr.neighbours) + pr.width <= s.in &&
                          (pr.self + pr.width <= pr.neighbours || pr.neighbours + pr.width <= pr.self),
                      "retexo::stage_model: offset pair (" << pr.self << ", " << pr.neighbours << ", " << pr.width
                                                           << ") does not fit a dense stage of " << s.in
                                                           << " input columns");
    if (s.head && s.layer_norm) norm_.emplace(s.hidden, name + ".norm");
    if (s.head) head_.emplace(s.hidden, s.classes, s.seed, init + 1, name + ".head");
}

const matrix_f& stage_model::transform_weights()
{
    const auto& w = dense_->w.value;
    if (spec_.offset_pairs.empty()) return w;
    weights_ = w;
    for (const auto& pr : spec_.offset_pairs)
        weights_.middleRows(pr.neighbours, pr.width) += w.middleRows(pr.self, pr.width);
    return weights_;
}

void stage_model::offset_gradients(const reduce_mode& mode)
{
    auto& w = dense_->w;
    for (const auto& pr : spec_.offset_pairs) {
        if (!mode.exact) {
            w.grad.middleRows(pr.self, pr.width) += w.grad.middleRows(pr.neighbours, pr.width);
            continue;
        }
        const auto row = static_cast<std::size_t>(w.value.cols());
        const auto n = static_cast<std::ptrdiff_t>(row * static_cast<std::size_t>(pr.width));
        auto self = w.exact.begin() + static_cast<std::ptrdiff_t>(row * static_cast<std::size_t>(pr.self));
        auto neighbours = w.exact.begin() + static_cast<std::ptrdiff_t>(row * static_cast<std::size_t>(pr.neighbours));
        std::transform(self, self + n, neighbours, self, std::plus<>());
    }
}

std::vector<parameter<float>*> stage_model::parameters()
{
    std::vector<parameter<float>*> ps;
    if (dense_) ps = {&dense_->w, &dense_->b};
    if (layer_) ps = layer_->parameters();
    if (norm_) ps.insert(ps.end(), {&norm_->gamma, &norm_->beta});
    if (head_) ps.insert(ps.end(), {&head_->w, &head_->b});
    return ps;
}

layer_plan stage_model::make_plan(const local_graph& g, std::span<const node_t> rows) const
{
    RETEXO_ENSURE(layer_, "retexo::stage_model::make_plan: stage " << spec_.stage << " has no graph layer");
    return layer_->make_plan(g, rows);
}

dropout_key stage_model::input_key(std::int64_t step) const
{
    return {spec_.seed, mask_stream(0), static_cast<std::uint64_t>(step)};
}

dropout_key stage_model::hidden_key(std::int64_t step) const
{
    return {spec_.seed, mask_stream(1), static_cast<std::uint64_t>(step)};
}

std::uint64_t stage_model::mask_stream(int which) const
{
    // Fold f > 0 of a stage: streams of their own, far above every stage's 2k, 2k + 1.
    const auto fold = static_cast<std::uint64_t>(std::max(spec_.fold, 0));
    return static_cast<std::uint64_t>(2 * spec_.stage + which) + (fold << 32U);
}

void stage_model::forward(stage_pass& p, const node_features& x, std::span<const node_t> local_ids, bool training,
                          std::int64_t step)
{
    p.ids.resize(p.rows.size());
    for (std::size_t i = 0; i < p.rows.size(); ++i)
        p.ids[i] = local_ids[static_cast<std::size_t>(p.rows[i])];
    const double rate = training ? spec_.dropout : 0.0;
    x.visit([&]<typename X>(const X& xv) {
        transform(p, xv, p.x_rows.storage<X>(), p.x_all.storage<X>(), local_ids, rate, step);
    });
    if (!head_) {
        p.logits = p.t;
        return;
    }
    if (norm_) norm_->forward(p.t, p.u);
    const matrix_f& pre = norm_ ? p.u : p.t; // what ReLU reads
    p.h.resize(pre.rows(), pre.cols());
    activation_forward(activation::relu, pre.data(), static_cast<std::size_t>(pre.size()), p.h.data());
    p.hd.resize(p.h.rows(), p.h.cols());
    dropout_forward(p.h.data(), p.ids, spec_.hidden, rate, hidden_key(step), p.hd.data());
    head_->forward(p.hd, p.logits);
}

template <typename X>
void stage_model::transform(stage_pass& p, const X& x, X& x_rows, X& x_all, std::span<const node_t> local_ids,
                            double rate, std::int64_t step)
{
    // Without dropout, a pass over the same rows of the same inputs as the pass before
    // (evaluation, round after round) finds them already gathered.
    const bool gathered = rate == 0 && p.undropped_from == &x && p.undropped_rows == p.rows;
    p.undropped_from = rate == 0 ? &x : nullptr;
    if (rate == 0) p.undropped_rows = p.rows;
    if (dense_) {
        if (!gathered) {
            gather_dropout_rows(x, p.rows, p.ids, rate, input_key(step), x_rows);
        }
        dense_->kernel.forward(x_rows, transform_weights(), dense_->b.value, p.t);
        return;
    }
    const auto& support = p.plan->support;
    // GAT may sum the inputs first (not when exact sums need every message's gradient).
    p.used_inputs_first = !p.every_message && layer_->kind() == layer_kind::gat &&
                          spec_.inputs_first.value_or(layer_->aggregates_inputs_first(*p.plan, gemm_width(x)));
    if (support_only(p)) {
        if (!gathered) {
            gather_rows(x, support, x_all);
            p.support_ids.resize(support.size());
            for (std::size_t i = 0; i < support.size(); ++i)
                p.support_ids[i] = local_ids[static_cast<std::size_t>(support[i])];
            dropout_rows(x_all, p.support_ids, rate, input_key(step), x_all);
            gather_rows(x_all, p.plan->row_in_support, x_rows);
        }
    } else if (!gathered) {
        dropout_rows(x, local_ids, rate, input_key(step), x_all);
        gather_rows(x_all, p.rows, x_rows);
    }
    if (p.used_inputs_first) {
        if constexpr (!std::is_same_v<X, matrix_f>)
            if (!gathered || p.x_dense.rows() != rows_of(x_all)) x_all.to_dense(p.x_dense);
        layer_->forward_inputs(*p.plan, dense_support(p, x_all), p.cache, p.t);
        return;
    }
    if (support_only(p)) {
        layer_->message(x_all, p.cache, p.msg_support);
        const auto w = p.msg_support.cols();
        p.msg.resize(p.plan->num_local, w);
        for (std::size_t i = 0; i < support.size(); ++i)
            p.msg.row(support[i]) = p.msg_support.row(static_cast<Eigen::Index>(i));
    } else {
        layer_->message(x_all, p.cache, p.msg);
    }
    layer_->combine(*p.plan, p.msg, x_rows, p.cache, p.t);
}

void stage_model::backward(stage_pass& p, std::int64_t step, const reduce_mode& mode, const halo_gradient_fn& add_halo)
{
    auto& d_t = p.d_t;
    if (head_) {
        auto& d_hd = p.d_hd;
        head_->backward(p.hd, p.d_logits, &d_hd, mode);
        dropout_backward(d_hd.data(), p.ids, spec_.hidden, spec_.dropout, hidden_key(step), d_hd.data());
        activation_backward(activation::relu, (norm_ ? p.u : p.t).data(), d_hd.data(),
                            static_cast<std::size_t>(d_hd.size()), d_hd.data());
        if (norm_)
            norm_->backward(p.t, d_hd, d_t, mode);
        else
            d_t = d_hd;
    } else {
        d_t = p.d_logits;
    }
    p.x_rows.visit(
        [&]<typename X>(const X& x_rows) { transform_backward(p, x_rows, p.x_all.as<X>(), mode, add_halo); });
}

template <typename X>
void stage_model::transform_backward(stage_pass& p, const X& x_rows, const X& x_all, const reduce_mode& mode,
                                     const halo_gradient_fn& add_halo)
{
    if (dense_) {
        dense_->backward(x_rows, p.d_t, nullptr, mode);
        offset_gradients(mode);
        return;
    }
    if (p.used_inputs_first) {
        layer_->backward_inputs(*p.plan, dense_support(p, x_all), p.cache, p.d_t, mode);
        return;
    }
    layer_->combine_backward(*p.plan, p.msg, x_rows, p.cache, p.d_t, true, mode);
    if (support_only(p)) {
        RETEXO_ENSURE(!mode.exact, "retexo::stage_model: an exact backward pass needs every message (every_message)");
        const auto& support = p.plan->support;
        p.d_msg_support.resize(static_cast<Eigen::Index>(support.size()), p.cache.d_msg.cols());
        for (std::size_t i = 0; i < support.size(); ++i)
            p.d_msg_support.row(static_cast<Eigen::Index>(i)) = p.cache.d_msg.row(support[i]);
        std::swap(p.cache.d_msg, p.d_msg_support); // message_backward reads rows [0, support)
        layer_->message_backward(x_all, p.msg_support, p.cache, nullptr, mode);
        std::swap(p.cache.d_msg, p.d_msg_support);
    } else if (mode.exact) {
        // Exact sums need each halo row's message gradient summed at its owner.
        add_halo(p.cache.d_msg_exact.data(), layer_->msg_width());
        layer_->message_backward(top_rows(x_all, p.plan->num_owned), p.msg, p.cache, nullptr, mode);
    } else {
        // Halo rows' contributions stay local: the gradient all-reduce sums them.
        layer_->message_backward(x_all, p.msg, p.cache, nullptr, mode);
    }
}

} // namespace retexo::nn

#include <retexo/comm/overlap.hpp>
#include <retexo/kernels/dense.hpp>
#include <retexo/kernels/loss.hpp>
#include <retexo/kernels/sparse.hpp>
#include <retexo/train/standard.hpp>

#include <cmath>
#include <map>
#include <optional>

namespace retexo::train {

void standard_options::validate() const
{
    RETEXO_ENSURE(layers >= 1, "--layers must be at least 1, got " << layers);
    RETEXO_ENSURE(hidden >= 1, "--hidden must be positive, got " << hidden);
    RETEXO_ENSURE(epochs >= 1, "--epochs must be positive, got " << epochs);
    RETEXO_ENSURE(dropout >= 0 && dropout < 1, "--dropout must be in [0, 1), got " << dropout);
    RETEXO_ENSURE(eval_every >= 1, "--eval-every must be positive, got " << eval_every);
    RETEXO_ENSURE(bns_p > 0 && bns_p <= 1, "--bns-p must be in (0, 1], got " << bns_p);
    RETEXO_ENSURE(bns_p == 1 || !exact, "--deterministic is not available with boundary node sampling (--bns-p < 1)");
    RETEXO_ENSURE(model != nn::layer_kind::gat || hidden % heads == 0,
                  "--hidden " << hidden << " must be divisible by --heads " << heads << " for GAT");
}

namespace {

/// The whole graph's fraction of non-zero features when they are stored sparse (the same on
/// every rank, so every partitioning picks the same layer order), else 0.
double sparse_input_density(const rank_context& ctx)
{
    const auto& x = ctx.part.features;
    if (!x.is_sparse()) return 0;
    const auto nnz = ctx.comm.allreduce(static_cast<std::int64_t>(x.sparse().nnz()), MPI_SUM, purpose::control);
    const double cells = static_cast<double>(ctx.part.global.num_nodes) * ctx.part.global.num_features;
    return cells > 0 ? std::max(static_cast<double>(nnz) / cells, 1e-9) : 0;
}

struct standard_model {
    std::vector<nn::gnn_layer<float>> layers;
    // A plan depends on the layer kind, heads and graph only, all alike across layers: one
    // plan serves every layer (at products scale each costs about half a GB per rank).
    std::optional<nn::layer_plan> plan;      // over the graph training sees
    std::optional<nn::layer_plan> eval_plan; // over the whole graph (inductive only)
    activation act;

    standard_model(const rank_context& ctx, const standard_options& o)
    {
        const int F = ctx.part.global.num_features, C = ctx.part.global.num_classes;
        act = o.model == nn::layer_kind::gat ? activation::elu : activation::relu;
        const double density = sparse_input_density(ctx);
        for (int l = 0; l < o.layers; ++l) {
            const int in = l == 0 ? F : o.hidden;
            const bool last = l == o.layers - 1;
            const int out = last ? C : o.hidden;
            nn::layer_options lo;
            lo.heads = o.heads;
            lo.concat = !last;           // GAT: hidden layers concatenate heads, the output layer averages them
            if (l == 0 && density > 0) { // sparse features: the cheaper order for these shapes
                lo.sparse_input_density = density;
                lo.mean_in_degree = static_cast<double>(ctx.part.global.num_edges) /
                                    static_cast<double>(std::max<node_t>(1, ctx.part.global.num_nodes));
            }
            layers.emplace_back(o.model, in, out, lo, o.seed, static_cast<std::uint64_t>(l));
        }
        plan = layers.front().make_plan(ctx.train_graph, ctx.owned_rows);
        if (ctx.inductive) eval_plan = layers.front().make_plan(ctx.graph, ctx.owned_rows);
    }

    std::vector<parameter<float>*> parameters()
    {
        std::vector<parameter<float>*> ps;
        for (auto& l : layers)
            for (auto* p : l.parameters())
                ps.push_back(p);
        return ps;
    }
};

/// y = dropout(x) over the owned rows (global ids ids), stored as x is (dense or sparse).
void dropout_into(const node_features& x, node_features& y, std::span<const node_t> ids, const dropout_key& key,
                  double p)
{
    if (x.is_sparse()) {
        if (!y.is_sparse()) y = csr_matrix();
        dropout_rows(x.sparse(), ids, p, key, y.sparse());
    } else {
        if (y.is_sparse()) y = matrix_f();
        dropout_rows(x.dense(), ids, p, key, y.dense());
    }
}

/// One run of the standard trainer: the model, its optimiser and the activations every
/// epoch reuses.
class standard_run {
public:
    standard_run(const rank_context& ctx, const standard_options& o)
        : ctx_(ctx), o_(o), meter_(ctx), own_(ctx.part.num_owned()), local_(ctx.part.num_local()), L_(o.layers),
          model_(ctx, o), params_(model_.parameters()), opt_(o.optimizer, params_), mode_(ctx.reduce(o.exact)),
          ids_(ctx.part.owned_global)
    {
        broadcast_parameters(ctx.comm, params_);
        const auto n = static_cast<std::size_t>(L_);
        for (auto* v : {&own_msgs_, &msgs_, &out_})
            v->resize(n);
        xs_.resize(n);
        acts_.resize(n);
        inputs_.resize(n);
        cache_.resize(n);
        if (ctx.inductive) { // the features training sees: the evaluation nodes' rows hidden
            train_features_ = ctx.part.features;
            ctx.hide_evaluation_rows(train_features_);
        }
    }

    run_result train(const progress_fn& progress);

private:
    /// BNS: the boundary nodes kept at (epoch, layer), decided from global ids on every rank.
    auto keep(int epoch, int layer) const
    {
        const counter_rng rng(o_.seed, rng_stream::sampling + static_cast<std::uint64_t>(epoch) * 1000003ULL +
                                           static_cast<std::uint64_t>(layer));
        const float p = static_cast<float>(o_.bns_p);
        return [rng, p](node_t g) { return rng.uniform(static_cast<std::uint64_t>(g)) < p; };
    }
    bool bns() const { return o_.bns_p < 1.0; }
    dropout_key key(int layer, int epoch) const
    {
        return {o_.seed, static_cast<std::uint64_t>(layer), static_cast<std::uint64_t>(epoch)};
    }
    /// Logits of every owned row: per layer, messages of the owned rows, the halo exchange
    /// (overlapped with the interior rows' aggregation), combine.
    const matrix_f& forward(bool training, int epoch, purpose exchange_purpose);
    void layer_forward(int l, bool training, int epoch, purpose exchange_purpose, const node_features& h);
    /// Whether layer l's halo rows are the cached raw features (see resend_features).
    bool cached_halo_inputs(int l) const
    {
        return l == 0 && model_.layers.front().message_is_input() && !bns() && !o_.resend_features;
    }
    /// msg's halo rows for the first layer from the cached raw rows of source h (sent once).
    void set_cached_halo_rows(const node_features& h, bool training, int epoch, purpose p, matrix_f& msg);
    /// Parameter gradients from the logits' gradient d (halo rows' message gradients go
    /// back to their owners).
    void backward(matrix_f d, int epoch);

    const rank_context& ctx_;
    const standard_options& o_;
    run_meter meter_; // from the start: model setup and the parameter broadcast count
    const node_t own_, local_;
    const int L_;
    standard_model model_;
    std::vector<parameter<float>*> params_;
    optimizer<float> opt_;
    nn::reduce_mode mode_;
    const std::span<const node_t> ids_; // global ids of the owned rows (dropout keys)
    // Per layer, kept across epochs (no reallocation): the owned rows' dropped-out inputs,
    // the owned rows' messages, every local row's messages, outputs and activations.
    std::vector<matrix_f> own_msgs_, msgs_, out_;
    std::vector<node_features> xs_, acts_; // the first layer's inputs may be sparse rows
    std::vector<const node_features*> inputs_;
    std::vector<nn::layer_cache<float>> cache_;
    // The first layer's raw halo input rows, by source (the features, or those training sees),
    // when they cross once (cached_halo_inputs), and this epoch's dropped-out copy.
    std::map<const node_features*, matrix_f> halo_inputs_;
    matrix_f halo_dropped_;
    node_features train_features_;
};

const matrix_f& standard_run::forward(bool training, int epoch, purpose exchange_purpose)
{
    const node_features* h = training && ctx_.inductive ? &train_features_ : &ctx_.part.features;
    for (int l = 0; l < L_; ++l) {
        layer_forward(l, training, epoch, exchange_purpose, *h);
        if (l + 1 < L_) {
            const auto li = static_cast<std::size_t>(l);
            phase_timer::scope s(meter_.timer, training ? "compute" : "eval");
            const auto& y = out_[li];
            auto& a = acts_[li].dense();
            a.resize(y.rows(), y.cols());
            activation_forward(model_.act, y.data(), static_cast<std::size_t>(y.size()), a.data(), 1.0);
            h = &acts_[li];
        }
    }
    return out_[static_cast<std::size_t>(L_ - 1)];
}

void standard_run::layer_forward(int l, bool training, int epoch, purpose exchange_purpose, const node_features& h)
{
    const auto li = static_cast<std::size_t>(l);
    auto& layer = model_.layers[li];
    auto& msg = msgs_[li];
    auto& timer = meter_.timer;
    const char* phase = training ? "compute" : "eval";
    const int mw = layer.msg_width();
    {
        phase_timer::scope s(timer, phase);
        if (training && o_.dropout > 0) {
            dropout_into(h, xs_[li], ids_, key(l, epoch), o_.dropout);
            inputs_[li] = &xs_[li];
        } else {
            inputs_[li] = &h;
        }
        inputs_[li]->visit([&](const auto& x) { layer.message(x, cache_[li], own_msgs_[li]); });
        msg.resize(local_, mw);
        msg.topRows(own_) = own_msgs_[li];
    }
    const auto& plan = training || !ctx_.inductive ? *model_.plan : *model_.eval_plan;
    float* halo_rows = msg.data() + static_cast<std::ptrdiff_t>(own_) * mw;
    bool aggregated = false;
    if (cached_halo_inputs(l)) {
        set_cached_halo_rows(h, training, epoch, exchange_purpose, msg);
        phase_timer::scope s(timer, phase);
        for (const auto& rows : {std::span<const node_t>(plan.interior), std::span<const node_t>(plan.boundary)})
            layer.aggregate_rows(plan, msg, cache_[li], rows, true);
        aggregated = true;
    } else if (training && bns()) {
        phase_timer::scope s(timer, "exchange");
        ctx_.halo->forward_sampled(msg.data(), halo_rows, mw, keep(epoch, l), 1.0F / static_cast<float>(o_.bns_p),
                                   exchange_purpose);
    } else {
        pending_exchange pending = [&] {
            phase_timer::scope s(timer, "exchange");
            return ctx_.halo->start_forward(msg.data(), halo_rows, mw, exchange_purpose);
        }();
        overlap_rows(pending, plan.interior, plan.boundary, o_.overlap, timer,
                     [&](std::span<const node_t> rows, bool halo_ready) {
                         phase_timer::scope s(timer, phase);
                         layer.aggregate_rows(plan, msg, cache_[li], rows, halo_ready);
                     });
        aggregated = true;
    }
    phase_timer::scope s(timer, phase);
    inputs_[li]->visit([&](const auto& x) { layer.combine(plan, msg, x, cache_[li], out_[li], aggregated); });
}

void standard_run::set_cached_halo_rows(const node_features& h, bool training, int epoch, purpose p, matrix_f& msg)
{
    auto [it, fresh] = halo_inputs_.try_emplace(&h);
    matrix_f& raw = it->second;
    if (fresh) {
        phase_timer::scope s(meter_.timer, "exchange");
        const matrix_f dense = h.is_sparse() ? h.sparse().to_dense() : matrix_f();
        const matrix_f& own = h.is_sparse() ? dense : h.dense();
        raw.resize(local_ - own_, own.cols());
        ctx_.halo->start_forward(own.data(), raw.data(), static_cast<int>(own.cols()), p).wait();
    }
    phase_timer::scope s(meter_.timer, training ? "compute" : "eval");
    if (training && o_.dropout > 0) {
        dropout_rows(raw, ctx_.part.halo_global, o_.dropout, key(0, epoch), halo_dropped_);
        msg.bottomRows(local_ - own_) = halo_dropped_;
    } else {
        msg.bottomRows(local_ - own_) = raw;
    }
}

void standard_run::backward(matrix_f d, int epoch)
{
    auto& timer = meter_.timer;
    for (int l = L_ - 1; l >= 0; --l) {
        const auto li = static_cast<std::size_t>(l);
        auto& layer = model_.layers[li];
        auto& c = cache_[li];
        const auto& plan = *model_.plan;
        const bool need_in = l > 0;
        const bool need_msg = need_in || layer.has_message_params();
        {
            phase_timer::scope s(timer, "compute");
            inputs_[li]->visit(
                [&](const auto& x) { layer.combine_backward(plan, msgs_[li], x, c, d, need_msg, mode_); });
        }
        if (!need_msg) continue;
        {
            phase_timer::scope s(timer, "exchange");
            const int w = layer.msg_width();
            const auto off = static_cast<std::ptrdiff_t>(own_) * w;
            if (o_.exact)
                ctx_.halo->reverse_add(c.d_msg_exact.data() + off, c.d_msg_exact.data(), w);
            else if (bns())
                ctx_.halo->reverse_add_sampled(c.d_msg.data() + off, c.d_msg.data(), w, keep(epoch, l),
                                               1.0F / static_cast<float>(o_.bns_p));
            else
                ctx_.halo->reverse_add(c.d_msg.data() + off, c.d_msg.data(), w);
        }
        phase_timer::scope s(timer, "compute");
        matrix_f dx;
        inputs_[li]->visit(
            [&](const auto& x) { layer.message_backward(x, msgs_[li], c, need_in ? &dx : nullptr, mode_); });
        if (need_in) {
            layer.add_self_gradient(plan, c, dx);
            dropout_backward(dx.data(), ids_, layer.in(), o_.dropout, key(l, epoch), dx.data());
            const auto& pre = out_[static_cast<std::size_t>(l - 1)];
            d.resize(dx.rows(), dx.cols());
            activation_backward(model_.act, pre.data(), dx.data(), static_cast<std::size_t>(dx.size()), d.data(), 1.0);
        }
    }
}

run_result standard_run::train(const progress_fn& progress)
{
    const auto& comm = ctx_.comm;
    const int C = ctx_.part.global.num_classes;
    run_result result;
    result.mode = bns() ? "bns" : "standard";
    result.model = name_of(o_.model);
    result.ranks = comm.size();
    result.seed = o_.seed;
    double best_valid = -1;
    std::vector<matrix_f> best_params = snapshot(params_);
    const int loss_k = o_.exact ? loss_exponent(ctx_.global_train) : -1;

    for (int epoch = 1; epoch <= o_.epochs; ++epoch) {
        const matrix_f& logits = forward(true, epoch, purpose::halo_forward);
        matrix_f d = matrix_f::Zero(own_, C);
        loss_result local_loss;
        comm.checked([&] {
            local_loss = softmax_cross_entropy(logits.data(), C, ctx_.part.labels, ctx_.train_rows,
                                               1.0F / static_cast<float>(ctx_.global_train), d.data(), loss_k);
        });
        backward(std::move(d), epoch);
        {
            phase_timer::scope s(meter_.timer, "sync");
            allreduce_gradients(comm, params_, o_.exact);
        }
        {
            phase_timer::scope s(meter_.timer, "compute");
            opt_.step();
        }
        epoch_record rec;
        rec.epoch = epoch;
        rec.loss = reduce_loss(comm, local_loss, ctx_.global_train, loss_k);
        if (epoch % o_.eval_every == 0 || epoch == o_.epochs) {
            rec.acc = reduce_accuracies(ctx_, forward(false, epoch, purpose::halo_eval));
            if (rec.acc.valid > best_valid) {
                best_valid = rec.acc.valid;
                best_params = snapshot(params_);
            }
        }
        meter_.record(rec, result, progress);
    }
    restore(params_, best_params);
    result.final_acc = reduce_accuracies(ctx_, forward(false, o_.epochs + 1, purpose::halo_eval));
    result.parameters = named_values(params_);
    result.logits = out_[static_cast<std::size_t>(L_ - 1)];
    result.embedding = L_ >= 2 ? acts_[static_cast<std::size_t>(L_ - 2)].dense() : result.logits;
    return meter_.finish(std::move(result));
}

} // namespace

run_result train_standard(const rank_context& ctx, const standard_options& o, const progress_fn& progress)
{
    o.validate();
    standard_run run(ctx, o);
    return run.train(progress);
}

} // namespace retexo::train

// The standard distributed trainer: a halo exchange per layer, forward and backward, every epoch.
#include <retexo/comm/overlap.hpp>
#include <retexo/kernels/dense.hpp>
#include <retexo/kernels/loss.hpp>
#include <retexo/kernels/sparse.hpp>
#include <retexo/nn/standard_model.hpp>
#include <retexo/train/standard.hpp>

#include <cmath>
#include <map>
#include <sstream>

namespace retexo::train {

void standard_options::validate_values() const
{
    RETEXO_ENSURE(layers >= 1, "--layers must be at least 1, got " << layers);
    RETEXO_ENSURE(hidden >= 1, "--std-hidden (default: the first --hidden) must be positive, got " << hidden);
    RETEXO_ENSURE(heads >= 1, "--heads must be at least 1, got " << heads);
    RETEXO_ENSURE(epochs >= 1, "--epochs must be positive, got " << epochs);
    RETEXO_ENSURE(dropout >= 0 && dropout < 1, "--std-dropout must be in [0, 1), got " << dropout);
    RETEXO_ENSURE(optimizer.lr > 0 && std::isfinite(optimizer.lr), "--std-lr must be positive, got " << optimizer.lr);
    RETEXO_ENSURE(optimizer.weight_decay >= 0 && std::isfinite(optimizer.weight_decay),
                  "--std-weight-decay must be >= 0, got " << optimizer.weight_decay);
    RETEXO_ENSURE(eval_every >= 1, "--eval-every must be positive, got " << eval_every);
    RETEXO_ENSURE(bns_p > 0 && bns_p <= 1, "--bns-p must be in (0, 1], got " << bns_p);
}

void standard_options::validate() const
{
    validate_values();
    RETEXO_ENSURE(bns_p == 1 || !deterministic,
                  "--deterministic is not available with boundary node sampling (--bns-p < 1)");
    RETEXO_ENSURE(model != nn::layer_kind::gat || hidden % heads == 0,
                  "--hidden " << hidden << " must be divisible by --heads " << heads << " for GAT");
}

namespace {

/// The whole graph's fraction of non-zero features, dense or sparse (one allreduce: the same
/// on every rank, so every partitioning decides alike).
double global_feature_density(const rank_context& ctx)
{
    const auto& x = ctx.part.features;
    const auto own = x.is_sparse() ? static_cast<std::int64_t>(x.sparse().nnz())
                                   : static_cast<std::int64_t>((x.dense().array() != 0.0F).count());
    const auto nnz = ctx.comm.allreduce(own, MPI_SUM, purpose::control);
    const double cells = static_cast<double>(ctx.part.global.num_nodes) * ctx.part.global.num_features;
    return cells > 0 ? static_cast<double>(nnz) / cells : 0;
}

/// The whole graph's density when the features are stored sparse (it picks the first
/// layer's order), else 0.
double sparse_input_density(const rank_context& ctx)
{
    return ctx.part.features.is_sparse() ? std::max(global_feature_density(ctx), 1e-9) : 0;
}

/// Refuses (every rank together) a model this rank's node cannot hold.  What it takes at
/// least: each layer's weights, with their gradients and one optimiser moment (12 bytes
/// each), and each layer's output over the owned rows, kept for the backward pass (4 bytes).
void ensure_model_fits(const rank_context& ctx, const standard_options& o)
{
    const auto& g = ctx.part.global;
    const double F = g.num_features, C = g.num_classes, H = o.hidden, L = o.layers;
    const auto rows = ctx.part.num_owned();
    const double weights = L == 1 ? F * C : F * H + (L - 2) * H * H + H * C;
    const double outputs = static_cast<double>(rows) * ((L - 1) * H + C);
    std::ostringstream what;
    what << "--layers " << o.layers << " and --std-hidden " << o.hidden << ": the standard " << name_of(o.model)
         << " model (" << g.num_features << " features, " << g.num_classes << " classes, " << rows
         << " rows on this rank)";
    mpi::ensure_memory(ctx.comm, 12 * weights + 4 * outputs, what.str());
}

/// The model of options o over this rank's partition.
nn::standard_model make_model(const rank_context& ctx, const standard_options& o)
{
    const auto& g = ctx.part.global;
    nn::standard_model_spec spec{.kind = o.model,
                                 .layers = o.layers,
                                 .in = g.num_features,
                                 .hidden = o.hidden,
                                 .out = g.num_classes,
                                 .heads = o.heads,
                                 .seed = o.seed,
                                 .sparse_input_density = sparse_input_density(ctx)};
    if (spec.sparse_input_density > 0)
        spec.mean_in_degree = static_cast<double>(g.num_edges) / static_cast<double>(std::max<node_t>(1, g.num_nodes));
    return {spec, ctx.train_graph, ctx.owned_rows, ctx.inductive ? &ctx.graph : nullptr};
}

/// Whether the first layer's dropped-out inputs are kept as sparse rows though the features
/// are dense: the layer multiplies them by its weights first, and the global density times
/// the keep rate is under sparse_density_limit (the same decision on every rank, at every
/// rank count, so the sums are the same whatever the partitioning).
bool drops_to_sparse(const rank_context& ctx, const standard_options& o, const nn::standard_model& m)
{
    const auto& x = ctx.part.features;
    if (x.is_sparse() || o.dropout <= 0 || m.layers.front().message_is_input()) return false;
    return global_feature_density(ctx) * (1 - o.dropout) < sparse_density_limit;
}

/// y = dropout(x) over the owned rows (global ids ids), stored as x is (dense or sparse), or
/// sparse for dense x when to_sparse.
void dropout_into(const node_features& x, node_features& y, std::span<const node_t> ids, const dropout_key& key,
                  double p, bool to_sparse)
{
    if (x.is_sparse() || to_sparse) {
        if (!y.is_sparse()) y = csr_matrix();
        if (x.is_sparse())
            dropout_rows(x.sparse(), ids, p, key, y.sparse());
        else
            dropout_rows(x.dense(), ids, p, key, y.sparse());
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
          model_([&] {
              phase_timer::scope s(meter_.timer, "setup");
              ensure_model_fits(ctx, o);
              return make_model(ctx, o);
          }()),
          params_(model_.parameters()), opt_(o.optimizer, params_), mode_(ctx.reduce(o.deterministic)),
          ids_(ctx.part.owned_global)
    {
        phase_timer::scope s(meter_.timer, "setup");
        agree_initial_parameters(ctx.comm, params_);
        sparse_dropout_ = drops_to_sparse(ctx, o, model_);
        const auto n = static_cast<std::size_t>(L_);
        msgs_.resize(n);
        out_.resize(n);
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
    /// Accuracies of the model as it is (every rank's owned rows).
    accuracies evaluate(int epoch);
    /// Layer l on inputs_[l]; source: the first layer's inputs before dropout.
    void layer_forward(int l, bool training, int epoch, purpose exchange_purpose, const node_features& source);
    /// Hidden layer l's output: for ReLU the activation's own buffer (the activation, then
    /// the next layer's dropout, are applied in place, and the backward pass reads the
    /// derivative from the sign of what is left), else out_[l].
    matrix_f& hidden_output(int l)
    {
        const auto li = static_cast<std::size_t>(l);
        return model_.act == activation::relu ? acts_[li].dense() : out_[li];
    }
    /// Whether layer l keeps its messages after combine: the backward pass reads them, or
    /// their storage becomes the message gradients (c.d_msg).
    bool keeps_messages(int l) const
    {
        const auto& layer = model_.layers[static_cast<std::size_t>(l)];
        return layer.backward_reads_messages() || l > 0 || layer.has_message_params();
    }
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
    nn::standard_model model_;
    std::vector<parameter<float>*> params_;
    optimizer<float> opt_;
    nn::reduce_mode mode_;
    const std::span<const node_t> ids_; // global ids of the owned rows (dropout keys)
    // Kept across epochs (no reallocation), and no more than the backward pass reads (a
    // products-scale graph fits on 4 ranks): the first layer's dropped-out inputs (dense or
    // sparse rows); per layer, every local row's messages (while keeps_messages), outputs
    // (the last layer's, and hidden ones unless hidden_output is the activation's buffer) and
    // activations (the next layer's inputs, dropped out in place when training).
    node_features dropped_input_;
    bool sparse_dropout_ = false; // dropped_input_ sparse for dense features (drops_to_sparse)
    std::vector<matrix_f> msgs_, out_;
    std::vector<node_features> acts_;
    std::vector<const node_features*> inputs_;
    std::vector<nn::layer_cache<float>> cache_;
    // The first layer's raw halo input rows, by source (the features, or those training sees),
    // when they cross once (cached_halo_inputs).
    std::map<const node_features*, matrix_f> halo_inputs_;
    node_features train_features_;
};

const matrix_f& standard_run::forward(bool training, int epoch, purpose exchange_purpose)
{
    const node_features& source = training && ctx_.inductive ? train_features_ : ctx_.part.features;
    const bool drop = training && o_.dropout > 0;
    for (int l = 0; l < L_; ++l) {
        const auto li = static_cast<std::size_t>(l);
        if (l == 0) {
            inputs_[li] = &source;
            if (drop) {
                phase_timer::scope s(meter_.timer, "compute");
                dropout_into(source, dropped_input_, ids_, key(l, epoch), o_.dropout, sparse_dropout_);
                inputs_[li] = &dropped_input_;
            }
        } else {
            auto& a = acts_[li - 1].dense();
            if (drop) {
                phase_timer::scope s(meter_.timer, "compute");
                dropout_rows(a, ids_, o_.dropout, key(l, epoch), a);
            }
            inputs_[li] = &acts_[li - 1];
        }
        layer_forward(l, training, epoch, exchange_purpose, source);
        if (l + 1 < L_) {
            phase_timer::scope s(meter_.timer, training ? "compute" : "eval");
            const auto& y = hidden_output(l);
            auto& a = acts_[li].dense();
            a.resize(y.rows(), y.cols()); // a no-op when a is y
            activation_forward(model_.act, y.data(), static_cast<std::size_t>(y.size()), a.data(), 1.0);
        }
    }
    return out_[static_cast<std::size_t>(L_ - 1)];
}

void standard_run::layer_forward(int l, bool training, int epoch, purpose exchange_purpose, const node_features& source)
{
    const auto li = static_cast<std::size_t>(l);
    auto& layer = model_.layers[li];
    auto& msg = msgs_[li];
    auto& timer = meter_.timer;
    const char* phase = training ? "compute" : "eval";
    const int mw = layer.msg_width();
    {
        phase_timer::scope s(timer, phase);
        msg.resize(local_, mw);
        const node_features& x = *inputs_[li];
        if (layer.message_is_input() && !x.is_sparse()) {
            msg.topRows(own_) = x.dense();
        } else {
            // A temporary, not a member: at products scale it would otherwise stay allocated
            // through the backward pass (small ones come back from the heap; see mallopt).
            matrix_f own_msgs;
            x.visit([&](const auto& xv) { layer.message(xv, cache_[li], own_msgs); });
            msg.topRows(own_) = own_msgs;
        }
    }
    const auto& plan = training || !ctx_.inductive ? *model_.plan : *model_.eval_plan;
    float* halo_rows = msg.data() + static_cast<std::ptrdiff_t>(own_) * mw;
    bool aggregated = false;
    if (cached_halo_inputs(l)) {
        set_cached_halo_rows(source, training, epoch, exchange_purpose, msg);
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
    auto& out = l + 1 < L_ ? hidden_output(l) : out_[li];
    inputs_[li]->visit([&](const auto& x) { layer.combine(plan, msg, x, cache_[li], out, aggregated); });
    // Freed, and allocated again next pass, rather than held through the backward pass: e.g.
    // the first layer's input rows, halo rows included (958 MB per rank at products scale).
    if (!keeps_messages(l)) release(msg);
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
        ctx_.halo->release_buffers(); // sized for these rows, wider than later layers' messages
    }
    phase_timer::scope s(meter_.timer, training ? "compute" : "eval");
    float* halo_rows = msg.data() + static_cast<std::ptrdiff_t>(own_) * msg.cols();
    const double p_drop = training ? o_.dropout : 0.0; // p = 0 copies
    dropout_forward(raw.data(), ctx_.part.halo_global, static_cast<int>(raw.cols()), p_drop, key(0, epoch), halo_rows);
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
        // The messages' storage becomes their gradients' when nothing reads the messages.
        const bool lend = need_msg && !o_.deterministic && !layer.backward_reads_messages();
        if (lend) c.d_msg = std::move(msgs_[li]);
        {
            phase_timer::scope s(timer, "compute");
            inputs_[li]->visit(
                [&](const auto& x) { layer.combine_backward(plan, msgs_[li], x, c, d, need_msg, mode_); });
        }
        if (!need_msg) continue;
        release(d); // read by combine_backward only
        {
            phase_timer::scope s(timer, "exchange");
            const int w = layer.msg_width();
            const auto off = static_cast<std::ptrdiff_t>(own_) * w;
            if (o_.deterministic)
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
        if (lend) msgs_[li] = std::move(c.d_msg);
        if (need_in) {
            layer.add_self_gradient(plan, c, dx);
            dropout_backward(dx.data(), ids_, layer.in(), o_.dropout, key(l, epoch), dx.data());
            // ReLU: hidden_output holds relu(pre) dropped out, positive exactly where pre is
            // and the element was kept (dx is 0 where it was dropped): the same derivative.
            const auto& pre = hidden_output(l - 1);
            activation_backward(model_.act, pre.data(), dx.data(), static_cast<std::size_t>(dx.size()), dx.data(), 1.0);
            d = std::move(dx);
        }
    }
    phase_timer::scope s(timer, "compute");
    release(d); // the first layer's input gradient, if any, at products scale hundreds of MB
}

accuracies standard_run::evaluate(int epoch)
{
    const matrix_f& logits = forward(false, epoch, purpose::halo_eval);
    phase_timer::scope s(meter_.timer, "eval");
    return reduce_accuracies(ctx_, logits);
}

run_result standard_run::train(const progress_fn& progress)
{
    const auto& comm = ctx_.comm;
    const int C = ctx_.part.global.num_classes;
    run_result result;
    result.mode = bns() ? "bns" : "standard";
    result.model = name_of(o_.model);
    result.first_layer_input = ctx_.part.features.is_sparse() ? "sparse"
                               : sparse_dropout_              ? "dense, dropped out as sparse rows"
                                                              : "dense";
    result.ranks = comm.size();
    result.seed = o_.seed;
    double best_valid = -1;
    std::vector<matrix_f> best_params = snapshot(params_);
    const int loss_k = o_.deterministic ? loss_exponent(ctx_.global_train) : -1;

    for (int epoch = 1; epoch <= o_.epochs; ++epoch) {
        const matrix_f& logits = forward(true, epoch, purpose::halo_forward);
        matrix_f d;
        loss_result local_loss;
        {
            phase_timer::scope s(meter_.timer, "compute");
            d = matrix_f::Zero(own_, C);
            comm.checked([&] {
                local_loss = softmax_cross_entropy(logits.data(), C, ctx_.part.labels, ctx_.train_rows,
                                                   1.0F / static_cast<float>(ctx_.global_train), d.data(), loss_k);
            });
        }
        backward(std::move(d), epoch);
        {
            phase_timer::scope s(meter_.timer, "sync");
            allreduce_gradients(comm, params_, o_.deterministic);
        }
        {
            phase_timer::scope s(meter_.timer, "compute");
            opt_.step();
        }
        epoch_record rec;
        rec.epoch = epoch;
        {
            phase_timer::scope s(meter_.timer, "sync");
            rec.loss = reduce_loss(comm, local_loss, ctx_.global_train, loss_k);
        }
        if (epoch % o_.eval_every == 0 || epoch == o_.epochs) {
            rec.acc = evaluate(epoch);
            if (rec.acc.valid > best_valid) {
                phase_timer::scope s(meter_.timer, "eval");
                best_valid = rec.acc.valid;
                best_params = snapshot(params_);
            }
        }
        meter_.record(rec, result, progress);
    }
    restore(params_, best_params);
    result.final_acc = evaluate(o_.epochs + 1);
    {
        phase_timer::scope s(meter_.timer, "output");
        result.parameters = named_values(params_);
        result.logits = out_[static_cast<std::size_t>(L_ - 1)];
        result.embedding = L_ >= 2 ? acts_[static_cast<std::size_t>(L_ - 2)].dense() : result.logits;
    }
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

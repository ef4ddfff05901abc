#include <retexo/kernels/dense.hpp>
#include <retexo/kernels/loss.hpp>
#include <retexo/train/standard.hpp>

#include <cmath>
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

/// Fixed-point exponent for summing per-node losses (each below 2^10).
int loss_exponent(std::int64_t rows)
{
    return exact::scale_exponent(static_cast<double>(rows) * 1024.0);
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
        for (int l = 0; l < o.layers; ++l) {
            const int in = l == 0 ? F : o.hidden;
            const bool last = l == o.layers - 1;
            const int out = last ? C : o.hidden;
            nn::layer_options lo;
            lo.heads = o.heads;
            lo.concat = !last; // GAT: hidden layers concatenate heads, the output layer averages them
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

} // namespace

run_result train_standard(const rank_context& ctx, const standard_options& o, const progress_fn& progress)
{
    o.validate();
    const auto& comm = ctx.comm;
    const auto& part = ctx.part;
    const byte_ledger start_ledger = comm.ledger();
    const auto t_start = std::chrono::steady_clock::now();
    phase_timer timer;
    const node_t own = part.num_owned();
    const node_t local = part.num_local();
    const int L = o.layers;
    const int C = part.global.num_classes;

    standard_model model(ctx, o);
    auto params = model.parameters();
    broadcast_parameters(comm, params);
    optimizer<float> opt(o.optimizer, params);
    const auto mode = ctx.reduce(o.exact);

    // Per layer, kept across epochs (no reallocation): the owned rows' dropped-out inputs,
    // the owned rows' messages, every local row's messages, outputs and activations.
    std::vector<matrix_f> xs(static_cast<std::size_t>(L)), own_msgs(static_cast<std::size_t>(L)),
        msgs(static_cast<std::size_t>(L)), out(static_cast<std::size_t>(L)), acts(static_cast<std::size_t>(L));
    std::vector<const matrix_f*> inputs(static_cast<std::size_t>(L));
    std::vector<nn::layer_cache<float>> cache(static_cast<std::size_t>(L));
    const std::span<const node_t> ids(part.owned_global);

    // Forward over all owned rows: messages of owned rows, halo exchange, combine.
    // BNS: the boundary nodes kept at (epoch, layer), decided from global ids on every rank.
    const bool bns = o.bns_p < 1.0;
    auto keep = [&](int epoch, int layer) {
        const counter_rng rng(o.seed, rng_stream::sampling + static_cast<std::uint64_t>(epoch) * 1000003ULL +
                                          static_cast<std::uint64_t>(layer));
        const float p = static_cast<float>(o.bns_p);
        return [rng, p](node_t g) { return rng.uniform(static_cast<std::uint64_t>(g)) < p; };
    };
    matrix_f train_features; // inductive: features with the evaluation nodes' rows hidden
    if (ctx.inductive) {
        train_features = part.features;
        ctx.hide_evaluation_rows(train_features);
    }
    auto forward = [&](bool training, int epoch, purpose exchange_purpose) -> const matrix_f& {
        const matrix_f* h = training && ctx.inductive ? &train_features : &part.features;
        for (int l = 0; l < L; ++l) {
            const auto li = static_cast<std::size_t>(l);
            auto& layer = model.layers[li];
            auto& msg = msgs[li];
            const int mw = layer.msg_width();
            {
                phase_timer::scope s(timer, training ? "compute" : "eval");
                if (training && o.dropout > 0) {
                    xs[li].resize(own, layer.in());
                    dropout_forward(
                        h->data(), ids, layer.in(), o.dropout,
                        dropout_key{o.seed, static_cast<std::uint64_t>(l), static_cast<std::uint64_t>(epoch)},
                        xs[li].data());
                    inputs[li] = &xs[li];
                } else {
                    inputs[li] = h;
                }
                layer.message(*inputs[li], cache[li], own_msgs[li]);
                msg.resize(local, mw);
                msg.topRows(own) = own_msgs[li];
            }
            const auto& plan = training || !ctx.inductive ? *model.plan : *model.eval_plan;
            bool interior_done = false;
            {
                float* halo_rows = msg.data() + static_cast<std::ptrdiff_t>(own) * mw;
                if (training && bns) {
                    phase_timer::scope s(timer, "exchange");
                    ctx.halo->forward_sampled(msg.data(), halo_rows, mw, keep(epoch, l),
                                              1.0F / static_cast<float>(o.bns_p), exchange_purpose);
                } else {
                    // While the halo rows travel, aggregate the rows whose neighbours are
                    // all owned (gcn, sage), letting MPI progress between chunks.
                    pending_exchange pending = [&] {
                        phase_timer::scope s(timer, "exchange");
                        return ctx.halo->start_forward(msg.data(), halo_rows, mw, exchange_purpose);
                    }();
                    if (o.overlap) {
                        phase_timer::scope s(timer, training ? "compute" : "eval");
                        interior_done = layer.combine_interior(plan, msg, cache[li], [&] { pending.test(); });
                    }
                    phase_timer::scope s(timer, "exchange");
                    pending.wait();
                }
            }
            phase_timer::scope s(timer, training ? "compute" : "eval");
            layer.combine(plan, msg, *inputs[li], cache[li], out[li], interior_done);
            if (l + 1 < L) {
                const auto& y = out[li];
                acts[li].resize(y.rows(), y.cols());
                activation_forward(model.act, y.data(), static_cast<std::size_t>(y.size()), acts[li].data(), 1.0);
                h = &acts[li];
            }
        }
        return out[static_cast<std::size_t>(L - 1)];
    };

    run_result result;
    result.mode = bns ? "bns" : "standard";
    result.model = nn::to_string(o.model);
    result.ranks = comm.size();
    result.seed = o.seed;
    double best_valid = -1;
    std::vector<matrix_f> best_params = snapshot(params);
    const int loss_k = o.exact ? loss_exponent(ctx.global_train) : -1;

    for (int epoch = 1; epoch <= o.epochs; ++epoch) {
        const matrix_f& logits = forward(true, epoch, purpose::halo_forward);
        matrix_f d = matrix_f::Zero(own, C);
        loss_result local_loss;
        comm.checked([&] {
            local_loss = softmax_cross_entropy(logits.data(), C, part.labels, ctx.train_rows,
                                               1.0F / static_cast<float>(ctx.global_train), d.data(), loss_k);
        });
        for (int l = L - 1; l >= 0; --l) {
            const auto li = static_cast<std::size_t>(l);
            auto& layer = model.layers[li];
            auto& c = cache[li];
            const auto& plan = *model.plan;
            const bool need_in = l > 0;
            const bool need_msg = need_in || layer.has_message_params();
            {
                phase_timer::scope s(timer, "compute");
                layer.combine_backward(plan, msgs[li], *inputs[li], c, d, need_msg, mode);
            }
            if (!need_msg) continue;
            {
                phase_timer::scope s(timer, "exchange");
                const int w = layer.msg_width();
                const auto off = static_cast<std::ptrdiff_t>(own) * w;
                if (o.exact)
                    ctx.halo->reverse_add(c.d_msg_exact.data() + off, c.d_msg_exact.data(), w);
                else if (bns)
                    ctx.halo->reverse_add_sampled(c.d_msg.data() + off, c.d_msg.data(), w, keep(epoch, l),
                                                  1.0F / static_cast<float>(o.bns_p));
                else
                    ctx.halo->reverse_add(c.d_msg.data() + off, c.d_msg.data(), w);
            }
            phase_timer::scope s(timer, "compute");
            matrix_f dx;
            layer.message_backward(*inputs[li], msgs[li], c, need_in ? &dx : nullptr, mode);
            if (need_in) {
                layer.add_self_gradient(plan, c, dx);
                dropout_backward(dx.data(), ids, layer.in(), o.dropout,
                                 dropout_key{o.seed, static_cast<std::uint64_t>(l), static_cast<std::uint64_t>(epoch)},
                                 dx.data());
                const auto& pre = out[static_cast<std::size_t>(l - 1)];
                d.resize(dx.rows(), dx.cols());
                activation_backward(model.act, pre.data(), dx.data(), static_cast<std::size_t>(dx.size()), d.data(),
                                    1.0);
            }
        }
        {
            phase_timer::scope s(timer, "sync");
            allreduce_gradients(comm, params, o.exact);
        }
        {
            phase_timer::scope s(timer, "compute");
            opt.step();
        }
        epoch_record rec;
        rec.epoch = epoch;
        rec.loss = reduce_loss(comm, local_loss, ctx.global_train, loss_k);
        if (epoch % o.eval_every == 0 || epoch == o.epochs) {
            const matrix_f& eval_logits = forward(false, epoch, purpose::halo_eval);
            rec.acc = reduce_accuracies(ctx, eval_logits);
            if (rec.acc.valid > best_valid) {
                best_valid = rec.acc.valid;
                best_params = snapshot(params);
            }
        }
        rec.bytes = comm.sum(comm.ledger() - start_ledger + ctx.setup_bytes).total_sent();
        rec.calls = (comm.ledger() - start_ledger).total_calls();
        rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
        result.history.push_back(rec);
        if (progress) progress(rec);
    }
    restore(params, best_params);
    result.final_acc = reduce_accuracies(ctx, forward(false, o.epochs + 1, purpose::halo_eval));
    result.parameters = named_values(params);
    result.logits = out[static_cast<std::size_t>(L - 1)];
    result.embedding = L >= 2 ? acts[static_cast<std::size_t>(L - 2)] : result.logits;
    result.seconds = timer.seconds();
    result.seconds["total"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    finish_bytes(ctx, start_ledger, result);
    return result;
}

} // namespace retexo::train

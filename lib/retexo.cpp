#include <retexo/kernels/dense.hpp>
#include <retexo/kernels/loss.hpp>
#include <retexo/train/retexo.hpp>

#include <cmath>
#include <optional>

namespace retexo::train {

retexo_variant parse_variant(const std::string& name)
{
    if (name == "hidden") return retexo_variant::hidden;
    if (name == "logits") return retexo_variant::logits;
    RETEXO_THROW("--variant: unknown variant '" << name << "' (expected hidden or logits)");
}

std::string to_string(retexo_variant v) { return v == retexo_variant::hidden ? "hidden" : "logits"; }

void retexo_options::validate() const
{
    RETEXO_ENSURE(!stages.empty(), "--stages must be at least 1");
    for (std::size_t k = 0; k < stages.size(); ++k) {
        const auto& s = stages[k];
        RETEXO_ENSURE(s.rounds >= 1, "--rounds: stage " << k << " needs at least 1 round, got " << s.rounds);
        RETEXO_ENSURE(s.hidden >= 1, "--hidden: stage " << k << " width must be positive, got " << s.hidden);
        RETEXO_ENSURE(s.dropout >= 0 && s.dropout < 1, "--dropout: stage " << k << " rate must be in [0, 1), got " << s.dropout);
        RETEXO_ENSURE(s.lr > 0, "--lr: stage " << k << " must be positive, got " << s.lr);
        RETEXO_ENSURE(model != nn::layer_kind::gat || s.hidden % heads == 0,
                      "--hidden " << s.hidden << " must be divisible by --heads " << heads << " for GAT");
    }
    RETEXO_ENSURE(batch_size >= 0, "--batch-size must be >= 0, got " << batch_size);
    RETEXO_ENSURE(patience >= 0, "--patience must be >= 0, got " << patience);
}

namespace {

int loss_exponent(std::int64_t rows) { return exact::scale_exponent(static_cast<double>(rows) * 1024.0); }

/// One stage's model: transform (dense over precomputed aggregates, or a graph layer),
/// then LayerNorm, ReLU and a head, unless this is the hidden variant's last stage.
struct stage_model {
    bool graph = false;  // SAGE-pool / GAT: aggregation trained every round
    bool has_head = true;
    std::optional<nn::dense_layer<float>> dense;
    std::optional<nn::gnn_layer<float>> layer;
    std::optional<nn::layer_norm<float>> ln;
    std::optional<nn::dense_layer<float>> head;

    std::vector<parameter<float>*> parameters()
    {
        std::vector<parameter<float>*> ps;
        if (dense) ps = {&dense->w, &dense->b};
        if (layer) ps = layer->parameters();
        if (ln) {
            ps.push_back(&ln->gamma);
            ps.push_back(&ln->beta);
        }
        if (head) {
            ps.push_back(&head->w);
            ps.push_back(&head->b);
        }
        return ps;
    }
};

/// Activations of one forward pass over a set of rows.
struct stage_pass {
    std::vector<node_t> rows;
    std::vector<node_t> ids;         // global ids of rows (dropout keys)
    matrix_f x_rows, x_all, msg, t, u, h, hd, logits;
    nn::layer_cache<float> cache;
    const nn::layer_plan* plan = nullptr;
};

}  // namespace

run_result train_retexo(const rank_context& ctx, const retexo_options& o, const progress_fn& progress)
{
    o.validate();
    const auto& comm = ctx.comm;
    const auto& part = ctx.part;
    const byte_ledger start_ledger = comm.ledger();
    const auto t_start = std::chrono::steady_clock::now();
    phase_timer timer;
    const node_t own = part.num_owned();
    const node_t local = part.num_local();
    const int C = part.global.num_classes;
    const auto K = static_cast<int>(o.stages.size());
    const auto mode = ctx.reduce(o.exact);
    const bool logits_variant = o.variant == retexo_variant::logits;
    const int loss_k = o.exact ? loss_exponent(ctx.global_train) : -1;

    // Global ids of every local row (dropout keys, batch assignment).
    std::vector<node_t> local_ids(part.owned_global);
    local_ids.insert(local_ids.end(), part.halo_global.begin(), part.halo_global.end());
    auto ids_of = [&](const std::vector<node_t>& rows) {
        std::vector<node_t> ids(rows.size());
        for (std::size_t i = 0; i < rows.size(); ++i) ids[i] = local_ids[rows[i]];
        return ids;
    };

    run_result result;
    result.mode = "retexo";
    result.model = nn::to_string(o.model);
    result.variant = to_string(o.variant);
    result.ranks = comm.size();
    result.seed = o.seed;

    matrix_f h_own = part.features;  // this stage's inputs, owned rows (whole graph)
    matrix_f h_train_own;            // inductive: the same computed on the training graph
    if (ctx.inductive) {
        h_train_own = part.features;
        ctx.hide_evaluation_rows(h_train_own);
    }
    std::int64_t step = 0;
    for (int k = 0; k < K; ++k) {
        const auto& so = o.stages[static_cast<std::size_t>(k)];
        const byte_ledger stage_start = comm.ledger();
        const auto stage_t0 = std::chrono::steady_clock::now();
        const bool last = k == K - 1;
        const bool mlp_only = logits_variant && k == 0;  // raw features never cross a partition
        const int F = static_cast<int>(h_own.cols());

        // 1. The stage's one exchange: halo rows of h_k (inductive: also of the training
        //    graph's h_k, as training must not see evaluation nodes).
        auto exchange = [&](const matrix_f& h) {
            matrix_f x(local, F);
            x.topRows(own) = h;
            if (mlp_only) return x;
            phase_timer::scope s(timer, "exchange");
            float* halo_rows = x.data() + static_cast<std::ptrdiff_t>(own) * F;
            if (o.bf16_exchange) {
                std::vector<bf16> buf(static_cast<std::size_t>(part.num_halo()) * F);
                ctx.halo->forward(h.data(), buf.data(), F);
                for (std::size_t i = 0; i < buf.size(); ++i) halo_rows[i] = load(buf[i]);
            } else {
                ctx.halo->forward(h.data(), halo_rows, F);
            }
            return x;
        };
        const matrix_f x_all = exchange(h_own);
        const matrix_f x_all_train = [&] {
            if (!ctx.inductive) return matrix_f();
            matrix_f x = exchange(h_train_own);
            ctx.hide_evaluation_rows(x);
            return x;
        }();

        // 2. The stage model.
        stage_model m;
        m.graph = !mlp_only && (o.model == nn::layer_kind::sage_pool || o.model == nn::layer_kind::gat);
        m.has_head = !(last && !logits_variant);
        const int t_out = m.has_head ? so.hidden : C;
        const auto init_index = static_cast<std::uint64_t>(1000 + 10 * k);
        matrix_f input, input_train;  // dense path: precomputed inputs of every owned row
        if (!m.graph) {
            phase_timer::scope s(timer, "aggregate");
            auto precompute = [&](const nn::local_graph& g, const matrix_f& x, const matrix_f& h) {
                if (mlp_only) return h;
                const bool gcn = o.model == nn::layer_kind::gcn;
                const aggregation agg(*g.in_edges, local,
                                      aggregation_options{.kind = gcn ? aggregator::gcn : aggregator::mean, .in_degree = g.in_degree});
                matrix_f a;
                agg.forward(x, a);
                if (gcn && !logits_variant) return a;
                matrix_f cat(own, 2 * F);  // the node's own input next to its neighbours' aggregate
                cat.leftCols(F) = h;
                cat.rightCols(F) = a;
                return cat;
            };
            input = precompute(ctx.graph, x_all, h_own);
            if (ctx.inductive) input_train = precompute(ctx.train_graph, x_all_train, h_train_own);
            m.dense.emplace(static_cast<int>(input.cols()), t_out, o.seed, init_index, "stage" + std::to_string(k) + ".transform");
        } else {
            nn::layer_options lo;
            lo.heads = o.heads;
            lo.concat = m.has_head;
            m.layer.emplace(o.model, F, t_out, lo, o.seed, init_index, "stage" + std::to_string(k) + ".transform");
        }
        if (m.has_head) {
            m.ln.emplace(so.hidden, "stage" + std::to_string(k) + ".norm");
            m.head.emplace(so.hidden, C, o.seed, init_index + 1, "stage" + std::to_string(k) + ".head");
        }
        auto params = m.parameters();
        broadcast_parameters(comm, params);
        optimizer<float> opt({.kind = so.optimizer, .lr = so.lr, .weight_decay = so.weight_decay}, params);

        // Plans of the graph path, per row set (training rows over the graph training sees).
        std::vector<node_t> eval_rows = ctx.valid_rows;  // every round: validation (and test) rows
        if (o.track_test) eval_rows.insert(eval_rows.end(), ctx.test_rows.begin(), ctx.test_rows.end());
        std::optional<nn::layer_plan> plan_train, plan_valid, plan_own, plan_own_train;
        if (m.graph) {
            plan_train = m.layer->make_plan(ctx.train_graph, ctx.train_rows);
            plan_valid = m.layer->make_plan(ctx.graph, eval_rows);
            plan_own = m.layer->make_plan(ctx.graph, ctx.owned_rows);
            if (ctx.inductive) plan_own_train = m.layer->make_plan(ctx.train_graph, ctx.owned_rows);
        }
        // What a pass reads: the whole graph's inputs, or (inductive training) the training graph's.
        struct view {
            const matrix_f* input;
            const matrix_f* x_all;
        };
        const view full{&input, &x_all};
        const view train_view = ctx.inductive ? view{&input_train, &x_all_train} : full;

        const auto in_key = [&](std::int64_t st) {
            return dropout_key{o.seed, static_cast<std::uint64_t>(2 * k), static_cast<std::uint64_t>(st)};
        };
        const auto hid_key = [&](std::int64_t st) {
            return dropout_key{o.seed, static_cast<std::uint64_t>(2 * k + 1), static_cast<std::uint64_t>(st)};
        };

        // Forward over p.rows (set by the caller) reading v; dropout when training.
        auto forward = [&](stage_pass& p, const view& v, bool training, std::int64_t st) {
            p.ids = ids_of(p.rows);
            const double pin = training ? so.dropout : 0.0;
            if (!m.graph) {
                const auto w = static_cast<int>(v.input->cols());
                p.x_rows.resize(static_cast<Eigen::Index>(p.rows.size()), w);
                gather_rows(v.input->data(), p.rows, w, p.x_rows.data());
                dropout_forward(p.x_rows.data(), p.ids, w, pin, in_key(st), p.x_rows.data());
                m.dense->forward(p.x_rows, p.t);
            } else {
                p.x_all.resize(local, F);
                dropout_forward(v.x_all->data(), local_ids, F, pin, in_key(st), p.x_all.data());
                m.layer->message(p.x_all, p.cache, p.msg);
                p.x_rows.resize(static_cast<Eigen::Index>(p.rows.size()), F);
                gather_rows(p.x_all.data(), p.rows, F, p.x_rows.data());
                m.layer->combine(*p.plan, p.msg, p.x_rows, p.cache, p.t);
            }
            if (!m.has_head) {
                p.logits = p.t;
                return;
            }
            m.ln->forward(p.t, p.u);
            p.h.resize(p.u.rows(), p.u.cols());
            activation_forward(activation::relu, p.u.data(), static_cast<std::size_t>(p.u.size()), p.h.data());
            p.hd.resize(p.h.rows(), p.h.cols());
            dropout_forward(p.h.data(), p.ids, so.hidden, training ? so.dropout : 0.0, hid_key(st), p.hd.data());
            m.head->forward(p.hd, p.logits);
        };

        auto backward = [&](stage_pass& p, const matrix_f& d_logits, std::int64_t st) {
            matrix_f d_t;
            if (m.has_head) {
                matrix_f d_hd, d_u;
                m.head->backward(p.hd, d_logits, &d_hd, mode);
                dropout_backward(d_hd.data(), p.ids, so.hidden, so.dropout, hid_key(st), d_hd.data());
                activation_backward(activation::relu, p.u.data(), d_hd.data(), static_cast<std::size_t>(d_hd.size()), d_hd.data());
                m.ln->backward(p.t, d_hd, d_t, mode);
            } else {
                d_t = d_logits;
            }
            if (!m.graph) {
                m.dense->backward(p.x_rows, d_t, nullptr, mode);
                return;
            }
            m.layer->combine_backward(*p.plan, p.msg, p.x_rows, p.cache, d_t, true, mode);
            if (o.exact) {
                // Exact sums need each halo row's message gradient summed at its owner.
                const int w = m.layer->msg_width();
                {
                    phase_timer::scope s(timer, "exchange");
                    ctx.halo->reverse_add(p.cache.d_msg_exact.data() + static_cast<std::ptrdiff_t>(own) * w,
                                          p.cache.d_msg_exact.data(), w);
                }
                const matrix_f x_own = p.x_all.topRows(own);
                m.layer->message_backward(x_own, p.msg, p.cache, nullptr, mode);
            } else {
                // Halo rows' contributions stay local: the all-reduce sums them.
                m.layer->message_backward(p.x_all, p.msg, p.cache, nullptr, mode);
            }
        };

        // Mini-batches: batch of a training node = hash(global id, stage, round) mod batches,
        // the same on every partitioning.
        const int batches = o.batch_size > 0
                                ? static_cast<int>((ctx.global_train + o.batch_size - 1) / o.batch_size)
                                : 1;

        // 3. Rounds.
        double best_valid = -1;
        int best_round = 0;
        std::vector<matrix_f> best_params = snapshot(params);
        int rounds_done = 0;
        for (int round = 1; round <= so.rounds; ++round) {
            rounds_done = round;
            double round_loss = 0;
            std::vector<std::vector<node_t>> batch_rows(static_cast<std::size_t>(batches));
            if (batches == 1) {
                batch_rows[0] = ctx.train_rows;
            } else {
                const counter_rng rng(o.seed, rng_stream::shuffle + static_cast<std::uint64_t>(k) * 1000003ULL);
                for (node_t r : ctx.train_rows)
                    batch_rows[rng.below(static_cast<std::uint64_t>(local_ids[r]) * 100003ULL + static_cast<std::uint64_t>(round),
                                         static_cast<std::uint64_t>(batches))]
                        .push_back(r);
            }
            std::vector<std::int64_t> batch_counts(static_cast<std::size_t>(batches));
            for (int b = 0; b < batches; ++b) batch_counts[static_cast<std::size_t>(b)] = static_cast<std::int64_t>(batch_rows[static_cast<std::size_t>(b)].size());
            if (batches > 1) comm.allreduce(std::span<std::int64_t>(batch_counts), MPI_SUM, purpose::control);
            else batch_counts[0] = ctx.global_train;

            for (int b = 0; b < batches; ++b) {
                ++step;
                stage_pass p;
                p.rows = batch_rows[static_cast<std::size_t>(b)];
                std::optional<nn::layer_plan> batch_plan;
                if (m.graph) {
                    if (batches == 1) p.plan = &*plan_train;
                    else {
                        batch_plan = m.layer->make_plan(ctx.train_graph, p.rows);
                        p.plan = &*batch_plan;
                    }
                }
                loss_result lr;
                {
                    phase_timer::scope s(timer, "compute");
                    forward(p, train_view, true, step);
                    matrix_f d_logits = matrix_f::Zero(p.logits.rows(), C);
                    std::vector<node_t> seq(p.rows.size());
                    std::vector<std::int32_t> labels(p.rows.size());
                    for (std::size_t i = 0; i < seq.size(); ++i) {
                        seq[i] = static_cast<node_t>(i);
                        labels[i] = part.labels[p.rows[i]];
                    }
                    const auto n_global = std::max<std::int64_t>(1, batch_counts[static_cast<std::size_t>(b)]);
                    comm.checked([&] {
                        lr = softmax_cross_entropy(p.logits.data(), C, labels, seq, 1.0F / static_cast<float>(n_global),
                                                   d_logits.data(), loss_k);
                    });
                    backward(p, d_logits, step);
                }
                {
                    phase_timer::scope s(timer, "sync");
                    allreduce_gradients(comm, params, o.exact);
                }
                {
                    phase_timer::scope s(timer, "compute");
                    opt.step();
                }
                round_loss += reduce_loss(comm, lr, std::max<std::int64_t>(1, batch_counts[static_cast<std::size_t>(b)]), loss_k) *
                              static_cast<double>(batch_counts[static_cast<std::size_t>(b)]) / static_cast<double>(ctx.global_train);
            }

            // Validation accuracy every round (no traffic but the counts).
            epoch_record rec;
            rec.stage = k;
            rec.epoch = round;
            rec.loss = round_loss;
            {
                phase_timer::scope s(timer, "eval");
                stage_pass p;
                p.rows = eval_rows;
                if (m.graph) p.plan = &*plan_valid;
                forward(p, full, false, 0);
                std::vector<node_t> seq_valid, seq_test;
                std::vector<std::int32_t> labels(p.rows.size());
                for (std::size_t i = 0; i < p.rows.size(); ++i) {
                    (i < ctx.valid_rows.size() ? seq_valid : seq_test).push_back(static_cast<node_t>(i));
                    labels[i] = part.labels[p.rows[i]];
                }
                std::int64_t correct[2] = {count_correct(p.logits.data(), C, labels, seq_valid),
                                           count_correct(p.logits.data(), C, labels, seq_test)};
                comm.allreduce(std::span<std::int64_t>(correct, o.track_test ? 2 : 1), MPI_SUM, purpose::metrics);
                auto ratio = [](std::int64_t a, std::int64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0; };
                rec.acc.valid = ratio(correct[0], ctx.global_valid);
                if (o.track_test) rec.acc.test = ratio(correct[1], ctx.global_test);
            }
            if (rec.acc.valid > best_valid) {
                best_valid = rec.acc.valid;
                best_round = round;
                best_params = snapshot(params);
            }
            rec.bytes = comm.sum(comm.ledger() - start_ledger + ctx.setup_bytes).total_sent();
            rec.calls = (comm.ledger() - start_ledger).total_calls();
            rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
            result.history.push_back(rec);
            if (progress) progress(rec);
            if (o.patience > 0 && round - best_round >= o.patience) break;
        }

        // 4. Best parameters, every owned row's embedding (and logits), stage accuracies.
        restore(params, best_params);
        stage_pass p;
        p.rows = ctx.owned_rows;
        if (m.graph) p.plan = &*plan_own;
        stage_pass pt;  // inductive: the next stage's training inputs, from the training graph
        {
            phase_timer::scope s(timer, "eval");
            forward(p, full, false, 0);
            if (ctx.inductive && !last) {
                pt.rows = ctx.owned_rows;
                if (m.graph) pt.plan = &*plan_own_train;
                forward(pt, train_view, false, 0);
            }
        }
        stage_record sr;
        sr.stage = k;
        sr.rounds = rounds_done;
        sr.best_round = best_round;
        sr.best = reduce_accuracies(ctx, p.logits);
        sr.bytes = comm.sum(comm.ledger() - stage_start);
        sr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stage_t0).count();
        result.stages.push_back(sr);
        for (auto& t : named_values(params)) result.parameters.push_back(std::move(t));
        if (last) {
            result.final_acc = sr.best;
            result.logits = p.logits;
            result.embedding = m.has_head ? p.h : h_own;
        } else {
            h_own = logits_variant ? p.logits : p.h;
            if (ctx.inductive) {
                h_train_own = logits_variant ? pt.logits : pt.h;
                ctx.hide_evaluation_rows(h_train_own);
            }
        }
    }
    result.seconds = timer.seconds();
    result.seconds["total"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    finish_bytes(ctx, start_ledger, result);
    return result;
}

}  // namespace retexo::train

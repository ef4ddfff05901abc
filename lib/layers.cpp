#include <retexo/kernels/dense.hpp>
#include <retexo/nn/layers.hpp>

#include <algorithm>
#include <cmath>

namespace retexo::nn {

layer_kind parse_layer_kind(const std::string& name)
{
    if (name == "gcn") return layer_kind::gcn;
    if (name == "sage" || name == "sage-mean") return layer_kind::sage_mean;
    if (name == "sage-pool") return layer_kind::sage_pool;
    if (name == "gat") return layer_kind::gat;
    RETEXO_THROW("--model: unknown model '" << name << "' (expected gcn, sage, sage-pool or gat)");
}

std::string to_string(layer_kind k)
{
    switch (k) {
    case layer_kind::gcn: return "gcn";
    case layer_kind::sage_mean: return "sage";
    case layer_kind::sage_pool: return "sage-pool";
    case layer_kind::gat: return "gat";
    }
    return "?";
}

local_graph make_local_graph(const local_partition& lp, std::vector<offset_t>& degree)
{
    degree.resize(static_cast<std::size_t>(lp.num_local()));
    for (node_t v = 0; v < lp.num_owned(); ++v) degree[v] = lp.in_edges.degree(v);
    for (node_t h = 0; h < lp.num_halo(); ++h) degree[lp.num_owned() + h] = lp.halo_in_degree[h];
    return {&lp.in_edges, lp.num_owned(), lp.num_local(), degree};
}

namespace {

template <typename T>
T max_abs_of(const matrix<T>& m)
{
    return m.size() == 0 ? T(0) : m.cwiseAbs().maxCoeff();
}

/// Rows [0, n) of an exact message buffer (width w) as reals.
template <typename T>
void exact_rows_to_real(const std::vector<std::int64_t>& acc, node_t n, int w, int k, matrix<T>& out)
{
    out.resize(n, w);
    exact::to_real(acc.data(), static_cast<std::size_t>(n) * w, k, out.data());
}

/// Message gradients of rows [0, n) as reals, whatever the mode.
template <typename T>
matrix<T> message_rows(const layer_cache<T>& c, node_t n, int w, bool exact_mode)
{
    matrix<T> m;
    if (exact_mode) exact_rows_to_real(c.d_msg_exact, n, w, c.msg_k, m);
    else m = c.d_msg.topRows(n);
    return m;
}

template <typename T>
void init_glorot(parameter<T>& p, int fan_in, int fan_out, std::uint64_t seed, std::uint64_t index)
{
    xavier_uniform(p.value, fan_in, fan_out, counter_rng(seed, rng_stream::init * 100000 + index));
}

}  // namespace

template <typename T>
gnn_layer<T>::gnn_layer(layer_kind kind, int in, int out, const layer_options& o, std::uint64_t seed,
                        std::uint64_t index)
    : kind_(kind), in_(in), out_(out), opt_(o)
{
    RETEXO_ENSURE(in > 0 && out > 0, "retexo::gnn_layer: widths must be positive, got " << in << " -> " << out);
    const std::string tag = "layer" + std::to_string(index) + ".";
    const std::uint64_t base = index * 16;
    switch (kind) {
    case layer_kind::gcn:
        w_ = parameter<T>(tag + "weight", in, out);
        init_glorot(w_, in, out, seed, base);
        lin_.emplace(in, out);
        break;
    case layer_kind::sage_mean:
        w_ = parameter<T>(tag + "weight", 2 * in, out);  // [self; neighbours]
        init_glorot(w_, in, out, seed, base);
        lin_.emplace(2 * in, out);
        break;
    case layer_kind::sage_pool:
        pool_ = o.pool_width > 0 ? o.pool_width : in;
        w_pool_ = parameter<T>(tag + "pool_weight", in, pool_);
        b_pool_ = parameter<T>(tag + "pool_bias", 1, pool_);
        init_glorot(w_pool_, in, pool_, seed, base + 1);
        lin_pool_.emplace(in, pool_);
        w_ = parameter<T>(tag + "weight", in + pool_, out);
        init_glorot(w_, in, out, seed, base);
        lin_.emplace(in + pool_, out);
        break;
    case layer_kind::gat:
        RETEXO_ENSURE(o.heads >= 1, "--heads must be positive, got " << o.heads);
        heads_ = o.heads;
        if (o.concat) {
            RETEXO_ENSURE(out % heads_ == 0, "GAT: width " << out << " is not divisible by " << heads_ << " heads");
            head_dim_ = out / heads_;
        } else {
            head_dim_ = out;
        }
        w_ = parameter<T>(tag + "weight", in, heads_ * head_dim_);
        init_glorot(w_, in, heads_ * head_dim_, seed, base);
        lin_.emplace(in, heads_ * head_dim_);
        a_l_ = parameter<T>(tag + "attn_l", heads_, head_dim_);
        a_r_ = parameter<T>(tag + "attn_r", heads_, head_dim_);
        init_glorot(a_l_, head_dim_, 1, seed, base + 2);
        init_glorot(a_r_, head_dim_, 1, seed, base + 3);
        break;
    }
    b_ = parameter<T>(tag + "bias", 1, out);
}

template <typename T>
int gnn_layer<T>::msg_width() const noexcept
{
    switch (kind_) {
    case layer_kind::gcn:
    case layer_kind::sage_mean: return in_;
    case layer_kind::sage_pool: return pool_;
    case layer_kind::gat: return heads_ * head_dim_ + heads_;
    }
    return 0;
}

template <typename T>
std::vector<parameter<T>*> gnn_layer<T>::parameters()
{
    switch (kind_) {
    case layer_kind::gcn:
    case layer_kind::sage_mean: return {&w_, &b_};
    case layer_kind::sage_pool: return {&w_pool_, &b_pool_, &w_, &b_};
    case layer_kind::gat: return {&w_, &a_l_, &a_r_, &b_};
    }
    return {};
}

template <typename T>
layer_plan gnn_layer<T>::make_plan(const local_graph& g, std::span<const node_t> rows) const
{
    layer_plan p;
    p.rows.assign(rows.begin(), rows.end());
    p.num_owned = g.num_owned;
    p.num_local = g.num_local;
    switch (kind_) {
    case layer_kind::gcn:
        p.agg.emplace(*g.in_edges, g.num_local, aggregation_options{.kind = aggregator::gcn, .in_degree = g.in_degree, .rows = rows});
        break;
    case layer_kind::sage_mean:
        p.agg.emplace(*g.in_edges, g.num_local, aggregation_options{.kind = aggregator::mean, .rows = rows});
        break;
    case layer_kind::sage_pool:
        p.agg.emplace(*g.in_edges, g.num_local, aggregation_options{.kind = aggregator::max, .rows = rows});
        break;
    case layer_kind::gat:
        p.att.emplace(*g.in_edges, g.num_local,
                      gat_options{.heads = heads_, .negative_slope = opt_.negative_slope, .self_loops = true, .rows = rows});
        break;
    }
    return p;
}

template <typename T>
void gnn_layer<T>::forward(const layer_plan& plan, const matrix<T>& x_all, layer_cache<T>& c, matrix<T>& out) const
{
    RETEXO_ENSURE_DIMS("gnn_layer::forward", "input rows", x_all.rows(), Eigen::Index{plan.num_local});
    RETEXO_ENSURE_DIMS("gnn_layer::forward", "input width", x_all.cols(), Eigen::Index{in_});
    const auto n = static_cast<Eigen::Index>(plan.rows.size());
    switch (kind_) {
    case layer_kind::gcn:
        plan.agg->forward(x_all, c.agg);
        lin_->forward(c.agg, w_.value, b_.value, out);
        break;
    case layer_kind::sage_mean:
        plan.agg->forward(x_all, c.agg);
        c.cat.resize(n, 2 * in_);
        for (Eigen::Index i = 0; i < n; ++i) {
            c.cat.row(i).head(in_) = x_all.row(plan.rows[i]);
            c.cat.row(i).tail(in_) = c.agg.row(i);
        }
        lin_->forward(c.cat, w_.value, b_.value, out);
        break;
    case layer_kind::sage_pool:
        lin_pool_->forward(x_all, w_pool_.value, b_pool_.value, c.pre);
        c.p.resize(c.pre.rows(), c.pre.cols());
        activation_forward(activation::relu, c.pre.data(), static_cast<std::size_t>(c.pre.size()), c.p.data());
        plan.agg->forward(c.p, c.agg, &c.argmax);
        c.cat.resize(n, in_ + pool_);
        for (Eigen::Index i = 0; i < n; ++i) {
            c.cat.row(i).head(in_) = x_all.row(plan.rows[i]);
            c.cat.row(i).tail(pool_) = c.agg.row(i);
        }
        lin_->forward(c.cat, w_.value, b_.value, out);
        break;
    case layer_kind::gat: {
        const int H = heads_, D = head_dim_;
        lin_->forward(x_all, w_.value, matrix<T>(), c.pre);  // z
        const Eigen::Index L = x_all.rows();
        c.el.resize(L, H);
        c.er.resize(L, H);
#pragma omp parallel for schedule(static)
        for (Eigen::Index u = 0; u < L; ++u)
            for (int h = 0; h < H; ++h) {
                T sl = 0, sr = 0;
                for (int d = 0; d < D; ++d) {
                    sl += c.pre(u, h * D + d) * a_l_.value(h, d);
                    sr += c.pre(u, h * D + d) * a_r_.value(h, d);
                }
                c.el(u, h) = sl;
                c.er(u, h) = sr;
            }
        c.alpha.resize(plan.att->num_edges(), H);
        c.att.resize(n, H * D);
        plan.att->forward(c.pre.data(), c.el.data(), c.er.data(), D, c.att.data(), c.alpha.data());
        if (opt_.concat) {
            out = c.att;
            out.rowwise() += b_.value.row(0);
        } else {
            out.resize(n, D);
            for (Eigen::Index i = 0; i < n; ++i) {
                for (int d = 0; d < D; ++d) {
                    T s = 0;
                    for (int h = 0; h < H; ++h) s += c.att(i, h * D + d);
                    out(i, d) = s / static_cast<T>(H) + b_.value(0, d);
                }
            }
        }
        break;
    }
    }
}

template <typename T>
void gnn_layer<T>::backward_messages(const layer_plan& plan, const matrix<T>& x_all, layer_cache<T>& c,
                                     const matrix<T>& d_out, bool need_input_grad, const reduce_mode& mode)
{
    (void)x_all;
    const auto n = static_cast<Eigen::Index>(plan.rows.size());
    RETEXO_ENSURE_DIMS("gnn_layer::backward", "gradient rows", d_out.rows(), n);
    RETEXO_ENSURE_DIMS("gnn_layer::backward", "gradient width", d_out.cols(), Eigen::Index{out_});
    const bool exact_mode = mode.exact && std::is_same_v<T, float>;
    auto scatter_messages = [&](const matrix<T>& d_agg) {
        const int w = static_cast<int>(d_agg.cols());
        if (exact_mode) {
            c.msg_k = mode.scale_for({static_cast<double>(plan.agg->max_weight()), static_cast<double>(max_abs_of(d_agg))});
            c.d_msg_exact.assign(static_cast<std::size_t>(plan.num_local) * w, 0);
            if constexpr (std::is_same_v<T, float>)
                plan.agg->backward_exact(d_agg.data(), w, c.msg_k, c.d_msg_exact.data(),
                                         kind_ == layer_kind::sage_pool ? c.argmax.data() : nullptr);
        } else {
            plan.agg->backward(d_agg, c.d_msg, kind_ == layer_kind::sage_pool ? &c.argmax : nullptr);
        }
    };
    switch (kind_) {
    case layer_kind::gcn:
        weight_gradient(w_, *lin_, c.agg.data(), d_out.data(), n, mode);
        bias_gradient(b_, d_out.data(), n, mode);
        if (need_input_grad) {
            matrix<T> d_agg(n, in_);
            lin_->backward_data(d_out.data(), n, w_.value.data(), d_agg.data());
            scatter_messages(d_agg);
        }
        break;
    case layer_kind::sage_mean:
    case layer_kind::sage_pool: {
        weight_gradient(w_, *lin_, c.cat.data(), d_out.data(), n, mode);
        bias_gradient(b_, d_out.data(), n, mode);
        const int agg_w = kind_ == layer_kind::sage_mean ? in_ : pool_;
        if (!need_input_grad && kind_ == layer_kind::sage_mean) break;
        matrix<T> d_cat(n, in_ + agg_w);
        lin_->backward_data(d_out.data(), n, w_.value.data(), d_cat.data());
        c.d_self = d_cat.leftCols(in_);
        const matrix<T> d_agg = d_cat.rightCols(agg_w);
        scatter_messages(d_agg);
        break;
    }
    case layer_kind::gat: {
        const int H = heads_, D = head_dim_, HD = H * D;
        bias_gradient(b_, d_out.data(), n, mode);
        matrix<T> d_att(n, HD);
        if (opt_.concat) {
            d_att = d_out;
        } else {
            for (Eigen::Index i = 0; i < n; ++i)
                for (int h = 0; h < H; ++h)
                    for (int d = 0; d < D; ++d) d_att(i, h * D + d) = d_out(i, d) / static_cast<T>(H);
        }
        const Eigen::Index L = plan.num_local;
        c.d_er.resize(L, H);
        c.d_score.resize(plan.att->num_edges(), H);
        if (exact_mode) {
            if constexpr (std::is_same_v<T, float>) {
                const double zmax = max_abs_of(c.pre);
                c.msg_k = mode.scale_for({static_cast<double>(max_abs_of(d_att)), std::max(1.0, 2.0 * D * zmax)});
                std::vector<std::int64_t> acc_z(static_cast<std::size_t>(L) * HD, 0), acc_el(static_cast<std::size_t>(L) * H, 0);
                plan.att->backward_exact(c.pre.data(), c.el.data(), c.er.data(), c.alpha.data(), d_att.data(), D,
                                         c.msg_k, acc_z.data(), acc_el.data(), c.d_er.data(), c.d_score.data());
                c.d_msg_exact.resize(static_cast<std::size_t>(L) * (HD + H));
                for (Eigen::Index u = 0; u < L; ++u) {
                    std::copy_n(acc_z.data() + u * HD, HD, c.d_msg_exact.data() + u * (HD + H));
                    std::copy_n(acc_el.data() + u * H, H, c.d_msg_exact.data() + u * (HD + H) + HD);
                }
            }
        } else {
            matrix<T> d_z(L, HD), d_el(L, H);
            plan.att->backward(c.pre.data(), c.el.data(), c.er.data(), c.alpha.data(), d_att.data(), D, d_z.data(),
                               d_el.data(), c.d_er.data(), c.d_score.data());
            c.d_msg.resize(L, HD + H);
            c.d_msg.leftCols(HD) = d_z;
            c.d_msg.rightCols(H) = d_el;
        }
        break;
    }
    }
}

template <typename T>
void gnn_layer<T>::backward_finish(const layer_plan& plan, const matrix<T>& x_all, layer_cache<T>& c,
                                   node_t param_rows, matrix<T>* d_x, const reduce_mode& mode)
{
    const bool exact_mode = mode.exact && std::is_same_v<T, float>;
    const node_t own = plan.num_owned;
    auto add_self = [&](matrix<T>& dx) {
        for (std::size_t i = 0; i < plan.rows.size(); ++i) dx.row(plan.rows[i]) += c.d_self.row(static_cast<Eigen::Index>(i));
    };
    switch (kind_) {
    case layer_kind::gcn:
        if (d_x != nullptr) *d_x = message_rows(c, own, in_, exact_mode);
        break;
    case layer_kind::sage_mean:
        if (d_x != nullptr) {
            *d_x = message_rows(c, own, in_, exact_mode);
            add_self(*d_x);
        }
        break;
    case layer_kind::sage_pool: {
        matrix<T> d_pre = message_rows(c, param_rows, pool_, exact_mode);
        activation_backward(activation::relu, c.pre.data(), d_pre.data(), static_cast<std::size_t>(d_pre.size()), d_pre.data());
        weight_gradient(w_pool_, *lin_pool_, x_all.data(), d_pre.data(), param_rows, mode);
        bias_gradient(b_pool_, d_pre.data(), param_rows, mode);
        if (d_x != nullptr) {
            d_x->resize(own, in_);
            lin_pool_->backward_data(d_pre.data(), own, w_pool_.value.data(), d_x->data());
            add_self(*d_x);
        }
        break;
    }
    case layer_kind::gat: {
        const int H = heads_, D = head_dim_, HD = H * D;
        const matrix<T> msg = message_rows(c, param_rows, HD + H, exact_mode);
        matrix<T> d_z = msg.leftCols(HD);
        const matrix<T> d_el = msg.rightCols(H);
        // Attention-vector gradients: sum over rows of d_el[u,h] z[u,h,:] (and d_er).
        a_l_.grad.setZero();
        a_r_.grad.setZero();
        if (exact_mode) {
            const int k = mode.scale_for({static_cast<double>(std::max(max_abs_of(d_el), max_abs_of(c.d_er))),
                                          static_cast<double>(max_abs_of(c.pre))});
            const double scale = std::ldexp(1.0, k);
            for (auto* p : {&a_l_, &a_r_}) {
                p->exact_k = k;
                p->exact.assign(static_cast<std::size_t>(HD), 0);
            }
            for (node_t u = 0; u < param_rows; ++u)
                for (int h = 0; h < H; ++h)
                    for (int d = 0; d < D; ++d) {
                        const double z = static_cast<double>(c.pre(u, h * D + d)) * scale;
                        a_l_.exact[h * D + d] += static_cast<std::int64_t>(z * static_cast<double>(d_el(u, h)));
                        a_r_.exact[h * D + d] += static_cast<std::int64_t>(z * static_cast<double>(c.d_er(u, h)));
                    }
        } else {
            for (node_t u = 0; u < param_rows; ++u)
                for (int h = 0; h < H; ++h)
                    for (int d = 0; d < D; ++d) {
                        a_l_.grad(h, d) += d_el(u, h) * c.pre(u, h * D + d);
                        a_r_.grad(h, d) += c.d_er(u, h) * c.pre(u, h * D + d);
                    }
        }
        // Full gradient of z: attention part + through el and er.
#pragma omp parallel for schedule(static)
        for (node_t u = 0; u < param_rows; ++u)
            for (int h = 0; h < H; ++h)
                for (int d = 0; d < D; ++d)
                    d_z(u, h * D + d) += d_el(u, h) * a_l_.value(h, d) + c.d_er(u, h) * a_r_.value(h, d);
        weight_gradient(w_, *lin_, x_all.data(), d_z.data(), param_rows, mode);
        if (d_x != nullptr) {
            d_x->resize(own, in_);
            lin_->backward_data(d_z.data(), own, w_.value.data(), d_x->data());
        }
        break;
    }
    }
}

template <typename T>
dense_layer<T>::dense_layer(int in, int out, std::uint64_t seed, std::uint64_t index, const std::string& name)
    : w(name + ".weight", in, out), b(name + ".bias", 1, out), kernel(in, out)
{
    init_glorot(w, in, out, seed, index * 16);
}

template <typename T>
void dense_layer<T>::backward(const matrix<T>& x, const matrix<T>& dy, matrix<T>* dx, const reduce_mode& mode)
{
    RETEXO_ENSURE_DIMS("dense_layer::backward", "gradient rows", dy.rows(), x.rows());
    weight_gradient(w, kernel, x.data(), dy.data(), x.rows(), mode);
    bias_gradient(b, dy.data(), x.rows(), mode);
    if (dx != nullptr) {
        dx->resize(x.rows(), w.value.rows());
        kernel.backward_data(dy.data(), dy.rows(), w.value.data(), dx->data());
    }
}

template <typename T>
layer_norm<T>::layer_norm(int width, const std::string& name) : gamma(name + ".gamma", 1, width), beta(name + ".beta", 1, width)
{
    gamma.value.setOnes();
}

template <typename T>
void layer_norm<T>::forward(const matrix<T>& x, matrix<T>& y)
{
    RETEXO_ENSURE_DIMS("layer_norm::forward", "input width", x.cols(), gamma.value.cols());
    y.resize(x.rows(), x.cols());
    mean.resize(x.rows(), 1);
    rstd.resize(x.rows(), 1);
    layer_norm_forward(x.data(), x.rows(), static_cast<int>(x.cols()), gamma.value.data(), beta.value.data(), eps, y.data(),
                       mean.data(), rstd.data());
}

template <typename T>
void layer_norm<T>::backward(const matrix<T>& x, const matrix<T>& dy, matrix<T>& dx, const reduce_mode& mode)
{
    const auto n = x.rows();
    const auto w = static_cast<int>(x.cols());
    dx.resize(n, w);
    if (mode.exact && std::is_same_v<T, float>) {
        if constexpr (std::is_same_v<T, float>) {
            layer_norm_backward_data(x.data(), dy.data(), n, w, gamma.value.data(), mean.data(), rstd.data(), dx.data());
            matrix<T> xhat(n, w);
            layer_norm_xhat(x.data(), n, w, mean.data(), rstd.data(), xhat.data());
            gamma.exact_k = mode.scale_for({static_cast<double>(max_abs_of(xhat)), static_cast<double>(max_abs_of(dy))});
            gamma.exact.assign(static_cast<std::size_t>(w), 0);
            exact::colsum_product(xhat.data(), dy.data(), n, w, gamma.exact_k, gamma.exact.data());
            bias_gradient(beta, dy.data(), n, mode);
        }
    } else {
        layer_norm_backward(x.data(), dy.data(), n, w, gamma.value.data(), mean.data(), rstd.data(), dx.data(),
                            gamma.grad.data(), beta.grad.data());
    }
}

template class gnn_layer<float>;
template class gnn_layer<double>;
template struct dense_layer<float>;
template struct dense_layer<double>;
template struct layer_norm<float>;
template struct layer_norm<double>;

}  // namespace retexo::nn

// GCN, GraphSAGE and GAT layers: messages, aggregation, combine, and their backward passes.
#include <retexo/kernels/dense.hpp>
#include <retexo/nn/layers.hpp>

#include <algorithm>
#include <cmath>
#include <tuple>

namespace retexo::nn {

local_graph make_local_graph(const local_partition& lp, std::vector<offset_t>& degree)
{
    degree.resize(static_cast<std::size_t>(lp.num_local()));
    for (node_t v = 0; v < lp.num_owned(); ++v)
        degree[v] = lp.in_edges.degree(v);
    for (node_t h = 0; h < lp.num_halo(); ++h)
        degree[lp.num_owned() + h] = lp.halo_in_degree[h];
    return {&lp.in_edges, lp.num_owned(), lp.num_local(), degree};
}

namespace {

template <typename T>
T max_abs_of(const matrix<T>& m)
{
    return m.size() == 0 ? T(0) : m.cwiseAbs().maxCoeff();
}

/// Message gradients of rows [0, n) as reals (n x w, row-major), whatever the mode: c.d_msg's
/// own rows, or in exact mode the fixed-point sums converted into `converted`.
template <typename T>
Eigen::Map<const matrix<T>> message_rows(const layer_cache<T>& c, node_t n, int w, bool exact_mode,
                                         matrix<T>& converted)
{
    if (!exact_mode) {
        RETEXO_ENSURE(c.d_msg.rows() >= n && c.d_msg.cols() == w,
                      "retexo::gnn_layer::message_backward: combine_backward did not form the message gradients");
        return {c.d_msg.data(), n, w};
    }
    converted.resize(n, w);
    exact::to_real(c.d_msg_exact.data(), static_cast<std::size_t>(n) * w, c.msg_k, converted.data());
    return {converted.data(), n, w};
}

/// x itself (dense), or the dense form of sparse rows.
template <typename T>
const matrix<T>& dense_rows(const matrix<T>& x)
{
    return x;
}
inline matrix_f dense_rows(const csr_matrix& x)
{
    return x.to_dense();
}

template <typename T>
void init_glorot(parameter<T>& p, int fan_in, int fan_out, std::uint64_t seed, std::uint64_t index)
{
    xavier_uniform(p.value, fan_in, fan_out, counter_rng(seed, rng_stream::init * 100000 + index));
}

bool transforms_first(int in, int out, const layer_options& o) noexcept
{
    return o.sparse_input_density > 0 ? sparse_input_transforms_first(in, out, o.sparse_input_density, o.mean_in_degree)
                                      : in > out;
}

} // namespace

bool sparse_input_transforms_first(int in, int out, double density, double mean_in_degree) noexcept
{
    const double rows = mean_in_degree + 1; // with the self loop
    const double transform_first = 20 * density * in * out + 50 * rows * out;
    const double aggregate_first = 2.0 * in * out + 25 * rows * in;
    return transform_first <= aggregate_first;
}

template <typename T>
gnn_layer<T>::gnn_layer(layer_kind kind, int in, int out, const layer_options& o, std::uint64_t seed,
                        std::uint64_t index, const std::string& name)
    : kind_(kind), in_(in), out_(out), opt_(o)
{
    RETEXO_ENSURE(in > 0 && out > 0, "retexo::gnn_layer: widths must be positive, got " << in << " -> " << out);
    const std::string tag = (name.empty() ? "layer" + std::to_string(index) : name) + ".";
    const std::uint64_t base = index * 16;
    switch (kind) {
    case layer_kind::gcn:
        transform_first_ = transforms_first(in, out, o);
        w_ = parameter<T>(tag + "weight", in, out);
        init_glorot(w_, in, out, seed, base);
        lin_.emplace(in, out);
        break;
    case layer_kind::sage_mean:
        transform_first_ = transforms_first(in, out, o);
        w_ = parameter<T>(tag + "neigh_weight", in, out);
        w_self_ = parameter<T>(tag + "self_weight", in, out);
        init_glorot(w_, in, out, seed, base);
        init_glorot(w_self_, in, out, seed, base + 4);
        lin_.emplace(in, out);
        lin_self_.emplace(in, out);
        break;
    case layer_kind::sage_pool:
        pool_ = o.pool_width > 0 ? o.pool_width : std::min(in, 512); // GraphSAGE-pool default width
        w_pool_ = parameter<T>(tag + "pool_weight", in, pool_);
        b_pool_ = parameter<T>(tag + "pool_bias", 1, pool_);
        init_glorot(w_pool_, in, pool_, seed, base + 1);
        lin_pool_.emplace(in, pool_);
        w_ = parameter<T>(tag + "neigh_weight", pool_, out);
        w_self_ = parameter<T>(tag + "self_weight", in, out);
        init_glorot(w_, pool_, out, seed, base);
        init_glorot(w_self_, in, out, seed, base + 4);
        lin_.emplace(pool_, out);
        lin_self_.emplace(in, out);
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
    case layer_kind::sage_mean:
        return transform_first_ ? out_ : in_;
    case layer_kind::sage_pool:
        return pool_;
    case layer_kind::gat:
        return heads_ * head_dim_ + heads_;
    }
    return 0;
}

template <typename T>
bool gnn_layer<T>::message_is_input() const noexcept
{
    return (kind_ == layer_kind::gcn || kind_ == layer_kind::sage_mean) && !transform_first_;
}

template <typename T>
bool gnn_layer<T>::has_message_params() const noexcept
{
    return !message_is_input();
}

template <typename T>
std::vector<parameter<T>*> gnn_layer<T>::parameters()
{
    switch (kind_) {
    case layer_kind::gcn:
        return {&w_, &b_};
    case layer_kind::sage_mean:
        return {&w_self_, &w_, &b_};
    case layer_kind::sage_pool:
        return {&w_pool_, &b_pool_, &w_self_, &w_, &b_};
    case layer_kind::gat:
        return {&w_, &a_l_, &a_r_, &b_};
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
        p.agg.emplace(*g.in_edges, g.num_local,
                      aggregation_options{.kind = aggregator::gcn, .in_degree = g.in_degree, .rows = rows});
        break;
    case layer_kind::sage_mean:
        p.agg.emplace(*g.in_edges, g.num_local, aggregation_options{.kind = aggregator::mean, .rows = rows});
        break;
    case layer_kind::sage_pool:
        p.agg.emplace(*g.in_edges, g.num_local, aggregation_options{.kind = aggregator::max, .rows = rows});
        break;
    case layer_kind::gat:
        p.att.emplace(
            *g.in_edges, g.num_local,
            gat_options{.heads = heads_, .negative_slope = opt_.negative_slope, .self_loops = true, .rows = rows});
        break;
    }
    if (p.agg) std::tie(p.interior, p.boundary) = p.agg->rows_within(g.num_owned);
    return p;
}

template <typename T>
template <typename X>
void gnn_layer<T>::message(const X& x, layer_cache<T>& c, matrix<T>& msg) const
{
    RETEXO_ENSURE_DIMS("gnn_layer::message", "input width", cols_of(x), Eigen::Index{in_});
    const matrix<T> none;
    switch (kind_) {
    case layer_kind::gcn:
    case layer_kind::sage_mean:
        if (transform_first_)
            lin_->forward(x, w_.value, none, msg);
        else
            msg = dense_rows(x);
        break;
    case layer_kind::sage_pool:
        lin_pool_->forward(x, w_pool_.value, b_pool_.value, c.pre);
        msg.resize(c.pre.rows(), c.pre.cols());
        activation_forward(activation::relu, c.pre.data(), static_cast<std::size_t>(c.pre.size()), msg.data());
        break;
    case layer_kind::gat: {
        const int H = heads_, D = head_dim_, HD = H * D;
        matrix<T> z;
        lin_->forward(x, w_.value, none, z);
        msg.resize(rows_of(x), HD + H);
        msg.leftCols(HD) = z;
#pragma omp parallel for schedule(static)
        for (Eigen::Index u = 0; u < rows_of(x); ++u)
            for (int h = 0; h < H; ++h) {
                T s = 0;
                for (int d = 0; d < D; ++d)
                    s += z(u, h * D + d) * a_l_.value(h, d);
                msg(u, HD + h) = s;
            }
        break;
    }
    }
}

template <typename T>
void gnn_layer<T>::aggregate_rows(const layer_plan& plan, const matrix<T>& msg_all, layer_cache<T>& c,
                                  std::span<const node_t> rows, bool halo_ready) const
{
    if (!plan.agg) return;
    RETEXO_ENSURE_DIMS("gnn_layer::aggregate_rows", "message rows", msg_all.rows(), Eigen::Index{plan.num_local});
    RETEXO_ENSURE_DIMS("gnn_layer::aggregate_rows", "message width", msg_all.cols(), Eigen::Index{msg_width()});
    const int w = msg_width();
    const bool max = kind_ == layer_kind::sage_pool;
    if (c.agg.rows() != plan.agg->num_out() || c.agg.cols() != w) c.agg.resize(plan.agg->num_out(), w);
    if (max) c.argmax.resize(static_cast<std::size_t>(plan.agg->num_out()) * w);
    plan.agg->forward_subset(msg_all.data(), w, c.agg.data(), max ? c.argmax.data() : nullptr, rows, 0,
                             halo_ready ? plan.num_local : plan.num_owned);
}

template <typename T>
template <typename X>
void gnn_layer<T>::combine(const layer_plan& plan, const matrix<T>& msg_all, const X& x_rows, layer_cache<T>& c,
                           matrix<T>& out, bool aggregated) const
{
    const auto n = static_cast<Eigen::Index>(plan.rows.size());
    RETEXO_ENSURE_DIMS("gnn_layer::combine", "message rows", msg_all.rows(), Eigen::Index{plan.num_local});
    RETEXO_ENSURE_DIMS("gnn_layer::combine", "message width", msg_all.cols(), Eigen::Index{msg_width()});
    const matrix<T> none;
    // The neighbour aggregation (gcn, sage), unless aggregate_rows() has done it.
    auto aggregate = [&] {
        if (!aggregated) {
            plan.agg->forward(msg_all, c.agg, kind_ == layer_kind::sage_pool ? &c.argmax : nullptr);
            return;
        }
        RETEXO_ENSURE(c.agg.rows() == plan.agg->num_out() && c.agg.cols() == msg_width(),
                      "retexo::gnn_layer::combine: aggregate_rows was not called for this plan");
    };
    switch (kind_) {
    case layer_kind::gcn:
        aggregate();
        if (transform_first_) {
            out = std::move(c.agg); // the backward pass does not read it: free it
            release(c.agg);
            out.rowwise() += b_.value.row(0);
        } else {
            lin_->forward(c.agg, w_.value, b_.value, out);
        }
        break;
    case layer_kind::sage_mean:
    case layer_kind::sage_pool: {
        RETEXO_ENSURE_DIMS("gnn_layer::combine", "self rows", rows_of(x_rows), n);
        aggregate();
        lin_self_->forward(x_rows, w_self_.value, b_.value, out);
        if (transform_first_) {
            out += c.agg;
        } else {
            matrix<T> neigh;
            lin_->forward(c.agg, w_.value, none, neigh);
            out += neigh;
        }
        break;
    }
    case layer_kind::gat: {
        const int H = heads_, D = head_dim_, HD = H * D;
        const Eigen::Index L = plan.num_local;
        c.z = msg_all.leftCols(HD);
        c.el = msg_all.rightCols(H);
        c.er = matrix<T>::Zero(L, H);
        for (node_t v : plan.rows)
            for (int h = 0; h < H; ++h) {
                T s = 0;
                for (int d = 0; d < D; ++d)
                    s += c.z(v, h * D + d) * a_r_.value(h, d);
                c.er(v, h) = s;
            }
        c.alpha.resize(plan.att->num_edges(), H);
        c.att.resize(n, HD);
        plan.att->forward(c.z.data(), c.el.data(), c.er.data(), D, c.att.data(), c.alpha.data());
        if (opt_.concat) {
            out = c.att;
            out.rowwise() += b_.value.row(0);
        } else {
            out.resize(n, D);
            for (Eigen::Index i = 0; i < n; ++i)
                for (int d = 0; d < D; ++d) {
                    T s = 0;
                    for (int h = 0; h < H; ++h)
                        s += c.att(i, h * D + d);
                    out(i, d) = s / static_cast<T>(H) + b_.value(0, d);
                }
        }
        break;
    }
    }
}

template <typename T>
template <typename X>
void gnn_layer<T>::combine_backward(const layer_plan& plan, const matrix<T>& msg_all, const X& x_rows,
                                    layer_cache<T>& c, const matrix<T>& d_out, bool need_messages,
                                    const reduce_mode& mode)
{
    (void)msg_all;
    const auto n = static_cast<Eigen::Index>(plan.rows.size());
    RETEXO_ENSURE_DIMS("gnn_layer::backward", "gradient rows", d_out.rows(), n);
    RETEXO_ENSURE_DIMS("gnn_layer::backward", "gradient width", d_out.cols(), Eigen::Index{out_});
    RETEXO_ENSURE(need_messages || !has_message_params(),
                  "retexo::gnn_layer::backward: message gradients are needed for the message parameters");
    const bool exact_mode = mode.exact && std::is_same_v<T, float>;
    const int mw = msg_width();
    bias_gradient(b_, d_out.data(), n, mode);
    auto scatter = [&](const matrix<T>& d_agg) {
        if (exact_mode) {
            c.msg_k =
                mode.scale_for({static_cast<double>(plan.agg->max_weight()), static_cast<double>(max_abs_of(d_agg))});
            c.d_msg_exact.assign(static_cast<std::size_t>(plan.num_local) * mw, 0);
            if constexpr (std::is_same_v<T, float>)
                plan.agg->backward_exact(d_agg.data(), mw, c.msg_k, c.d_msg_exact.data(),
                                         kind_ == layer_kind::sage_pool ? c.argmax.data() : nullptr);
        } else {
            plan.agg->backward(d_agg, c.d_msg, kind_ == layer_kind::sage_pool ? &c.argmax : nullptr);
        }
    };
    switch (kind_) {
    case layer_kind::gcn:
    case layer_kind::sage_mean:
    case layer_kind::sage_pool: {
        if (kind_ != layer_kind::gcn) {
            weight_gradient(w_self_, *lin_self_, x_rows, d_out.data(), mode);
            if (need_messages) c.d_self = d_out;
        }
        if (transform_first_) {
            if (need_messages) scatter(d_out);
            break;
        }
        weight_gradient(w_, *lin_, c.agg.data(), d_out.data(), n, mode);
        if (need_messages) {
            matrix<T> d_agg(n, mw);
            lin_->backward_data(d_out.data(), n, w_.value.data(), d_agg.data());
            scatter(d_agg);
        }
        break;
    }
    case layer_kind::gat:
        gat_combine_backward(plan, c, d_out, exact_mode, mode);
        break;
    }
}

template <typename T>
void gnn_layer<T>::gat_combine_backward(const layer_plan& plan, layer_cache<T>& c, const matrix<T>& d_out,
                                        bool exact_mode, const reduce_mode& mode)
{
    const auto n = static_cast<Eigen::Index>(plan.rows.size());
    const int H = heads_, D = head_dim_, HD = H * D;
    matrix<T> d_att(n, HD);
    if (opt_.concat) {
        d_att = d_out;
    } else {
        for (Eigen::Index i = 0; i < n; ++i)
            for (int h = 0; h < H; ++h)
                for (int d = 0; d < D; ++d)
                    d_att(i, h * D + d) = d_out(i, d) / static_cast<T>(H);
    }
    const Eigen::Index L = plan.num_local;
    c.d_score.resize(plan.att->num_edges(), H);
    matrix<T> d_er(L, H);
    // a_r only sees the destination rows: sum over plan rows of d_er[v] z[v].
    auto attn_r_gradient = [&] {
        a_r_.grad.setZero();
        if (exact_mode) {
            a_r_.exact_k =
                mode.scale_for({static_cast<double>(max_abs_of(d_er)), static_cast<double>(max_abs_of(c.z))});
            a_r_.exact.assign(static_cast<std::size_t>(HD), 0);
            const double scale = std::ldexp(1.0, a_r_.exact_k);
            for (node_t v : plan.rows)
                for (int h = 0; h < H; ++h)
                    for (int d = 0; d < D; ++d)
                        a_r_.exact[h * D + d] += static_cast<std::int64_t>(static_cast<double>(c.z(v, h * D + d)) *
                                                                           scale * static_cast<double>(d_er(v, h)));
        } else {
            for (node_t v : plan.rows)
                for (int h = 0; h < H; ++h)
                    for (int d = 0; d < D; ++d)
                        a_r_.grad(h, d) += d_er(v, h) * c.z(v, h * D + d);
        }
    };
    if (exact_mode) {
        if constexpr (std::is_same_v<T, float>) {
            const double zmax = max_abs_of(c.z);
            const double amax = std::max(1.0, static_cast<double>(max_abs_of(a_r_.value)));
            c.msg_k = mode.scale_for({static_cast<double>(max_abs_of(d_att)), std::max(1.0, 2.0 * D * zmax) * amax});
            std::vector<std::int64_t> acc_z(static_cast<std::size_t>(L) * HD, 0),
                acc_el(static_cast<std::size_t>(L) * H, 0);
            plan.att->backward_exact(c.z.data(), c.el.data(), c.er.data(), c.alpha.data(), d_att.data(), D, c.msg_k,
                                     acc_z.data(), acc_el.data(), d_er.data(), c.d_score.data());
            // z also feeds er of the destination rows: add d_er a_r, term by term.
            const double scale = std::ldexp(1.0, c.msg_k);
            for (node_t v : plan.rows)
                for (int h = 0; h < H; ++h)
                    for (int d = 0; d < D; ++d)
                        acc_z[static_cast<std::size_t>(v) * HD + h * D + d] += static_cast<std::int64_t>(
                            static_cast<double>(d_er(v, h)) * scale * static_cast<double>(a_r_.value(h, d)));
            c.d_msg_exact.resize(static_cast<std::size_t>(L) * (HD + H));
            for (Eigen::Index u = 0; u < L; ++u) {
                std::copy_n(acc_z.data() + u * HD, HD, c.d_msg_exact.data() + u * (HD + H));
                std::copy_n(acc_el.data() + u * H, H, c.d_msg_exact.data() + u * (HD + H) + HD);
            }
        }
    } else {
        matrix<T> d_z(L, HD), d_el(L, H);
        plan.att->backward(c.z.data(), c.el.data(), c.er.data(), c.alpha.data(), d_att.data(), D, d_z.data(),
                           d_el.data(), d_er.data(), c.d_score.data());
        for (node_t v : plan.rows)
            for (int h = 0; h < H; ++h)
                for (int d = 0; d < D; ++d)
                    d_z(v, h * D + d) += d_er(v, h) * a_r_.value(h, d);
        c.d_msg.resize(L, HD + H);
        c.d_msg.leftCols(HD) = d_z;
        c.d_msg.rightCols(H) = d_el;
    }
    attn_r_gradient();
}

template <typename T>
template <typename X>
void gnn_layer<T>::message_backward(const X& x, const matrix<T>& msg, layer_cache<T>& c, matrix<T>* d_x,
                                    const reduce_mode& mode)
{
    const bool exact_mode = mode.exact && std::is_same_v<T, float>;
    const auto n = static_cast<node_t>(rows_of(x));
    const int mw = msg_width();
    matrix<T> converted;
    const auto dm = message_rows(c, n, mw, exact_mode, converted);
    switch (kind_) {
    case layer_kind::gcn:
    case layer_kind::sage_mean:
        if (transform_first_) {
            weight_gradient(w_, *lin_, x, dm.data(), mode);
            if (d_x != nullptr) {
                d_x->resize(n, in_);
                lin_->backward_data(dm.data(), n, w_.value.data(), d_x->data());
            }
        } else if (d_x != nullptr) {
            *d_x = dm;
        }
        break;
    case layer_kind::sage_pool: {
        matrix<T> d_pre(n, mw);
        activation_backward(activation::relu, c.pre.data(), dm.data(), static_cast<std::size_t>(dm.size()),
                            d_pre.data());
        weight_gradient(w_pool_, *lin_pool_, x, d_pre.data(), mode);
        bias_gradient(b_pool_, d_pre.data(), n, mode);
        if (d_x != nullptr) {
            d_x->resize(n, in_);
            lin_pool_->backward_data(d_pre.data(), n, w_pool_.value.data(), d_x->data());
        }
        break;
    }
    case layer_kind::gat: {
        const int H = heads_, D = head_dim_, HD = H * D;
        matrix<T> d_z = dm.leftCols(HD);
        const matrix<T> d_el = dm.rightCols(H);
        a_l_.grad.setZero();
        if (exact_mode) {
            a_l_.exact_k =
                mode.scale_for({static_cast<double>(max_abs_of(d_el)), static_cast<double>(max_abs_of(msg))});
            a_l_.exact.assign(static_cast<std::size_t>(HD), 0);
            const double scale = std::ldexp(1.0, a_l_.exact_k);
            for (node_t u = 0; u < n; ++u)
                for (int h = 0; h < H; ++h)
                    for (int d = 0; d < D; ++d)
                        a_l_.exact[h * D + d] += static_cast<std::int64_t>(static_cast<double>(msg(u, h * D + d)) *
                                                                           scale * static_cast<double>(d_el(u, h)));
        } else {
            for (node_t u = 0; u < n; ++u)
                for (int h = 0; h < H; ++h)
                    for (int d = 0; d < D; ++d)
                        a_l_.grad(h, d) += d_el(u, h) * msg(u, h * D + d);
        }
#pragma omp parallel for schedule(static)
        for (node_t u = 0; u < n; ++u)
            for (int h = 0; h < H; ++h)
                for (int d = 0; d < D; ++d)
                    d_z(u, h * D + d) += d_el(u, h) * a_l_.value(h, d);
        weight_gradient(w_, *lin_, x, d_z.data(), mode);
        if (d_x != nullptr) {
            d_x->resize(n, in_);
            lin_->backward_data(d_z.data(), n, w_.value.data(), d_x->data());
        }
        break;
    }
    }
}

template <typename T>
void gnn_layer<T>::add_self_gradient(const layer_plan& plan, const layer_cache<T>& c, matrix<T>& d_x) const
{
    if (kind_ != layer_kind::sage_mean && kind_ != layer_kind::sage_pool) return;
    const auto n = static_cast<Eigen::Index>(plan.rows.size());
    RETEXO_ENSURE(c.d_self.rows() == n, "retexo::gnn_layer::add_self_gradient: combine_backward did not run");
    matrix<T> d_self(n, in_);
    lin_self_->backward_data(c.d_self.data(), n, w_self_.value.data(), d_self.data());
    for (Eigen::Index i = 0; i < n; ++i)
        d_x.row(plan.rows[static_cast<std::size_t>(i)]) += d_self.row(i);
}

template <typename T>
dense_layer<T>::dense_layer(int in, int out, std::uint64_t seed, std::uint64_t index, const std::string& name)
    : w(name + ".weight", in, out), b(name + ".bias", 1, out), kernel(in, out)
{
    init_glorot(w, in, out, seed, index * 16);
}

template <typename T>
template <typename X>
void dense_layer<T>::backward(const X& x, const matrix<T>& dy, matrix<T>* dx, const reduce_mode& mode)
{
    RETEXO_ENSURE_DIMS("dense_layer::backward", "gradient rows", dy.rows(), rows_of(x));
    weight_gradient(w, kernel, x, dy.data(), mode);
    bias_gradient(b, dy.data(), dy.rows(), mode);
    if (dx != nullptr) {
        dx->resize(dy.rows(), w.value.rows());
        kernel.backward_data(dy.data(), dy.rows(), w.value.data(), dx->data());
    }
}

template <typename T>
layer_norm<T>::layer_norm(int width, const std::string& name)
    : gamma(name + ".gamma", 1, width), beta(name + ".beta", 1, width)
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
    layer_norm_forward(x.data(), x.rows(), static_cast<int>(x.cols()), gamma.value.data(), beta.value.data(), eps,
                       y.data(), mean.data(), rstd.data());
}

template <typename T>
void layer_norm<T>::backward(const matrix<T>& x, const matrix<T>& dy, matrix<T>& dx, const reduce_mode& mode)
{
    const auto n = x.rows();
    const auto w = static_cast<int>(x.cols());
    dx.resize(n, w);
    if (mode.exact && std::is_same_v<T, float>) {
        if constexpr (std::is_same_v<T, float>) {
            layer_norm_backward_data(x.data(), dy.data(), n, w, gamma.value.data(), mean.data(), rstd.data(),
                                     dx.data());
            matrix<T> xhat(n, w);
            layer_norm_xhat(x.data(), n, w, mean.data(), rstd.data(), xhat.data());
            gamma.exact_k =
                mode.scale_for({static_cast<double>(max_abs_of(xhat)), static_cast<double>(max_abs_of(dy))});
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

// The input forms each layer takes: dense rows of its type, and sparse rows (float).
#define RETEXO_LAYER_INPUT(T, X)                                                                                       \
    template void gnn_layer<T>::message<X>(const X&, layer_cache<T>&, matrix<T>&) const;                               \
    template void gnn_layer<T>::combine<X>(const layer_plan&, const matrix<T>&, const X&, layer_cache<T>&, matrix<T>&, \
                                           bool) const;                                                                \
    template void gnn_layer<T>::combine_backward<X>(const layer_plan&, const matrix<T>&, const X&, layer_cache<T>&,    \
                                                    const matrix<T>&, bool, const reduce_mode&);                       \
    template void gnn_layer<T>::message_backward<X>(const X&, const matrix<T>&, layer_cache<T>&, matrix<T>*,           \
                                                    const reduce_mode&);                                               \
    template void dense_layer<T>::backward<X>(const X&, const matrix<T>&, matrix<T>*, const reduce_mode&);
RETEXO_LAYER_INPUT(float, matrix_f)
RETEXO_LAYER_INPUT(float, csr_matrix)
RETEXO_LAYER_INPUT(double, matrix<double>)
#undef RETEXO_LAYER_INPUT
template struct layer_norm<float>;
template struct layer_norm<double>;

} // namespace retexo::nn

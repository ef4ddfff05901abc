// GCN, GraphSAGE and GAT layers: messages, aggregation, combine, and their backward passes.
#include <retexo/kernels/dense.hpp>
#include <retexo/nn/layers.hpp>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <variant>

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

/// x itself (dense), or the dense form of sparse rows or column blocks.
template <typename T>
const matrix<T>& dense_rows(const matrix<T>& x)
{
    return x;
}
inline matrix_f dense_rows(const csr_matrix& x)
{
    return x.to_dense();
}
inline matrix_f dense_rows(const column_blocks& x)
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
    const double rows = mean_in_degree + 1;                                   // with the self loop
    const double transform_first = 20 * density * in * out + 50 * rows * out; // 10 per sparse multiply-add, twice
    const double aggregate_first = 2.0 * in * out + 25 * rows * in;
    return transform_first <= aggregate_first;
}

double gemm_width(const matrix_f& x) noexcept
{
    return static_cast<double>(x.cols());
}
double gemm_width(const csr_matrix& x) noexcept
{
    return 10 * x.density() * static_cast<double>(x.cols);
}
double gemm_width(const column_blocks& x) noexcept
{
    double w = 0;
    x.for_each([&](const auto& b, Eigen::Index) { w += gemm_width(b); });
    return w;
}

// ---- the kinds, private to this file (gnn_layer holds one)

namespace kinds {

int positive_width(int in, int out)
{
    RETEXO_ENSURE(in > 0 && out > 0, "retexo::gnn_layer: widths must be positive, got " << in << " -> " << out);
    return in;
}

/// The neighbour transform W of GCN and SAGE-mean: before the aggregation (messages are x W)
/// when that is narrower or, for sparse inputs, cheaper; else after it (messages are x).
template <typename T>
struct neighbour_transform {
    parameter<T> w;
    linear_kernel kernel;
    bool first = false; ///< messages are x W
    neighbour_transform(int in, int out, bool first, const std::string& name)
        : w(name, in, out), kernel(in, out), first(first)
    {
    }
};

/// GraphSAGE's self term x W_self (mean and max-pool).
template <typename T>
struct self_term {
    parameter<T> w;
    linear_kernel kernel;
    self_term(int in, int out, const std::string& name) : w(name, in, out), kernel(in, out) {}
};

/// GraphSAGE-pool's message MLP: ReLU(x W_pool + b_pool).
template <typename T>
struct pool_mlp {
    parameter<T> w, b;
    linear_kernel kernel;
    pool_mlp(int in, int width, const std::string& tag)
        : w(tag + "pool_weight", in, width), b(tag + "pool_bias", 1, width), kernel(in, width)
    {
    }
};

/// The message gradients of a layer's rows, as reals (n x msg_width).
template <typename T>
using message_gradients = Eigen::Map<const matrix<T>>;

/// The parts every kind has: widths and the output bias.
template <typename T>
struct layer_core {
    int in, out;
    parameter<T> b;
    layer_core(int in, int out, const std::string& tag) : in(positive_width(in, out)), out(out), b(tag + "bias", 1, out)
    {
    }
};

/// Messages x W (transform first) or x itself (GCN, SAGE-mean).
template <typename T, typename X>
void transform_message(const neighbour_transform<T>& t, const X& x, matrix<T>& msg)
{
    if (t.first)
        t.kernel.forward(x, t.w.value, matrix<T>(), msg);
    else
        msg = dense_rows(x);
}

/// message_backward of transform_message: W's gradient, and d_x if given.
template <typename T, typename X>
void transform_message_backward(neighbour_transform<T>& t, int in, const X& x, const message_gradients<T>& dm,
                                matrix<T>* d_x, const reduce_mode& mode)
{
    const auto n = static_cast<node_t>(rows_of(x));
    if (t.first) {
        weight_gradient(t.w, t.kernel, x, dm.data(), mode);
        if (d_x != nullptr) {
            d_x->resize(n, in);
            t.kernel.backward_data(dm.data(), n, t.w.value.data(), d_x->data());
        }
    } else if (d_x != nullptr) {
        *d_x = dm;
    }
}

/// Message gradients of every local row (c.d_msg, or c.d_msg_exact in exact mode) from the
/// gradient of the aggregation's output rows (width mw).
template <typename T>
void scatter_message_gradients(const layer_plan& plan, const matrix<T>& d_agg, int mw, layer_cache<T>& c,
                               const reduce_mode& mode)
{
    const bool max = plan.agg->kind() == aggregator::max;
    if (mode.exact && std::is_same_v<T, float>) {
        c.msg_k = mode.scale_for({static_cast<double>(plan.agg->max_weight()), static_cast<double>(max_abs_of(d_agg))});
        c.d_msg_exact.assign(static_cast<std::size_t>(plan.num_local) * mw, 0);
        if constexpr (std::is_same_v<T, float>)
            plan.agg->backward_exact(d_agg.data(), mw, c.msg_k, c.d_msg_exact.data(), max ? c.argmax.data() : nullptr);
    } else {
        plan.agg->backward(d_agg, c.d_msg, max ? &c.argmax : nullptr);
    }
}

/// The backward pass of the neighbour part agg (W after it, or none when W came first):
/// W's gradient, and the message gradients when need_messages.
template <typename T>
void neighbour_backward(neighbour_transform<T>& t, const layer_plan& plan, layer_cache<T>& c, const matrix<T>& d_out,
                        int mw, bool need_messages, const reduce_mode& mode)
{
    if (t.first) {
        if (need_messages) scatter_message_gradients(plan, d_out, mw, c, mode);
        return;
    }
    const auto n = static_cast<Eigen::Index>(plan.rows.size());
    weight_gradient(t.w, t.kernel, c.agg.data(), d_out.data(), n, mode);
    if (need_messages) {
        matrix<T> d_agg(n, mw);
        t.kernel.backward_data(d_out.data(), n, t.w.value.data(), d_agg.data());
        scatter_message_gradients(plan, d_agg, mw, c, mode);
    }
}

int pool_width(int in, const layer_options& o)
{
    return o.pool_width > 0 ? o.pool_width : std::min(in, 512); // GraphSAGE-pool default width
}

int gat_head_dim(int out, const layer_options& o)
{
    RETEXO_ENSURE(o.heads >= 1, "--heads must be positive, got " << o.heads);
    if (!o.concat) return out;
    RETEXO_ENSURE(out % o.heads == 0, "GAT: width " << out << " is not divisible by " << o.heads << " heads");
    return out / o.heads;
}

/// GCN: out = A_hat (x W) + b, with W before or after the aggregation (neighbour_transform).
template <typename T>
class gcn_layer {
public:
    gcn_layer(int in, int out, const layer_options& o, std::uint64_t seed, std::uint64_t index, const std::string& tag)
        : core_(in, out, tag), t_(in, out, transforms_first(in, out, o), tag + "weight")
    {
        init_glorot(t_.w, in, out, seed, index * 16);
    }
    const layer_core<T>& core() const noexcept { return core_; }
    layer_core<T>& core() noexcept { return core_; }
    int msg_width() const noexcept { return t_.first ? core_.out : core_.in; }
    bool message_is_input() const noexcept { return !t_.first; }
    std::vector<parameter<T>*> parameters() { return {&t_.w, &core_.b}; }
    void plan_aggregation(const local_graph& g, std::span<const node_t> rows, layer_plan& p) const
    {
        p.agg.emplace(*g.in_edges, g.num_local,
                      aggregation_options{.kind = aggregator::gcn, .in_degree = g.in_degree, .rows = rows});
    }
    template <typename X>
    void message(const X& x, layer_cache<T>&, matrix<T>& msg) const
    {
        transform_message(t_, x, msg);
    }
    template <typename X>
    void combine(const layer_plan&, const matrix<T>&, const X&, layer_cache<T>& c, matrix<T>& out) const
    {
        if (t_.first) {
            out = std::move(c.agg); // the backward pass does not read it: free it
            release(c.agg);
            out.rowwise() += core_.b.value.row(0);
        } else {
            t_.kernel.forward(c.agg, t_.w.value, core_.b.value, out);
        }
    }
    template <typename X>
    void combine_backward(const layer_plan& plan, const matrix<T>&, const X&, layer_cache<T>& c, const matrix<T>& d_out,
                          bool need_messages, const reduce_mode& mode)
    {
        neighbour_backward(t_, plan, c, d_out, msg_width(), need_messages, mode);
    }
    template <typename X>
    void message_backward(const X& x, const matrix<T>&, const message_gradients<T>& dm, layer_cache<T>&, matrix<T>* d_x,
                          const reduce_mode& mode)
    {
        transform_message_backward(t_, core_.in, x, dm, d_x, mode);
    }
    void add_self_gradient(const layer_plan&, const layer_cache<T>&, matrix<T>&) const {}

private:
    layer_core<T> core_;
    neighbour_transform<T> t_;
};

/// GraphSAGE: out = x W_self + agg(messages) W_neigh + b; mean of x (W_neigh before or after,
/// as GCN's), or max of pool_mlp(x) (W_neigh after).
template <typename T>
class sage_layer {
public:
    sage_layer(bool pool, int in, int out, const layer_options& o, std::uint64_t seed, std::uint64_t index,
               const std::string& tag)
        : core_(in, out, tag),
          t_(pool ? pool_width(in, o) : in, out, !pool && transforms_first(in, out, o), tag + "neigh_weight"),
          self_(in, out, tag + "self_weight")
    {
        const std::uint64_t base = index * 16;
        if (pool) {
            pool_.emplace(in, pool_width(in, o), tag);
            init_glorot(pool_->w, in, pool_width(in, o), seed, base + 1);
        }
        init_glorot(t_.w, static_cast<int>(t_.w.value.rows()), out, seed, base);
        init_glorot(self_.w, in, out, seed, base + 4);
    }
    const layer_core<T>& core() const noexcept { return core_; }
    layer_core<T>& core() noexcept { return core_; }
    int msg_width() const noexcept
    {
        if (pool_) return static_cast<int>(pool_->w.value.cols());
        return t_.first ? core_.out : core_.in;
    }
    bool message_is_input() const noexcept { return !pool_ && !t_.first; }
    std::vector<parameter<T>*> parameters()
    {
        if (pool_) return {&pool_->w, &pool_->b, &self_.w, &t_.w, &core_.b};
        return {&self_.w, &t_.w, &core_.b};
    }
    void plan_aggregation(const local_graph& g, std::span<const node_t> rows, layer_plan& p) const
    {
        p.agg.emplace(*g.in_edges, g.num_local,
                      aggregation_options{.kind = pool_ ? aggregator::max : aggregator::mean, .rows = rows});
    }
    template <typename X>
    void message(const X& x, layer_cache<T>& c, matrix<T>& msg) const
    {
        if (!pool_) {
            transform_message(t_, x, msg);
            return;
        }
        pool_->kernel.forward(x, pool_->w.value, pool_->b.value, c.pre);
        msg.resize(c.pre.rows(), c.pre.cols());
        activation_forward(activation::relu, c.pre.data(), static_cast<std::size_t>(c.pre.size()), msg.data());
    }
    template <typename X>
    void combine(const layer_plan& plan, const matrix<T>&, const X& x_rows, layer_cache<T>& c, matrix<T>& out) const
    {
        RETEXO_ENSURE_DIMS("gnn_layer::combine", "self rows", rows_of(x_rows),
                           static_cast<Eigen::Index>(plan.rows.size()));
        self_.kernel.forward(x_rows, self_.w.value, core_.b.value, out);
        if (t_.first) {
            out += c.agg;
        } else {
            matrix<T> neigh;
            t_.kernel.forward(c.agg, t_.w.value, matrix<T>(), neigh);
            out += neigh;
        }
    }
    template <typename X>
    void combine_backward(const layer_plan& plan, const matrix<T>&, const X& x_rows, layer_cache<T>& c,
                          const matrix<T>& d_out, bool need_messages, const reduce_mode& mode)
    {
        weight_gradient(self_.w, self_.kernel, x_rows, d_out.data(), mode);
        if (need_messages) c.d_self = d_out;
        neighbour_backward(t_, plan, c, d_out, msg_width(), need_messages, mode);
    }
    template <typename X>
    void message_backward(const X& x, const matrix<T>&, const message_gradients<T>& dm, layer_cache<T>& c,
                          matrix<T>* d_x, const reduce_mode& mode)
    {
        if (!pool_) {
            transform_message_backward(t_, core_.in, x, dm, d_x, mode);
            return;
        }
        const auto n = static_cast<node_t>(rows_of(x));
        matrix<T> d_pre(n, dm.cols());
        activation_backward(activation::relu, c.pre.data(), dm.data(), static_cast<std::size_t>(dm.size()),
                            d_pre.data());
        weight_gradient(pool_->w, pool_->kernel, x, d_pre.data(), mode);
        bias_gradient(pool_->b, d_pre.data(), n, mode);
        if (d_x != nullptr) {
            d_x->resize(n, core_.in);
            pool_->kernel.backward_data(d_pre.data(), n, pool_->w.value.data(), d_x->data());
        }
    }
    void add_self_gradient(const layer_plan& plan, const layer_cache<T>& c, matrix<T>& d_x) const
    {
        const auto n = static_cast<Eigen::Index>(plan.rows.size());
        RETEXO_ENSURE(c.d_self.rows() == n, "retexo::gnn_layer::add_self_gradient: combine_backward did not run");
        matrix<T> d_self(n, core_.in);
        self_.kernel.backward_data(c.d_self.data(), n, self_.w.value.data(), d_self.data());
        for (Eigen::Index i = 0; i < n; ++i)
            d_x.row(plan.rows[static_cast<std::size_t>(i)]) += d_self.row(i);
    }

private:
    layer_core<T> core_;
    std::optional<pool_mlp<T>> pool_;
    neighbour_transform<T> t_;
    self_term<T> self_;
};

/// GAT: H attention heads over the in-neighbours and the node itself, concatenated or
/// averaged; messages are [z = x W | el = <z, a_l>].
template <typename T>
class gat_layer {
public:
    gat_layer(int in, int out, const layer_options& o, std::uint64_t seed, std::uint64_t index, const std::string& tag)
        : core_(in, out, tag), heads_(o.heads), head_dim_(gat_head_dim(out, o)), concat_(o.concat),
          negative_slope_(o.negative_slope), w_(tag + "weight", in, heads_ * head_dim_),
          a_l_(tag + "attn_l", heads_, head_dim_), a_r_(tag + "attn_r", heads_, head_dim_),
          lin_(in, heads_ * head_dim_), lin_scores_(in, 2 * heads_), lin_head_(in, head_dim_)
    {
        const std::uint64_t base = index * 16;
        init_glorot(w_, in, heads_ * head_dim_, seed, base);
        init_glorot(a_l_, head_dim_, 1, seed, base + 2);
        init_glorot(a_r_, head_dim_, 1, seed, base + 3);
    }
    const layer_core<T>& core() const noexcept { return core_; }
    layer_core<T>& core() noexcept { return core_; }
    int msg_width() const noexcept { return heads_ * head_dim_ + heads_; }
    bool message_is_input() const noexcept { return false; }
    std::vector<parameter<T>*> parameters() { return {&w_, &a_l_, &a_r_, &core_.b}; }
    void plan_aggregation(const local_graph& g, std::span<const node_t> rows, layer_plan& p) const
    {
        p.att.emplace(
            *g.in_edges, g.num_local,
            gat_options{.heads = heads_, .negative_slope = negative_slope_, .self_loops = true, .rows = rows});
    }
    template <typename X>
    void message(const X& x, layer_cache<T>&, matrix<T>& msg) const
    {
        const int H = heads_, D = head_dim_, HD = H * D;
        matrix<T> z;
        lin_.forward(x, w_.value, matrix<T>(), z);
        msg.resize(rows_of(x), HD + H);
        msg.leftCols(HD) = z;
#pragma omp parallel for schedule(static) if (worth_threads(static_cast <std::int64_t>(rows_of(x)) * HD))
        for (Eigen::Index u = 0; u < rows_of(x); ++u)
            for (int h = 0; h < H; ++h) {
                T s = 0;
                for (int d = 0; d < D; ++d)
                    s += z(u, h * D + d) * a_l_.value(h, d);
                msg(u, HD + h) = s;
            }
    }
    template <typename X>
    void combine(const layer_plan& plan, const matrix<T>& msg_all, const X&, layer_cache<T>& c, matrix<T>& out) const
    {
        const auto n = static_cast<Eigen::Index>(plan.rows.size());
        const int H = heads_, D = head_dim_, HD = H * D;
        const Eigen::Index L = plan.num_local;
        // The messages are [z | el] per local row; the kernel reads them in place.
        c.er = matrix<T>::Zero(L, H);
        for (node_t v : plan.rows)
            for (int h = 0; h < H; ++h) {
                T s = 0;
                for (int d = 0; d < D; ++d)
                    s += msg_all(v, h * D + d) * a_r_.value(h, d);
                c.er(v, h) = s;
            }
        c.alpha.resize(plan.att->num_edges(), H);
        c.att.resize(n, HD);
        plan.att->forward(msg_all.data(), c.er.data(), D, c.att.data(), c.alpha.data());
        if (concat_) {
            out = c.att;
            out.rowwise() += core_.b.value.row(0);
            return;
        }
        out.resize(n, D);
        for (Eigen::Index i = 0; i < n; ++i)
            for (int d = 0; d < D; ++d) {
                T s = 0;
                for (int h = 0; h < H; ++h)
                    s += c.att(i, h * D + d);
                out(i, d) = s / static_cast<T>(H) + core_.b.value(0, d);
            }
    }
    template <typename X>
    void combine_backward(const layer_plan& plan, const matrix<T>& msg_all, const X&, layer_cache<T>& c,
                          const matrix<T>& d_out, bool, const reduce_mode& mode)
    {
        const bool exact_mode = mode.exact && std::is_same_v<T, float>;
        const auto n = static_cast<Eigen::Index>(plan.rows.size());
        const int H = heads_, D = head_dim_, HD = H * D;
        matrix<T> d_att(n, HD);
        if (concat_) {
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
        // Exact scales: the largest message of the rows the plan reads, so that which other
        // rows are present (a rank's halo, a gathered neighbourhood) does not change them.
        T z_max = 0;
        if (exact_mode && L > 0 && plan.support.empty())
            z_max = msg_all.leftCols(HD).cwiseAbs().maxCoeff();
        else if (exact_mode)
            for (node_t u : plan.support)
                z_max = std::max(z_max, msg_all.row(u).leftCols(HD).cwiseAbs().maxCoeff());
        // a_r only sees the destination rows: sum over plan rows of d_er[v] z[v].
        auto attn_r_gradient = [&] {
            a_r_.grad.setZero();
            if (exact_mode) {
                a_r_.exact_k = mode.scale_for({static_cast<double>(max_abs_of(d_er)), static_cast<double>(z_max)});
                a_r_.exact.assign(static_cast<std::size_t>(HD), 0);
                const double scale = std::ldexp(1.0, a_r_.exact_k);
                for (node_t v : plan.rows)
                    for (int h = 0; h < H; ++h)
                        for (int d = 0; d < D; ++d)
                            a_r_.exact[h * D + d] += static_cast<std::int64_t>(
                                static_cast<double>(msg_all(v, h * D + d)) * scale * static_cast<double>(d_er(v, h)));
            } else {
                for (node_t v : plan.rows)
                    for (int h = 0; h < H; ++h)
                        for (int d = 0; d < D; ++d)
                            a_r_.grad(h, d) += d_er(v, h) * msg_all(v, h * D + d);
            }
        };
        // The message gradients [d_z | d_el] are formed in place; z also feeds er of the
        // destination rows, so each adds d_er a_r (term by term in exact mode).
        if (exact_mode) {
            if constexpr (std::is_same_v<T, float>) {
                const double amax = std::max(1.0, static_cast<double>(max_abs_of(a_r_.value)));
                c.msg_k = mode.scale_for({static_cast<double>(max_abs_of(d_att)),
                                          std::max(1.0, 2.0 * D * static_cast<double>(z_max)) * amax});
                c.d_msg_exact.assign(static_cast<std::size_t>(L) * (HD + H), 0);
                plan.att->backward_exact(msg_all.data(), c.er.data(), c.alpha.data(), d_att.data(), D, c.msg_k,
                                         c.d_msg_exact.data(), d_er.data(), c.d_score.data());
                const double scale = std::ldexp(1.0, c.msg_k);
                for (node_t v : plan.rows)
                    for (int h = 0; h < H; ++h)
                        for (int d = 0; d < D; ++d)
                            c.d_msg_exact[static_cast<std::size_t>(v) * (HD + H) + h * D + d] +=
                                static_cast<std::int64_t>(static_cast<double>(d_er(v, h)) * scale *
                                                          static_cast<double>(a_r_.value(h, d)));
            }
        } else {
            c.d_msg.resize(L, HD + H);
            plan.att->backward(msg_all.data(), c.er.data(), c.alpha.data(), d_att.data(), D, c.d_msg.data(),
                               d_er.data(), c.d_score.data());
            for (node_t v : plan.rows)
                for (int h = 0; h < H; ++h)
                    for (int d = 0; d < D; ++d)
                        c.d_msg(v, h * D + d) += d_er(v, h) * a_r_.value(h, d);
        }
        attn_r_gradient();
    }
    template <typename X>
    void message_backward(const X& x, const matrix<T>& msg, const message_gradients<T>& dm, layer_cache<T>&,
                          matrix<T>* d_x, const reduce_mode& mode)
    {
        const bool exact_mode = mode.exact && std::is_same_v<T, float>;
        const auto n = static_cast<node_t>(rows_of(x));
        const int H = heads_, D = head_dim_, HD = H * D;
        matrix<T> d_z = dm.leftCols(HD);
        const matrix<T> d_el = dm.rightCols(H);
        a_l_.grad.setZero();
        if (exact_mode) {
            T msg_max = 0; // over the rows whose messages were read (d_el nonzero): see z_max
            for (node_t u = 0; u < n; ++u)
                if (d_el.row(u).cwiseAbs().maxCoeff() > 0)
                    msg_max = std::max(msg_max, msg.row(u).cwiseAbs().maxCoeff());
            a_l_.exact_k = mode.scale_for({static_cast<double>(max_abs_of(d_el)), static_cast<double>(msg_max)});
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
#pragma omp parallel for schedule(static) if (worth_threads(static_cast <std::int64_t>(n) * H * D))
        for (node_t u = 0; u < n; ++u)
            for (int h = 0; h < H; ++h)
                for (int d = 0; d < D; ++d)
                    d_z(u, h * D + d) += d_el(u, h) * a_l_.value(h, d);
        weight_gradient(w_, lin_, x, d_z.data(), mode);
        if (d_x != nullptr) {
            d_x->resize(n, core_.in);
            lin_.backward_data(d_z.data(), n, w_.value.data(), d_x->data());
        }
    }
    void add_self_gradient(const layer_plan&, const layer_cache<T>&, matrix<T>&) const {}

    // ---- aggregating the inputs first (gnn_layer::forward_inputs)

    /// The cost of one forward pass in sgemm multiply-adds: transforming the support,
    /// S H D transform_width (the inputs' width counted as gemm_width()), against the weighted
    /// sums of the dense inputs (E edges, each reading a random input row for all heads:
    /// memory-bound, 50-70 sgemm multiply-adds per element here: perf/bench_kernels "GAT over
    /// inputs" measures 72 on 200 MB of inputs, amazon-computers' 24-40 MB supports 48),
    /// their projection (n H D in) and the scores' inputs (S 2H in).  The backward passes
    /// cost about as much again on either side.
    bool aggregates_inputs_first(const layer_plan& plan, double transform_width) const noexcept
    {
        if (!plan.att) return false;
        const double S = static_cast<double>(source_rows(plan)), n = static_cast<double>(plan.rows.size());
        const double E = static_cast<double>(plan.att->num_edges()), H = heads_, HD = H * head_dim_;
        return (64 * E + n * HD + 2 * S * H) * core_.in < S * HD * transform_width;
    }
    void forward_inputs(const layer_plan& plan, const matrix<T>& xs, layer_cache<T>& c, matrix<T>& out) const
    {
        const int H = heads_, D = head_dim_;
        const auto n = static_cast<Eigen::Index>(plan.rows.size());
        const auto in = static_cast<int>(xs.cols());
        // [el | er] of every row read: x times W_h a_l[h] and W_h a_r[h].
        matrix<T> w_scores(in, 2 * H), scores;
        for (int h = 0; h < H; ++h) {
            w_scores.col(h) = w_.value.middleCols(h * D, D) * a_l_.value.row(h).transpose();
            w_scores.col(H + h) = w_.value.middleCols(h * D, D) * a_r_.value.row(h).transpose();
        }
        lin_scores_.forward(xs, w_scores, matrix<T>(), scores);
        c.el = scores.leftCols(H);
        c.er = matrix<T>::Zero(att_of(plan).num_src(), H); // the plan rows' (the kernel reads those)
        for (Eigen::Index i = 0; i < n; ++i)
            c.er.row(dest_of(plan, i)) = scores.row(source_of(plan, i)).rightCols(H);
        c.alpha.resize(plan.att->num_edges(), H);
        c.y.resize(H * n, in);
        att_of(plan).forward_inputs(xs.data(), in, c.el.data(), c.er.data(), c.y.data(), c.alpha.data());
        // out_v[h] = y_v[h] W_h
        out = matrix<T>::Zero(n, concat_ ? H * D : D);
        matrix<T> w_h, out_h(n, D);
        for (int h = 0; h < H; ++h) {
            w_h = w_.value.middleCols(h * D, D);
            lin_head_.forward(c.y.data() + h * n * in, n, w_h.data(), static_cast<const T*>(nullptr), out_h.data());
            if (concat_)
                out.middleCols(h * D, D) = out_h;
            else
                out += out_h / static_cast<T>(H);
        }
        out.rowwise() += core_.b.value.row(0);
    }
    void backward_inputs(const layer_plan& plan, const matrix<T>& xs, layer_cache<T>& c, const matrix<T>& d_out)
    {
        const int H = heads_, D = head_dim_;
        const auto n = static_cast<Eigen::Index>(plan.rows.size());
        const auto S = xs.rows();
        const auto in = static_cast<int>(xs.cols());
        // W_h's gradient y[h]^T d_out[h], and d_y[h] = d_out[h] W_h^T.
        auto& d_y = c.d_y;
        d_y.resize(H * n, in);
        matrix<T> d_h(n, D), w_h, dw_h(in, D);
        for (int h = 0; h < H; ++h) {
            if (concat_)
                d_h = d_out.middleCols(h * D, D);
            else
                d_h = d_out / static_cast<T>(H);
            w_h = w_.value.middleCols(h * D, D);
            lin_head_.backward_weights(c.y.data() + h * n * in, d_h.data(), n, dw_h.data(), static_cast<T*>(nullptr));
            w_.grad.middleCols(h * D, D) = dw_h;
            lin_head_.backward_data(d_h.data(), n, w_h.data(), d_y.data() + h * n * in);
        }
        // The scores' gradients, then those of their in x 2H matrix: x^T [d_el | d_er].
        matrix<T> d_el(S, H), d_er(S, H), d_score(plan.att->num_edges(), H);
        att_of(plan).backward_inputs(xs.data(), in, c.el.data(), c.er.data(), c.alpha.data(), d_y.data(), d_el.data(),
                                     d_er.data(), d_score.data());
        matrix<T> d_scores = matrix<T>::Zero(S, 2 * H), d_w_scores(in, 2 * H);
        d_scores.leftCols(H) = d_el;
        for (Eigen::Index i = 0; i < n; ++i)
            d_scores.row(source_of(plan, i)).rightCols(H) += d_er.row(dest_of(plan, i));
        lin_scores_.backward_weights(xs.data(), d_scores.data(), S, d_w_scores.data(), static_cast<T*>(nullptr));
        // w_scores[:, h] = W_h a_l[h]: W_h += g a_l[h]^T, a_l[h] = W_h^T g (likewise a_r).
        for (int h = 0; h < H; ++h) {
            const auto w = w_.value.middleCols(h * D, D);
            w_.grad.middleCols(h * D, D) +=
                d_w_scores.col(h) * a_l_.value.row(h) + d_w_scores.col(H + h) * a_r_.value.row(h);
            a_l_.grad.row(h) = (w.transpose() * d_w_scores.col(h)).transpose();
            a_r_.grad.row(h) = (w.transpose() * d_w_scores.col(H + h)).transpose();
        }
    }

private:
    // Aggregating the inputs first reads the plan's support (att_inputs, sources at support
    // positions), or, where the support is every local row, every local row (att).
    static const gat_attention& att_of(const layer_plan& plan)
    {
        return plan.att_inputs ? *plan.att_inputs : *plan.att;
    }
    static node_t source_rows(const layer_plan& plan)
    {
        return att_of(plan).num_src();
    }
    /// Plan row i's position among the source rows, and its destination row in the kernel.
    static Eigen::Index source_of(const layer_plan& plan, Eigen::Index i)
    {
        const auto k = static_cast<std::size_t>(i);
        return plan.att_inputs ? plan.row_in_support[k] : plan.rows[k];
    }
    static Eigen::Index dest_of(const layer_plan& plan, Eigen::Index i)
    {
        return att_of(plan).out_rows()[static_cast<std::size_t>(i)];
    }

    layer_core<T> core_;
    int heads_, head_dim_;
    bool concat_;
    double negative_slope_;
    parameter<T> w_, a_l_, a_r_;
    linear_kernel lin_;
    linear_kernel lin_scores_, lin_head_; // aggregating the inputs first: x [W a_l | W a_r], y_h W_h
};

} // namespace kinds

// ---- any kind

/// The layer's kind: one class per kind, each with only its own parameters.
template <typename T>
struct gnn_layer<T>::impl {
    std::variant<kinds::gcn_layer<T>, kinds::sage_layer<T>, kinds::gat_layer<T>> kind;

    static impl make(layer_kind kind, int in, int out, const layer_options& o, std::uint64_t seed, std::uint64_t index,
                     const std::string& tag)
    {
        switch (kind) {
        case layer_kind::gcn:
            return {kinds::gcn_layer<T>(in, out, o, seed, index, tag)};
        case layer_kind::sage_mean:
        case layer_kind::sage_pool:
            return {kinds::sage_layer<T>(kind == layer_kind::sage_pool, in, out, o, seed, index, tag)};
        case layer_kind::gat:
            return {kinds::gat_layer<T>(in, out, o, seed, index, tag)};
        }
        RETEXO_THROW("retexo::gnn_layer: unknown layer kind " << static_cast<int>(kind));
    }
};

template <typename T>
gnn_layer<T>::gnn_layer(layer_kind kind, int in, int out, const layer_options& o, std::uint64_t seed,
                        std::uint64_t index, const std::string& name)
    : kind_(kind), impl_(std::make_unique<impl>(impl::make(
                       kind, in, out, o, seed, index, (name.empty() ? "layer" + std::to_string(index) : name) + ".")))
{
}

template <typename T>
gnn_layer<T>::gnn_layer(gnn_layer&&) noexcept = default;
template <typename T>
gnn_layer<T>& gnn_layer<T>::operator=(gnn_layer&&) noexcept = default;
template <typename T>
gnn_layer<T>::~gnn_layer() = default;

template <typename T>
int gnn_layer<T>::in() const noexcept
{
    return std::visit([](const auto& l) { return l.core().in; }, impl_->kind);
}

template <typename T>
int gnn_layer<T>::out() const noexcept
{
    return std::visit([](const auto& l) { return l.core().out; }, impl_->kind);
}

template <typename T>
int gnn_layer<T>::msg_width() const noexcept
{
    return std::visit([](const auto& l) { return l.msg_width(); }, impl_->kind);
}

template <typename T>
bool gnn_layer<T>::message_is_input() const noexcept
{
    return std::visit([](const auto& l) { return l.message_is_input(); }, impl_->kind);
}

template <typename T>
std::vector<parameter<T>*> gnn_layer<T>::parameters()
{
    return std::visit([](auto& l) { return l.parameters(); }, impl_->kind);
}

template <typename T>
layer_plan gnn_layer<T>::make_plan(const local_graph& g, std::span<const node_t> rows) const
{
    layer_plan p;
    p.rows.assign(rows.begin(), rows.end());
    p.num_owned = g.num_owned;
    p.num_local = g.num_local;
    std::visit([&](const auto& l) { l.plan_aggregation(g, rows, p); }, impl_->kind);
    if (p.agg) std::tie(p.interior, p.boundary) = p.agg->rows_within(g.num_owned);
    if (p.att) {
        std::vector<char> read(static_cast<std::size_t>(g.num_local), 0);
        for (node_t r : rows)
            read[static_cast<std::size_t>(r)] = 1;
        for (node_t u : p.att->edges().sources)
            read[static_cast<std::size_t>(u)] = 1;
        std::vector<node_t> position(read.size(), -1);
        for (node_t u = 0; u < g.num_local; ++u)
            if (read[static_cast<std::size_t>(u)]) {
                position[static_cast<std::size_t>(u)] = static_cast<node_t>(p.support.size());
                p.support.push_back(u);
            }
        for (node_t r : rows)
            p.row_in_support.push_back(position[static_cast<std::size_t>(r)]);
        if (p.support.size() == read.size()) { // every local row: the plain path, without a second buffer
            p.support.clear();
            p.row_in_support.clear();
        } else { // the plan's edges with the support's positions as sources
            csr by_position = p.att->edges();
            for (auto& u : by_position.sources)
                u = position[static_cast<std::size_t>(u)];
            p.att_inputs.emplace(
                by_position, static_cast<node_t>(p.support.size()),
                gat_options{.heads = p.att->heads(), .negative_slope = p.att->negative_slope(), .self_loops = false});
        }
    }
    return p;
}

template <typename T>
bool gnn_layer<T>::aggregates_inputs_first(const layer_plan& plan, double transform_width) const noexcept
{
    const auto* gat = std::get_if<kinds::gat_layer<T>>(&impl_->kind);
    return gat != nullptr && gat->aggregates_inputs_first(plan, transform_width);
}

template <typename T>
void gnn_layer<T>::forward_inputs(const layer_plan& plan, const matrix<T>& xs, layer_cache<T>& c, matrix<T>& out) const
{
    const auto* gat = std::get_if<kinds::gat_layer<T>>(&impl_->kind);
    RETEXO_ENSURE(gat != nullptr && plan.att, "retexo::gnn_layer::forward_inputs: a GAT plan");
    RETEXO_ENSURE_DIMS("gnn_layer::forward_inputs", "input rows", xs.rows(),
                       static_cast<Eigen::Index>(plan.support.empty() ? plan.num_local : plan.support.size()));
    RETEXO_ENSURE_DIMS("gnn_layer::forward_inputs", "input width", xs.cols(), Eigen::Index{in()});
    gat->forward_inputs(plan, xs, c, out);
}

template <typename T>
void gnn_layer<T>::backward_inputs(const layer_plan& plan, const matrix<T>& xs, layer_cache<T>& c,
                                   const matrix<T>& d_out, const reduce_mode& mode)
{
    auto* gat = std::get_if<kinds::gat_layer<T>>(&impl_->kind);
    RETEXO_ENSURE(gat != nullptr && plan.att, "retexo::gnn_layer::backward_inputs: a GAT plan");
    RETEXO_ENSURE(!mode.exact, "retexo::gnn_layer::backward_inputs: not in exact mode");
    RETEXO_ENSURE_DIMS("gnn_layer::backward_inputs", "gradient rows", d_out.rows(),
                       static_cast<Eigen::Index>(plan.rows.size()));
    bias_gradient(gat->core().b, d_out.data(), d_out.rows(), mode);
    gat->backward_inputs(plan, xs, c, d_out);
}

template <typename T>
template <typename X>
void gnn_layer<T>::message(const X& x, layer_cache<T>& c, matrix<T>& msg) const
{
    RETEXO_ENSURE_DIMS("gnn_layer::message", "input width", cols_of(x), Eigen::Index{in()});
    std::visit([&](const auto& l) { l.message(x, c, msg); }, impl_->kind);
}

template <typename T>
void gnn_layer<T>::aggregate_rows(const layer_plan& plan, const matrix<T>& msg_all, layer_cache<T>& c,
                                  std::span<const node_t> rows, bool halo_ready) const
{
    if (!plan.agg) return;
    RETEXO_ENSURE_DIMS("gnn_layer::aggregate_rows", "message rows", msg_all.rows(), Eigen::Index{plan.num_local});
    RETEXO_ENSURE_DIMS("gnn_layer::aggregate_rows", "message width", msg_all.cols(), Eigen::Index{msg_width()});
    const int w = msg_width();
    const bool max = plan.agg->kind() == aggregator::max;
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
    RETEXO_ENSURE_DIMS("gnn_layer::combine", "message rows", msg_all.rows(), Eigen::Index{plan.num_local});
    RETEXO_ENSURE_DIMS("gnn_layer::combine", "message width", msg_all.cols(), Eigen::Index{msg_width()});
    // The neighbour aggregation (gcn, sage), unless aggregate_rows() has done it.
    if (plan.agg && !aggregated) {
        plan.agg->forward(msg_all, c.agg, plan.agg->kind() == aggregator::max ? &c.argmax : nullptr);
    } else if (plan.agg) {
        RETEXO_ENSURE(c.agg.rows() == plan.agg->num_out() && c.agg.cols() == msg_width(),
                      "retexo::gnn_layer::combine: aggregate_rows was not called for this plan");
    }
    std::visit([&](const auto& l) { l.combine(plan, msg_all, x_rows, c, out); }, impl_->kind);
}

template <typename T>
template <typename X>
void gnn_layer<T>::combine_backward(const layer_plan& plan, const matrix<T>& msg_all, const X& x_rows,
                                    layer_cache<T>& c, const matrix<T>& d_out, bool need_messages,
                                    const reduce_mode& mode)
{
    const auto n = static_cast<Eigen::Index>(plan.rows.size());
    RETEXO_ENSURE_DIMS("gnn_layer::backward", "gradient rows", d_out.rows(), n);
    RETEXO_ENSURE_DIMS("gnn_layer::backward", "gradient width", d_out.cols(), Eigen::Index{out()});
    RETEXO_ENSURE(need_messages || !has_message_params(),
                  "retexo::gnn_layer::backward: message gradients are needed for the message parameters");
    std::visit(
        [&](auto& l) {
            bias_gradient(l.core().b, d_out.data(), n, mode);
            l.combine_backward(plan, msg_all, x_rows, c, d_out, need_messages, mode);
        },
        impl_->kind);
}

template <typename T>
template <typename X>
void gnn_layer<T>::message_backward(const X& x, const matrix<T>& msg, layer_cache<T>& c, matrix<T>* d_x,
                                    const reduce_mode& mode)
{
    const bool exact_mode = mode.exact && std::is_same_v<T, float>;
    matrix<T> converted;
    const auto dm = message_rows(c, static_cast<node_t>(rows_of(x)), msg_width(), exact_mode, converted);
    std::visit([&](auto& l) { l.message_backward(x, msg, dm, c, d_x, mode); }, impl_->kind);
}

template <typename T>
void gnn_layer<T>::add_self_gradient(const layer_plan& plan, const layer_cache<T>& c, matrix<T>& d_x) const
{
    std::visit([&](const auto& l) { l.add_self_gradient(plan, c, d_x); }, impl_->kind);
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

// The input forms each layer takes: dense rows of its type, sparse rows and column blocks (float).
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
RETEXO_LAYER_INPUT(float, column_blocks)
RETEXO_LAYER_INPUT(double, matrix<double>)
#undef RETEXO_LAYER_INPUT
template struct layer_norm<float>;
template struct layer_norm<double>;

} // namespace retexo::nn

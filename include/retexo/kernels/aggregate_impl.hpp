#pragma once
// Template bodies of aggregate.hpp, which includes this file at its end: include aggregate.hpp, not this.

#include <retexo/kernels/row_sums.hpp>

#include <algorithm>
#include <limits>

namespace retexo {

template <typename T, typename In>
void aggregation::forward(const In* x, int width, T* out, node_t* argmax) const
{
    forward_rows(x, width, out, argmax, {}, 0, num_src_);
}

template <typename T, typename In>
void aggregation::forward_subset(const In* x, int width, T* out, node_t* argmax, std::span<const node_t> subset,
                                 node_t check_begin, node_t check_end) const
{
    RETEXO_ENSURE(std::all_of(subset.begin(), subset.end(), [&](node_t i) { return i >= 0 && i < num_out(); }),
                  "retexo::aggregation::forward_subset: an output row index is out of range");
    RETEXO_ENSURE(0 <= check_begin && check_begin <= check_end && check_end <= num_src_,
                  "retexo::aggregation::forward_subset: bad range of checked input rows");
    forward_rows(x, width, out, argmax, subset, check_begin, check_end);
}

template <typename T, typename In>
void aggregation::forward_rows(const In* x, int width, T* out, node_t* argmax, std::span<const node_t> subset,
                               node_t check_begin, node_t check_end) const
{
    static_assert(std::is_floating_point_v<T>, "retexo::aggregation::forward: output must be float or double");
    RETEXO_ENSURE(width >= 0, "retexo::aggregation::forward: negative width " << width);
    RETEXO_ENSURE(kind_ != aggregator::max || argmax != nullptr,
                  "retexo::aggregation::forward: max aggregation needs an argmax buffer");
    if constexpr (std::is_same_v<In, float> || std::is_same_v<In, double>)
        check_finite("aggregation::forward", "input", x + static_cast<std::ptrdiff_t>(check_begin) * width,
                     static_cast<std::size_t>(check_end - check_begin) * width);
    const float* w = weight_.data(); // float for every T: one set of constants
    const bool all = subset.empty();
    const auto n = all ? static_cast<std::int64_t>(num_out()) : static_cast<std::int64_t>(subset.size());
    const auto& off = plan_.offsets;
    const auto& src = plan_.sources;
#pragma omp parallel for schedule(dynamic, 256) if (worth_threads(static_cast <std::int64_t>(src.size()) * width))
    for (std::int64_t k = 0; k < n; ++k) {
        const node_t i = all ? static_cast<node_t>(k) : subset[static_cast<std::size_t>(k)];
        T* o = out + static_cast<std::ptrdiff_t>(i) * width;
        const offset_t e0 = off[i], e1 = off[i + 1];
        if (kind_ == aggregator::max) {
            node_t* am = argmax + static_cast<std::ptrdiff_t>(i) * width;
            if (e0 == e1) {
                std::fill(o, o + width, T(0));
                std::fill(am, am + width, node_t(-1));
                continue;
            }
            const node_t u0 = src[e0];
            const In* x0 = x + static_cast<std::ptrdiff_t>(u0) * width;
            for (int f = 0; f < width; ++f) {
                o[f] = static_cast<T>(load(x0[f]));
                am[f] = u0;
            }
            for (offset_t e = e0 + 1; e < e1; ++e) {
                const node_t u = src[e];
                const In* xu = x + static_cast<std::ptrdiff_t>(u) * width;
                for (int f = 0; f < width; ++f) {
                    const T v = static_cast<T>(load(xu[f]));
                    if (v > o[f]) {
                        o[f] = v;
                        am[f] = u;
                    }
                }
            }
            continue;
        }
        std::fill(o, o + width, T(0));
        // bf16 rows narrower than a pass (label spreading's class counts) take the register
        // kernel too: 47 columns 430-445 ms against 535-545 in the loop below (1M nodes,
        // in-degree 20, 2 threads); at 128 and 256 columns the loop was 4% and 11% faster.
        if constexpr (std::is_same_v<T, float> && (std::is_same_v<In, float> || std::is_same_v<In, bf16>)) {
            if (std::is_same_v<In, float> || width < detail::gather_columns) {
                detail::add_terms<detail::gather_columns>(
                    e0, e1, [&](offset_t e) { return w[e]; },
                    [&](offset_t e) { return x + static_cast<std::ptrdiff_t>(src[e]) * width; }, width, o);
                continue;
            }
        }
        for (offset_t e = e0; e < e1; ++e) {
            if (e + 4 < e1) {
                const char* p = reinterpret_cast<const char*>(x + static_cast<std::ptrdiff_t>(src[e + 4]) * width);
                for (std::size_t b = 0; b < width * sizeof(In); b += 64)
                    __builtin_prefetch(p + b);
            }
            const In* xu = x + static_cast<std::ptrdiff_t>(src[e]) * width;
            const T we = static_cast<T>(w[e]);
#pragma omp simd
            for (int f = 0; f < width; ++f)
                o[f] += we * static_cast<T>(load(xu[f]));
        }
    }
}

template <typename T>
void aggregation::backward(const T* d_out, int width, T* d_x, const node_t* argmax) const
{
    RETEXO_ENSURE(kind_ != aggregator::max || argmax != nullptr,
                  "retexo::aggregation::backward: max aggregation needs the forward argmax");
    RETEXO_ENSURE(has_backward_, "retexo::aggregation::backward: the plan was built forward-only");
    check_finite("aggregation::backward", "d_out", d_out, static_cast<std::size_t>(num_out()) * width);
    const float* w = back_weight_.data();
    const auto& off = back_.offsets;
    const auto& dst = back_.sources;
#pragma omp parallel for schedule(dynamic, 256) if (worth_threads(static_cast <std::int64_t>(dst.size()) * width))
    for (node_t u = 0; u < num_src_; ++u) {
        T* g = d_x + static_cast<std::ptrdiff_t>(u) * width;
        std::fill(g, g + width, T(0));
        if constexpr (std::is_same_v<T, float>) {
            if (kind_ != aggregator::max) {
                detail::add_terms<detail::gather_columns>(
                    off[u], off[u + 1], [&](offset_t e) { return w[e]; },
                    [&](offset_t e) { return d_out + static_cast<std::ptrdiff_t>(dst[e]) * width; }, width, g);
                continue;
            }
        }
        for (offset_t e = off[u]; e < off[u + 1]; ++e) {
            if (e + 4 < off[u + 1]) {
                const char* p = reinterpret_cast<const char*>(d_out + static_cast<std::ptrdiff_t>(dst[e + 4]) * width);
                for (std::size_t b = 0; b < width * sizeof(T); b += 64)
                    __builtin_prefetch(p + b);
            }
            const node_t o = dst[e];
            const T* d = d_out + static_cast<std::ptrdiff_t>(o) * width;
            if (kind_ == aggregator::max) {
                const node_t* am = argmax + static_cast<std::ptrdiff_t>(o) * width;
                for (int f = 0; f < width; ++f)
                    if (am[f] == u) g[f] += d[f];
            } else {
                const T we = static_cast<T>(w[e]);
#pragma omp simd
                for (int f = 0; f < width; ++f)
                    g[f] += we * d[f];
            }
        }
    }
}

namespace reference {

template <typename T>
void aggregate_forward(const aggregation& plan, const T* x, int width, T* out, node_t* argmax)
{
    const auto& g = plan.edges();
    const auto w = plan.weights();
    for (node_t i = 0; i < plan.num_out(); ++i) {
        for (int f = 0; f < width; ++f) {
            if (plan.kind() == aggregator::max) {
                T best = 0;
                node_t arg = -1;
                for (offset_t e = g.offsets[i]; e < g.offsets[i + 1]; ++e) {
                    const T v = x[static_cast<std::ptrdiff_t>(g.sources[e]) * width + f];
                    if (arg < 0 || v > best) {
                        best = v;
                        arg = g.sources[e];
                    }
                }
                out[static_cast<std::ptrdiff_t>(i) * width + f] = best;
                argmax[static_cast<std::ptrdiff_t>(i) * width + f] = arg;
            } else {
                double s = 0;
                for (offset_t e = g.offsets[i]; e < g.offsets[i + 1]; ++e)
                    s += static_cast<double>(w[e]) * x[static_cast<std::ptrdiff_t>(g.sources[e]) * width + f];
                out[static_cast<std::ptrdiff_t>(i) * width + f] = static_cast<T>(s);
            }
        }
    }
}

template <typename T>
void aggregate_backward(const aggregation& plan, const T* d_out, int width, T* d_x, const node_t* argmax)
{
    const auto& g = plan.edges();
    const auto w = plan.weights();
    std::vector<double> acc(static_cast<std::size_t>(plan.num_src()) * width, 0.0);
    for (node_t i = 0; i < plan.num_out(); ++i)
        for (offset_t e = g.offsets[i]; e < g.offsets[i + 1]; ++e) {
            const node_t u = g.sources[e];
            for (int f = 0; f < width; ++f) {
                const double d = d_out[static_cast<std::ptrdiff_t>(i) * width + f];
                if (plan.kind() == aggregator::max) {
                    if (argmax[static_cast<std::ptrdiff_t>(i) * width + f] == u)
                        acc[static_cast<std::size_t>(u) * width + f] += d;
                } else {
                    acc[static_cast<std::size_t>(u) * width + f] += static_cast<double>(w[e]) * d;
                }
            }
        }
    for (std::size_t k = 0; k < acc.size(); ++k)
        d_x[k] = static_cast<T>(acc[k]);
}

} // namespace reference

extern template void aggregation::forward<float, float>(const float*, int, float*, node_t*) const;
extern template void aggregation::forward<float, bf16>(const bf16*, int, float*, node_t*) const;
extern template void aggregation::forward<double, double>(const double*, int, double*, node_t*) const;
extern template void aggregation::backward<float>(const float*, int, float*, const node_t*) const;
extern template void aggregation::backward<double>(const double*, int, double*, const node_t*) const;

} // namespace retexo

#pragma once
// Template bodies of loss.hpp, which includes this file at its end: include loss.hpp, not this.

#include <cmath>

namespace retexo {

template <typename T>
loss_result softmax_cross_entropy(const T* logits, int classes, std::span<const std::int32_t> labels,
                                  std::span<const node_t> rows, T grad_scale, T* d_logits, int exact_k)
{
    const auto n = static_cast<std::int64_t>(rows.size());
    std::vector<double> per_row(static_cast<std::size_t>(n));
#pragma omp parallel for schedule(static) if (worth_threads(n * classes * 16)) // two exp per entry
    for (std::int64_t i = 0; i < n; ++i) {
        const node_t r = rows[i];
        const T* z = logits + static_cast<std::ptrdiff_t>(r) * classes;
        const std::int32_t y = labels[r];
        double mx = z[0];
        for (int c = 1; c < classes; ++c)
            mx = std::max(mx, static_cast<double>(z[c]));
        double s = 0;
        for (int c = 0; c < classes; ++c)
            s += std::exp(static_cast<double>(z[c]) - mx);
        const double lse = mx + std::log(s);
        per_row[i] = lse - static_cast<double>(z[y]);
        if (d_logits != nullptr) {
            T* d = d_logits + static_cast<std::ptrdiff_t>(r) * classes;
            for (int c = 0; c < classes; ++c) {
                const double p = std::exp(static_cast<double>(z[c]) - lse);
                d[c] = static_cast<T>((p - (c == y ? 1.0 : 0.0)) * static_cast<double>(grad_scale));
            }
        }
    }
    loss_result res;
    res.count = n;
    const double scale = exact_k >= 0 ? std::ldexp(1.0, exact_k) : 0.0;
    for (std::int64_t i = 0; i < n; ++i) { // fixed order
        res.sum += per_row[i];
        if (exact_k >= 0) res.exact_sum += exact::fixed(per_row[i], scale);
    }
    if (!std::isfinite(res.sum)) RETEXO_THROW("retexo::softmax_cross_entropy: the loss is not finite (diverged?)");
    return res;
}

template <typename T>
std::int64_t count_correct(const T* logits, int classes, std::span<const std::int32_t> labels,
                           std::span<const node_t> rows)
{
    std::int64_t correct = 0;
    for (node_t r : rows) {
        const T* z = logits + static_cast<std::ptrdiff_t>(r) * classes;
        int best = 0;
        for (int c = 1; c < classes; ++c)
            if (z[c] > z[best]) best = c;
        correct += best == labels[r] ? 1 : 0;
    }
    return correct;
}

template <typename T>
std::vector<std::int32_t> predict(const T* logits, std::int64_t n, int classes)
{
    std::vector<std::int32_t> out(static_cast<std::size_t>(n));
    for (std::int64_t r = 0; r < n; ++r) {
        const T* z = logits + r * classes;
        int best = 0;
        for (int c = 1; c < classes; ++c)
            if (z[c] > z[best]) best = c;
        out[r] = best;
    }
    return out;
}

template <typename T>
std::vector<std::int64_t> confusion_matrix(const T* logits, int classes, std::span<const std::int32_t> labels,
                                           std::span<const node_t> rows)
{
    std::vector<std::int64_t> m(static_cast<std::size_t>(classes) * classes, 0);
    for (node_t r : rows) {
        const T* z = logits + static_cast<std::ptrdiff_t>(r) * classes;
        int best = 0;
        for (int c = 1; c < classes; ++c)
            if (z[c] > z[best]) best = c;
        ++m[static_cast<std::size_t>(labels[r]) * classes + best];
    }
    return m;
}

inline double micro_f1(std::span<const std::int64_t> confusion, int classes)
{
    // Micro-averaging pools true positives, false positives and false negatives over classes.
    std::int64_t tp = 0, fp = 0, fn = 0;
    for (int t = 0; t < classes; ++t)
        for (int p = 0; p < classes; ++p) {
            const auto c = confusion[static_cast<std::size_t>(t) * classes + p];
            if (t == p)
                tp += c;
            else {
                fp += c;
                fn += c;
            }
        }
    const double denom = static_cast<double>(2 * tp + fp + fn);
    return denom > 0 ? 2.0 * static_cast<double>(tp) / denom : 0.0;
}

} // namespace retexo

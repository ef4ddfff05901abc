#pragma once
/// @file loss.hpp
/// Softmax cross-entropy over a subset of rows, accuracy and micro-F1.

#include <retexo/kernels/common.hpp>
#include <retexo/kernels/exact.hpp>

#include <span>
#include <vector>

namespace retexo {

/// Result of a cross-entropy evaluation on one rank.
struct loss_result {
    double sum = 0;             ///< sum of -log p(label) over the rows
    std::int64_t count = 0;     ///< rows
    std::int64_t exact_sum = 0; ///< the sum in fixed point (exact mode)
};

/// Per-row cross-entropy of softmax(logits[rows[i]]) against labels[rows[i]]; when d_logits
/// is given it receives (softmax - onehot) * grad_scale on those rows (other rows untouched).
/// exact_k >= 0 also accumulates the loss in fixed point with scale 2^exact_k.
template <typename T>
loss_result softmax_cross_entropy(const T* logits, int classes, std::span<const std::int32_t> labels,
                                  std::span<const node_t> rows, T grad_scale, T* d_logits, int exact_k = -1);

/// Number of rows whose argmax (first maximum) equals the label.
template <typename T>
std::int64_t count_correct(const T* logits, int classes, std::span<const std::int32_t> labels,
                           std::span<const node_t> rows);

/// argmax of each row (first maximum).
template <typename T>
std::vector<std::int32_t> predict(const T* logits, std::int64_t n, int classes);

/// Micro-averaged F1 from a confusion matrix (classes x classes, rows = truth).  For
/// single-label multi-class prediction it equals accuracy.
double micro_f1(std::span<const std::int64_t> confusion, int classes);
/// Confusion counts over the rows (row-major classes x classes, rows = truth).
template <typename T>
std::vector<std::int64_t> confusion_matrix(const T* logits, int classes, std::span<const std::int32_t> labels,
                                           std::span<const node_t> rows);

} // namespace retexo

#include <retexo/kernels/loss_impl.hpp>

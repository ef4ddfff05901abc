#pragma once
// This machine's limits, measured in the same run as the benchmarks that are compared to
// them: STREAM-like triad bandwidth and oneDNN's sgemm throughput.

#include <retexo/kernels/linear.hpp>

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

namespace retexo::perf {

/// Best-of-repeats triad a[i] = b[i] + s * c[i] over n floats per array, all threads;
/// bytes counted as STREAM does (3 x 4 bytes per element).  GB/s.
inline double measure_triad_gbs(std::size_t n = std::size_t{1} << 26, int repeats = 8)
{
    std::vector<float> a(n), b(n), c(n);
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < n; ++i) {
        a[i] = 0.0F;
        b[i] = 1.0F;
        c[i] = 2.0F;
    }
    double best = 0;
    for (int r = 0; r < repeats; ++r) {
        const float s = 0.5F + static_cast<float>(r);
        const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for simd schedule(static)
        for (std::size_t i = 0; i < n; ++i)
            a[i] = b[i] + s * c[i];
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, 3.0 * 4.0 * static_cast<double>(n) / sec * 1e-9);
    }
    volatile float sink = a[n / 2];
    (void)sink;
    return best;
}

/// Best-of-repeats random row reads: every row of x (width floats) is read once, in a
/// shuffled order, and summed into a per-thread accumulator (no large writes), all threads.
/// GB/s of rows read.  This is the machine's limit for the access pattern of neighbour
/// aggregation on a graph without locality (each edge reads one random row).
inline double measure_gather_gbs(std::int64_t rows, int width, int repeats = 3)
{
    std::vector<float> x(static_cast<std::size_t>(rows) * width, 1.0F);
    std::vector<std::int64_t> perm(static_cast<std::size_t>(rows));
    for (std::int64_t i = 0; i < rows; ++i)
        perm[i] = static_cast<std::int64_t>((static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ULL) %
                                            static_cast<std::uint64_t>(rows));
    double best = 0;
    float total = 0;
    for (int r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : total)
        {
            std::vector<float> acc(static_cast<std::size_t>(width), 0.0F);
#pragma omp for schedule(static)
            for (std::int64_t i = 0; i < rows; ++i) {
                if (i + 8 < rows) {
                    const char* p = reinterpret_cast<const char*>(x.data() + perm[i + 8] * width);
                    for (int b = 0; b < width * 4; b += 64)
                        __builtin_prefetch(p + b);
                }
                const float* row = x.data() + perm[i] * width;
#pragma omp simd
                for (int f = 0; f < width; ++f)
                    acc[f] += row[f];
            }
            total += acc[0];
        }
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, 4.0 * static_cast<double>(rows) * width / sec * 1e-9);
    }
    volatile float sink = total;
    (void)sink;
    return best;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// The cost of an empty OpenMP parallel region, in microseconds, the median of repeats: after
/// a millisecond's pause (under OMP_WAIT_POLICY=passive the threads are asleep by then; with
/// libgomp's default they still spin), and back to back.  What a kernel's parallel region costs before its
/// work starts: the reason small loops stay on one thread (worth_threads).
inline std::pair<double, double> measure_region_us(int repeats = 41)
{
    const auto median_us = [&](bool pause) {
        std::vector<double> t;
        for (int r = 0; r < repeats; ++r) {
            if (pause) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
            {
                volatile int sink = omp_get_thread_num();
                (void)sink;
            }
            t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e6);
        }
        std::nth_element(t.begin(), t.begin() + repeats / 2, t.end());
        return t[static_cast<std::size_t>(repeats / 2)];
    };
    return {median_us(true), median_us(false)};
}

/// Best wall time of f over repeats (after one warm-up call).
template <typename F>
double best_time(F&& f, int repeats = 3)
{
    f();
    double best = 1e300;
    for (int r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        best = std::min(best, seconds_since(t0));
    }
    return best;
}

} // namespace retexo::perf

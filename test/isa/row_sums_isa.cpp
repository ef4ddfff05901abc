// The row-sum kernel (kernels/row_sums.hpp) built for one instruction set, the one this
// target's compiler flags choose (test/CMakeLists.txt builds it for SSE, AVX2 and AVX-512),
// checked bit for bit against the plain loop `for t: for k: out[k] += value(t) * row(t)[k]`:
// float and bf16 rows, every width from 1 to 300, both pass widths. test_serial checks the
// build machine's own instruction set; this checks the others a build may choose, so the masked
// tails (AVX2: float rows; AVX-512: float and bf16) and the scalar tail each meet the oracle
// wherever the CPU can run them. Elsewhere it reports SKIPPED. Also checked: the kernel writes
// no column past the row's width.
#include <retexo/kernels/row_sums.hpp>

#include <cstdio>
#include <random>
#include <vector>

namespace {

using retexo::bf16;
using retexo::offset_t;

struct problem {
    int rows = 0;                  // output rows
    std::vector<offset_t> offsets; // terms of output row i: [offsets[i], offsets[i + 1])
    std::vector<int> source;       // each term's input row
    std::vector<float> value;      // each term's weight
};

problem random_problem(int rows, int inputs, std::mt19937& rng)
{
    problem p;
    p.rows = rows;
    p.offsets.push_back(0);
    std::uniform_int_distribution<int> count(0, 30), row(0, inputs - 1);
    std::uniform_real_distribution<float> weight(-1.0F, 1.0F);
    for (int i = 0; i < rows; ++i) {
        for (int n = count(rng); n > 0; --n) {
            p.source.push_back(row(rng));
            p.value.push_back(weight(rng));
        }
        p.offsets.push_back(static_cast<offset_t>(p.source.size()));
    }
    return p;
}

constexpr int guard = 16; // columns after each output row that the kernel must not write
constexpr float guard_value = 12345.0F;

/// Failures of add_terms<Pass> against the plain loop on rows of T, `width` columns.
template <int Pass, typename T>
int check(const problem& p, const std::vector<T>& x, int width, const std::vector<float>& start)
{
    const int stride = width + guard;
    std::vector<float> want(start), got(start);
    for (int i = 0; i < p.rows; ++i) {
        float* o = want.data() + static_cast<std::ptrdiff_t>(i) * stride;
        for (offset_t t = p.offsets[i]; t < p.offsets[i + 1]; ++t) {
            const T* r = x.data() + static_cast<std::ptrdiff_t>(p.source[t]) * width;
            for (int k = 0; k < width; ++k)
                o[k] += p.value[t] * retexo::load(r[k]);
        }
        retexo::detail::add_terms<Pass>(
            p.offsets[i], p.offsets[i + 1], [&](offset_t t) { return p.value[t]; },
            [&](offset_t t) { return x.data() + static_cast<std::ptrdiff_t>(p.source[t]) * width; }, width,
            got.data() + static_cast<std::ptrdiff_t>(i) * stride);
    }
    int failures = 0;
    for (std::size_t j = 0; j < want.size(); ++j)
        if (want[j] != got[j] && failures++ < 3)
            std::printf("FAIL: pass %d, %s rows, width %d: element %zu is %.9g, the plain loop's %.9g\n", Pass,
                        sizeof(T) == 2 ? "bf16" : "float", width, j, static_cast<double>(got[j]),
                        static_cast<double>(want[j]));
    return failures;
}

[[gnu::noinline]] int run(const char* isa)
{
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    const int inputs = 120;
    const problem p = random_problem(40, inputs, rng);
    int failures = 0;
    for (int width = 1; width <= 300; ++width) {
        std::vector<float> x(static_cast<std::size_t>(inputs) * width);
        for (float& v : x)
            v = normal(rng);
        std::vector<bf16> xb(x.size());
        for (std::size_t j = 0; j < x.size(); ++j)
            xb[j] = bf16(x[j]);
        std::vector<float> start(static_cast<std::size_t>(p.rows) * (width + guard), guard_value);
        for (int i = 0; i < p.rows; ++i)
            for (int k = 0; k < width; ++k)
                start[static_cast<std::size_t>(i) * (width + guard) + k] = normal(rng);
        failures += check<retexo::detail::gather_columns>(p, x, width, start);
        failures += check<retexo::detail::block_columns>(p, x, width, start);
        failures += check<retexo::detail::gather_columns>(p, xb, width, start);
    }
    std::printf("%s: %s (masked tails: float %s, bf16 %s)\n", isa, failures == 0 ? "ok" : "FAILED",
                retexo::detail::masked_tail<float> ? "yes" : "no", retexo::detail::masked_tail<bf16> ? "yes" : "no");
    return failures == 0 ? 0 : 1;
}

} // namespace

int main()
{
#if defined(__AVX512F__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl")) {
        std::puts("SKIPPED: this CPU has no AVX-512 (F, BW, VL)");
        return 0;
    }
    return run("AVX-512");
#elif defined(__AVX2__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        std::puts("SKIPPED: this CPU has no AVX2 and FMA");
        return 0;
    }
    return run("AVX2");
#else
    return run("SSE");
#endif
}

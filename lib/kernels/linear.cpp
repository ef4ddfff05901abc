// The linear map through oneDNN (dense) or sparse x dense products, and its gradients.
#include <retexo/kernels/linear.hpp>

#include <oneapi/dnnl/dnnl.hpp>

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <numeric>
#include <span>
#include <vector>

namespace retexo {

namespace {

/// oneDNN's f32 GEMM computes a row in a way that depends on the row count of the call:
/// its register-blocked kernels take rows in groups, and the rows of a smaller last group,
/// or a single row, go through other kernels that add in another order (measured on AVX2
/// with oneDNN 2.6: groups of 24; a row of a 32-row call differs in its last bits from the
/// same row in a 48-row call).  So every call here has a row count that is a multiple of
/// row_quantum(): a row's bits then depend on its own inputs only, not on how many rows the
/// partition gave the rank or where they fall.  24 where oneDNN runs AVX2 kernels (fewer
/// rows computed twice), 48 on every other CPU (wider vectors take wider groups).
std::int64_t row_quantum()
{
    static const std::int64_t q = [] {
        const auto isa = dnnl::get_effective_cpu_isa();
        return isa == dnnl::cpu_isa::avx2 || isa == dnnl::cpu_isa::avx2_vnni ? std::int64_t{24} : std::int64_t{48};
    }();
    return q;
}
constexpr std::int64_t row_block = 480; // a multiple of every row_quantum()
constexpr std::int64_t col_block = 64;

/// Whether a product of m x k x n multiply-adds is worth waking the thread pool for: a core's
/// GEMM does about 16 of them in the time of one of worth_threads' simple operations.
bool gemm_worth_threads(std::int64_t m, std::int64_t k, std::int64_t n)
{
    return worth_threads(m * k * n / 16);
}

/// While it lives (when on), oneDNN runs single-threaded on this thread, as it does inside a
/// parallel region: the same kernels, so the same bits, without waking the pool.  A primitive
/// keeps the thread count it was made with: the serial ones (matmul_shape::serial) are made
/// while it lives.
class single_threaded_dnnl {
public:
    explicit single_threaded_dnnl(bool on) : was_(on ? omp_get_max_threads() : 0)
    {
        if (on) omp_set_num_threads(1);
    }
    ~single_threaded_dnnl()
    {
        if (was_ > 0) omp_set_num_threads(was_);
    }
    single_threaded_dnnl(const single_threaded_dnnl&) = delete;
    single_threaded_dnnl& operator=(const single_threaded_dnnl&) = delete;

private:
    int was_;
};

/// The row tiles of n rows: blocks of row_block, then the rest's whole quanta in one tile,
/// then its last rows in one call of a quantum: the quantum of rows that ends with them
/// (rows before them computed again, their outputs dropped), or where n is less than a
/// quantum, the rows padded with zero rows.
struct row_tiles {
    struct tile_t {
        std::int64_t r0, m;    ///< the call's first row and row count
        std::int64_t keep = 0; ///< in place (0), or the outputs kept: the call's last rows
        bool padded = false;   ///< the call reads a copy of the rows, padded with zero rows
    };
    std::int64_t n, q, full, aligned, tail, count;
    explicit row_tiles(std::int64_t rows)
        : n(rows), q(row_quantum()), full(n / row_block), aligned((n % row_block) / q * q),
          tail(n % row_block - aligned), count(full + (aligned > 0) + (tail > 0))
    {
    }
    tile_t tile(std::int64_t i) const
    {
        if (i < full) return {i * row_block, row_block};
        if (i == full && aligned > 0) return {full * row_block, aligned};
        if (n >= q) return {.r0 = n - q, .m = q, .keep = tail};
        return {.r0 = 0, .m = q, .keep = tail, .padded = true};
    }
};

dnnl::engine& cpu_engine()
{
    static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    return eng;
}

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

/// A matmul C (m x n) = A (m x k) B (k x n) (+ bias), A and B possibly transposed in memory,
/// each operand a block of a wider row-major array (its leading dimension); accumulating:
/// C += A B (+ bias).
struct matmul_shape {
    std::int64_t m, k, n;
    bool a_transposed = false, b_transposed = false, bias = false, accumulate = false;
    std::int64_t lda = 0, ldb = 0, ldc = 0; ///< 0: the operand's own width
    bool serial = false;                    ///< made for calls outside parallel regions (under single_threaded_dnnl)
    auto key() const { return std::tie(m, k, n, a_transposed, b_transposed, bias, accumulate, lda, ldb, ldc, serial); }
    bool operator<(const matmul_shape& o) const { return key() < o.key(); }
};

struct matmul_prim {
    dnnl::memory::desc a, b, c, bias, scratch;
    dnnl::matmul prim;
};

matmul_prim make_matmul(const matmul_shape& s)
{
    const auto ld = [](std::int64_t given, std::int64_t own) { return given > 0 ? given : own; };
    matmul_prim p;
    p.a = s.a_transposed ? dnnl::memory::desc(dims{s.m, s.k}, dt::f32, dims{1, ld(s.lda, s.m)})
                         : dnnl::memory::desc(dims{s.m, s.k}, dt::f32, dims{ld(s.lda, s.k), 1});
    p.b = s.b_transposed ? dnnl::memory::desc(dims{s.k, s.n}, dt::f32, dims{1, ld(s.ldb, s.k)})
                         : dnnl::memory::desc(dims{s.k, s.n}, dt::f32, dims{ld(s.ldb, s.n), 1});
    p.c = dnnl::memory::desc(dims{s.m, s.n}, dt::f32, dims{ld(s.ldc, s.n), 1});
    if (s.bias) p.bias = dnnl::memory::desc(dims{1, s.n}, dt::f32, dims{s.n, 1});
    // User-managed scratchpad: oneDNN's own scratchpad is shared and not safe for the
    // concurrent execution retexo does (one primitive per thread on different blocks).
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (s.accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0F);
        attr.set_post_ops(ops);
    }
#if DNNL_VERSION_MAJOR >= 3
    const auto pd = s.bias ? dnnl::matmul::primitive_desc(cpu_engine(), p.a, p.b, p.bias, p.c, attr)
                           : dnnl::matmul::primitive_desc(cpu_engine(), p.a, p.b, p.c, attr);
#else
    const auto d = s.bias ? dnnl::matmul::desc(p.a, p.b, p.bias, p.c) : dnnl::matmul::desc(p.a, p.b, p.c);
    const auto pd = dnnl::matmul::primitive_desc(d, attr, cpu_engine());
#endif
    p.scratch = pd.scratchpad_desc();
    p.prim = dnnl::matmul(pd);
    return p;
}

} // namespace

struct linear_kernel::impl {
    std::map<matmul_shape, matmul_prim> cache;
    std::mutex mutex;
    std::vector<dnnl::stream> streams;
    std::vector<std::vector<std::uint8_t>> scratch; // one scratchpad per thread
    std::vector<std::vector<float>> pad_a, pad_c;   // a last row tile's inputs and outputs, per thread
    std::vector<float> partial, bias_partial;       // weight-gradient chunk partials, reused

    const matmul_prim& get(const matmul_shape& shape)
    {
        std::lock_guard lock(mutex);
        auto it = cache.find(shape);
        if (it == cache.end()) {
            it = cache.emplace(shape, make_matmul(shape)).first;
            const auto need = it->second.scratch.get_size();
            for (auto& s : scratch)
                if (s.size() < need) s.resize(need);
            scratch_size = std::max(scratch_size, need);
        }
        return it->second;
    }
    /// Streams and scratchpads for every thread (call outside parallel regions).
    void ensure_threads()
    {
        std::lock_guard lock(mutex);
        const auto want = static_cast<std::size_t>(omp_get_max_threads());
        while (streams.size() < want)
            streams.emplace_back(cpu_engine());
        while (scratch.size() < want)
            scratch.emplace_back(scratch_size);
        pad_a.resize(std::max(pad_a.size(), want));
        pad_c.resize(std::max(pad_c.size(), want));
    }
    /// Run p on this thread's stream with its scratchpad.
    void run(const matmul_prim& p, std::unordered_map<int, dnnl::memory> args)
    {
        const auto t = static_cast<std::size_t>(omp_get_thread_num());
        args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.scratch, cpu_engine(), scratch[t].data()));
        p.prim.execute(streams[t], args);
        streams[t].wait();
    }
    /// One term a (n x depth) B of a row-blocked product: B (depth x cols) row-major or, with
    /// b_transposed, read transposed from a row-major cols x depth array.
    struct term {
        const float* a;
        std::int64_t depth;
        const float* b;
    };
    /// c (n x cols) = the sum of the terms a B, in term order (+ bias, with the first); bias
    /// may be null.  The output goes in tiles, one per iteration of an OpenMP loop, each on its
    /// thread's stream, every term of a tile one after another: row tiles (row_tiles) and,
    /// when there are fewer than four of them, column blocks of col_block, so that a product
    /// over a few hundred rows (a RETEXO stage's training or validation rows) still uses every
    /// core.  The tiles depend on the shape only, never on the thread count, and a tile's terms
    /// are the calls one product per term makes: the same bits, in one parallel region.  n must
    /// be positive.  accumulate: c += the terms (+ bias).
    void row_blocked(std::span<const term> terms, std::int64_t n, std::int64_t cols, bool b_transposed,
                     const float* bias, float* c, bool accumulate = false)
    {
        ensure_threads();
        const row_tiles rows(n);
        const std::int64_t width = rows.count < 4 && cols >= 2 * col_block ? col_block : cols;
        const std::int64_t col_blocks = (cols + width - 1) / width;
        const bool threads =
            gemm_worth_threads(n,
                               std::transform_reduce(terms.begin(), terms.end(), std::int64_t{0}, std::plus<>(),
                                                     [](const term& t) { return t.depth; }),
                               cols);
        const single_threaded_dnnl single(!threads);
        const auto shape = [&](std::size_t k, std::int64_t m, std::int64_t cb) {
            const std::int64_t depth = terms[k].depth;
            return matmul_shape{.m = m,
                                .k = depth,
                                .n = std::min(width, cols - cb * width),
                                .b_transposed = b_transposed,
                                .bias = k == 0 && bias != nullptr,
                                .accumulate = k > 0 || accumulate,
                                .ldb = b_transposed ? depth : cols,
                                .ldc = cols,
                                .serial = !threads};
        };
        // The (at most six per term) tile shapes, made before the parallel loop.
        for (std::size_t k = 0; k < terms.size(); ++k)
            for (std::int64_t rt = 0; rt < rows.count; ++rt)
                for (std::int64_t cb : {std::int64_t{0}, col_blocks - 1})
                    (void)get(shape(k, rows.tile(rt).m, cb));
        auto& eng = cpu_engine();
        // Tiles differ in size (the last row tiles are short): handed out one at a time, so
        // that the 480-row tiles of a 500-row product do not all fall to one thread.
#pragma omp parallel for schedule(dynamic) if (threads)
        for (std::int64_t tile = 0; tile < rows.count * col_blocks; ++tile) {
            const std::int64_t cb = tile % col_blocks, c0 = cb * width, w = std::min(width, cols - c0);
            const auto rt = rows.tile(tile / col_blocks);
            const auto t = static_cast<std::size_t>(omp_get_thread_num());
            // The outputs kept from a tile that is not in place: its last rt.keep rows (a
            // padded tile's rows come first, so there the first ones).
            const std::int64_t first = rt.padded ? 0 : rt.m - rt.keep;
            for (std::size_t k = 0; k < terms.size(); ++k) {
                const auto& p = get(shape(k, rt.m, cb));
                const std::int64_t depth = terms[k].depth;
                const float* at = terms[k].a + rt.r0 * depth;
                float* ct = c + rt.r0 * cols;
                if (rt.keep > 0) {
                    if (rt.padded) {
                        pad_a[t].assign(static_cast<std::size_t>(rt.m * depth), 0.0F);
                        std::copy(at, at + rt.keep * depth, pad_a[t].begin());
                        at = pad_a[t].data();
                    }
                    pad_c[t].resize(static_cast<std::size_t>(rt.m * cols));
                    if (k > 0 || accumulate)
                        for (std::int64_t r = first; r < first + rt.keep; ++r)
                            std::copy(ct + r * cols + c0, ct + r * cols + c0 + w, pad_c[t].data() + r * cols + c0);
                    ct = pad_c[t].data();
                }
                const float* bt = terms[k].b + (b_transposed ? c0 * depth : c0);
                dnnl::memory ma(p.a, eng, const_cast<float*>(at));
                dnnl::memory mb(p.b, eng, const_cast<float*>(bt));
                dnnl::memory mc(p.c, eng, ct + c0);
                std::unordered_map<int, dnnl::memory> args{
                    {DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
                if (k == 0 && bias != nullptr)
                    args.emplace(DNNL_ARG_BIAS, dnnl::memory(p.bias, eng, const_cast<float*>(bias + c0)));
                run(p, std::move(args));
                for (std::int64_t r = first; r < first + rt.keep; ++r)
                    std::copy(ct + r * cols + c0, ct + r * cols + c0 + w, c + (rt.r0 + r) * cols + c0);
            }
        }
    }
    /// One weight gradient of weight_gradient: dw (in x out) = x^T dy, x n x in.
    struct gradient_term {
        const float* x;
        int in;
        float* dw;
    };
    /// Every term's dw = x^T dy over n > 0 rows (the same dy), db (out) = column sums of dy
    /// (db may be null); overwritten, or added to.  Each summed over fixed row chunks.
    void weight_gradient(std::span<const gradient_term> terms, const float* dy, std::int64_t n, int out, float* db,
                         bool accumulate)
    {
        ensure_threads();
        const int chunks = reduction_blocks(n);
        // Row chunks and, when there are fewer than four, blocks of dw's rows (x's columns)
        // of col_block: tiles of the shape only.  Chunk row counts differ by at most one.
        const auto width = [&](std::size_t k) -> std::int64_t {
            const std::int64_t in = terms[k].in;
            return chunks < 4 && in >= 2 * col_block ? col_block : in;
        };
        const bool threads =
            gemm_worth_threads(n,
                               std::transform_reduce(terms.begin(), terms.end(), std::int64_t{0}, std::plus<>(),
                                                     [](const gradient_term& t) { return std::int64_t{t.in}; }),
                               out);
        const single_threaded_dnnl single(!threads);
        const auto shape = [&](std::size_t k, std::int64_t rows, std::int64_t ib) {
            const std::int64_t in = terms[k].in;
            return matmul_shape{.m = std::min(width(k), in - ib * width(k)),
                                .k = rows,
                                .n = out,
                                .a_transposed = true,
                                .lda = in,
                                .serial = !threads};
        };
        // Term k's partials at offset[k] of each chunk's; its tiles from tile0[k] on.
        std::vector<std::size_t> offset(terms.size() + 1, 0);
        std::vector<std::int64_t> tile0(terms.size() + 1, 0);
        for (std::size_t k = 0; k < terms.size(); ++k) {
            const std::int64_t in_blocks = (terms[k].in + width(k) - 1) / width(k);
            offset[k + 1] = offset[k] + static_cast<std::size_t>(terms[k].in) * out;
            tile0[k + 1] = tile0[k] + chunks * in_blocks;
            for (int c = 0; c < chunks; ++c) {
                const auto [r0, r1] = block_range(n, chunks, c);
                for (std::int64_t ib : {std::int64_t{0}, in_blocks - 1})
                    (void)get(shape(k, r1 - r0, ib));
            }
        }
        const std::size_t wsize = offset.back();
        // One chunk, overwriting: the tiles write dw itself.  0 + x is x but for the sign of
        // a zero gradient, which an optimiser step passes on only to a weight that is itself
        // exactly zero, and then only as that zero's sign.
        const bool direct = chunks == 1 && !accumulate;
        if (!direct && partial.size() < static_cast<std::size_t>(chunks) * wsize)
            partial.resize(static_cast<std::size_t>(chunks) * wsize);
        bias_partial.assign(static_cast<std::size_t>(chunks) * out, 0.0F);
        auto& eng = cpu_engine();
        // One parallel region: every term's tiles, then the fixed-order sums of their partials.
#pragma omp parallel if (threads)
        {
#pragma omp for schedule(static)
            for (std::int64_t tile = 0; tile < tile0.back(); ++tile) {
                const auto k =
                    static_cast<std::size_t>(std::upper_bound(tile0.begin(), tile0.end(), tile) - tile0.begin() - 1);
                const std::int64_t in_blocks = (tile0[k + 1] - tile0[k]) / chunks;
                const auto c = static_cast<int>((tile - tile0[k]) / in_blocks);
                const std::int64_t ib = (tile - tile0[k]) % in_blocks, i0 = ib * width(k);
                const auto [r0, r1] = block_range(n, chunks, c);
                const auto& p = get(shape(k, r1 - r0, ib));
                const std::int64_t in = terms[k].in;
                // A = X_c^T: (in x rows) read from row-major X_c (rows x in).
                dnnl::memory ma(p.a, eng, const_cast<float*>(terms[k].x + r0 * in + i0));
                dnnl::memory mb(p.b, eng, const_cast<float*>(dy + r0 * out));
                float* dst = direct ? terms[k].dw : partial.data() + static_cast<std::size_t>(c) * wsize + offset[k];
                dnnl::memory mc(p.c, eng, dst + i0 * out);
                run(p, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
                if (db != nullptr && k == 0 && ib == 0) {
                    float* bp = bias_partial.data() + static_cast<std::size_t>(c) * out;
                    for (std::int64_t r = r0; r < r1; ++r)
                        for (int j = 0; j < out; ++j)
                            bp[j] += dy[r * out + j];
                }
            }
            for (std::size_t k = 0; k < terms.size() && !direct; ++k) {
                float* dw = terms[k].dw;
                const float* pk = partial.data() + offset[k];
#pragma omp for schedule(static) nowait
                for (std::size_t i = 0; i < offset[k + 1] - offset[k]; ++i) {
                    float s = accumulate ? dw[i] : 0.0F;
                    for (int c = 0; c < chunks; ++c)
                        s += pk[static_cast<std::size_t>(c) * wsize + i];
                    dw[i] = s;
                }
            }
        }
        if (db != nullptr)
            for (int j = 0; j < out; ++j) {
                float s = accumulate ? db[j] : 0.0F;
                for (int c = 0; c < chunks; ++c)
                    s += bias_partial[static_cast<std::size_t>(c) * out + j];
                db[j] = s;
            }
    }
    std::size_t scratch_size = 0;
};

linear_kernel::linear_kernel(int in, int out) : in_(in), out_(out), impl_(std::make_unique<impl>())
{
    RETEXO_ENSURE(in > 0 && out > 0, "retexo::linear_kernel: dimensions must be positive, got " << in << " x " << out);
}
linear_kernel::~linear_kernel() = default;
linear_kernel::linear_kernel(linear_kernel&&) noexcept = default;
linear_kernel& linear_kernel::operator=(linear_kernel&&) noexcept = default;

template <>
void linear_kernel::forward<float>(const float* x, std::int64_t n, const float* w, const float* b, float* y) const
{
    check_finite("linear::forward", "x", x, static_cast<std::size_t>(n) * in_);
    if (n == 0) return;
    const impl::term t{x, in_, w};
    impl_->row_blocked({&t, 1}, n, out_, false, b, y);
}

template <>
void linear_kernel::backward_data<float>(const float* dy, std::int64_t n, const float* w, float* dx) const
{
    check_finite("linear::backward", "dy", dy, static_cast<std::size_t>(n) * out_);
    if (n == 0) return;
    // dx (m x in) = dy (m x out) * W^T (out x in): B is W read transposed.
    const impl::term t{dy, out_, w};
    impl_->row_blocked({&t, 1}, n, in_, true, nullptr, dx);
}

template <>
void linear_kernel::backward_weights<float>(const float* x, const float* dy, std::int64_t n, float* dw, float* db,
                                            bool accumulate) const
{
    if (n == 0) {
        if (!accumulate) {
            std::fill(dw, dw + static_cast<std::size_t>(in_) * out_, 0.0F);
            if (db != nullptr) std::fill(db, db + out_, 0.0F);
        }
        return;
    }
    const impl::gradient_term t{x, in_, dw};
    impl_->weight_gradient({&t, 1}, dy, n, out_, db, accumulate);
}

void linear_kernel::forward(const column_blocks& x, const matrix_f& w, const matrix_f& b, matrix_f& y) const
{
    check_shapes("linear::forward", cols_of(x), w, b);
    const Eigen::Index n = rows_of(x);
    y.resize(n, out_);
    if (n == 0) return;
    const float* bias = b.size() > 0 ? b.data() : nullptr;
    // Dense blocks side by side are one product of several terms (one parallel region); a
    // sparse block is its own.  The first term writes y (with the bias), the others add to it.
    std::vector<impl::term> dense;
    bool written = false;
    const auto flush = [&] {
        if (dense.empty()) return;
        impl_->row_blocked(dense, n, out_, false, written ? nullptr : bias, y.data(), written);
        dense.clear();
        written = true;
    };
    x.for_each([&]<typename X>(const X& block, Eigen::Index col0) {
        const float* wb = w.data() + col0 * out_;
        if constexpr (std::is_same_v<X, matrix_f>) {
            check_finite("linear::forward", "x", block.data(), static_cast<std::size_t>(block.size()));
            dense.push_back({block.data(), block.cols(), wb});
        } else {
            flush();
            sparse_linear_forward(block, wb, out_, written ? nullptr : bias, y.data(), written);
            written = true;
        }
    });
    flush();
}

void linear_kernel::backward_weights(const column_blocks& x, const float* dy, float* dw) const
{
    RETEXO_ENSURE_DIMS("linear::backward", "x columns", cols_of(x), Eigen::Index{in_});
    const Eigen::Index n = rows_of(x);
    std::vector<impl::gradient_term> dense; // every dense block's, in one parallel region
    x.for_each([&]<typename X>(const X& block, Eigen::Index col0) {
        float* dwb = dw + col0 * out_;
        if constexpr (std::is_same_v<X, matrix_f>) {
            if (n == 0)
                std::fill(dwb, dwb + block.cols() * out_, 0.0F);
            else
                dense.push_back({block.data(), static_cast<int>(block.cols()), dwb});
        } else {
            sparse_linear_backward_weights(block, dy, out_, dwb);
        }
    });
    if (!dense.empty()) impl_->weight_gradient(dense, dy, n, out_, nullptr, false);
}

// double: Eigen, same blocking.
namespace {
using md = Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
using mdw = Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
} // namespace

template <>
void linear_kernel::forward<double>(const double* x, std::int64_t n, const double* w, const double* b, double* y) const
{
    const md W(w, in_, out_);
    mdw Y(y, n, out_);
    Y.noalias() = md(x, n, in_) * W;
    if (b != nullptr) Y.rowwise() += Eigen::Map<const Eigen::RowVectorXd>(b, out_);
}

template <>
void linear_kernel::backward_data<double>(const double* dy, std::int64_t n, const double* w, double* dx) const
{
    mdw(dx, n, in_).noalias() = md(dy, n, out_) * md(w, in_, out_).transpose();
}

template <>
void linear_kernel::backward_weights<double>(const double* x, const double* dy, std::int64_t n, double* dw, double* db,
                                             bool accumulate) const
{
    mdw DW(dw, in_, out_);
    if (!accumulate) DW.setZero();
    DW.noalias() += md(x, n, in_).transpose() * md(dy, n, out_);
    if (db != nullptr) {
        Eigen::Map<Eigen::RowVectorXd> DB(db, out_);
        if (!accumulate) DB.setZero();
        DB += md(dy, n, out_).colwise().sum();
    }
}

namespace reference {
template <typename T>
void linear_forward(const T* x, std::int64_t n, int in, int out, const T* w, const T* b, T* y)
{
    for (std::int64_t r = 0; r < n; ++r)
        for (int j = 0; j < out; ++j) {
            double s = b != nullptr ? static_cast<double>(b[j]) : 0.0;
            for (int i = 0; i < in; ++i)
                s += static_cast<double>(x[r * in + i]) * static_cast<double>(w[i * out + j]);
            y[r * out + j] = static_cast<T>(s);
        }
}
template <typename T>
void linear_backward(const T* x, const T* dy, std::int64_t n, int in, int out, const T* w, T* dx, T* dw, T* db)
{
    for (std::int64_t r = 0; r < n; ++r)
        for (int i = 0; i < in; ++i) {
            double s = 0;
            for (int j = 0; j < out; ++j)
                s += static_cast<double>(dy[r * out + j]) * static_cast<double>(w[i * out + j]);
            dx[r * in + i] = static_cast<T>(s);
        }
    for (int i = 0; i < in; ++i)
        for (int j = 0; j < out; ++j) {
            double s = 0;
            for (std::int64_t r = 0; r < n; ++r)
                s += static_cast<double>(x[r * in + i]) * static_cast<double>(dy[r * out + j]);
            dw[i * out + j] = static_cast<T>(s);
        }
    for (int j = 0; j < out; ++j) {
        double s = 0;
        for (std::int64_t r = 0; r < n; ++r)
            s += static_cast<double>(dy[r * out + j]);
        db[j] = static_cast<T>(s);
    }
}
template void linear_forward<float>(const float*, std::int64_t, int, int, const float*, const float*, float*);
template void linear_forward<double>(const double*, std::int64_t, int, int, const double*, const double*, double*);
template void linear_backward<float>(const float*, const float*, std::int64_t, int, int, const float*, float*, float*,
                                     float*);
template void linear_backward<double>(const double*, const double*, std::int64_t, int, int, const double*, double*,
                                      double*, double*);
} // namespace reference

double measure_sgemm_gflops(int m, int k, int n, int repeats)
{
    const auto p = make_matmul({.m = m, .k = k, .n = n});
    std::vector<float> a(static_cast<std::size_t>(m) * k, 0.5F), b(static_cast<std::size_t>(k) * n, 0.25F),
        c(static_cast<std::size_t>(m) * n);
    auto& eng = cpu_engine();
    dnnl::stream s(eng);
    std::vector<std::uint8_t> scratch(p.scratch.get_size());
    dnnl::memory ma(p.a, eng, a.data()), mb(p.b, eng, b.data()), mc(p.c, eng, c.data()),
        ms(p.scratch, eng, scratch.data());
    const std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, ms}};
    p.prim.execute(s, args); // warm up
    s.wait();
    double best = 0;
    for (int r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        p.prim.execute(s, args);
        s.wait();
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, 2.0 * m * k * n / sec * 1e-9);
    }
    return best;
}

} // namespace retexo

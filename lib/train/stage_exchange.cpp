#include <retexo/comm/overlap.hpp>
#include <retexo/kernels/quantize.hpp>
#include <retexo/train/stage_exchange.hpp>

namespace retexo::train {

namespace {

/// Zero the rows of x listed in `rows` that fall in [begin, end).
template <typename T>
void zero_rows(matrix<T>& x, std::span<const node_t> rows, node_t begin, node_t end)
{
    for (node_t u : rows)
        if (u >= begin && u < end) x.row(u).setZero();
}

/// One block of a stage's inputs on the wire: every local row of it, stored as T (float for
/// fp32, bf16 below), the owned rows set and the halo rows arriving.  Stays in place while
/// the exchange is in flight (MPI writes the halo rows).
template <typename T>
class in_flight {
public:
    in_flight(const halo_plan& halo, const matrix_f& h, wire_precision precision, std::span<const node_t> zero,
              phase_timer& timer)
        : zero_(zero), own_(halo.num_owned()), x_(halo.num_owned() + halo.num_halo(), h.cols()),
          pending_(start(halo, h, precision, timer))
    {
        zero_rows(x_, zero_, 0, own_);
    }
    in_flight(const in_flight&) = delete;
    in_flight& operator=(const in_flight&) = delete;

    bool test() { return pending_.test(); }
    /// Completes the exchange: the halo rows are set.
    void wait()
    {
        pending_.wait();
        const node_t local = static_cast<node_t>(x_.rows());
        if (!got_.empty())
            dequantize_int8(got_.data(), local - own_, static_cast<int>(x_.cols()),
                            x_.data() + static_cast<std::ptrdiff_t>(own_) * x_.cols());
        zero_rows(x_, zero_, own_, local);
    }
    const matrix<T>& rows() const noexcept { return x_; }
    matrix<T>& rows() noexcept { return x_; }

private:
    /// Sets the owned rows (rounded to the wire precision) and starts the exchange.
    pending_exchange start(const halo_plan& halo, const matrix_f& h, wire_precision precision, phase_timer& timer)
    {
        const auto f = static_cast<int>(h.cols());
        if (precision == wire_precision::int8) {
            const int w = int8_row_bytes(f);
            sent_.resize(static_cast<std::size_t>(own_) * w);
            got_.resize(static_cast<std::size_t>(halo.num_halo()) * w);
            quantize_int8(h.data(), own_, f, sent_.data());
            dequantize_int8(sent_.data(), own_, f, x_.data());
            phase_timer::scope s(timer, "exchange");
            return halo.start_forward(sent_.data(), got_.data(), w);
        }
        if constexpr (std::is_same_v<T, float>)
            x_.topRows(own_) = h;
        else
            for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(own_) * f; ++i)
                x_.data()[i] = T(h.data()[i]);
        phase_timer::scope s(timer, "exchange");
        return halo.start_forward(h.data(), x_.data() + static_cast<std::ptrdiff_t>(own_) * f, f);
    }

    std::span<const node_t> zero_;
    node_t own_;
    matrix<T> x_;
    std::vector<std::uint8_t> sent_, got_; // int8: the quantised rows
    pending_exchange pending_;
};

} // namespace

stage_exchange::stage_exchange(const halo_plan& halo, const stage_exchange_options& options, phase_timer& timer)
    : halo_(halo), o_(options), timer_(timer)
{
    RETEXO_ENSURE(o_.columns >= 0, "--exchange-columns must be >= 0, got " << o_.columns);
}

stage_exchange::~stage_exchange()
{
    halo_.release_buffers();
}

matrix_f stage_exchange::local_rows(const matrix_f& h, std::span<const node_t> zero) const
{
    auto complete = [&](auto& x) {
        phase_timer::scope s(timer_, "exchange");
        x.wait();
    };
    if (o_.precision == wire_precision::fp32) {
        in_flight<float> x(halo_, h, o_.precision, zero, timer_);
        complete(x);
        return std::move(x.rows());
    }
    in_flight<bf16> x(halo_, h, o_.precision, zero, timer_);
    complete(x);
    return x.rows().cast<float>();
}

matrix_f stage_exchange::aggregate(const matrix_f& h, const nn::local_graph& g, aggregator kind,
                                   std::span<const node_t> zero) const
{
    return o_.precision == wire_precision::fp32 ? aggregate_as<float>(h, g, kind, zero)
                                                : aggregate_as<bf16>(h, g, kind, zero);
}

template <typename T>
matrix_f stage_exchange::aggregate_as(const matrix_f& h, const nn::local_graph& g, aggregator kind,
                                      std::span<const node_t> zero) const
{
    const node_t own = halo_.num_owned();
    const node_t local = own + halo_.num_halo();
    const auto F = static_cast<Eigen::Index>(h.cols());
    const auto [interior, boundary] = split_rows_within(*g.in_edges, own);
    matrix_f a(own, F);
    matrix_f out;
    const Eigen::Index block = o_.columns > 0 ? std::min<Eigen::Index>(o_.columns, F) : F;
    for (Eigen::Index c0 = 0; c0 < F; c0 += block) {
        const Eigen::Index w = std::min(block, F - c0);
        const matrix_f hb = w == F ? matrix_f() : matrix_f(h.middleCols(c0, w));
        in_flight<T> x(halo_, w == F ? h : hb, o_.precision, zero, timer_);
        // Rows are aggregated a chunk at a time, each chunk with its own plan (the sources
        // and weights of its edges): a few chunk-sized buffers instead of a plan of every
        // owned row.  Each output row is reduced alone in CSR order: chunks change no bit.
        overlap_rows(x, interior, boundary, o_.overlap, timer_, [&](std::span<const node_t> rows, bool halo_ready) {
            phase_timer::scope s(timer_, "aggregate");
            const aggregation agg(
                *g.in_edges, local,
                aggregation_options{.kind = kind, .in_degree = g.in_degree, .rows = rows, .backward = false});
            out.resize(static_cast<Eigen::Index>(rows.size()), w);
            agg.forward_subset(x.rows().data(), static_cast<int>(w), out.data(), nullptr, {}, 0,
                               halo_ready ? local : own);
            for (std::size_t i = 0; i < rows.size(); ++i)
                a.block(rows[i], c0, 1, w) = out.row(static_cast<Eigen::Index>(i));
        });
    }
    return a;
}

} // namespace retexo::train

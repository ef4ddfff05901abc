#pragma once
/// @file overlap.hpp
/// Computing while a halo exchange travels: the one loop both trainers use.
///
/// The rows a computation produces split into interior rows, which read owned rows only
/// (every in-neighbour is owned), and boundary rows, which also read halo rows.  With
/// overlap on, the interior rows are computed while the halo rows are in flight, in chunks,
/// and MPI progresses the exchange between chunks; then the exchange completes and the
/// boundary rows follow.  With overlap off the exchange completes first.  Each row is
/// computed exactly once either way, so a row-by-row computation gives the same bits.

#include <retexo/core/timer.hpp>
#include <retexo/core/types.hpp>

#include <algorithm>
#include <span>

namespace retexo {

/// Rows per chunk of overlapped work: between two chunks MPI may progress the exchange.
inline constexpr std::size_t overlap_chunk_rows = std::size_t{1} << 13;

/// work(rows, halo_ready) over interior then boundary rows, in chunks, around one exchange
/// (anything with test(), which lets MPI progress it, and wait(), which completes it; both
/// count as the timer's "exchange" phase).  halo_ready tells work whether the halo
/// rows may be read.
template <typename Exchange, typename Work>
void overlap_rows(Exchange& exchange, std::span<const node_t> interior, std::span<const node_t> boundary, bool overlap,
                  phase_timer& timer, Work&& work)
{
    auto each_chunk = [&](std::span<const node_t> rows, bool halo_ready, bool progress) {
        for (std::size_t r0 = 0; r0 < rows.size(); r0 += overlap_chunk_rows) {
            work(rows.subspan(r0, std::min(overlap_chunk_rows, rows.size() - r0)), halo_ready);
            if (progress) { // MPI's progress may yield the core to another rank (oversubscribed)
                phase_timer::scope s(timer, "exchange");
                exchange.test();
            }
        }
    };
    if (overlap) each_chunk(interior, false, true);
    {
        phase_timer::scope s(timer, "exchange");
        exchange.wait();
    }
    if (!overlap) each_chunk(interior, true, false);
    each_chunk(boundary, true, false);
}

} // namespace retexo

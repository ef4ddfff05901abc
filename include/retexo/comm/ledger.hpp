#pragma once
/// @file ledger.hpp
/// Byte accounting: every byte a rank sends (and receives) through MPI, by purpose.
///
/// Counting rules (per rank, payload bytes, self-messages excluded):
///   alltoallv       exact bytes to / from other ranks;
///   allreduce       2 (P-1)/P x payload each way (what ring reduce-scatter + allgather moves);
///   bcast           root sends (P-1) x payload, every other rank receives payload;
///   allgather(v)    each rank sends its piece to P-1 ranks and receives the others' pieces.
/// Summed over ranks these give the network volume of the collective regardless of the
/// algorithm MPI picks (tree or ring).  The reference implementation's convention, sent +
/// received per rank, is reported beside it.

#include <array>
#include <cstdint>
#include <string>

namespace retexo {

enum class purpose : int {
    setup = 0,     ///< halo-plan construction, partition checks
    halo_forward,  ///< node embeddings / features sent to the ranks that need them
    halo_backward, ///< gradients of halo rows sent back to their owners
    halo_eval,     ///< halo exchanges of evaluation-only forward passes
    gradients,     ///< gradient all-reduce
    parameters,    ///< parameter broadcast / best-model sync
    metrics,       ///< loss / accuracy reductions
    control,       ///< error agreement, early-stop decisions, small control values
    output,        ///< redistribution of results for writing (after training)
    checkpoint,    ///< agreement around checkpoint writes and resumes
    train_rows,    ///< training rows (GAT: with neighbourhoods) gathered once per stage (--replicate-train)
    smooth,        ///< class scores of halo rows, label spreading after training (train/smooth.hpp)
    count_
};

inline constexpr int num_purposes = static_cast<int>(purpose::count_);

inline const char* to_string(purpose p)
{
    static constexpr std::array<const char*, num_purposes> names = {
        "setup",   "halo_forward", "halo_backward", "halo_eval",  "gradients",  "parameters",
        "metrics", "control",      "output",        "checkpoint", "train_rows", "smooth"};
    return names[static_cast<int>(p)];
}

/// A network to emulate: every communication call on a rank is followed by a pause of
/// latency + bytes sent / bandwidth (bandwidth 0: no emulation).
struct network_model {
    double bandwidth_bits_per_s = 0;
    double latency_s = 0;
    bool enabled() const noexcept { return bandwidth_bits_per_s > 0 || latency_s > 0; }
    double seconds(std::uint64_t bytes) const noexcept
    {
        return latency_s + (bandwidth_bits_per_s > 0 ? 8.0 * static_cast<double>(bytes) / bandwidth_bits_per_s : 0.0);
    }
};

/// Per-rank byte and message counters.
struct byte_ledger {
    std::array<std::uint64_t, num_purposes> sent{};
    std::array<std::uint64_t, num_purposes> received{};
    std::array<std::uint64_t, num_purposes> messages{}; ///< point-to-point messages sent
    std::array<std::uint64_t, num_purposes> calls{};    ///< communication calls (rounds of latency)

    void add(purpose p, std::uint64_t bytes_sent, std::uint64_t bytes_received, std::uint64_t msgs = 0) noexcept
    {
        sent[static_cast<int>(p)] += bytes_sent;
        received[static_cast<int>(p)] += bytes_received;
        messages[static_cast<int>(p)] += msgs;
        calls[static_cast<int>(p)] += 1;
    }
    std::uint64_t total_calls() const noexcept
    {
        std::uint64_t t = 0;
        for (auto c : calls)
            t += c;
        return t;
    }
    std::uint64_t total_sent() const noexcept
    {
        std::uint64_t t = 0;
        for (auto b : sent)
            t += b;
        return t;
    }
    std::uint64_t sent_for(purpose p) const noexcept { return sent[static_cast<int>(p)]; }
    void reset() noexcept { *this = byte_ledger{}; }

    byte_ledger& operator+=(const byte_ledger& o) noexcept
    {
        for (int i = 0; i < num_purposes; ++i) {
            sent[i] += o.sent[i];
            received[i] += o.received[i];
            messages[i] += o.messages[i];
            calls[i] += o.calls[i];
        }
        return *this;
    }
    friend byte_ledger operator+(byte_ledger a, const byte_ledger& b) noexcept { return a += b; }
    friend byte_ledger operator-(byte_ledger a, const byte_ledger& b) noexcept
    {
        for (int i = 0; i < num_purposes; ++i) {
            a.sent[i] -= b.sent[i];
            a.received[i] -= b.received[i];
            a.messages[i] -= b.messages[i];
            a.calls[i] -= b.calls[i];
        }
        return a;
    }
};

} // namespace retexo

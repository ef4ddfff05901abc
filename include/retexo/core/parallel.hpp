#pragma once
/// @file parallel.hpp
/// When a loop is worth OpenMP threads.

#include <cstdint>

namespace retexo {

/// Whether a loop of `work` simple element operations is worth waking the thread pool for:
/// below about 32k (the grain PyTorch's parallel_for uses) one thread is faster, since a
/// parallel region costs a few tens of microseconds when idle threads sleep
/// (OMP_WAIT_POLICY=passive).  Every loop it guards computes the same bits either way.
inline bool worth_threads(std::int64_t work)
{
    return work >= (std::int64_t{1} << 17);
}

} // namespace retexo

#pragma once
/// @file parallel.hpp
/// When a loop is worth OpenMP threads.

#include <cstdint>

namespace retexo {

/// Whether a loop of `work` simple element operations is worth waking the thread pool for:
/// below about 128k one thread is faster, since a parallel region costs tens of microseconds
/// when idle threads sleep (OMP_WAIT_POLICY=passive; bench_kernels prints what it costs:
/// 50-85 us on a 2-core AMD EPYC VM, where 32k, PyTorch's grain, left a RETEXO round of
/// amazon-computers 30 regions).  Every loop it guards computes the same bits either way.
inline bool worth_threads(std::int64_t work)
{
    return work >= (std::int64_t{1} << 17);
}

} // namespace retexo

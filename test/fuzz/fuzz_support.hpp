#pragma once
// Shared by the fuzz targets: process-wide setup, done once in LLVMFuzzerInitialize (never per
// input), and the input as the byte span the readers take.

#include <retexo/io/hdf5.hpp>

#include <omp.h>

#include <cstdint>
#include <span>

namespace retexo::fuzz {

/// Once per process: HDF5 initialised and silenced, with room in its free lists of single
/// structures for the metadata cache every file open allocates and zeroes (about 0.5 MiB;
/// above the default limit of 64 KiB a list it is freed when the file closes and mapped afresh
/// for the next input, page faults that cost more than reading a small file); and one OpenMP
/// thread (the library's parallel loops would leave workers spinning between inputs on the
/// cores the fuzzer needs).
inline void init()
{
    H5open();
    h5::silence_errors();
    H5set_free_list_limits(16 << 20, 8 << 20, 4 << 20, 256 << 10, 16 << 20, 1 << 20);
    omp_set_num_threads(1);
}

/// libFuzzer's input as characters.
inline std::span<const char> chars(const std::uint8_t* data, std::size_t size)
{
    return {reinterpret_cast<const char*>(data), size};
}

} // namespace retexo::fuzz

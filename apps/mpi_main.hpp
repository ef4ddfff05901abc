#pragma once
// Process set-up for retexo_mpi: heap settings that keep an epoch's buffers mapped.  Errors are
// mapped to messages and exit codes by cli::run (cli.hpp), given the communicator.

#include "cli.hpp"

#include <malloc.h>

#include <cstdlib>
#include <string_view>

namespace retexo::cli {

/// Keeps freed buffers of up to 32 MB in the heap for the next epoch, and up to 1 GB of free
/// heap mapped: by default glibc unmaps every freed buffer above 128 KB (or its adaptive
/// threshold) and each epoch page-faults its buffers in again (cora standard GCN, 100 epochs:
/// 1.83 s -> 0.73 s, a third of it in the kernel's page-fault handler before).  Settings the
/// user made with GLIBC_TUNABLES win.
inline void keep_freed_buffers()
{
    const char* t = std::getenv("GLIBC_TUNABLES");
    const std::string_view tunables = t != nullptr ? t : "";
    if (tunables.find("mmap_threshold") == std::string_view::npos) mallopt(M_MMAP_THRESHOLD, 32 << 20);
    if (tunables.find("trim_threshold") == std::string_view::npos) mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

} // namespace retexo::cli

#pragma once
// Error handling for MPI tools: errors all ranks agreed on end the job cleanly (rank 0
// prints, every rank exits non-zero); an error only one rank knows of aborts the job with
// the message, so no rank is left waiting in a collective.

#include "cli.hpp"

#include <retexo/comm/communicator.hpp>

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

template <typename F>
int run_mpi(const std::string& tool, const mpi::communicator& comm, F&& body)
{
    const bool root = comm.rank() == 0;
    try {
        return body();
    } catch (const po::error& e) { // same argv on every rank: all ranks fail alike
        if (root) std::cerr << tool << ": error: " << e.what() << " (see " << tool << " --help)\n";
        return exit_usage;
    } catch (const mpi::agreed_error& e) {
        if (root) std::cerr << tool << ": error: " << e.what() << "\n";
        return exit_failure;
    } catch (const std::exception& e) {
        std::cerr << tool << ": error on rank " << comm.rank() << ": " << e.what() << " (aborting the job)\n";
        std::cerr.flush();
        MPI_Abort(comm.get(), exit_failure);
        return exit_failure;
    }
}

} // namespace retexo::cli

#pragma once
// Error handling for MPI tools: errors all ranks agreed on end the job cleanly (rank 0
// prints, every rank exits non-zero); an error only one rank knows of aborts the job with
// the message, so no rank is left waiting in a collective.

#include "cli.hpp"

#include <retexo/comm/communicator.hpp>

namespace retexo::cli {

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

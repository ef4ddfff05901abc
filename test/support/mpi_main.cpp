// Catch2 main for MPI tests.  Every rank runs every test case; rank 0 reports, other ranks
// write their report to a file shown only if they failed.  The exit code is the maximum over
// ranks, so a failing assertion on any rank fails the test on every rank.
// --hang-rank R: rank R waits for a debugger (gdb -p PID; set var retexo_wait = 0).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <mpi.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <unistd.h>

volatile int retexo_wait = 1;

int main(int argc, char** argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    std::vector<char*> args;
    int hang_rank = -1;
    for (int i = 0; i < argc; ++i) {
        if (std::string(argv[i]) == "--hang-rank" && i + 1 < argc) {
            hang_rank = std::stoi(argv[++i]);
            continue;
        }
        args.push_back(argv[i]);
    }
    if (rank == hang_rank) {
        std::cerr << "rank " << rank << " waiting for a debugger: gdb -p " << getpid() << "\n";
        while (retexo_wait != 0)
            sleep(1);
    }

    Catch::Session session;
    int rc = session.applyCommandLine(static_cast<int>(args.size()), args.data());
    std::string report;
    if (rc == 0) {
        if (rank != 0) {
            report = "/tmp/retexo-test-mpi-report." + std::to_string(getpid());
            session.configData().outputFilename = report;
        }
        rc = session.run();
    }
    int worst = rc;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!report.empty()) {
        if (rc != 0) {
            std::ifstream f(report);
            std::cerr << "---- report of rank " << rank << " of " << size << " ----\n" << f.rdbuf();
        }
        std::remove(report.c_str());
    }
    if (rank == 0 && worst != 0 && rc == 0)
        std::cerr << "rank 0 passed, but another rank failed (see its report above)\n";
    MPI_Finalize();
    return worst;
}

#pragma once
// Shared command-line plumbing of the retexo tools: option parsing with Boost.Program_options,
// uniform error reporting and exit codes (0 success, 1 runtime error, 2 usage error).

#include <retexo/core/error.hpp>
#include <retexo/version.hpp>

#include <boost/program_options.hpp>

#include <exception>
#include <iostream>
#include <string>

namespace retexo::cli {

namespace po = boost::program_options;

inline constexpr int exit_ok = 0;
inline constexpr int exit_failure = 1;
inline constexpr int exit_usage = 2;

/// Parse argv against `options`; prints help / version and returns false when the caller
/// should exit with `code`.
inline bool parse(int argc, char** argv, const std::string& tool, const std::string& usage,
                  const po::options_description& options, po::variables_map& vm, int& code, bool print = true)
{
    po::options_description all = options;
    all.add_options()("help,h", "show this help and exit")("version", "print the version and exit");
    po::store(po::command_line_parser(argc, argv).options(all).run(), vm);
    if (vm.count("help") != 0U) {
        if (print) std::cout << "Usage: " << usage << "\n\n" << all << "\n";
        code = exit_ok;
        return false;
    }
    if (vm.count("version") != 0U) {
        if (print) std::cout << tool << " (retexo) " << version_string << "\n";
        code = exit_ok;
        return false;
    }
    po::notify(vm);
    return true;
}

/// Run a tool body, turning exceptions into "tool: error: ..." and an exit code.
template <typename F>
int run(const std::string& tool, F&& body)
{
    try {
        return body();
    } catch (const po::error& e) {
        std::cerr << tool << ": error: " << e.what() << " (see " << tool << " --help)\n";
        return exit_usage;
    } catch (const std::exception& e) {
        std::cerr << tool << ": error: " << e.what() << "\n";
        return exit_failure;
    }
}

} // namespace retexo::cli

#pragma once
// Shared command-line plumbing of the retexo tools: option parsing with Boost.Program_options
// (--help and --version alike for every tool), and the one mapping of errors to messages and
// exit codes (0 success, 1 runtime error, 2 usage error), for serial tools and MPI tools alike.

#include <retexo/comm/communicator.hpp>
#include <retexo/core/error.hpp>
#include <retexo/core/names.hpp>
#include <retexo/version.hpp>

#include <boost/program_options.hpp>

#include <charconv>
#include <cstdint>
#include <exception>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace retexo::cli {

namespace po = boost::program_options;

inline constexpr int exit_ok = 0;
inline constexpr int exit_failure = 1;
inline constexpr int exit_usage = 2;

/// A usage error (exit 2, with a pointer to --help): a value the command line gives that
/// cannot be parsed, as Boost's own.
[[noreturn]] inline void usage_error(const std::string& message)
{
    throw po::error(message);
}

/// An enum option's value from its name; an unknown name is a usage error.
template <typename E>
E option_value(const std::string& text, const std::string& option)
{
    try {
        return parse_name<E>(text, option);
    } catch (const retexo::error& e) {
        usage_error(e.what());
    }
}

/// comm.checked(f) (every rank agrees on f's errors), where a usage error (a po::error: a value
/// of the command line or of --config that cannot be parsed) on any rank makes the agreed
/// error a usage error on every rank (exit 2, as when Boost itself cannot parse argv).
template <typename F>
void checked_options(const mpi::communicator& comm, F&& f)
{
    bool usage = false;
    try {
        comm.checked([&] {
            try {
                f();
            } catch (const po::error&) {
                usage = true;
                throw;
            }
        });
    } catch (const mpi::agreed_error& e) {
        if (comm.allreduce(usage ? 1 : 0, MPI_MAX, purpose::control) != 0) usage_error(e.what());
        throw;
    }
}

/// A floating-point default as --help shows it ("0.0005", not Boost's "0.00050000000000000001").
template <typename T>
po::typed_value<T>* value_shown(T* v)
{
    std::ostringstream o;
    o << *v;
    return po::value(v)->default_value(*v, o.str());
}

/// A seed as an option holds it: a decimal integer from 0 to 2^64 - 1. Boost alone reads "-1"
/// into a std::uint64_t as 2^64 - 1, a seed nobody meant; validate() below makes a sign, or
/// anything else that is not such an integer, a usage error.
struct seed {
    std::uint64_t value = 0;
};

/// Boost.Program_options' parser of `seed` (found by argument-dependent lookup).
inline void validate(boost::any& v, const std::vector<std::string>& values, seed* /*type*/, int /*overload*/)
{
    po::validators::check_first_occurrence(v);
    const std::string& text = po::validators::get_single_string(values);
    std::uint64_t x = 0;
    const char* end = text.data() + text.size();
    const auto [stop, ec] = std::from_chars(text.data(), end, x);
    if (text.empty() || ec != std::errc{} || stop != end)
        usage_error("--seed: '" + text + "' is not a seed (an integer from 0 to 2^64 - 1)");
    v = seed{x};
}

/// The --seed option, stored in `*target`.
inline po::typed_value<seed>* seed_value(std::uint64_t* target)
{
    return po::value<seed>()->default_value(seed{*target}, std::to_string(*target))->notifier([target](const seed& s) {
        *target = s.value;
    });
}

/// How parse() treats --help, --version and the options it stored.
struct parse_settings {
    bool print = true;  ///< print the help or version (false on every MPI rank but rank 0)
    bool notify = true; ///< po::notify(vm) once argv is stored; false: the caller stores more (a config file) first
    std::string version_help = "print the version and exit"; ///< --version's line in the help
    std::function<std::string()> version;                    ///< the --version text; default "<tool> (retexo) V\n"
};

/// Parse argv against `options`; prints help / version and returns false when the caller
/// should exit with `code`.
inline bool parse(int argc, char** argv, const std::string& tool, const std::string& usage,
                  const po::options_description& options, po::variables_map& vm, int& code,
                  const parse_settings& s = {})
{
    po::options_description all = options;
    all.add_options()("help,h", "show this help and exit")("version", s.version_help.c_str());
    const auto parsed = po::command_line_parser(argc, argv).options(all).run();
    for (const auto& o : parsed.options) // no positional arguments: a word without its option
        if (o.position_key >= 0 && !o.value.empty())
            usage_error("unexpected argument '" + o.value.front() + "' (options start with --)");
    po::store(parsed, vm);
    if (vm.count("help") != 0U) {
        if (s.print) std::cout << "Usage: " << usage << "\n\n" << all << "\n";
        code = exit_ok;
        return false;
    }
    if (vm.count("version") != 0U) {
        if (s.print) std::cout << (s.version ? s.version() : tool + " (retexo) " + version_string + "\n");
        code = exit_ok;
        return false;
    }
    if (s.notify) po::notify(vm);
    return true;
}

/// An error's message; running out of memory says what may have asked for too much.
inline std::string message_of(const std::exception& e)
{
    const std::string what = e.what();
    if (what.ends_with("std::bad_alloc"))
        return what + ": out of memory (a size such as --hidden, --layers, --heads or the graph's "
                      "num_classes or num_features may be too large for this machine)";
    return what;
}

/// The exit code of the exception being handled (call inside a catch block), its message on
/// stderr as "tool: error: ...".  `comm` is the MPI tool's communicator, null for a serial tool.
///  - a usage error (po::error; every rank has the same argv, so all fail alike): exit 2, the
///    message once (rank 0) with a pointer to --help;
///  - an error every rank raised together (mpi::agreed_error), or any error of a serial tool
///    or a job of one rank: exit 1, the message once (rank 0);
///  - an error only this rank of an MPI tool knows of: the message names the rank, and the job
///    is aborted (MPI_Abort), so no rank is left waiting in a collective.
inline int exit_code_of_current_exception(const std::string& tool, const mpi::communicator* comm)
{
    const bool root = comm == nullptr || comm->rank() == 0;
    try {
        throw;
    } catch (const po::error& e) {
        if (root) std::cerr << tool << ": error: " << e.what() << " (see " << tool << " --help)\n";
        return exit_usage;
    } catch (const mpi::agreed_error& e) {
        if (root) std::cerr << tool << ": error: " << message_of(e) << "\n";
        return exit_failure;
    } catch (const std::exception& e) {
        if (comm == nullptr || comm->size() == 1) { // no other rank to leave waiting
            std::cerr << tool << ": error: " << message_of(e) << "\n";
            return exit_failure;
        }
        std::cerr << tool << ": error on rank " << comm->rank() << ": " << message_of(e) << " (aborting the job)\n";
        std::cerr.flush();
        MPI_Abort(comm->get(), exit_failure);
        return exit_failure;
    }
}

/// Run a tool body, turning its exceptions into a message and an exit code (see
/// exit_code_of_current_exception).  MPI tools pass their communicator: every rank then exits
/// non-zero on an error, without hanging; serial tools pass none.
template <typename F>
int run(const std::string& tool, const mpi::communicator* comm, F&& body)
{
    try {
        return body();
    } catch (...) {
        return exit_code_of_current_exception(tool, comm);
    }
}

/// run() for a serial tool.
template <typename F>
int run(const std::string& tool, F&& body)
{
    return run(tool, nullptr, std::forward<F>(body));
}

} // namespace retexo::cli

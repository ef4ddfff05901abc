// A main() for a fuzz target built without libFuzzer (any compiler; the ctest fuzz_smoke):
// every seed input given (files, or directories of files) is run, then deterministic random
// mutations of them (bit flips, interesting bytes and integers, inserted digits and
// separators, erased, copied and spliced ranges) until --runs or --seconds is reached.  It
// prints the runs and runs/s.  A target lets only retexo::error out of its parser and catches
// it; any other exception fails the run, and a crash kills it.  Either way the input is saved
// as crash-<target>-<hash> in the working directory: replay it by giving that file alone,
// here or to the libFuzzer binary.
//   <target>_replay [--runs N] [--seconds S] [--seed X] [--max-len N] FILE|DIR...
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

namespace fs = std::filesystem;

const char* target_name = "fuzz";
const std::string* current = nullptr; // the input running, saved by the crash handler
char crash_path[256] = "";

std::uint64_t fnv1a(const std::string& s)
{
    std::uint64_t h = 1469598103934665603ULL;
    for (unsigned char c : s)
        h = (h ^ c) * 1099511628211ULL;
    return h;
}

/// crash-<target>-<hash of the input> (the name is made before the input runs: the signal
/// handler may only write).
void name_crash_file(const std::string& input)
{
    std::snprintf(crash_path, sizeof crash_path, "crash-%s-%016llx", target_name,
                  static_cast<unsigned long long>(fnv1a(input)));
}

void save_input(const std::string& input)
{
    std::ofstream(crash_path, std::ios::binary) << input;
    std::cerr << target_name << ": input (" << input.size() << " bytes) saved as " << crash_path << "\n";
}

extern "C" void on_crash(int sig)
{
    if (current != nullptr) { // async-signal-safe calls only
        const int fd = ::open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            [[maybe_unused]] const auto w = ::write(fd, current->data(), current->size());
            ::close(fd);
        }
        const char msg[] = ": crashed; input saved as ";
        [[maybe_unused]] auto w1 = ::write(2, target_name, std::strlen(target_name));
        [[maybe_unused]] auto w2 = ::write(2, msg, sizeof msg - 1);
        [[maybe_unused]] auto w3 = ::write(2, crash_path, std::strlen(crash_path));
        [[maybe_unused]] auto w4 = ::write(2, "\n", 1);
    }
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

/// Run one input; false (after saving it) if anything but a clean return came out.
bool run_one(const std::string& input)
{
    name_crash_file(input);
    current = &input;
    try {
        LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(input.data()), input.size());
    } catch (const std::exception& e) {
        std::cerr << target_name << ": FAILED: exception escaped the target: " << e.what() << "\n";
        save_input(input);
        return false;
    } catch (...) {
        std::cerr << target_name << ": FAILED: unknown exception escaped the target\n";
        save_input(input);
        return false;
    }
    current = nullptr;
    return true;
}

/// libFuzzer-style mutations, deterministic for a given generator state.
class mutator {
public:
    mutator(std::uint64_t seed, std::size_t max_len) : rng_(seed), max_len_(max_len) {}

    std::string mutate(std::string s, const std::vector<std::string>& corpus)
    {
        const int steps = 1 + static_cast<int>(below(8));
        for (int k = 0; k < steps; ++k)
            step(s, corpus);
        if (s.size() > max_len_) s.resize(max_len_);
        return s;
    }
    std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : rng_() % n; }

private:
    void step(std::string& s, const std::vector<std::string>& corpus)
    {
        static const char interesting_bytes[] = {0,   1,   0x7F, '\x80', '\xFF', '\n', '\r', ',',  ' ', '-', '+',
                                                 '.', 'e', 'n',  'i',    '0',    '1',  '9',  '\'', '(', ')', ':'};
        static const char* const tokens[] = {
            "0",          "1",   "-1",      "4294967296", "2147483648", "9223372036854775807",
            "1e308",      "nan", "inf",     ",",          "\n",         "\r\n",
            "<f4",        ">i8", "|b1",     "<f2",        "(0,)",       "True",
            "'shape': (", ", ",  "\x1f\x8b"};
        static const std::int64_t interesting_ints[] = {
            0,         1,        -1,     0x7F,       0x80,
            0xFF,      0x7FFF,   0xFFFF, 0x7FFFFFFF, static_cast<std::int64_t>(0xFFFFFFFFULL),
            INT64_MAX, INT64_MIN};
        const std::size_t at = static_cast<std::size_t>(below(s.size() + 1));
        switch (below(10)) {
        case 0: // flip a bit
            if (!s.empty()) s[at % s.size()] ^= static_cast<char>(1U << below(8));
            break;
        case 1: // a random byte
            if (!s.empty()) s[at % s.size()] = static_cast<char>(below(256));
            break;
        case 2: // an interesting byte
            if (!s.empty()) s[at % s.size()] = interesting_bytes[below(sizeof interesting_bytes)];
            break;
        case 3: // insert random bytes
            s.insert(at, static_cast<std::size_t>(1 + below(4)), static_cast<char>(below(256)));
            break;
        case 4: // erase a range
            if (!s.empty())
                s.erase(at % s.size(), static_cast<std::size_t>(1 + below(std::min<std::size_t>(s.size(), 16))));
            break;
        case 5: // insert a token
            s.insert(at, tokens[below(std::size(tokens))]);
            break;
        case 6: { // overwrite with an interesting integer (little-endian, 1, 2, 4 or 8 bytes)
            const std::int64_t v = interesting_ints[below(std::size(interesting_ints))];
            const std::size_t n = std::size_t{1} << below(4);
            if (s.size() >= n) std::memcpy(s.data() + below(s.size() - n + 1), &v, n);
            break;
        }
        case 7: // copy a range elsewhere
            if (!s.empty()) {
                const std::size_t from = static_cast<std::size_t>(below(s.size()));
                const std::size_t n = static_cast<std::size_t>(1 + below(std::min<std::size_t>(s.size() - from, 64)));
                s.insert(at, s.substr(from, n));
            }
            break;
        case 8: { // splice in a piece of another input
            const std::string& o = corpus[below(corpus.size())];
            if (!o.empty()) {
                const std::size_t from = static_cast<std::size_t>(below(o.size()));
                s.insert(at, o.substr(from, static_cast<std::size_t>(1 + below(o.size() - from))));
            }
            break;
        }
        default: // add to a number written in ASCII
            for (std::size_t i = 0; i < s.size(); ++i) {
                char& c = s[(at + i) % s.size()];
                if (c >= '0' && c <= '9') {
                    c = static_cast<char>('0' + (c - '0' + 1 + below(9)) % 10);
                    break;
                }
            }
        }
    }

    std::mt19937_64 rng_;
    std::size_t max_len_;
};

std::string read_file(const fs::path& p)
{
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

int usage(const char* argv0)
{
    std::cerr << "usage: " << argv0 << " [--runs N] [--seconds S] [--seed X] [--max-len N] FILE|DIR...\n";
    return 2;
}

} // namespace

int main(int argc, char** argv)
{
    std::string name = fs::path(argv[0]).filename().string();
    if (name.ends_with("_replay")) name.resize(name.size() - 7);
    static std::string name_storage = name;
    target_name = name_storage.c_str();

    std::uint64_t runs = 0, seed = 1;
    double seconds = 5;
    std::size_t max_len = 1 << 16;
    std::vector<std::string> corpus;
    std::size_t seeds = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const bool has_value = i + 1 < argc;
        if (a == "--runs" && has_value)
            runs = std::stoull(argv[++i]);
        else if (a == "--seconds" && has_value)
            seconds = std::stod(argv[++i]);
        else if (a == "--seed" && has_value)
            seed = std::stoull(argv[++i]);
        else if (a == "--max-len" && has_value)
            max_len = std::stoull(argv[++i]);
        else if (a.starts_with("--"))
            return usage(argv[0]);
        else if (fs::is_directory(a)) {
            std::vector<fs::path> files;
            for (const auto& e : fs::directory_iterator(a))
                if (e.is_regular_file()) files.push_back(e.path());
            std::sort(files.begin(), files.end()); // deterministic order
            for (const auto& f : files)
                corpus.push_back(read_file(f));
        } else if (fs::is_regular_file(a)) {
            corpus.push_back(read_file(a));
        } else {
            std::cerr << target_name << ": " << a << ": no such file or directory\n";
            return 2;
        }
    }
    if (corpus.empty()) corpus.emplace_back(); // mutations of the empty input
    seeds = corpus.size();

    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
        std::signal(sig, on_crash);
    if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);

    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    std::uint64_t done = 0;
    for (const auto& input : corpus) {
        if (!run_one(input)) return 1;
        ++done;
    }
    // Mutations: of a seed, or (one time in four) of the previous mutant, so changes stack up.
    mutator m(seed, max_len);
    std::string last = corpus[0];
    const bool only_seeds = seconds <= 0 && runs == 0;
    while (!only_seeds && (runs == 0 || done < runs) &&
           (seconds <= 0 || std::chrono::duration<double>(clock::now() - t0).count() < seconds)) {
        const std::string& base = m.below(4) == 0 ? last : corpus[m.below(corpus.size())];
        last = m.mutate(base, corpus);
        if (!run_one(last)) return 1;
        ++done;
    }
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    std::cout << target_name << ": " << done << " runs (" << seeds << " seeds, " << done - std::min(done, seeds)
              << " mutations, seed " << seed << ") in " << s
              << " s: " << static_cast<std::uint64_t>(done / std::max(s, 1e-9)) << " runs/s, no failure\n";
    return 0;
}

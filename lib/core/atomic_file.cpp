// Files that appear only when complete: written under a temporary name, then renamed.
#include <retexo/core/atomic_file.hpp>

#include <filesystem>
#include <retexo/core/error.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <unistd.h>
#include <vector>

namespace retexo {

atomic_file::atomic_file(std::string path) : path_(std::move(path))
{
    RETEXO_ENSURE(!path_.empty(), "output file name is empty");
    temp_ = path_ + ".tmp." + std::to_string(::getpid());
}

atomic_file::~atomic_file()
{
    if (!committed_) std::remove(temp_.c_str());
}

void atomic_file::commit(bool keep_previous)
{
    if (keep_previous && ::access(path_.c_str(), F_OK) == 0) {
        const std::string prev = path_ + "_prev";
        RETEXO_ENSURE(std::rename(path_.c_str(), prev.c_str()) == 0,
                      path_ << ": cannot rename to " << prev << ": " << std::strerror(errno));
    }
    RETEXO_ENSURE(std::rename(temp_.c_str(), path_.c_str()) == 0,
                  path_ << ": cannot move " << temp_ << " into place: " << std::strerror(errno));
    committed_ = true;
}

committed_files::~committed_files()
{
    if (kept_) return;
    for (const auto& p : paths_)
        std::remove(p.c_str());
    for (const auto& d : dirs_)
        ::rmdir(d.c_str()); // only if empty
}

void write_text_atomic(const std::string& path, const std::string& text)
{
    atomic_file out(path);
    {
        std::ofstream f(out.temp_path(), std::ios::binary);
        RETEXO_ENSURE(f.good(), path << ": cannot open for writing: " << std::strerror(errno));
        f << text;
        f.flush();
        RETEXO_ENSURE(f.good(), path << ": write failed: " << std::strerror(errno));
    }
    out.commit();
}

void check_output_file(const std::string& path, const std::string& option)
{
    namespace fs = std::filesystem;
    RETEXO_ENSURE(!path.empty(), option << ": the file name is empty");
    std::error_code ec;
    RETEXO_ENSURE(!fs::is_directory(path, ec), option << " " << path << ": is a directory, not a file");
    const fs::path parent = fs::path(path).parent_path();
    const std::string dir = parent.empty() ? "." : parent.string();
    RETEXO_ENSURE(fs::is_directory(dir, ec), option << " " << path << ": the directory " << dir << " does not exist");
    RETEXO_ENSURE(::access(dir.c_str(), W_OK) == 0,
                  option << " " << path << ": cannot write in " << dir << ": " << std::strerror(errno));
}

void create_output_directory(const std::string& dir, committed_files& output)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    std::vector<fs::path> missing; // deepest first
    fs::path d = fs::absolute(dir, ec).lexically_normal();
    if (!d.has_filename()) d = d.parent_path(); // "a/b/" is a/b
    for (; !d.empty() && d != d.parent_path() && !fs::exists(d, ec); d = d.parent_path())
        missing.push_back(d);
    fs::create_directories(dir, ec);
    RETEXO_ENSURE(!ec && fs::is_directory(dir), dir << ": cannot create directory: " << ec.message());
    for (const auto& made : missing)
        output.add_directory(made.string());
}

} // namespace retexo

// Files that appear only when complete: written under a temporary name, then renamed.
#include <retexo/core/atomic_file.hpp>

#include <filesystem>
#include <retexo/core/error.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <unistd.h>

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

void create_output_directory(const std::string& dir)
{
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    RETEXO_ENSURE(!ec && std::filesystem::is_directory(dir), dir << ": cannot create directory: " << ec.message());
}

} // namespace retexo

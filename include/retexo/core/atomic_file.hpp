#pragma once
/// @file atomic_file.hpp
/// Output files that are never left half-written: data goes to a temporary file next to the
/// target, which is renamed over the target only on commit().  Without commit() (an error,
/// an exception) the temporary file is removed and the target is untouched.

#include <string>
#include <vector>

namespace retexo {

class atomic_file {
public:
    /// Reserve `path`; write to temp_path() and call commit() when complete.
    explicit atomic_file(std::string path);
    atomic_file(const atomic_file&) = delete;
    atomic_file& operator=(const atomic_file&) = delete;
    ~atomic_file(); ///< removes the temporary file unless committed

    const std::string& path() const noexcept { return path_; }
    const std::string& temp_path() const noexcept { return temp_; }

    /// Rename the temporary file onto path().  If keep_previous, an existing path() is first
    /// renamed to path() + "_prev" (checkpoint rotation).
    void commit(bool keep_previous = false);

private:
    std::string path_;
    std::string temp_;
    bool committed_ = false;
};

/// The files of a several-file output (a partitioned directory, owner shards) committed so
/// far, and the directories made for it: removed again if it is destroyed before keep(), when
/// a later file fails, so that a failed run leaves none of its files behind (a directory only
/// when empty: another rank may still be removing its file there).
class committed_files {
public:
    committed_files() = default;
    committed_files(const committed_files&) = delete;
    committed_files& operator=(const committed_files&) = delete;
    ~committed_files();
    void add(std::string path) { paths_.push_back(std::move(path)); }
    /// A directory this output created (removed after the files, in the order added).
    void add_directory(std::string dir) { dirs_.push_back(std::move(dir)); }
    void keep() noexcept { kept_ = true; }

private:
    std::vector<std::string> paths_;
    std::vector<std::string> dirs_;
    bool kept_ = false;
};

/// Write `text` to `path` atomically.
void write_text_atomic(const std::string& path, const std::string& text);

/// Check, before any work, that an output file can be written at `path`: it is not a
/// directory and its directory exists and is writable; throws naming `option` and the path.
void check_output_file(const std::string& path, const std::string& option);

/// Create a directory for output files (and its parents) if it does not exist; throws naming
/// it when that fails.  The directories it creates are added to `output` (deepest first), to
/// be removed if the output fails.
void create_output_directory(const std::string& dir, committed_files& output);

} // namespace retexo

#pragma once
/// @file text_reader.hpp
/// Streaming line reader over plain or gzip-compressed text (zlib), plus number parsing
/// with error messages that name the file and line.

#include <retexo/core/error.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace retexo {

/// Reads lines from a .gz (or plain) text file through a large buffer; a line is valid until
/// the next call to next().
class text_reader {
public:
    explicit text_reader(std::string path, std::size_t buffer_bytes = std::size_t{4} << 20);
    /// Read the text held in `bytes`, which must outlive the reader; `name` stands for the file
    /// in error messages.  Nothing touches the disk and the buffer is no larger than the text
    /// (tests, fuzzing); the lines come out of the same code as a file's.  gzip text (`bytes`
    /// starting with the gzip magic) is decompressed whole here, read as gzread reads a file.
    text_reader(std::string name, std::span<const char> bytes, std::size_t buffer_bytes = std::size_t{4} << 20);
    text_reader(const text_reader&) = delete;
    text_reader& operator=(const text_reader&) = delete;
    ~text_reader();

    /// Next line without its newline (and without a trailing `\r`); false at end of file.
    bool next(std::string_view& line);
    /// 1-based number of the line last returned.
    std::int64_t line_number() const noexcept { return line_no_; }
    const std::string& path() const noexcept { return path_; }
    /// "path:line" for error messages.
    std::string where() const { return path_ + ":" + std::to_string(line_no_); }

private:
    bool refill();
    int read_memory(char* out, std::size_t n);
    std::string path_;
    void* gz_ = nullptr;
    std::span<const char> memory_; ///< the memory reader's text not yet read
    std::string inflated_;         ///< the memory reader's text, when `bytes` was gzip
    std::string memory_error_;     ///< zlib's message if that gzip data is corrupt after memory_
    std::vector<char> buf_;
    std::size_t begin_ = 0, end_ = 0;
    bool eof_ = false;
    std::int64_t line_no_ = 0;
};

/// Parse one number, the whole of `field`; throws naming `where` on failure.
template <typename T>
T parse_number(std::string_view field, const std::string& where)
{
    while (!field.empty() && (field.front() == ' ' || field.front() == '\t'))
        field.remove_prefix(1);
    while (!field.empty() && (field.back() == ' ' || field.back() == '\t'))
        field.remove_suffix(1);
    T value{};
    const auto* first = field.data();
    const auto* last = field.data() + field.size();
    const auto [ptr, ec] = std::from_chars(first, last, value);
    RETEXO_ENSURE(ec == std::errc() && ptr == last && !field.empty(),
                  where << ": '" << field << "' is not a valid " << (std::is_integral_v<T> ? "integer" : "number"));
    if constexpr (std::is_floating_point_v<T>)
        RETEXO_ENSURE(std::isfinite(value), where << ": non-finite value '" << field << "'");
    return value;
}

/// Split a comma-separated line into numbers appended to `out`; returns how many were read.
template <typename T>
std::size_t parse_csv_numbers(std::string_view line, const std::string& where, std::vector<T>& out)
{
    std::size_t count = 0;
    while (true) {
        const auto comma = line.find(',');
        out.push_back(parse_number<T>(line.substr(0, comma), where));
        ++count;
        if (comma == std::string_view::npos) break;
        line.remove_prefix(comma + 1);
    }
    return count;
}

/// Read a file holding one integer per line (split files, assignment files, counts).
std::vector<std::int64_t> read_integer_lines(const std::string& path);
/// The same from an open reader (a file, or text in memory); blank lines are skipped.
std::vector<std::int64_t> read_integer_lines(text_reader& in);

} // namespace retexo

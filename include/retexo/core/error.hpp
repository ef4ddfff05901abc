#pragma once
/// @file error.hpp
/// The one exception type of retexo and the checking macros built on it.
///
/// Every failure libretexo reports is a retexo::error carrying the source location
/// of the check that fired and a message that names the offending file, option or
/// argument.  Destructors never throw.

#include <sstream>
#include <stdexcept>
#include <string>

namespace retexo {

/// The single error type thrown by libretexo.
class error : public std::runtime_error {
public:
    error(const std::string& message, const char* file, int line)
        : std::runtime_error(message), file_(file), line_(line)
    {
    }

    /// Source file of the check that raised the error.
    const char* file() const noexcept { return file_; }
    /// Source line of the check that raised the error.
    int line() const noexcept { return line_; }

private:
    const char* file_;
    int line_;
};

namespace detail {
[[noreturn]] inline void throw_error(const std::string& message, const char* file, int line)
{
    throw error(message, file, line);
}
} // namespace detail

} // namespace retexo

/// Throw a retexo::error whose message is built from a stream expression:
/// RETEXO_THROW("file " << path << ": bad header").  msg_stream is spliced in without
/// parentheses on purpose: ("file " << path) would be a shift, not a stream insertion.
#define RETEXO_THROW(msg_stream)                                                                                       \
    do {                                                                                                               \
        std::ostringstream retexo_msg_;                                                                                \
        retexo_msg_ << msg_stream; /* NOLINT(bugprone-macro-parentheses): see above */                                 \
        ::retexo::detail::throw_error(retexo_msg_.str(), __FILE__, __LINE__);                                          \
    } while (false)

/// Throw a retexo::error with the given message unless cond holds.
#define RETEXO_ENSURE(cond, msg_stream)                                                                                \
    do {                                                                                                               \
        if (!(cond)) RETEXO_THROW(msg_stream);                                                                         \
    } while (false)

/// Check that two dimensions agree; the message names the operation.
#define RETEXO_ENSURE_DIMS(op, what, got, expected)                                                                    \
    RETEXO_ENSURE((got) == (expected),                                                                                 \
                  "retexo::" << (op) << ": " << (what) << " is " << (got) << ", expected " << (expected))

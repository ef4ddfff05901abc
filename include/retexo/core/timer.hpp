#pragma once
/// @file timer.hpp
/// Wall-clock time by phase ("compute", "exchange", "sync", ...), summed over scopes.

#include <chrono>
#include <map>
#include <string>

namespace retexo {

class phase_timer {
public:
    /// Adds the time from its construction to its destruction to a phase.
    class scope {
    public:
        scope(phase_timer& t, std::string phase)
            : t_(t), phase_(std::move(phase)), start_(std::chrono::steady_clock::now())
        {
        }
        ~scope() { t_.add(phase_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count()); }
        scope(const scope&) = delete;
        scope& operator=(const scope&) = delete;

    private:
        phase_timer& t_;
        std::string phase_;
        std::chrono::steady_clock::time_point start_;
    };
    void add(const std::string& phase, double seconds) { seconds_[phase] += seconds; }
    const std::map<std::string, double>& seconds() const noexcept { return seconds_; }

private:
    std::map<std::string, double> seconds_;
};

} // namespace retexo

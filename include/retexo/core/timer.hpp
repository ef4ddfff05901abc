#pragma once
/// @file timer.hpp
/// Wall-clock time by phase ("compute", "exchange", "sync", ...), summed over scopes.

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace retexo {

/// Exclusive time: a scope opened inside another pauses the outer one, so every second is
/// counted in one phase only and the phases add up to the time spent in scopes.
class phase_timer {
public:
    /// Adds the time from its construction to its destruction, less its nested scopes', to a
    /// phase.
    class scope {
    public:
        scope(phase_timer& t, std::string phase) : t_(t) { t_.open(std::move(phase)); }
        ~scope() { t_.close(); }
        scope(const scope&) = delete;
        scope& operator=(const scope&) = delete;

    private:
        phase_timer& t_;
    };
    void add(const std::string& phase, double seconds) { seconds_[phase] += seconds; }
    const std::map<std::string, double>& seconds() const noexcept { return seconds_; }

private:
    using clock = std::chrono::steady_clock;
    void open(std::string phase)
    {
        const auto now = clock::now();
        if (!open_.empty()) credit(open_.back(), now);
        open_.push_back({std::move(phase), now});
    }
    void close()
    {
        const auto now = clock::now();
        credit(open_.back(), now);
        open_.pop_back();
        if (!open_.empty()) open_.back().since = now;
    }
    struct running {
        std::string phase;
        clock::time_point since;
    };
    void credit(running& r, clock::time_point now)
    {
        add(r.phase, std::chrono::duration<double>(now - r.since).count());
        r.since = now;
    }
    std::map<std::string, double> seconds_;
    std::vector<running> open_; ///< the open scopes, innermost last
};

} // namespace retexo

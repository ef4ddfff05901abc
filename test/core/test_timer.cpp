// phase_timer: nested scopes count exclusive time, so the phases add up to the time spent.
#include <retexo/core/timer.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

using namespace retexo;

TEST_CASE("phase_timer: a nested scope pauses the outer one, no second is counted twice", "[core]")
{
    using namespace std::chrono_literals;
    phase_timer t;
    const auto start = std::chrono::steady_clock::now();
    {
        phase_timer::scope outer(t, "setup");
        std::this_thread::sleep_for(20ms);
        {
            phase_timer::scope inner(t, "exchange");
            std::this_thread::sleep_for(20ms);
        }
        {
            phase_timer::scope same(t, "setup"); // a phase nested in itself is counted once too
            std::this_thread::sleep_for(5ms);
        }
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto& s = t.seconds();
    REQUIRE(s.size() == 2);
    CHECK(s.at("exchange") >= 0.020);
    CHECK(s.at("setup") >= 0.025);
    // Inclusive counting would put the 20 ms of "exchange" into "setup" as well.
    CHECK(s.at("setup") + s.at("exchange") <= wall);
}

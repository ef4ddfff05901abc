#pragma once
// Reporting of retexo_mpi: the banner, progress lines, the final side-by-side table and the
// metrics JSON.

#include <retexo/train/common.hpp>
#include <retexo/version.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace retexo::report {

inline std::string human_bytes(double b)
{
    const char* units[] = {"B", "KB", "MB", "GB", "TB"};
    int u = 0;
    while (b >= 1000 && u < 4) {
        b /= 1000;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g %s", b, units[u]);
    return buf;
}

inline nlohmann::json ledger_json(const byte_ledger& l)
{
    nlohmann::json j;
    j["total"] = l.total_sent();
    for (int p = 0; p < num_purposes; ++p)
        j[to_string(static_cast<purpose>(p))] = l.sent[p];
    std::uint64_t both = 0;
    for (int p = 0; p < num_purposes; ++p)
        both += l.sent[p] + l.received[p];
    j["reference_sent_plus_received"] = both;
    return j;
}

inline nlohmann::json accuracy_json(const accuracies& a)
{
    return {{"train", a.train}, {"valid", a.valid}, {"test", a.test}};
}

/// Accuracy after label spreading and the rate chosen (null where not spread).
inline nlohmann::json spread_json(const spread_accuracy& s)
{
    if (s.alpha < 0) return nullptr;
    return {{"alpha", s.alpha}, {"accuracy", accuracy_json(s.acc)}};
}

inline nlohmann::json run_json(const train::run_result& r, const nlohmann::json& config)
{
    nlohmann::json j;
    j["mode"] = r.mode;
    j["model"] = r.model;
    j["variant"] = r.variant.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.variant);
    if (!r.first_layer_input.empty()) j["first_layer_input"] = r.first_layer_input;
    j["ranks"] = r.ranks;
    j["seed"] = r.seed;
    j["accuracy"] = accuracy_json(r.final_acc);
    j["nodes"] = {{"train", r.nodes.train}, {"valid", r.nodes.valid}, {"test", r.nodes.test}};
    j["bytes"] = ledger_json(r.bytes);
    j["time_s"] = r.seconds;
    j["max_rank_bytes"] = r.max_rank_bytes;
    j["calls_per_rank"] = r.bytes.total_calls() / static_cast<std::uint64_t>(std::max(1, r.ranks));
    for (const auto& n : train::paper_networks())
        j["emulated_time_s"][n.name] = train::emulated_seconds(r, n.model);
    nlohmann::json stages = nlohmann::json::array();
    for (const auto& s : r.stages) {
        stages.push_back({{"stage", s.stage},
                          {"rounds", s.rounds},
                          {"best_round", s.best_round},
                          {"accuracy", accuracy_json(s.best)},
                          {"spread", spread_json(s.spread)},
                          {"bytes", ledger_json(s.bytes)},
                          {"time_s", s.seconds}});
        if (s.pseudo > 0) stages.back()["pseudo_labels"] = s.pseudo;
        if (s.candidates > 1)
            stages.back()["search"] = {{"candidates", s.candidates},
                                       {"chosen", s.chosen},
                                       {"settings", s.settings},
                                       {"side_by_side", s.side_by_side}};
    }
    j["stages"] = stages;
    if (r.output_stage >= 0) j["output"] = {{"stage", r.output_stage}, {"label_head", r.output_label_head}};
    if (r.smoothed)
        j["smooth"] = {{"alpha", r.smoothed->alpha},
                       {"valid", r.smoothed->valid},
                       {"chosen", r.smoothed->chosen},
                       {"steps", r.smoothed->steps},
                       {"model_accuracy", accuracy_json(r.smoothed->model)}};
    if (r.label_head)
        j["label_head"] = {{"candidates", r.label_head->candidates},
                           {"rounds", r.label_head->rounds},
                           {"kept", r.label_head->kept},
                           {"accuracy", accuracy_json(r.label_head->acc)},
                           {"spread", spread_json(r.label_head->spread)}};
    nlohmann::json hist = nlohmann::json::array();
    for (const auto& e : r.history) {
        hist.push_back({{"stage", e.stage},
                        {"epoch", e.epoch},
                        {"loss", e.loss},
                        {"train", e.acc.train},
                        {"valid", e.acc.valid},
                        {"test", e.acc.test},
                        {"bytes", e.bytes},
                        {"calls", e.calls},
                        {"time_s", e.seconds}});
        if (std::isfinite(e.valid_loss)) hist.back()["valid_loss"] = e.valid_loss;
        if (r.mode == "retexo") hist.back()["candidate"] = e.candidate;
    }
    j["history"] = hist;
    j["config"] = config;
    return j;
}

/// RETEXO's stages: the rounds each trained over all its candidates, the candidate kept, its
/// validation accuracy (and after label spreading), and which one predicts.
inline std::string stage_lines(const train::run_result& r)
{
    std::ostringstream o;
    const auto spread = [&](const spread_accuracy& s) {
        if (s.alpha >= 0) o << " (label spreading, alpha " << s.alpha << ": " << s.acc.valid << ")";
    };
    for (const auto& st : r.stages) {
        const auto rounds = std::count_if(r.history.begin(), r.history.end(),
                                          [&](const epoch_record& e) { return e.stage == st.stage; });
        o << "stage " << st.stage << ": " << rounds << " rounds";
        if (st.candidates > 1)
            o << " over " << st.candidates << " candidates" << (st.side_by_side ? " side by side" : "") << ", kept "
              << st.settings;
        o << "; best round " << st.best_round << ", valid " << st.best.valid;
        spread(st.spread);
        o << ", " << st.seconds << " s" << (st.stage == r.output_stage && !r.output_label_head ? ", predicts\n" : "\n");
        if (st.stage == 0 && r.label_head) {
            o << "  label head: " << r.label_head->rounds << " rounds over " << r.label_head->candidates
              << " candidates, valid " << r.label_head->acc.valid;
            spread(r.label_head->spread);
            o << (r.output_label_head ? ", predicts\n" : "\n");
        } else if (st.stage == 0 && r.output_label_head) {
            o << "  label head (trained before the resume): predicts\n";
        }
    }
    return o.str();
}

/// The final side-by-side table of one or more runs.
inline std::string table(const std::vector<train::run_result>& runs)
{
    std::ostringstream o;
    char buf[256];
    o << "\n";
    std::snprintf(buf, sizeof buf, "%-22s", "");
    o << buf;
    for (const auto& r : runs) {
        std::snprintf(buf, sizeof buf, "%16s", (r.mode + (r.variant.empty() ? "" : "/" + r.variant)).c_str());
        o << buf;
    }
    o << "\n";
    auto row = [&](const char* name, auto&& value) {
        std::snprintf(buf, sizeof buf, "%-22s", name);
        o << buf;
        for (const auto& r : runs)
            o << value(r);
        o << "\n";
    };
    auto num = [](double v, const char* fmt) {
        char b[32];
        std::snprintf(b, sizeof b, fmt, v);
        return std::string(b);
    };
    auto text = [](const std::string& v) { // right-aligned in the column
        char b[32];
        std::snprintf(b, sizeof b, "%16s", v.c_str());
        return std::string(b);
    };
    row("accuracy train", [&](const train::run_result& r) { return num(r.final_acc.train, "%16.4f"); });
    row("accuracy valid", [&](const train::run_result& r) { return num(r.final_acc.valid, "%16.4f"); });
    row("accuracy test", [&](const train::run_result& r) {
        return r.nodes.test > 0 ? num(r.final_acc.test, "%16.4f") : text("n/a"); // no test nodes
    });
    for (int p = 0; p < num_purposes; ++p)
        row((std::string("bytes ") + to_string(static_cast<purpose>(p))).c_str(),
            [&](const train::run_result& r) { return text(human_bytes(static_cast<double>(r.bytes.sent[p]))); });
    row("bytes total",
        [&](const train::run_result& r) { return text(human_bytes(static_cast<double>(r.bytes.total_sent()))); });
    std::vector<std::string> phases;
    for (const auto& r : runs)
        for (const auto& [k, v] : r.seconds)
            if (k != "total" && std::find(phases.begin(), phases.end(), k) == phases.end()) phases.push_back(k);
    std::sort(phases.begin(), phases.end());
    phases.emplace_back("total"); // the phases add up to it
    for (const auto& ph : phases)
        row(("time " + ph + " s").c_str(), [&](const train::run_result& r) {
            const auto it = r.seconds.find(ph);
            return num(it == r.seconds.end() ? 0.0 : it->second, "%16.2f");
        });
    if (runs.size() == 2 && runs[1].bytes.total_sent() > 0 && runs[0].bytes.total_sent() > 0) {
        const auto& a = runs[0];
        const auto& b = runs[1];
        o << "bytes " << a.mode << " / " << b.mode << ": "
          << num(static_cast<double>(a.bytes.total_sent()) / static_cast<double>(b.bytes.total_sent()), "%.4g") << " ("
          << num(static_cast<double>(b.bytes.total_sent()) / static_cast<double>(a.bytes.total_sent()), "%.1f")
          << "x fewer for " << a.mode << ")\n";
    }
    return o.str();
}

} // namespace retexo::report

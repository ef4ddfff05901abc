// RETEXO checkpoints: one HDF5 file per rank, written atomically, checked on resume.
#include <retexo/core/atomic_file.hpp>
#include <retexo/core/hash.hpp>
#include <retexo/io/checkpoint.hpp>
#include <retexo/io/features.hpp>
#include <retexo/io/hdf5.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>
#include <variant>

namespace retexo {

namespace {

constexpr std::int64_t format_version = 5;

/// The scalar fields of the records a checkpoint keeps, for f(name, member): one list for
/// writing and reading.
template <typename E, typename F>
void fields(E& e, F&& f) requires std::is_same_v<std::remove_const_t<E>, epoch_record>
{
    f("stage", e.stage);
    f("epoch", e.epoch);
    f("loss", e.loss);
    f("valid_loss", e.valid_loss);
    f("train", e.acc.train);
    f("valid", e.acc.valid);
    f("test", e.acc.test);
    f("candidate", e.candidate);
    f("bytes", e.bytes);
    f("calls", e.calls);
    f("seconds", e.seconds);
}

/// An accuracy and the one after label spreading (with its alpha), as fields.
template <typename A, typename P, typename F>
void accuracy_fields(A& acc, P& spread, F&& f)
{
    f("train", acc.train);
    f("valid", acc.valid);
    f("test", acc.test);
    f("spread_alpha", spread.alpha);
    f("spread_train", spread.acc.train);
    f("spread_valid", spread.acc.valid);
    f("spread_test", spread.acc.test);
}

template <typename S, typename F>
void fields(S& s, F&& f) requires std::is_same_v<std::remove_const_t<S>, stage_record>
{
    f("stage", s.stage);
    f("rounds", s.rounds);
    f("best_round", s.best_round);
    f("candidates", s.candidates);
    f("chosen", s.chosen);
    f("pseudo", s.pseudo);
    accuracy_fields(s.best, s.spread, f);
    f("seconds", s.seconds);
}

template <typename L, typename F>
void fields(L& l, F&& f) requires std::is_same_v<std::remove_const_t<L>, label_head_record>
{
    f("candidates", l.candidates);
    f("rounds", l.rounds);
    accuracy_fields(l.acc, l.spread, f);
}

/// A record field across records: integers as int64, reals as double.
using column = std::variant<std::vector<std::int64_t>, std::vector<double>>;

template <typename R>
void write_records(h5::file& f, const std::string& group, const std::vector<R>& records)
{
    std::vector<std::pair<std::string, column>> cols;
    R probe{};
    fields(probe, [&](const char* name, auto& v) {
        if constexpr (std::is_floating_point_v<std::decay_t<decltype(v)>>)
            cols.emplace_back(name, std::vector<double>());
        else
            cols.emplace_back(name, std::vector<std::int64_t>());
    });
    for (const auto& r : records) {
        std::size_t i = 0;
        fields(r, [&](const char*, const auto& v) {
            std::visit([&](auto& c) { c.push_back(static_cast<typename std::decay_t<decltype(c)>::value_type>(v)); },
                       cols[i++].second);
        });
    }
    for (const auto& [name, c] : cols) {
        std::string path = group;
        path.append("/").append(name);
        std::visit(
            [&](const auto& values) {
                using T = typename std::decay_t<decltype(values)>::value_type;
                f.write<T>(path, values);
            },
            c);
    }
}

template <typename R>
std::vector<R> read_records(const h5::file& f, const std::string& group)
{
    R probe{};
    std::string first; // the records' count: the length of their first field
    fields(probe, [&](const char* name, auto&) {
        if (first.empty()) first = name;
    });
    const auto n = static_cast<std::int64_t>(f.dims(group + "/" + first).at(0));
    std::vector<R> records(static_cast<std::size_t>(n));
    fields(probe, [&](const char* name, auto& v) {
        using M = std::decay_t<decltype(v)>;
        using T = std::conditional_t<std::is_floating_point_v<M>, double, std::int64_t>;
        const auto values = f.read_vector<T>(group + "/" + name, n);
        for (std::int64_t i = 0; i < n; ++i)
            fields(records[static_cast<std::size_t>(i)], [&](const char* other, auto& w) {
                if (std::string_view(other) == name) w = static_cast<std::decay_t<decltype(w)>>(values[i]);
            });
    });
    return records;
}

/// A ledger's four counters as rows of a [4 x purposes] dataset.
matrix<std::uint64_t> ledger_rows(const std::vector<byte_ledger>& ledgers)
{
    matrix<std::uint64_t> m(static_cast<Eigen::Index>(ledgers.size()), 4 * num_purposes);
    for (std::size_t i = 0; i < ledgers.size(); ++i)
        for (int p = 0; p < num_purposes; ++p) {
            const auto r = static_cast<Eigen::Index>(i);
            m(r, p) = ledgers[i].sent[p];
            m(r, num_purposes + p) = ledgers[i].received[p];
            m(r, 2 * num_purposes + p) = ledgers[i].messages[p];
            m(r, 3 * num_purposes + p) = ledgers[i].calls[p];
        }
    return m;
}

std::vector<byte_ledger> ledgers_of(const matrix<std::uint64_t>& m)
{
    std::vector<byte_ledger> out(static_cast<std::size_t>(m.rows()));
    for (std::size_t i = 0; i < out.size(); ++i)
        for (int p = 0; p < num_purposes; ++p) {
            const auto r = static_cast<Eigen::Index>(i);
            out[i].sent[p] = m(r, p);
            out[i].received[p] = m(r, num_purposes + p);
            out[i].messages[p] = m(r, 2 * num_purposes + p);
            out[i].calls[p] = m(r, 3 * num_purposes + p);
        }
    return out;
}

void write_tensors(h5::file& f, const std::string& group, const std::vector<matrix_f>& tensors)
{
    for (std::size_t i = 0; i < tensors.size(); ++i)
        f.write_matrix(group + "/" + std::to_string(i), tensors[i]);
}

std::vector<matrix_f> read_tensors(const h5::file& f, const std::string& group, std::int64_t n)
{
    std::vector<matrix_f> out;
    for (std::int64_t i = 0; i < n; ++i)
        out.push_back(f.read_matrix<float>(group + "/" + std::to_string(i)));
    return out;
}

void write_identity(h5::file& f, const checkpoint_identity& id)
{
    f.set_attr("retexo_format", std::string("retexo-checkpoint"));
    f.set_attr("format_version", format_version);
    f.set_attr("assignment_hash", hash_to_hex(id.assignment_hash));
    f.set_attr("ranks", static_cast<std::int64_t>(id.ranks));
    f.set_attr("rank", static_cast<std::int64_t>(id.rank));
    f.set_attr("config", id.config);
    f.set_attr("input_digest", hash_to_hex(id.input_digest));
}

void check_identity(const h5::file& f, const std::string& path, const checkpoint_identity& id)
{
    RETEXO_ENSURE(f.has_attr("retexo_format") && f.attr_string("retexo_format") == "retexo-checkpoint",
                  path << ": not a retexo checkpoint");
    const std::int64_t version = f.has_attr("format_version") ? f.attr_int("format_version") : 1;
    RETEXO_ENSURE(version == format_version, path << ": checkpoint format version " << version
                                                  << ", this retexo reads version " << format_version
                                                  << " (finish the run with the retexo that started it)");
    RETEXO_ENSURE(f.attr_int("ranks") == id.ranks,
                  path << ": made by a run with " << f.attr_int("ranks") << " ranks; this run has " << id.ranks);
    RETEXO_ENSURE(f.attr_int("rank") == id.rank, path << ": belongs to rank " << f.attr_int("rank"));
    RETEXO_ENSURE(f.attr_string("assignment_hash") == hash_to_hex(id.assignment_hash),
                  path << ": made with another partition (assignment hash " << f.attr_string("assignment_hash")
                       << ", this run " << hash_to_hex(id.assignment_hash) << ")");
    RETEXO_ENSURE(f.attr_string("config") == id.config,
                  path << ": made with another model configuration (checkpoint: " << f.attr_string("config")
                       << "; this run: " << id.config << ")");
    RETEXO_ENSURE(f.attr_string("input_digest") == hash_to_hex(id.input_digest),
                  path << ": made with other input features on this rank (another graph file or feature "
                          "normalisation)");
}

/// An attribute that counts datasets or attributes: >= 0.
std::int64_t count_attr(const h5::file& f, const std::string& path, const std::string& name)
{
    const std::int64_t n = f.attr_int(name);
    RETEXO_ENSURE(n >= 0, path << ": attribute " << name << " must be >= 0, got " << n);
    return n;
}

bool finite(const matrix_f& m)
{
    return all_finite({m.data(), static_cast<std::size_t>(m.size())});
}

/// What a checkpoint must hold whatever the run: its counts in range, its tensors finite,
/// its parts of one shape where they must be (the run's own checks come on resume).
void check_contents(const retexo_checkpoint& c, const std::string& path)
{
    RETEXO_ENSURE(c.seq >= 1, path << ": attribute seq must be >= 1, got " << c.seq);
    RETEXO_ENSURE(c.stage >= 0, path << ": attribute stage must be >= 0, got " << c.stage);
    RETEXO_ENSURE(c.next_round >= 1, path << ": attribute next_round must be >= 1, got " << c.next_round);
    RETEXO_ENSURE(c.step >= 0, path << ": attribute step must be >= 0, got " << c.step);
    RETEXO_ENSURE(std::isfinite(c.elapsed) && c.elapsed >= 0,
                  path << ": attribute elapsed must be a finite time >= 0, got " << c.elapsed);
    for (const auto& [phase, seconds] : c.phases)
        RETEXO_ENSURE(std::isfinite(seconds) && seconds >= 0,
                      path << ": attribute phase." << phase << " must be a finite time >= 0, got " << seconds);
    RETEXO_ENSURE(static_cast<std::int64_t>(c.stages.size()) == c.stage,
                  path << ": " << c.stages.size() << " finished stages in stages/, but attribute stage is " << c.stage);
    RETEXO_ENSURE(c.carry.best_stage >= -1 && c.carry.best_stage < c.stage,
                  path << ": attribute best_stage must be -1 or a finished stage (0.." << c.stage - 1 << "), got "
                       << c.carry.best_stage);
    for (const auto& [name, v] :
         {std::pair<const char*, double>{"best_valid", c.carry.best_valid}, {"best_alpha", c.carry.best_alpha}})
        RETEXO_ENSURE(std::isfinite(v), path << ": attribute " << name << " is not finite");
    for (const auto& [name, a] : {std::pair<const char*, accuracies>{"best_acc", c.carry.best_acc},
                                  {"best_spread_acc", c.carry.best_spread_acc}})
        RETEXO_ENSURE(std::isfinite(a.train) && std::isfinite(a.valid) && std::isfinite(a.test),
                      path << ": inputs/" << name << " is not finite");
    for (double v : c.carry.best_alpha_valid)
        RETEXO_ENSURE(std::isfinite(v), path << ": inputs/best_alpha_valid is not finite");
    // inputs/*, stage/x: the feature reader refuses non-finite values (io/features.hpp).
    for (const auto& [name, m] : {std::pair<const char*, const matrix_f*>{"inputs/best_logits", &c.carry.best_logits},
                                  {"inputs/best_spread", &c.carry.best_spread},
                                  {"inputs/logits", &c.carry.logits}})
        RETEXO_ENSURE(finite(*m), path << ": " << name << " holds a value that is not finite");
    for (std::size_t i = 0; i < c.finished.size(); ++i)
        RETEXO_ENSURE(finite(c.finished[i].value), path << ": finished/" << i << " holds a value that is not finite");
    for (const auto& r : c.history)
        RETEXO_ENSURE(r.stage >= 0 && r.stage <= c.stage && r.epoch >= 1 && r.candidate >= 0,
                      path << ": history/ holds a round of stage " << r.stage << ", round " << r.epoch << ", candidate "
                           << r.candidate << " (attribute stage is " << c.stage << ")");
    for (std::size_t i = 0; i < c.stages.size(); ++i)
        RETEXO_ENSURE(c.stages[i].stage == static_cast<int>(i) && c.stages[i].rounds >= 0 &&
                          c.stages[i].best_round >= 0 && c.stages[i].best_round <= c.stages[i].rounds,
                      path << ": stages/ entry " << i << " (stage " << c.stages[i].stage << ", " << c.stages[i].rounds
                           << " rounds, best round " << c.stages[i].best_round << ") is not a finished stage " << i);
    if (c.next_round == 1) return;
    const auto& s = c.current;
    RETEXO_ENSURE(s.rounds_done == c.next_round - 1, path << ": attribute stage.rounds_done is " << s.rounds_done
                                                          << ", but next_round is " << c.next_round);
    RETEXO_ENSURE(s.best_round >= 0 && s.best_round <= s.rounds_done,
                  path << ": attribute stage.best_round must be in [0, " << s.rounds_done << "], got " << s.best_round);
    RETEXO_ENSURE(s.optimizer_steps >= 0,
                  path << ": attribute stage.optimizer_steps must be >= 0, got " << s.optimizer_steps);
    RETEXO_ENSURE(std::isfinite(s.elapsed) && s.elapsed >= 0,
                  path << ": attribute stage.elapsed must be a finite time >= 0, got " << s.elapsed);
    for (const auto& [name, tensors] :
         {std::pair<const char*, const std::vector<matrix_f>*>{"stage/first_moments", &s.first_moments},
          {"stage/second_moments", &s.second_moments},
          {"stage/best", &s.best}})
        for (std::size_t i = 0; i < s.params.size(); ++i)
            RETEXO_ENSURE((*tensors)[i].rows() == s.params[i].rows() && (*tensors)[i].cols() == s.params[i].cols(),
                          path << ": " << name << "/" << i << " is " << (*tensors)[i].rows() << " x "
                               << (*tensors)[i].cols() << ", stage/params/" << i << " " << s.params[i].rows() << " x "
                               << s.params[i].cols());
    for (const auto& [name, tensors] : {std::pair<const char*, const std::vector<matrix_f>*>{"stage/params", &s.params},
                                        {"stage/first_moments", &s.first_moments},
                                        {"stage/second_moments", &s.second_moments},
                                        {"stage/best", &s.best},
                                        {"search/top_best", &s.search.top_best}})
        for (std::size_t i = 0; i < tensors->size(); ++i)
            RETEXO_ENSURE(finite((*tensors)[i]),
                          path << ": " << name << "/" << i << " holds a value that is not finite");
    const auto& st = s.search;
    RETEXO_ENSURE(st.candidate >= 0 && st.tried >= 0 && st.tried <= st.candidate + 1,
                  path << ": attributes search.candidate " << st.candidate << " and search.tried " << st.tried
                       << " are out of range");
    RETEXO_ENSURE(st.top >= -1 && st.top < st.candidate,
                  path << ": attribute search.top must be -1 or a candidate before search.candidate (" << st.candidate
                       << "), got " << st.top);
    RETEXO_ENSURE(st.step0 >= 0 && st.step0 <= c.step && (st.top < 0 || (st.top_step >= st.step0)),
                  path << ": attributes search.step0 " << st.step0 << " and search.top_step " << st.top_step
                       << " are out of range (step " << c.step << ")");
    RETEXO_ENSURE(st.top_round >= 0 && st.top_round <= st.top_rounds_done,
                  path << ": attributes search.top_round " << st.top_round << " and search.top_rounds_done "
                       << st.top_rounds_done << " are out of range");
    RETEXO_ENSURE((st.top < 0) == st.top_best.empty(),
                  path << ": attribute search.top_tensors is " << st.top_best.size() << ", search.top " << st.top);
    for (std::int64_t n : s.fold_count)
        RETEXO_ENSURE(n >= 0, path << ": a stage.fold_count attribute is negative: " << n);
}

/// A field of a checkpoint that every rank's file of one moment holds alike.
struct shared_field {
    std::string name;
    std::int64_t value = 0;
    bool real = false; ///< value holds a double's bits
};

shared_field real_field(std::string name, double v)
{
    return {std::move(name), std::bit_cast<std::int64_t>(v), true};
}

/// The counts and scalars every rank's checkpoint of one moment shares, and the shapes whose
/// number these counts fix (the rows of the inputs are each rank's own).
std::vector<shared_field> shared_counts(const retexo_checkpoint& c)
{
    const auto& k = c.carry;
    const auto& s = c.current;
    const auto& st = s.search;
    return {{"attribute seq", c.seq},
            {"attribute stage", c.stage},
            {"attribute next_round", c.next_round},
            {"attribute step", c.step},
            {"attribute num_finished", static_cast<std::int64_t>(c.finished.size())},
            {"rounds in history/", static_cast<std::int64_t>(c.history.size())},
            {"attribute best_stage", k.best_stage},
            {"attribute best_label_head", static_cast<std::int64_t>(k.best_label_head)},
            real_field("inputs/best_acc (train)", k.best_acc.train),
            real_field("inputs/best_acc (valid)", k.best_acc.valid),
            real_field("inputs/best_acc (test)", k.best_acc.test),
            real_field("attribute best_valid", k.best_valid),
            real_field("attribute best_alpha", k.best_alpha),
            real_field("inputs/best_spread_acc (train)", k.best_spread_acc.train),
            real_field("inputs/best_spread_acc (valid)", k.best_spread_acc.valid),
            real_field("inputs/best_spread_acc (test)", k.best_spread_acc.test),
            {"rows of inputs/best_alpha_valid", static_cast<std::int64_t>(k.best_alpha_valid.size())},
            {"columns of inputs/h", k.h.all.cols()},
            {"columns of inputs/h_train", k.h.train.cols()},
            {"columns of inputs/skip", k.skip.all.cols()},
            {"columns of inputs/skip_train", k.skip.train.cols()},
            {"columns of inputs/best_logits", k.best_logits.cols()},
            {"columns of inputs/best_spread", k.best_spread.cols()},
            {"columns of inputs/logits", k.logits.cols()},
            {"attribute stage.rounds_done", s.rounds_done},
            {"attribute stage.best_round", s.best_round},
            {"attribute stage.optimizer_steps", s.optimizer_steps},
            {"attribute stage.tensors", static_cast<std::int64_t>(s.params.size())},
            real_field("attribute stage.best_score", s.best_score),
            real_field("attribute stage.best_loss", s.best_loss),
            {"attribute stage.folds", static_cast<std::int64_t>(s.fold_count.size())},
            {"columns of stage/x", s.x.all.cols()},
            {"columns of stage/x_train", s.x.train.cols()},
            {"attribute search.candidate", st.candidate},
            {"attribute search.tried", st.tried},
            {"attribute search.step0", st.step0},
            {"attribute search.top", st.top},
            {"attribute search.top_step", st.top_step},
            {"attribute search.top_round", st.top_round},
            {"attribute search.top_rounds_done", st.top_rounds_done},
            {"attribute search.top_tensors", static_cast<std::int64_t>(st.top_best.size())},
            real_field("attribute search.top_score", st.top_score),
            real_field("attribute search.top_loss", st.top_loss)};
}

std::vector<shared_field> shared_shapes(const retexo_checkpoint& c)
{
    std::vector<shared_field> out;
    auto shapes = [&](const std::string& group, const auto& tensors, auto value) {
        for (std::size_t i = 0; i < tensors.size(); ++i) {
            const matrix_f& m = value(tensors[i]);
            out.push_back({"rows of " + group + std::to_string(i), m.rows()});
            out.push_back({"columns of " + group + std::to_string(i), m.cols()});
        }
    };
    const auto same = [](const matrix_f& m) -> const matrix_f& { return m; };
    shapes("finished/", c.finished, [](const named_tensor& t) -> const matrix_f& { return t.value; });
    shapes("stage/params/", c.current.params, same);
    shapes("search/top_best/", c.current.search.top_best, same);
    for (std::size_t i = 0; i < c.stages.size(); ++i) {
        const auto& r = c.stages[i];
        const std::string at = " of stages/ entry " + std::to_string(i);
        out.push_back({"rounds" + at, r.rounds});
        out.push_back({"best round" + at, r.best_round});
        out.push_back({"candidates" + at, r.candidates});
        out.push_back({"candidate chosen" + at, r.chosen});
    }
    for (std::size_t i = 0; i < c.current.fold_count.size(); ++i)
        out.push_back({"attribute stage.fold_count." + std::to_string(i), c.current.fold_count[i]});
    return out;
}

std::string field_value(const shared_field& f, std::int64_t v)
{
    std::ostringstream out;
    if (f.real)
        out << std::bit_cast<double>(v);
    else
        out << v;
    return out.str();
}

/// Every rank's checkpoint of the moment picked must agree on what the ranks share (collective:
/// each file is checked on its own rank only); else every rank fails naming the files.
void agree_on_header(const mpi::communicator& comm, const std::string& dir, const retexo_checkpoint& c)
{
    const auto from_prev = comm.allgather(c.source == checkpoint_path(dir, comm.rank()) ? 0 : 1, purpose::checkpoint);
    auto file = [&](int r) {
        return checkpoint_path(dir, r) + (from_prev[static_cast<std::size_t>(r)] ? "_prev" : "");
    };
    // The counts first: when they agree, so do the number and the names of the shapes.
    for (const auto& fields : {shared_counts(c), shared_shapes(c)}) {
        std::vector<std::int64_t> mine;
        mine.reserve(fields.size());
        for (const auto& f : fields)
            mine.push_back(f.value);
        const auto all = comm.allgatherv(std::span<const std::int64_t>(mine), purpose::checkpoint);
        const auto n = fields.size();
        std::string err;
        for (std::size_t i = 0; i < n && err.empty(); ++i) {
            // The value most ranks hold (the first rank's of a tie), then a rank that differs.
            auto at = [&](int r) { return all[static_cast<std::size_t>(r) * n + i]; };
            int major = 0, most = 0;
            for (int r = 0; r < comm.size(); ++r) {
                int k = 0;
                for (int q = 0; q < comm.size(); ++q)
                    k += at(q) == at(r) ? 1 : 0;
                if (k > most) {
                    major = r;
                    most = k;
                }
            }
            for (int r = 0; r < comm.size() && err.empty(); ++r)
                if (at(r) != at(major))
                    err = file(r) + ": " + fields[i].name + " = " + field_value(fields[i], at(r)) + ", but " +
                          field_value(fields[i], at(major)) + " in " + file(major) +
                          " (the ranks' checkpoints are not of one moment of one run)";
        }
        comm.agree(err, purpose::checkpoint);
    }
}

} // namespace

std::string checkpoint_path(const std::string& dir, int rank)
{
    return dir + "/ckpt.rank" + std::to_string(rank) + ".h5";
}

void write_checkpoint(const std::string& path, const retexo_checkpoint& c, const checkpoint_identity& id)
{
    atomic_file out(path);
    {
        auto f = h5::file::create(out.temp_path(), path);
        write_identity(f, id);
        for (const auto& [k, v] : std::map<std::string, std::int64_t>{
                 {"seq", c.seq}, {"stage", c.stage}, {"next_round", c.next_round}, {"step", c.step}})
            f.set_attr(k, v);
        f.set_attr("elapsed", c.elapsed);
        write_features(f, "inputs/h", c.carry.h.all);
        write_features(f, "inputs/h_train", c.carry.h.train);
        write_features(f, "inputs/skip", c.carry.skip.all);
        write_features(f, "inputs/skip_train", c.carry.skip.train);
        f.write_matrix("inputs/best_logits", c.carry.best_logits);
        f.set_attr("best_stage", static_cast<std::int64_t>(c.carry.best_stage));
        f.set_attr("best_label_head", static_cast<std::int64_t>(c.carry.best_label_head));
        f.set_attr("best_valid", c.carry.best_valid);
        f.write_matrix("inputs/best_spread", c.carry.best_spread);
        f.set_attr("best_alpha", c.carry.best_alpha);
        for (const auto& [name, a] : {std::pair<const char*, accuracies>{"inputs/best_acc", c.carry.best_acc},
                                      {"inputs/best_spread_acc", c.carry.best_spread_acc}})
            f.write_matrix(name, matrix<double>{{a.train, a.valid, a.test}});
        matrix<double> alpha_valid; // one row per alpha
        if (!c.carry.best_alpha_valid.empty()) {
            alpha_valid.resize(static_cast<Eigen::Index>(c.carry.best_alpha_valid.size()), 1);
            std::copy(c.carry.best_alpha_valid.begin(), c.carry.best_alpha_valid.end(), alpha_valid.data());
        }
        f.write_matrix("inputs/best_alpha_valid", alpha_valid);
        f.write_matrix("inputs/logits", c.carry.logits);
        std::string names;
        for (std::size_t i = 0; i < c.finished.size(); ++i) {
            f.write_matrix("finished/" + std::to_string(i), c.finished[i].value);
            names += (i > 0 ? "\n" : "") + c.finished[i].name;
        }
        f.set_attr("finished_names", names);
        f.set_attr("num_finished", static_cast<std::int64_t>(c.finished.size()));
        write_records(f, "history", c.history);
        write_records(f, "stages", c.stages);
        std::vector<label_head_record> head;
        if (c.label_head) head.push_back(*c.label_head);
        write_records(f, "label_head", head);
        std::vector<byte_ledger> ledgers;
        for (const auto& s : c.stages)
            ledgers.push_back(s.bytes);
        f.write_matrix("stages/traffic", ledger_rows(ledgers));
        f.write_matrix("traffic", ledger_rows({c.done, c.current.done}));
        std::string phases;
        for (const auto& [k, v] : c.phases) {
            f.set_attr("phase." + k, v);
            phases += (phases.empty() ? "" : ",") + k;
        }
        f.set_attr("phases", phases);
        if (c.next_round > 1) {
            const auto& s = c.current;
            for (const auto& [k, v] : std::map<std::string, std::int64_t>{
                     {"stage.rounds_done", s.rounds_done},
                     {"stage.best_round", s.best_round},
                     {"stage.optimizer_steps", s.optimizer_steps},
                     {"stage.tensors", static_cast<std::int64_t>(s.params.size())},
                     {"search.candidate", s.search.candidate},
                     {"search.tried", s.search.tried},
                     {"search.step0", s.search.step0},
                     {"search.top", s.search.top},
                     {"search.top_step", s.search.top_step},
                     {"search.top_round", s.search.top_round},
                     {"search.top_rounds_done", s.search.top_rounds_done},
                     {"search.top_tensors", static_cast<std::int64_t>(s.search.top_best.size())}})
                f.set_attr(k, v);
            f.set_attr("stage.best_score", s.best_score);
            f.set_attr("stage.best_loss", s.best_loss);
            f.set_attr("search.top_score", s.search.top_score);
            f.set_attr("search.top_loss", s.search.top_loss);
            write_tensors(f, "search/top_best", s.search.top_best);
            f.set_attr("stage.elapsed", s.elapsed);
            write_tensors(f, "stage/params", s.params);
            write_tensors(f, "stage/first_moments", s.first_moments);
            write_tensors(f, "stage/second_moments", s.second_moments);
            write_tensors(f, "stage/best", s.best);
            write_features(f, "stage/x", s.x.all);
            write_features(f, "stage/x_train", s.x.train);
            f.set_attr("stage.folds", static_cast<std::int64_t>(s.fold_count.size()));
            for (std::size_t i = 0; i < s.fold_count.size(); ++i)
                f.set_attr("stage.fold_count." + std::to_string(i), s.fold_count[i]);
        }
        f.close();
    }
    out.commit(true);
}

retexo_checkpoint read_checkpoint(const std::string& path, const checkpoint_identity& id)
{
    const auto f = h5::file::open(path);
    check_identity(f, path, id);
    retexo_checkpoint c;
    c.source = path;
    c.seq = f.attr_int("seq");
    c.stage = static_cast<int>(f.attr_int("stage"));
    c.next_round = static_cast<int>(f.attr_int("next_round"));
    c.step = f.attr_int("step");
    c.elapsed = f.attr_double("elapsed");
    c.carry.h.all = read_features(f, "inputs/h");
    c.carry.h.train = read_features(f, "inputs/h_train");
    c.carry.skip.all = read_features(f, "inputs/skip");
    c.carry.skip.train = read_features(f, "inputs/skip_train");
    c.carry.best_logits = f.read_matrix<float>("inputs/best_logits");
    c.carry.best_stage = static_cast<int>(f.attr_int("best_stage"));
    const std::int64_t label_head = f.attr_int("best_label_head");
    RETEXO_ENSURE(label_head == 0 || label_head == 1,
                  path << ": attribute best_label_head must be 0 or 1, got " << label_head);
    c.carry.best_label_head = label_head == 1;
    c.carry.best_valid = f.attr_double("best_valid");
    c.carry.best_spread = f.read_matrix<float>("inputs/best_spread");
    c.carry.best_alpha = f.attr_double("best_alpha");
    for (auto [name, a] : {std::pair{"inputs/best_acc", &c.carry.best_acc},
                           std::pair{"inputs/best_spread_acc", &c.carry.best_spread_acc}}) {
        const auto m = f.read_matrix<double>(name, 3);
        RETEXO_ENSURE(m.rows() == 1, path << ": " << name << " must be 1 x 3");
        *a = {m(0, 0), m(0, 1), m(0, 2)};
    }
    const auto av = f.read_matrix<double>("inputs/best_alpha_valid");
    c.carry.best_alpha_valid.assign(av.data(), av.data() + av.size());
    c.carry.logits = f.read_matrix<float>("inputs/logits");
    std::stringstream names(f.attr_string("finished_names"));
    for (std::int64_t i = 0, n = count_attr(f, path, "num_finished"); i < n; ++i) {
        std::string name;
        RETEXO_ENSURE(std::getline(names, name) && !name.empty(),
                      path << ": attribute finished_names has fewer than num_finished (" << n << ") names");
        c.finished.push_back({name, f.read_matrix<float>("finished/" + std::to_string(i))});
    }
    std::string extra;
    RETEXO_ENSURE(!std::getline(names, extra),
                  path << ": attribute finished_names has more than num_finished (" << c.finished.size() << ") names");
    c.history = read_records<epoch_record>(f, "history");
    c.stages = read_records<stage_record>(f, "stages");
    const auto head = read_records<label_head_record>(f, "label_head");
    RETEXO_ENSURE(head.size() <= 1, path << ": label_head/ holds " << head.size() << " records (at most 1)");
    if (!head.empty()) c.label_head = head.front();
    const auto stage_traffic = ledgers_of(f.read_matrix<std::uint64_t>("stages/traffic", 4 * num_purposes));
    RETEXO_ENSURE(stage_traffic.size() == c.stages.size(), path << ": stages/traffic does not match stages");
    for (std::size_t i = 0; i < c.stages.size(); ++i)
        c.stages[i].bytes = stage_traffic[i];
    const auto traffic = ledgers_of(f.read_matrix<std::uint64_t>("traffic", 4 * num_purposes));
    RETEXO_ENSURE(traffic.size() == 2, path << ": traffic must have 2 rows");
    c.done = traffic[0];
    c.current.done = traffic[1];
    std::stringstream phases(f.attr_string("phases"));
    std::string k;
    while (std::getline(phases, k, ','))
        if (!k.empty()) c.phases[k] = f.attr_double("phase." + k);
    if (c.next_round > 1) {
        auto& s = c.current;
        s.rounds_done = static_cast<int>(f.attr_int("stage.rounds_done"));
        s.best_round = static_cast<int>(f.attr_int("stage.best_round"));
        s.optimizer_steps = f.attr_int("stage.optimizer_steps");
        s.best_score = f.attr_double("stage.best_score");
        s.best_loss = f.attr_double("stage.best_loss");
        auto& st = s.search;
        st.candidate = static_cast<int>(f.attr_int("search.candidate"));
        st.tried = static_cast<int>(f.attr_int("search.tried"));
        st.step0 = f.attr_int("search.step0");
        st.top = static_cast<int>(f.attr_int("search.top"));
        st.top_step = f.attr_int("search.top_step");
        st.top_round = static_cast<int>(f.attr_int("search.top_round"));
        st.top_rounds_done = static_cast<int>(f.attr_int("search.top_rounds_done"));
        st.top_score = f.attr_double("search.top_score");
        st.top_loss = f.attr_double("search.top_loss");
        st.top_best = read_tensors(f, "search/top_best", count_attr(f, path, "search.top_tensors"));
        s.elapsed = f.attr_double("stage.elapsed");
        const auto n = count_attr(f, path, "stage.tensors");
        s.params = read_tensors(f, "stage/params", n);
        s.first_moments = read_tensors(f, "stage/first_moments", n);
        s.second_moments = read_tensors(f, "stage/second_moments", n);
        s.best = read_tensors(f, "stage/best", n);
        s.x.all = read_features(f, "stage/x");
        s.x.train = read_features(f, "stage/x_train");
        for (std::int64_t i = 0, n_folds = count_attr(f, path, "stage.folds"); i < n_folds; ++i)
            s.fold_count.push_back(f.attr_int("stage.fold_count." + std::to_string(i)));
    }
    check_contents(c, path);
    return c;
}

retexo_checkpoint resume_checkpoint(const mpi::communicator& comm, const std::string& dir,
                                    const checkpoint_identity& id)
{
    const std::string path = checkpoint_path(dir, comm.rank());
    std::optional<retexo_checkpoint> cur, prev;
    std::string err;
    try {
        RETEXO_ENSURE(std::filesystem::exists(path) || std::filesystem::exists(path + "_prev"),
                      path << ": no checkpoint to resume from");
        if (std::filesystem::exists(path)) cur = read_checkpoint(path, id);
    } catch (const std::exception& e) {
        err = e.what();
    }
    comm.agree(err, purpose::checkpoint);
    const auto cur_seq = comm.allgather(cur ? cur->seq : std::int64_t{-1}, purpose::checkpoint);
    // The previous files matter only when the current ones are not of one moment (a job died
    // between two ranks' renames): then the ranks ahead, or without a current file, read theirs.
    const bool one_moment =
        cur_seq[0] >= 0 && std::all_of(cur_seq.begin(), cur_seq.end(), [&](auto s) { return s == cur_seq[0]; });
    std::int64_t oldest = -1;
    for (auto s : cur_seq)
        if (s >= 0 && (oldest < 0 || s < oldest)) oldest = s;
    if (!one_moment && (!cur || cur->seq > oldest)) {
        try {
            if (std::filesystem::exists(path + "_prev")) prev = read_checkpoint(path + "_prev", id);
        } catch (const std::exception& e) {
            err = e.what();
        }
    }
    comm.agree(err, purpose::checkpoint);
    const auto prev_seq = comm.allgather(prev ? prev->seq : std::int64_t{-1}, purpose::checkpoint);
    auto everyone_has = [&](std::int64_t s) {
        for (int r = 0; r < comm.size(); ++r)
            if (cur_seq[r] != s && prev_seq[r] != s) return false;
        return true;
    };
    std::int64_t pick = -1;
    for (auto s : {cur_seq[0], prev_seq[0]})
        if (s >= 0 && everyone_has(s)) pick = std::max(pick, s);
    if (pick < 0) err = dir + ": the ranks' checkpoints do not belong to one moment of one run";
    comm.agree(err, purpose::checkpoint);
    retexo_checkpoint c = cur && cur->seq == pick ? std::move(*cur) : std::move(*prev);
    agree_on_header(comm, dir, c);
    return c;
}

} // namespace retexo

#include <retexo/kernels/dense.hpp>
#include <retexo/kernels/loss.hpp>
#include <retexo/kernels/quantize.hpp>
#include <retexo/train/retexo.hpp>

#include <retexo/core/atomic_file.hpp>
#include <retexo/io/hdf5.hpp>
#include <retexo/partition/partitioner.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>
#include <tuple>

namespace retexo::train {

retexo_variant parse_variant(const std::string& name)
{
    if (name == "hidden") return retexo_variant::hidden;
    if (name == "logits") return retexo_variant::logits;
    RETEXO_THROW("--variant: unknown variant '" << name << "' (expected hidden or logits)");
}

std::string to_string(retexo_variant v)
{
    return v == retexo_variant::hidden ? "hidden" : "logits";
}

void retexo_options::validate() const
{
    RETEXO_ENSURE(!stages.empty(), "--stages must be at least 1");
    for (std::size_t k = 0; k < stages.size(); ++k) {
        const auto& s = stages[k];
        RETEXO_ENSURE(s.rounds >= 1, "--rounds: stage " << k << " needs at least 1 round, got " << s.rounds);
        RETEXO_ENSURE(s.hidden >= 1, "--hidden: stage " << k << " width must be positive, got " << s.hidden);
        RETEXO_ENSURE(s.dropout >= 0 && s.dropout < 1,
                      "--dropout: stage " << k << " rate must be in [0, 1), got " << s.dropout);
        RETEXO_ENSURE(s.lr > 0, "--lr: stage " << k << " must be positive, got " << s.lr);
        RETEXO_ENSURE(model != nn::layer_kind::gat || s.hidden % heads == 0,
                      "--hidden " << s.hidden << " must be divisible by --heads " << heads << " for GAT");
    }
    RETEXO_ENSURE(batch_size >= 0, "--batch-size must be >= 0, got " << batch_size);
    RETEXO_ENSURE(patience >= 0, "--patience must be >= 0, got " << patience);
    RETEXO_ENSURE(exchange_columns >= 0, "--exchange-columns must be >= 0, got " << exchange_columns);
    RETEXO_ENSURE(exchange_columns == 0 || model == nn::layer_kind::gcn || model == nn::layer_kind::sage_mean,
                  "--exchange-columns applies to gcn and sage: " << nn::to_string(model)
                                                                 << " trains on the exchanged rows every round");
}

namespace {

int loss_exponent(std::int64_t rows)
{
    return exact::scale_exponent(static_cast<double>(rows) * 1024.0);
}

/// One stage's model: transform (dense over precomputed aggregates, or a graph layer),
/// then LayerNorm (unless switched off), ReLU and a head, unless this is the hidden variant's last stage.
struct stage_model {
    bool graph = false; // SAGE-pool / GAT: aggregation trained every round
    bool has_head = true;
    std::optional<nn::dense_layer<float>> dense;
    std::optional<nn::gnn_layer<float>> layer;
    std::optional<nn::layer_norm<float>> ln;
    std::optional<nn::dense_layer<float>> head;

    std::vector<parameter<float>*> parameters()
    {
        std::vector<parameter<float>*> ps;
        if (dense) ps = {&dense->w, &dense->b};
        if (layer) ps = layer->parameters();
        if (ln) {
            ps.push_back(&ln->gamma);
            ps.push_back(&ln->beta);
        }
        if (head) {
            ps.push_back(&head->w);
            ps.push_back(&head->b);
        }
        return ps;
    }
};

/// Activations of one forward pass over a set of rows.
struct stage_pass {
    std::vector<node_t> rows;
    std::vector<node_t> ids; // global ids of rows (dropout keys)
    matrix_f x_rows, x_all, msg, t, u, h, hd, logits;
    matrix_f d_logits, d_hd, d_t; // backward
    nn::layer_cache<float> cache;
    const nn::layer_plan* plan = nullptr;
};

/// Everything a RETEXO run needs to continue: where it is, the replicated model state, this
/// rank's stage inputs, and what it has counted so far.
struct retexo_state {
    std::int64_t seq = 0;
    int stage = 0, next_round = 1, rounds_done = 0, best_round = 0;
    std::int64_t step = 0, opt_steps = 0;
    double best_score = -1, elapsed = 0, stage_elapsed = 0;
    std::vector<matrix_f> params, m, v, best;
    std::vector<epoch_record> history;
    std::vector<stage_record> stages;
    std::vector<named_tensor> finished;
    matrix_f h_own, h_train_own, input, input_train, x_all, x_all_train;
    byte_ledger done, stage_done;
    std::map<std::string, double> timer;
};

std::string checkpoint_path(const std::string& dir, int rank)
{
    return dir + "/ckpt.rank" + std::to_string(rank) + ".h5";
}

void write_matrix(h5::file& f, const std::string& name, const matrix_f& m)
{
    if (m.size() == 0) return;
    f.write<float>(name, std::span<const float>(m.data(), static_cast<std::size_t>(m.size())),
                   {static_cast<hsize_t>(m.rows()), static_cast<hsize_t>(m.cols())});
}

matrix_f read_matrix(const h5::file& f, const std::string& name)
{
    if (!f.exists(name)) return {};
    const auto d = f.dims(name);
    RETEXO_ENSURE(d.size() == 2, f.path() << ": " << name << " is not a matrix");
    matrix_f m(static_cast<Eigen::Index>(d[0]), static_cast<Eigen::Index>(d[1]));
    if (m.size() > 0) f.read_rows<float>(f.open_dataset(name), name, 0, d[0], d[1], m.data());
    return m;
}

std::vector<std::uint64_t> ledger_words(const byte_ledger& l)
{
    std::vector<std::uint64_t> w;
    for (const auto* a : {&l.sent, &l.received, &l.messages, &l.calls})
        w.insert(w.end(), a->begin(), a->end());
    return w;
}

byte_ledger ledger_from(const std::vector<std::uint64_t>& w, std::size_t at = 0)
{
    byte_ledger l;
    for (int i = 0; i < num_purposes; ++i) {
        l.sent[i] = w[at + i];
        l.received[i] = w[at + num_purposes + i];
        l.messages[i] = w[at + 2 * num_purposes + i];
        l.calls[i] = w[at + 3 * num_purposes + i];
    }
    return l;
}

struct checkpoint_id {
    std::uint64_t hash;
    int ranks, rank;
    std::string config;
};

void save_state(const std::string& path, const retexo_state& s, const checkpoint_id& id)
{
    atomic_file out(path);
    {
        auto f = h5::file::create(out.temp_path(), path);
        f.set_attr("retexo_format", std::string("retexo-checkpoint"));
        f.set_attr("assignment_hash", hash_to_hex(id.hash));
        f.set_attr("ranks", static_cast<std::int64_t>(id.ranks));
        f.set_attr("rank", static_cast<std::int64_t>(id.rank));
        f.set_attr("config", id.config);
        f.set_attr("seq", s.seq);
        for (const auto& [k, v] : std::map<std::string, std::int64_t>{{"stage", s.stage},
                                                                      {"next_round", s.next_round},
                                                                      {"rounds_done", s.rounds_done},
                                                                      {"best_round", s.best_round},
                                                                      {"step", s.step},
                                                                      {"opt_steps", s.opt_steps}})
            f.set_attr(k, v);
        f.set_attr("best_score", s.best_score);
        f.set_attr("elapsed", s.elapsed);
        f.set_attr("stage_elapsed", s.stage_elapsed);
        for (std::size_t i = 0; i < s.params.size(); ++i) {
            write_matrix(f, "params/" + std::to_string(i), s.params[i]);
            write_matrix(f, "adam_m/" + std::to_string(i), s.m[i]);
            write_matrix(f, "adam_v/" + std::to_string(i), s.v[i]);
            write_matrix(f, "best/" + std::to_string(i), s.best[i]);
        }
        f.set_attr("num_params", static_cast<std::int64_t>(s.params.size()));
        for (std::size_t i = 0; i < s.finished.size(); ++i) {
            write_matrix(f, "finished/" + std::to_string(i), s.finished[i].value);
            f.set_attr("finished_name." + std::to_string(i), s.finished[i].name);
        }
        f.set_attr("num_finished", static_cast<std::int64_t>(s.finished.size()));
        for (const auto& [name, m] : std::map<std::string, const matrix_f*>{{"h_own", &s.h_own},
                                                                            {"h_train_own", &s.h_train_own},
                                                                            {"input", &s.input},
                                                                            {"input_train", &s.input_train},
                                                                            {"x_all", &s.x_all},
                                                                            {"x_all_train", &s.x_all_train}})
            write_matrix(f, "inputs/" + name, *m);
        std::vector<double> hist;
        for (const auto& e : s.history)
            hist.insert(hist.end(), {static_cast<double>(e.stage), static_cast<double>(e.epoch), e.loss, e.acc.train,
                                     e.acc.valid, e.acc.test, static_cast<double>(e.bytes),
                                     static_cast<double>(e.calls), e.seconds, e.valid_loss});
        f.write<double>("history", hist, {s.history.size(), 10});
        std::vector<double> st;
        std::vector<std::uint64_t> st_bytes;
        for (const auto& r : s.stages) {
            st.insert(st.end(),
                      {static_cast<double>(r.stage), static_cast<double>(r.rounds), static_cast<double>(r.best_round),
                       r.best.train, r.best.valid, r.best.test, r.seconds});
            const auto w = ledger_words(r.bytes);
            st_bytes.insert(st_bytes.end(), w.begin(), w.end());
        }
        f.write<double>("stages", st, {s.stages.size(), 7});
        f.write<std::uint64_t>("stage_bytes", st_bytes, {s.stages.size(), 4 * num_purposes});
        auto words = ledger_words(s.done);
        const auto sw = ledger_words(s.stage_done);
        words.insert(words.end(), sw.begin(), sw.end());
        f.write<std::uint64_t>("ledger", words);
        for (const auto& [k, v] : s.timer)
            f.set_attr("timer." + k, v);
        std::string names;
        for (const auto& [k, v] : s.timer)
            names += (names.empty() ? "" : ",") + k;
        f.set_attr("timer_names", names);
    }
    out.commit(true);
}

retexo_state load_state(const std::string& path, const checkpoint_id& id)
{
    const auto f = h5::file::open(path);
    RETEXO_ENSURE(f.has_attr("retexo_format") && f.attr_string("retexo_format") == "retexo-checkpoint",
                  path << ": not a retexo checkpoint");
    RETEXO_ENSURE(f.attr_int("ranks") == id.ranks,
                  path << ": made by a run with " << f.attr_int("ranks") << " ranks; this run has " << id.ranks);
    RETEXO_ENSURE(f.attr_int("rank") == id.rank, path << ": belongs to rank " << f.attr_int("rank"));
    RETEXO_ENSURE(f.attr_string("assignment_hash") == hash_to_hex(id.hash),
                  path << ": made with another partition (assignment hash " << f.attr_string("assignment_hash")
                       << ", this run " << hash_to_hex(id.hash) << ")");
    RETEXO_ENSURE(f.attr_string("config") == id.config,
                  path << ": made with another model configuration (checkpoint: " << f.attr_string("config")
                       << "; this run: " << id.config << ")");
    retexo_state s;
    s.seq = f.attr_int("seq");
    s.stage = static_cast<int>(f.attr_int("stage"));
    s.next_round = static_cast<int>(f.attr_int("next_round"));
    s.rounds_done = static_cast<int>(f.attr_int("rounds_done"));
    s.best_round = static_cast<int>(f.attr_int("best_round"));
    s.step = f.attr_int("step");
    s.opt_steps = f.attr_int("opt_steps");
    s.best_score = f.attr_double("best_score");
    s.elapsed = f.attr_double("elapsed");
    s.stage_elapsed = f.attr_double("stage_elapsed");
    for (std::int64_t i = 0; i < f.attr_int("num_params"); ++i) {
        s.params.push_back(read_matrix(f, "params/" + std::to_string(i)));
        s.m.push_back(read_matrix(f, "adam_m/" + std::to_string(i)));
        s.v.push_back(read_matrix(f, "adam_v/" + std::to_string(i)));
        s.best.push_back(read_matrix(f, "best/" + std::to_string(i)));
    }
    for (std::int64_t i = 0; i < f.attr_int("num_finished"); ++i)
        s.finished.push_back(
            {f.attr_string("finished_name." + std::to_string(i)), read_matrix(f, "finished/" + std::to_string(i))});
    s.h_own = read_matrix(f, "inputs/h_own");
    s.h_train_own = read_matrix(f, "inputs/h_train_own");
    s.input = read_matrix(f, "inputs/input");
    s.input_train = read_matrix(f, "inputs/input_train");
    s.x_all = read_matrix(f, "inputs/x_all");
    s.x_all_train = read_matrix(f, "inputs/x_all_train");
    auto read2 = [&](const std::string& name, std::size_t cols) {
        const auto d = f.dims(name);
        RETEXO_ENSURE(d.size() == 2 && d[1] == cols, path << ": " << name << " has the wrong shape");
        std::vector<double> v(d[0] * cols);
        if (!v.empty()) f.read_rows<double>(f.open_dataset(name), name, 0, d[0], cols, v.data());
        return v;
    };
    const auto hist = read2("history", 10);
    for (std::size_t i = 0; i < hist.size(); i += 10) {
        epoch_record e;
        e.stage = static_cast<int>(hist[i]);
        e.epoch = static_cast<int>(hist[i + 1]);
        e.loss = hist[i + 2];
        e.acc = {hist[i + 3], hist[i + 4], hist[i + 5]};
        e.bytes = static_cast<std::uint64_t>(hist[i + 6]);
        e.calls = static_cast<std::uint64_t>(hist[i + 7]);
        e.seconds = hist[i + 8];
        e.valid_loss = hist[i + 9];
        s.history.push_back(e);
    }
    const auto st = read2("stages", 7);
    const auto sd = f.dims("stage_bytes");
    std::vector<std::uint64_t> sb(sd[0] * (sd.size() > 1 ? sd[1] : 1));
    if (!sb.empty())
        f.read_rows<std::uint64_t>(f.open_dataset("stage_bytes"), "stage_bytes", 0, sd[0], sd[1], sb.data());
    for (std::size_t i = 0; i * 7 < st.size(); ++i) {
        stage_record r;
        r.stage = static_cast<int>(st[i * 7]);
        r.rounds = static_cast<int>(st[i * 7 + 1]);
        r.best_round = static_cast<int>(st[i * 7 + 2]);
        r.best = {st[i * 7 + 3], st[i * 7 + 4], st[i * 7 + 5]};
        r.seconds = st[i * 7 + 6];
        r.bytes = ledger_from(sb, i * 4 * num_purposes);
        s.stages.push_back(r);
    }
    const auto words = f.read_vector<std::uint64_t>("ledger", 8 * num_purposes);
    s.done = ledger_from(words);
    s.stage_done = ledger_from(words, 4 * num_purposes);
    std::stringstream names(f.attr_string("timer_names"));
    std::string k;
    while (std::getline(names, k, ','))
        if (!k.empty()) s.timer[k] = f.attr_double("timer." + k);
    return s;
}

/// The newest checkpoint every rank has (collective): the current files, or the previous
/// ones if a job died between two ranks' renames.
retexo_state resume_state(const mpi::communicator& comm, const std::string& dir, const checkpoint_id& id)
{
    const std::string path = checkpoint_path(dir, comm.rank());
    std::optional<retexo_state> cur, prev;
    std::string err;
    try {
        RETEXO_ENSURE(std::filesystem::exists(path) || std::filesystem::exists(path + "_prev"),
                      path << ": no checkpoint to resume from");
        if (std::filesystem::exists(path)) cur = load_state(path, id);
        if (std::filesystem::exists(path + "_prev")) prev = load_state(path + "_prev", id);
    } catch (const std::exception& e) {
        err = e.what();
    }
    comm.agree(err, purpose::checkpoint);
    const auto cur_seq = comm.allgather(cur ? cur->seq : std::int64_t{-1}, purpose::checkpoint);
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
    return cur && cur->seq == pick ? std::move(*cur) : std::move(*prev);
}

} // namespace

run_result train_retexo(const rank_context& ctx, const retexo_options& o, const progress_fn& progress)
{
    o.validate();
    const auto& comm = ctx.comm;
    const auto& part = ctx.part;
    byte_ledger start_ledger = comm.ledger();
    auto t_start = std::chrono::steady_clock::now();
    phase_timer timer;
    const auto& ck = o.checkpoint;
    const bool checkpointing = !ck.dir.empty();
    const checkpoint_id ck_id{part.assignment_hash, comm.size(), comm.rank(), ck.config};
    if (checkpointing && comm.rank() == 0) std::filesystem::create_directories(ck.dir);
    if (checkpointing) comm.barrier();
    std::optional<retexo_state> resumed;
    if (checkpointing && ck.resume) resumed = resume_state(comm, ck.dir, ck_id);
    std::int64_t seq = resumed ? resumed->seq : 0;
    auto last_checkpoint = std::chrono::steady_clock::now();
    const node_t own = part.num_owned();
    const node_t local = part.num_local();
    const int C = part.global.num_classes;
    const auto K = static_cast<int>(o.stages.size());
    const auto mode = ctx.reduce(o.exact);
    const bool logits_variant = o.variant == retexo_variant::logits;
    const int loss_k = o.exact ? loss_exponent(ctx.global_train) : -1;
    const int valid_k = o.exact ? loss_exponent(ctx.global_valid) : -1;

    // Global ids of every local row (dropout keys, batch assignment).
    std::vector<node_t> local_ids(part.owned_global);
    local_ids.insert(local_ids.end(), part.halo_global.begin(), part.halo_global.end());
    auto ids_of = [&](const std::vector<node_t>& rows) {
        std::vector<node_t> ids(rows.size());
        for (std::size_t i = 0; i < rows.size(); ++i)
            ids[i] = local_ids[rows[i]];
        return ids;
    };

    run_result result;
    result.mode = "retexo";
    result.model = nn::to_string(o.model);
    result.variant = to_string(o.variant);
    result.ranks = comm.size();
    result.seed = o.seed;

    matrix_f h_own = part.features; // this stage's inputs, owned rows (whole graph)
    matrix_f h_train_own;           // inductive: the same computed on the training graph
    if (ctx.inductive) {
        h_train_own = part.features;
        ctx.hide_evaluation_rows(h_train_own);
    }
    std::int64_t step = 0;
    int first_stage = 0;
    if (resumed) { // continue where the checkpoint was taken, with everything it had counted
        first_stage = resumed->stage;
        step = resumed->step;
        start_ledger = comm.ledger() - resumed->done;
        t_start -= std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(resumed->elapsed));
        for (const auto& [k, v] : resumed->timer)
            timer.add(k, v);
        result.history = resumed->history;
        result.stages = resumed->stages;
        result.parameters = resumed->finished;
        h_own = resumed->h_own;
        h_train_own = resumed->h_train_own;
    }
    // Write this rank's part of a checkpoint (collective: every rank writes, errors agreed).
    auto write_checkpoint = [&](retexo_state& st) {
        st.seq = ++seq;
        st.step = step;
        st.history = result.history;
        st.stages = result.stages;
        st.finished = result.parameters;
        st.done = comm.ledger() - start_ledger;
        st.elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
        st.timer = timer.seconds();
        std::string err;
        try {
            phase_timer::scope sc(timer, "checkpoint");
            save_state(checkpoint_path(ck.dir, comm.rank()), st, ck_id);
        } catch (const std::exception& e) {
            err = e.what();
        }
        comm.agree(err, purpose::checkpoint);
        last_checkpoint = std::chrono::steady_clock::now();
    };
    auto finish = [&] {
        result.seconds = timer.seconds();
        result.seconds["total"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
        finish_bytes(ctx, start_ledger, result);
        return result;
    };
    for (int k = first_stage; k < K; ++k) {
        const auto& so = o.stages[static_cast<std::size_t>(k)];
        const bool mid = resumed && k == resumed->stage && resumed->next_round > 1; // resuming inside this stage
        const byte_ledger stage_start = mid ? comm.ledger() - resumed->stage_done : comm.ledger();
        const auto stage_t0 =
            std::chrono::steady_clock::now() - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                   std::chrono::duration<double>(mid ? resumed->stage_elapsed : 0.0));
        const bool last = k == K - 1;
        const bool mlp_only = logits_variant && k == 0; // raw features never cross a partition
        const int F = static_cast<int>(h_own.cols());

        // 1. The stage's one exchange: halo rows of h_k (inductive: also of the training
        //    graph's h_k, as training must not see evaluation nodes).  Below fp32 every row
        //    of the aggregation input is rounded alike (bf16, or int8 with a per-row scale,
        //    stored as bf16), owned rows too, so the result does not depend on which rows
        //    happen to be remote.  While the halo rows travel, meanwhile(x, pending) may work
        //    on x's owned rows (they are final, hidden rows included, when it is called).
        using wire = retexo_options::wire;
        // Runs meanwhile while the exchange is in flight, completes it, then after().
        auto complete = [&](auto& x, pending_exchange& pending, bool train_graph, auto&& meanwhile, auto&& after) {
            if (train_graph) ctx.hide_evaluation_rows(x, 0, own);
            meanwhile(x, pending);
            {
                phase_timer::scope s(timer, "exchange");
                pending.wait();
            }
            after();
            if (train_graph) ctx.hide_evaluation_rows(x, own, local);
        };
        auto exchange_compact = [&](const matrix_f& h, bool train_graph, auto&& meanwhile) {
            const auto f = static_cast<int>(h.cols());
            matrix<bf16> x(local, f);
            const auto n_own = static_cast<std::ptrdiff_t>(own) * f;
            const bool int8 = o.exchange == wire::int8;
            const int w = int8 ? int8_row_bytes(f) : f;
            std::vector<std::uint8_t> sent, got;
            pending_exchange pending = [&] {
                if (int8) {
                    sent.resize(static_cast<std::size_t>(own) * w);
                    got.resize(static_cast<std::size_t>(part.num_halo()) * w);
                    quantize_int8(h.data(), own, f, sent.data());
                    dequantize_int8(sent.data(), own, f, x.data());
                    phase_timer::scope s(timer, "exchange");
                    return ctx.halo->start_forward(sent.data(), got.data(), w);
                }
                for (std::ptrdiff_t i = 0; i < n_own; ++i)
                    x.data()[i] = bf16(h.data()[i]);
                phase_timer::scope s(timer, "exchange");
                return ctx.halo->start_forward(h.data(), x.data() + n_own, f);
            }();
            complete(x, pending, train_graph, meanwhile, [&] {
                if (int8) dequantize_int8(got.data(), part.num_halo(), f, x.data() + n_own);
            });
            return x;
        };
        auto exchange = [&](const matrix_f& h, bool train_graph, auto&& meanwhile) {
            const auto f = static_cast<int>(h.cols());
            matrix_f x(local, f);
            x.topRows(own) = h;
            if (mlp_only) return x;
            pending_exchange pending = [&] {
                phase_timer::scope s(timer, "exchange");
                return ctx.halo->start_forward(h.data(), x.data() + static_cast<std::ptrdiff_t>(own) * f, f);
            }();
            complete(x, pending, train_graph, meanwhile, [] {});
            return x;
        };
        auto no_overlap = [](const auto&, pending_exchange&) {};

        // 2. The stage model.
        stage_model m;
        m.graph = !mlp_only && (o.model == nn::layer_kind::sage_pool || o.model == nn::layer_kind::gat);
        m.has_head = !(last && !logits_variant);
        const int t_out = m.has_head ? so.hidden : C;
        const std::uint64_t init_index = 1000 + 10 * static_cast<std::uint64_t>(k);
        // Graph path: the exchanged inputs, read every round.  Dense path: the aggregated
        // inputs of every owned row, computed once (the exchanged rows are dropped after).
        matrix_f x_all, x_all_train, input, input_train;
        if (mid) {
            x_all = resumed->x_all;
            x_all_train = resumed->x_all_train;
            input = resumed->input;
            input_train = resumed->input_train;
        } else if (m.graph) {
            auto full = [&](const matrix_f& h, bool train_graph) {
                if (o.exchange != wire::fp32 && !mlp_only)
                    return matrix_f(exchange_compact(h, train_graph, no_overlap).cast<float>());
                return exchange(h, train_graph, no_overlap);
            };
            x_all = full(h_own, false);
            if (ctx.inductive) x_all_train = full(h_train_own, true);
            ctx.halo->release_buffers(); // the stage exchanges nothing more
        } else {
            auto precompute = [&](const nn::local_graph& g, const matrix_f& h, bool train_graph) {
                if (mlp_only) return h;
                const bool gcn = o.model == nn::layer_kind::gcn;
                // Interior rows (every in-neighbour owned) are aggregated while the halo rows
                // travel, the boundary rows after; without overlap (limit 0) only rows with no
                // in-neighbours come first.  Each output row is reduced alone in CSR order, so
                // the split changes no bit.
                std::vector<node_t> interior, boundary;
                std::tie(interior, boundary) = split_rows_within(*g.in_edges, o.overlap ? own : 0);
                matrix_f a(own, F);
                // Columns [c0, c0 + x.cols()) of a, aggregated from x (local rows, those columns).
                Eigen::Index c0 = 0;
                auto aggregate_rows = [&](const auto& x, std::span<const node_t> rows, pending_exchange* pending) {
                    const auto w = static_cast<int>(x.cols());
                    phase_timer::scope s(timer, "aggregate");
                    // In chunks of destination rows: one chunk's plan (sources and weights of
                    // its edges) at a time; between chunks MPI may progress the exchange.
                    const std::size_t chunk = pending != nullptr ? std::size_t{1} << 13 : std::size_t{1} << 17;
                    matrix_f out;
                    for (std::size_t r0 = 0; r0 < rows.size(); r0 += chunk) {
                        const auto sub = rows.subspan(r0, std::min(chunk, rows.size() - r0));
                        const aggregation agg(*g.in_edges, local,
                                              aggregation_options{.kind = gcn ? aggregator::gcn : aggregator::mean,
                                                                  .in_degree = g.in_degree,
                                                                  .rows = sub,
                                                                  .backward = false});
                        out.resize(static_cast<Eigen::Index>(sub.size()), w);
                        agg.forward(x.data(), w, out.data());
                        for (std::size_t i = 0; i < sub.size(); ++i)
                            a.block(sub[i], c0, 1, w) = out.row(static_cast<Eigen::Index>(i));
                        if (pending != nullptr) pending->test();
                    }
                };
                auto meanwhile = [&](const auto& x, pending_exchange& pending) {
                    aggregate_rows(x, interior, &pending);
                };
                // Column blocks of at most o.exchange_columns: the halo rows of one block at a time.
                const Eigen::Index block = o.exchange_columns > 0 ? std::min(o.exchange_columns, F) : F;
                for (c0 = 0; c0 < F; c0 += block) {
                    const Eigen::Index w = std::min<Eigen::Index>(block, F - c0);
                    const matrix_f hb = w == F ? matrix_f() : matrix_f(h.middleCols(c0, w));
                    const matrix_f& hx = w == F ? h : hb;
                    if (o.exchange != wire::fp32)
                        aggregate_rows(exchange_compact(hx, train_graph, meanwhile), boundary, nullptr);
                    else
                        aggregate_rows(exchange(hx, train_graph, meanwhile), boundary, nullptr);
                }
                ctx.halo->release_buffers(); // the stage exchanges nothing more
                if (gcn && !logits_variant) return a;
                matrix_f cat(own, 2 * F); // the node's own input next to its neighbours' aggregate
                cat.leftCols(F) = h;
                cat.rightCols(F) = a;
                return cat;
            };
            input = precompute(ctx.graph, h_own, false);
            if (ctx.inductive) input_train = precompute(ctx.train_graph, h_train_own, true);
        }
        if (!m.graph) {
            m.dense.emplace(static_cast<int>(input.cols()), t_out, o.seed, init_index,
                            "stage" + std::to_string(k) + ".transform");
        } else {
            nn::layer_options lo;
            lo.heads = o.heads;
            lo.concat = m.has_head;
            m.layer.emplace(o.model, F, t_out, lo, o.seed, init_index, "stage" + std::to_string(k) + ".transform");
        }
        if (m.has_head && so.layer_norm) m.ln.emplace(so.hidden, "stage" + std::to_string(k) + ".norm");
        if (m.has_head) m.head.emplace(so.hidden, C, o.seed, init_index + 1, "stage" + std::to_string(k) + ".head");
        auto params = m.parameters();
        // Mini-batches: batch of a training node = hash(global id, stage, round) mod batches,
        // the same on every partitioning.
        const int batches =
            o.batch_size > 0 ? static_cast<int>((ctx.global_train + o.batch_size - 1) / o.batch_size) : 1;
        optimizer<float> opt({.kind = so.optimizer,
                              .lr = so.lr,
                              .weight_decay = so.weight_decay,
                              .decay_steps = so.lr_decay ? std::int64_t{so.rounds} * batches : 0},
                             params);
        if (mid) {
            RETEXO_ENSURE(resumed->params.size() == params.size(),
                          "checkpoint: the stage model has another shape ("
                              << resumed->params.size() << " tensors, expected " << params.size() << ", stage "
                              << resumed->stage << " round " << resumed->next_round << ", k " << k << " of " << K
                              << " model " << nn::to_string(o.model) << ")");
            restore(params, resumed->params);
            opt.first_moments() = resumed->m;
            opt.second_moments() = resumed->v;
            opt.set_steps(resumed->opt_steps);
        } else {
            broadcast_parameters(comm, params);
        }

        // Plans of the graph path, per row set (training rows over the graph training sees).
        std::vector<node_t> eval_rows = ctx.valid_rows; // every round: validation (and test) rows
        if (o.track_test) eval_rows.insert(eval_rows.end(), ctx.test_rows.begin(), ctx.test_rows.end());
        std::optional<nn::layer_plan> plan_train, plan_valid, plan_own, plan_own_train;
        if (m.graph) {
            plan_train = m.layer->make_plan(ctx.train_graph, ctx.train_rows);
            plan_valid = m.layer->make_plan(ctx.graph, eval_rows);
            plan_own = m.layer->make_plan(ctx.graph, ctx.owned_rows);
            if (ctx.inductive) plan_own_train = m.layer->make_plan(ctx.train_graph, ctx.owned_rows);
        }
        // What a pass reads: the whole graph's inputs, or (inductive training) the training graph's.
        struct view {
            const matrix_f* input;
            const matrix_f* x_all;
        };
        const view full{&input, &x_all};
        const view train_view = ctx.inductive ? view{&input_train, &x_all_train} : full;

        const auto in_key = [&](std::int64_t st) {
            return dropout_key{o.seed, static_cast<std::uint64_t>(2 * k), static_cast<std::uint64_t>(st)};
        };
        const auto hid_key = [&](std::int64_t st) {
            return dropout_key{o.seed, static_cast<std::uint64_t>(2 * k + 1), static_cast<std::uint64_t>(st)};
        };

        // Forward over p.rows (set by the caller) reading v; dropout when training.
        auto forward = [&](stage_pass& p, const view& v, bool training, std::int64_t st) {
            p.ids = ids_of(p.rows);
            const double pin = training ? so.dropout : 0.0;
            if (!m.graph) {
                const auto w = static_cast<int>(v.input->cols());
                p.x_rows.resize(static_cast<Eigen::Index>(p.rows.size()), w);
                gather_rows(v.input->data(), p.rows, w, p.x_rows.data());
                dropout_forward(p.x_rows.data(), p.ids, w, pin, in_key(st), p.x_rows.data());
                m.dense->forward(p.x_rows, p.t);
            } else {
                p.x_all.resize(local, F);
                dropout_forward(v.x_all->data(), local_ids, F, pin, in_key(st), p.x_all.data());
                m.layer->message(p.x_all, p.cache, p.msg);
                p.x_rows.resize(static_cast<Eigen::Index>(p.rows.size()), F);
                gather_rows(p.x_all.data(), p.rows, F, p.x_rows.data());
                m.layer->combine(*p.plan, p.msg, p.x_rows, p.cache, p.t);
            }
            if (!m.has_head) {
                p.logits = p.t;
                return;
            }
            if (m.ln) m.ln->forward(p.t, p.u);
            const matrix_f& pre = m.ln ? p.u : p.t; // what ReLU reads
            p.h.resize(pre.rows(), pre.cols());
            activation_forward(activation::relu, pre.data(), static_cast<std::size_t>(pre.size()), p.h.data());
            p.hd.resize(p.h.rows(), p.h.cols());
            dropout_forward(p.h.data(), p.ids, so.hidden, training ? so.dropout : 0.0, hid_key(st), p.hd.data());
            m.head->forward(p.hd, p.logits);
        };

        // Backward from p.d_logits.
        auto backward = [&](stage_pass& p, std::int64_t st) {
            auto& d_t = p.d_t;
            if (m.has_head) {
                auto& d_hd = p.d_hd;
                m.head->backward(p.hd, p.d_logits, &d_hd, mode);
                dropout_backward(d_hd.data(), p.ids, so.hidden, so.dropout, hid_key(st), d_hd.data());
                activation_backward(activation::relu, (m.ln ? p.u : p.t).data(), d_hd.data(),
                                    static_cast<std::size_t>(d_hd.size()), d_hd.data());
                if (m.ln)
                    m.ln->backward(p.t, d_hd, d_t, mode);
                else
                    d_t = d_hd;
            } else {
                d_t = p.d_logits;
            }
            if (!m.graph) {
                m.dense->backward(p.x_rows, d_t, nullptr, mode);
                return;
            }
            m.layer->combine_backward(*p.plan, p.msg, p.x_rows, p.cache, d_t, true, mode);
            if (o.exact) {
                // Exact sums need each halo row's message gradient summed at its owner.
                const int w = m.layer->msg_width();
                {
                    phase_timer::scope s(timer, "exchange");
                    ctx.halo->reverse_add(p.cache.d_msg_exact.data() + static_cast<std::ptrdiff_t>(own) * w,
                                          p.cache.d_msg_exact.data(), w);
                }
                const matrix_f x_own = p.x_all.topRows(own);
                m.layer->message_backward(x_own, p.msg, p.cache, nullptr, mode);
            } else {
                // Halo rows' contributions stay local: the all-reduce sums them.
                m.layer->message_backward(p.x_all, p.msg, p.cache, nullptr, mode);
            }
        };

        // 3. Rounds.
        // Higher is better: validation accuracy, or minus the validation loss.
        const bool by_loss = o.select == retexo_options::selection::loss;
        double best_score = mid ? resumed->best_score : -std::numeric_limits<double>::infinity();
        int best_round = mid ? resumed->best_round : 0;
        std::vector<matrix_f> best_params = mid ? resumed->best : snapshot(params);
        int rounds_done = mid ? resumed->rounds_done : 0;
        // A checkpoint inside this stage: the model state and this rank's stage inputs.
        auto stage_state = [&](int next_round) {
            retexo_state st;
            st.stage = k;
            st.next_round = next_round;
            st.rounds_done = rounds_done;
            st.best_round = best_round;
            st.best_score = best_score;
            st.params = snapshot(params);
            st.m = opt.first_moments();
            st.v = opt.second_moments();
            st.opt_steps = opt.steps();
            st.best = best_params;
            st.h_own = h_own;
            st.h_train_own = h_train_own;
            st.input = input;
            st.input_train = input_train;
            st.x_all = x_all;
            st.x_all_train = x_all_train;
            st.stage_done = comm.ledger() - stage_start;
            st.stage_elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - stage_t0).count();
            return st;
        };
        // Buffers reused round after round (fresh large allocations cost page faults).
        stage_pass p, pe;
        for (int round = mid ? resumed->next_round : 1; round <= so.rounds; ++round) {
            rounds_done = round;
            double round_loss = 0;
            std::vector<std::vector<node_t>> batch_rows(static_cast<std::size_t>(batches));
            if (batches == 1) {
                batch_rows[0] = ctx.train_rows;
            } else {
                const counter_rng rng(o.seed, rng_stream::shuffle + static_cast<std::uint64_t>(k) * 1000003ULL);
                for (node_t r : ctx.train_rows)
                    batch_rows[rng.below(static_cast<std::uint64_t>(local_ids[r]) * 100003ULL +
                                             static_cast<std::uint64_t>(round),
                                         static_cast<std::uint64_t>(batches))]
                        .push_back(r);
            }
            std::vector<std::int64_t> batch_counts(static_cast<std::size_t>(batches));
            for (int b = 0; b < batches; ++b)
                batch_counts[static_cast<std::size_t>(b)] =
                    static_cast<std::int64_t>(batch_rows[static_cast<std::size_t>(b)].size());
            if (batches > 1)
                comm.allreduce(std::span<std::int64_t>(batch_counts), MPI_SUM, purpose::control);
            else
                batch_counts[0] = ctx.global_train;

            for (int b = 0; b < batches; ++b) {
                ++step;
                p.rows = batch_rows[static_cast<std::size_t>(b)];
                std::optional<nn::layer_plan> batch_plan;
                if (m.graph) {
                    if (batches == 1)
                        p.plan = &*plan_train;
                    else {
                        batch_plan = m.layer->make_plan(ctx.train_graph, p.rows);
                        p.plan = &*batch_plan;
                    }
                }
                loss_result lr;
                {
                    phase_timer::scope s(timer, "compute");
                    forward(p, train_view, true, step);
                    p.d_logits.setZero(p.logits.rows(), C);
                    std::vector<node_t> seq(p.rows.size());
                    std::vector<std::int32_t> labels(p.rows.size());
                    for (std::size_t i = 0; i < seq.size(); ++i) {
                        seq[i] = static_cast<node_t>(i);
                        labels[i] = part.labels[p.rows[i]];
                    }
                    const auto n_global = std::max<std::int64_t>(1, batch_counts[static_cast<std::size_t>(b)]);
                    comm.checked([&] {
                        lr = softmax_cross_entropy(p.logits.data(), C, labels, seq, 1.0F / static_cast<float>(n_global),
                                                   p.d_logits.data(), loss_k);
                    });
                    backward(p, step);
                }
                {
                    phase_timer::scope s(timer, "sync");
                    allreduce_gradients(comm, params, o.exact);
                }
                {
                    phase_timer::scope s(timer, "compute");
                    opt.step();
                }
                round_loss +=
                    reduce_loss(comm, lr, std::max<std::int64_t>(1, batch_counts[static_cast<std::size_t>(b)]),
                                loss_k) *
                    static_cast<double>(batch_counts[static_cast<std::size_t>(b)]) /
                    static_cast<double>(ctx.global_train);
            }

            // Validation accuracy every round (no traffic but the counts).
            epoch_record rec;
            rec.stage = k;
            rec.epoch = round;
            rec.loss = round_loss;
            {
                phase_timer::scope s(timer, "eval");
                pe.rows = eval_rows;
                if (m.graph) pe.plan = &*plan_valid;
                forward(pe, full, false, 0);
                std::vector<node_t> seq_valid, seq_test;
                std::vector<std::int32_t> labels(pe.rows.size());
                for (std::size_t i = 0; i < pe.rows.size(); ++i) {
                    (i < ctx.valid_rows.size() ? seq_valid : seq_test).push_back(static_cast<node_t>(i));
                    labels[i] = part.labels[pe.rows[i]];
                }
                std::int64_t correct[2] = {count_correct(pe.logits.data(), C, labels, seq_valid),
                                           count_correct(pe.logits.data(), C, labels, seq_test)};
                comm.allreduce(std::span<std::int64_t>(correct, o.track_test ? 2 : 1), MPI_SUM, purpose::metrics);
                auto ratio = [](std::int64_t a, std::int64_t b) {
                    return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
                };
                rec.acc.valid = ratio(correct[0], ctx.global_valid);
                if (by_loss)
                    rec.valid_loss = reduce_loss(comm,
                                                 softmax_cross_entropy(pe.logits.data(), C, labels, seq_valid, 1.0F,
                                                                       static_cast<float*>(nullptr), valid_k),
                                                 std::max<std::int64_t>(1, ctx.global_valid), valid_k);
                if (o.track_test) rec.acc.test = ratio(correct[1], ctx.global_test);
            }
            const double score = by_loss ? -rec.valid_loss : rec.acc.valid;
            if (score > best_score) {
                best_score = score;
                best_round = round;
                best_params = snapshot(params);
            }
            rec.bytes = comm.sum(comm.ledger() - start_ledger + ctx.setup_bytes).total_sent();
            rec.calls = (comm.ledger() - start_ledger).total_calls();
            rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
            result.history.push_back(rec);
            if (progress) progress(rec);
            if (checkpointing) {
                // Every rank takes the same decision: stop (signal, wall-time limit) and/or
                // write a timed checkpoint.
                const double elapsed =
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
                const double per_round = elapsed / std::max<std::size_t>(1, result.history.size());
                int flags[2] = {ck.stop_requested && ck.stop_requested() ? 1 : 0, 0};
                if (ck.max_hours > 0 && elapsed + 2 * per_round >= ck.max_hours * 3600) flags[0] = 1;
                if (ck.every_minutes > 0 &&
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - last_checkpoint).count() >=
                        ck.every_minutes * 60)
                    flags[1] = 1;
                comm.allreduce(std::span<int>(flags, 2), MPI_MAX, purpose::control);
                const bool stage_over = round == so.rounds || (o.patience > 0 && round - best_round >= o.patience);
                if ((flags[0] != 0 || flags[1] != 0) && !stage_over) {
                    auto st = stage_state(round + 1);
                    write_checkpoint(st);
                }
                if (flags[0] != 0 && !stage_over) {
                    result.interrupted = true;
                    return finish();
                }
            }
            if (o.patience > 0 && round - best_round >= o.patience) break;
        }

        // 4. Best parameters, every owned row's embedding (and logits), stage accuracies.
        //    The dense path runs in chunks of rows: a few chunk-sized buffers instead of
        //    one per layer output for every owned row.
        restore(params, best_params);
        p = stage_pass();
        pe = stage_pass();
        auto embed = [&](const view& v, const nn::layer_plan* plan, matrix_f& logits, matrix_f& hidden) {
            const node_t chunk = m.graph ? std::max<node_t>(own, 1) : node_t{1} << 16;
            logits.resize(own, C);
            hidden.resize(own, m.has_head ? so.hidden : 0);
            stage_pass c;
            c.plan = plan;
            for (node_t r0 = 0; r0 < own; r0 += chunk) {
                const node_t n = std::min(chunk, own - r0);
                c.rows.assign(ctx.owned_rows.begin() + r0, ctx.owned_rows.begin() + r0 + n);
                forward(c, v, false, 0);
                logits.middleRows(r0, n) = c.logits;
                if (m.has_head) hidden.middleRows(r0, n) = c.h;
            }
        };
        matrix_f logits, hidden, train_logits, train_hidden;
        {
            phase_timer::scope s(timer, "eval");
            embed(full, m.graph ? &*plan_own : nullptr, logits, hidden);
            if (ctx.inductive && !last)
                embed(train_view, m.graph ? &*plan_own_train : nullptr, train_logits, train_hidden);
        }
        stage_record sr;
        sr.stage = k;
        sr.rounds = rounds_done;
        sr.best_round = best_round;
        sr.best = reduce_accuracies(ctx, logits);
        sr.bytes = comm.sum(comm.ledger() - stage_start);
        sr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stage_t0).count();
        result.stages.push_back(sr);
        for (auto& t : named_values(params))
            result.parameters.push_back(std::move(t));
        if (last) {
            result.final_acc = sr.best;
            result.logits = std::move(logits);
            result.embedding = m.has_head ? std::move(hidden) : h_own;
        } else {
            h_own = logits_variant ? std::move(logits) : std::move(hidden);
            if (ctx.inductive) {
                h_train_own = logits_variant ? std::move(train_logits) : std::move(train_hidden);
                ctx.hide_evaluation_rows(h_train_own);
            }
            // A finished stage is a natural restart point: the next stage's inputs.
            if (checkpointing) {
                bool stop = ck.stop_after_stage == k || (ck.stop_requested && ck.stop_requested());
                stop = comm.allreduce(stop ? 1 : 0, MPI_MAX, purpose::control) != 0;
                retexo_state st;
                st.stage = k + 1;
                st.h_own = h_own;
                st.h_train_own = h_train_own;
                write_checkpoint(st);
                if (stop) {
                    result.interrupted = true;
                    return finish();
                }
            }
        }
    }
    return finish();
}

} // namespace retexo::train

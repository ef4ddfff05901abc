#pragma once
/// @file gat.hpp
/// Graph attention (GAT) over a CSR of in-edges, for H heads of width D:
///
///   s_uv = el_u + er_v   (el = <a_l, z_u>, er = <a_r, z_v> per head, computed by the layer)
///   e_uv = LeakyReLU(s_uv),   alpha_uv = softmax over u in N(v) (+ v itself with self loops)
///   out_v[h] = sum_u alpha_uv[h] z_u[h]
///
/// The sources are the GAT layer's messages: every source row (owned and halo) holds
/// [z_u | el_u], H*D + H values; er holds H values per source row (only destination rows are
/// read).  The backward pass returns the gradients w.r.t. the messages (gathered over the
/// transposed plan, so bit-identical for any thread count) and er (per destination row).

#include <retexo/graph/csr.hpp>
#include <retexo/kernels/common.hpp>

#include <span>

namespace retexo {

struct gat_options {
    int heads = 1;
    double negative_slope = 0.2;
    bool self_loops = true;
    std::span<const node_t> rows; ///< destination rows to produce; empty: every CSR row
};

class gat_attention {
public:
    gat_attention(const csr& g, node_t num_src, const gat_options& options);

    int heads() const noexcept { return heads_; }
    double negative_slope() const noexcept { return slope_; }
    node_t num_out() const noexcept { return plan_.num_rows(); }
    node_t num_src() const noexcept { return num_src_; }
    offset_t num_edges() const noexcept { return plan_.num_edges(); }
    const csr& edges() const noexcept { return plan_; }
    std::span<const node_t> out_rows() const noexcept { return rows_; }

    /// msg: num_src x (H*D + H); out: num_out x (H*D); alpha: num_edges x H (kept for
    /// backward).
    template <typename T>
    void forward(const T* msg, const T* er, int head_dim, T* out, T* alpha) const;

    /// d_msg: num_src x (H*D + H), d_er: num_src x H (only destination rows non-zero); both
    /// overwritten.  d_score: scratch of num_edges x H.
    template <typename T>
    void backward(const T* msg, const T* er, const T* alpha, const T* d_out, int head_dim, T* d_msg, T* d_er,
                  T* d_score) const;

    /// Exact mode: acc (num_src x (H*D + H)) += fixed-point scatter contributions; d_er
    /// (num_src x H) overwritten as in backward().
    void backward_exact(const float* msg, const float* er, const float* alpha, const float* d_out, int head_dim, int k,
                        std::int64_t* acc, float* d_er, float* d_score) const;

    /// Aggregating the inputs (a layer whose messages are x W per head can apply W after the
    /// sum): every head reads the same source row x_u (width values) and el from its own
    /// array (num_src x H); y_v[h] = sum_u alpha_uv[h] x_u.  y holds the heads one after the
    /// other, each num_out x width (head h's rows from h * num_out * width).
    template <typename T>
    void forward_inputs(const T* x, int width, const T* el, const T* er, T* y, T* alpha) const;
    /// The gradients of forward_inputs w.r.t. el (num_src x H) and er (num_src x H, destination
    /// rows non-zero) from d_y (laid out as y); the inputs' own gradient is not formed.
    /// d_score: scratch of num_edges x H.
    template <typename T>
    void backward_inputs(const T* x, int width, const T* el, const T* er, const T* alpha, const T* d_y, T* d_el,
                         T* d_er, T* d_score) const;

private:
    /// Where forward and the edge gradients read the values and el of a source row, and where
    /// a head's output goes: [z_u | el_u] rows with a slice per head (messages), or one row
    /// per source shared by the heads with el apart (inputs).
    template <typename T>
    struct source_layout {
        const T* values;
        std::ptrdiff_t value_stride; // between source rows
        int head_offset;             // of head h's values within a row: h * head_offset
        int width;                   // values per head
        const T* el;
        std::ptrdiff_t el_stride;
        std::ptrdiff_t out_head; // of head h's output: h * out_head within the row's output
        std::ptrdiff_t out_row;  // between output rows
    };
    template <typename T>
    source_layout<T> message_layout(const T* msg, int head_dim) const;
    template <typename T>
    source_layout<T> inputs_layout(const T* x, int width, const T* el) const;
    template <typename T>
    void forward(const source_layout<T>& s, const T* er, T* out, T* alpha) const;
    /// forward's weighted sums of one output row (edges [e0, e1)) from shared rows.
    template <typename T>
    void shared_forward_sums(const source_layout<T>& s, offset_t e0, offset_t e1, const T* alpha, T* o) const;
    template <typename T>
    void edge_gradients(const source_layout<T>& s, const T* er, const T* alpha, const T* d_out, T* d_er,
                        T* d_score) const;

    int heads_;
    double slope_;
    node_t num_src_;
    std::vector<node_t> rows_;
    csr plan_;
    csr back_;                     // source rows x (edge index into plan_)
    std::vector<node_t> back_out_; // output row of each back_ entry
};

namespace reference {
/// Sequential double-precision forward (oracle).
template <typename T>
void gat_forward(const gat_attention& plan, const T* msg, const T* er, int head_dim, double slope, T* out);
} // namespace reference

} // namespace retexo

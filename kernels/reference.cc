#include "kernels/reference.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

namespace pipescope::kernels::ref {
namespace {

template <class T>
using RowVec = Eigen::Matrix<T, 1, Eigen::Dynamic>;
template <class T>
using CMap = Eigen::Map<const Mat<T>>;
template <class T>
using MMap = Eigen::Map<Mat<T>>;
template <class T>
using CRow = Eigen::Map<const RowVec<T>>;
template <class T>
using MRow = Eigen::Map<RowVec<T>>;

void check_rows(const char* what, long rows, long cols, long want_rows, long want_cols) {
  if (rows != want_rows || cols != want_cols)
    throw KernelError(std::string(what) + ": expected [" + std::to_string(want_rows) + ", " +
                      std::to_string(want_cols) + "], got [" + std::to_string(rows) + ", " + std::to_string(cols) +
                      "]");
}

template <class T>
void ln_forward(const Mat<T>& x, const T* g, const T* b, Mat<T>& y, Vec<T>& mu, Vec<T>& rstd) {
  const long n = x.rows(), h = x.cols();
  CRow<T> G(g, h), B(b, h);
  y.resize(n, h);
  mu.resize(n);
  rstd.resize(n);
  for (long r = 0; r < n; ++r) {
    const T m = x.row(r).mean();
    const T var = (x.row(r).array() - m).square().mean();
    const T rs = T(1) / std::sqrt(var + T(kLayerNormEps));
    mu(r) = m;
    rstd(r) = rs;
    y.row(r) = (((x.row(r).array() - m) * rs) * G.array() + B.array()).matrix();
  }
}

// LN backward, split like the layer's backward: the gain / shift gradients (dg, db accumulate) and dx += the
// input gradient of da. Both recompute xhat the same way, so running both equals one fused pass bitwise.
template <class T>
void ln_backward_params(const Mat<T>& x, const Vec<T>& mu, const Vec<T>& rstd, const Mat<T>& da, T* dg, T* db) {
  const long n = x.rows(), h = x.cols();
  MRow<T> dG(dg, h), dB(db, h);
  for (long r = 0; r < n; ++r) {
    const RowVec<T> xhat = ((x.row(r).array() - mu(r)) * rstd(r)).matrix();
    dG += da.row(r).cwiseProduct(xhat);
    dB += da.row(r);
  }
}

template <class T>
void ln_backward_input(const Mat<T>& x, const Vec<T>& mu, const Vec<T>& rstd, const T* g, const Mat<T>& da,
                       Mat<T>& dx) {
  const long n = x.rows(), h = x.cols();
  CRow<T> G(g, h);
  for (long r = 0; r < n; ++r) {
    const RowVec<T> xhat = ((x.row(r).array() - mu(r)) * rstd(r)).matrix();
    const RowVec<T> dxhat = da.row(r).cwiseProduct(G);
    const T mean_d = dxhat.mean();
    const T mean_dx = dxhat.cwiseProduct(xhat).mean();
    dx.row(r).array() += rstd(r) * (dxhat.array() - mean_d - xhat.array() * mean_dx);
  }
}

template <class T>
void add_bias(Mat<T>& y, const T* b) {
  y.rowwise() += CRow<T>(b, y.cols());
}

template <class T>
void add_colsum(const Mat<T>& d, T* db) {
  MRow<T>(db, d.cols()) += d.colwise().sum();
}

template <class T>
void require_tp_sum(const LayerShape& shape, const TpSum<T>& tp_sum, const char* what) {
  if (shape.tp > 1 && !tp_sum)
    throw KernelError(std::string(what) + ": a tensor-parallel shard (tp = " + std::to_string(shape.tp) +
                      ") needs the all-reduce over its shards (Backend::set_tp_all_reduce)");
}

}  // namespace

template <class T>
KVCache<T>::KVCache(const LayerShape& shape, int batch, int max_len) : state(batch, max_len) {
  shape.validate();
  for (auto* buf : {&k, &v, &dk, &dv}) buf->assign(batch, Mat<T>::Zero(max_len, shape.shard_width()));
}

template <class T>
void layer_forward(const LayerShape& shape, const T* P, const Mat<T>& x, const Slice& sl, KVCache<T>& kv,
                   LayerRecord<T>& r, Mat<T>& y, const TpSum<T>& tp_sum) {
  const LayerLayout L = LayerLayout::of(shape);
  // w, f, nh: the shard's attention width, MLP width and heads (the whole layer's when tp = 1).
  const int h = shape.hidden, w = shape.shard_width(), f = shape.shard_ffn(), nh = shape.shard_heads(),
            dh = shape.head_dim();
  const int b = sl.batch, l = sl.len, c = sl.begin, nk = sl.end(), n = sl.rows();
  require_tp_sum(shape, tp_sum, "layer_forward");
  if (r.grads.filled)
    throw KernelError("layer_forward: the record's weight gradients are pending (run layer_backward_weight first)");
  kv.state.check_forward(sl);
  check_rows("layer_forward x", x.rows(), x.cols(), n, h);
  if (kv.k.empty() || kv.k[0].cols() != w)
    throw KernelError("layer_forward: the K/V cache was made for another layer shape");

  r.slice = sl;
  r.x = x;
  ln_forward(x, P + L.ln1_g, P + L.ln1_b, r.a1, r.mu1, r.rstd1);
  r.qkv.noalias() = r.a1 * CMap<T>(P + L.w_qkv, h, 3 * w);
  add_bias(r.qkv, P + L.b_qkv);
  for (int s = 0; s < b; ++s) {
    kv.k[s].middleRows(c, l) = r.qkv.block(s * l, w, l, w);
    kv.v[s].middleRows(c, l) = r.qkv.block(s * l, 2 * w, l, w);
    kv.dk[s].middleRows(c, l).setZero();
    kv.dv[s].middleRows(c, l).setZero();
  }

  const T scale = T(1) / std::sqrt(T(dh));
  r.ctx.setZero(n, w);
  r.probs.assign(static_cast<std::size_t>(b) * nh, Mat<T>());
  for (int s = 0; s < b; ++s) {
    for (int j = 0; j < nh; ++j) {
      Mat<T>& p = r.probs[static_cast<std::size_t>(s) * nh + j];
      p.noalias() = scale * r.qkv.block(s * l, j * dh, l, dh) * kv.k[s].block(0, j * dh, nk, dh).transpose();
      for (int t = 0; t < l; ++t) {
        const int valid = c + t + 1;  // query c + t sees keys [0, c + t]
        auto row = p.row(t);
        const T mx = row.head(valid).maxCoeff();
        row.head(valid).array() = (row.head(valid).array() - mx).exp();
        row.head(valid) /= row.head(valid).sum();
        row.tail(nk - valid).setZero();
      }
      r.ctx.block(s * l, j * dh, l, dh).noalias() = p * kv.v[s].block(0, j * dh, nk, dh);
    }
  }

  // Row-parallel W_o and fc2: each shard's product is a partial sum; the bias is added once, after the sum.
  r.x1.noalias() = r.ctx * CMap<T>(P + L.w_o, w, h);
  if (shape.tp > 1) tp_sum(r.x1);
  add_bias(r.x1, P + L.b_o);
  r.x1 += x;
  ln_forward(r.x1, P + L.ln2_g, P + L.ln2_b, r.a2, r.mu2, r.rstd2);
  r.u.noalias() = r.a2 * CMap<T>(P + L.w_fc1, h, f);
  add_bias(r.u, P + L.b_fc1);
  r.g = r.u.unaryExpr([](T v) { return gelu(v); });
  y.noalias() = r.g * CMap<T>(P + L.w_fc2, f, h);
  if (shape.tp > 1) tp_sum(y);
  add_bias(y, P + L.b_fc2);
  y += r.x1;
  r.filled = true;
  kv.state.commit_forward(sl);
}

namespace {

// The backward for inputs of a layer (see layer_backward_input); d receives the weights' output gradients (all but
// dy, which the caller keeps). Checks the record and the cache protocol.
template <class T>
void backward_input(const LayerShape& shape, const T* P, const LayerRecord<T>& r, KVCache<T>& kv, const Mat<T>& dy,
                    LayerGrads<T>& d, Mat<T>& dx, const TpSum<T>& tp_sum, const char* what,
                    const Mat<T>* da2_routed = nullptr) {
  const LayerLayout L = LayerLayout::of(shape);
  const int h = shape.hidden, w = shape.shard_width(), f = shape.shard_ffn(), nh = shape.shard_heads(),
            dh = shape.head_dim();
  const Slice& sl = r.slice;
  const int b = sl.batch, l = sl.len, c = sl.begin, nk = sl.end(), n = sl.rows();
  require_tp_sum(shape, tp_sum, what);
  if (!r.filled) throw KernelError(std::string(what) + ": the activation record holds no forward");
  if (r.grads.filled)
    throw KernelError(std::string(what) + ": the record's backward for inputs already ran (its W is pending)");
  if (r.qkv.cols() != 3 * w) throw KernelError(std::string(what) + ": the record was made for another layer shape");
  kv.state.check_backward(sl);
  check_rows((std::string(what) + " dy").c_str(), dy.rows(), dy.cols(), n, h);

  // MLP: y = x1 + gelu(LN2(x1) W1 + b1) W2 + b2.
  d.du.noalias() = dy * CMap<T>(P + L.w_fc2, f, h).transpose();
  d.du.array() *= r.u.unaryExpr([](T v) { return gelu_grad(v); }).array();
  // Column-parallel fc1 (and QKV below): the gradient w.r.t. their input is a partial sum over the shards.
  d.da2.noalias() = d.du * CMap<T>(P + L.w_fc1, h, f).transpose();
  if (shape.tp > 1) tp_sum(d.da2);
  if (da2_routed) d.da2 += *da2_routed;  // an MoE layer's router and routed experts read LN2's output too
  d.dx1 = dy;
  ln_backward_input(r.x1, r.mu2, r.rstd2, P + L.ln2_g, d.da2, d.dx1);

  // Attention output projection: x1 = x + ctx Wo + bo.
  const Mat<T> dctx = d.dx1 * CMap<T>(P + L.w_o, w, h).transpose();

  // Attention over the prefix [0, end): dK/dV of every earlier token go to the cache.
  const T scale = T(1) / std::sqrt(T(dh));
  d.dqkv.resize(n, 3 * w);
  for (int s = 0; s < b; ++s) {
    for (int j = 0; j < nh; ++j) {
      const Mat<T>& p = r.probs[static_cast<std::size_t>(s) * nh + j];
      const auto dO = dctx.block(s * l, j * dh, l, dh);
      Mat<T> dp = dO * kv.v[s].block(0, j * dh, nk, dh).transpose();
      kv.dv[s].block(0, j * dh, nk, dh).noalias() += p.transpose() * dO;
      const Vec<T> rowdot = dp.cwiseProduct(p).rowwise().sum();
      const Mat<T> ds = ((p.array() * (dp.colwise() - rowdot).array()) * scale).matrix();
      d.dqkv.block(s * l, j * dh, l, dh).noalias() = ds * kv.k[s].block(0, j * dh, nk, dh);
      kv.dk[s].block(0, j * dh, nk, dh).noalias() += ds.transpose() * r.qkv.block(s * l, j * dh, l, dh);
    }
    // The slice's own dK/dV are now complete: later slices added theirs before this backward ran.
    d.dqkv.block(s * l, w, l, w) = kv.dk[s].middleRows(c, l);
    d.dqkv.block(s * l, 2 * w, l, w) = kv.dv[s].middleRows(c, l);
  }

  d.da1.noalias() = d.dqkv * CMap<T>(P + L.w_qkv, h, 3 * w).transpose();
  if (shape.tp > 1) tp_sum(d.da1);
  dx = d.dx1;
  ln_backward_input(r.x, r.mu1, r.rstd1, P + L.ln1_g, d.da1, dx);
  kv.state.commit_backward(sl);
}

// Every parameter gradient of the layer from the record's activations and the output gradients (dy and d).
template <class T>
void backward_weight(const LayerShape& shape, const LayerRecord<T>& r, const Mat<T>& dy, const LayerGrads<T>& d, T* G) {
  const LayerLayout L = LayerLayout::of(shape);
  const int h = shape.hidden, w = shape.shard_width(), f = shape.shard_ffn();
  MMap<T>(G + L.w_fc2, f, h).noalias() += r.g.transpose() * dy;
  add_colsum(dy, G + L.b_fc2);
  MMap<T>(G + L.w_fc1, h, f).noalias() += r.a2.transpose() * d.du;
  add_colsum(d.du, G + L.b_fc1);
  ln_backward_params(r.x1, r.mu2, r.rstd2, d.da2, G + L.ln2_g, G + L.ln2_b);
  MMap<T>(G + L.w_o, w, h).noalias() += r.ctx.transpose() * d.dx1;
  add_colsum(d.dx1, G + L.b_o);
  MMap<T>(G + L.w_qkv, h, 3 * w).noalias() += r.a1.transpose() * d.dqkv;
  add_colsum(d.dqkv, G + L.b_qkv);
  ln_backward_params(r.x, r.mu1, r.rstd1, d.da1, G + L.ln1_g, G + L.ln1_b);
}

}  // namespace

template <class T>
void layer_backward(const LayerShape& shape, const T* P, const LayerRecord<T>& r, KVCache<T>& kv, const Mat<T>& dy,
                    T* G, Mat<T>& dx, const TpSum<T>& tp_sum) {
  LayerGrads<T> d;
  backward_input(shape, P, r, kv, dy, d, dx, tp_sum, "layer_backward");
  backward_weight(shape, r, dy, d, G);
}

template <class T>
void layer_backward_input(const LayerShape& shape, const T* P, LayerRecord<T>& r, KVCache<T>& kv, const Mat<T>& dy,
                          Mat<T>& dx, const TpSum<T>& tp_sum) {
  backward_input(shape, P, r, kv, dy, r.grads, dx, tp_sum, "layer_backward_input");
  r.grads.dy = dy;
  r.grads.filled = true;
  // Only the input half needed these; W keeps the GEMM inputs (x, a1, ctx, x1, a2, g) and the LN statistics.
  r.probs = {};
  r.qkv = Mat<T>();
  r.u = Mat<T>();
}

template <class T>
void layer_backward_weight(const LayerShape& shape, LayerRecord<T>& r, T* G) {
  if (!r.filled || !r.grads.filled)
    throw KernelError("layer_backward_weight: the record holds no backward for inputs (run layer_backward_input)");
  if (r.grads.dqkv.cols() != 3 * shape.shard_width() || r.grads.dy.cols() != shape.hidden)
    throw KernelError("layer_backward_weight: the record was made for another layer shape");
  backward_weight(shape, r, r.grads.dy, r.grads, G);
  r = LayerRecord<T>();  // consumed: the activations and output gradients are freed
}

namespace {

// One all-to-all of the expert-parallel group; without a transport (ep = 1) the rows stay here.
void ep_exchange(const EpAllToAll& ex, int ep, EpExchange what, const void* send, const std::vector<std::size_t>& sb,
                 void* recv, const std::vector<std::size_t>& rb) {
  if (ex) {
    ex(what, send, sb, recv, rb);
    return;
  }
  if (ep != 1)
    throw KernelError("MoE layer: expert parallelism (ep = " + std::to_string(ep) +
                      ") needs the all-to-all over its group (Backend::set_ep_all_to_all)");
  if (sb.size() != 1 || rb.size() != 1 || sb[0] != rb[0]) throw KernelError("MoE layer: exchange sizes differ");
  if (sb[0] > 0) std::memcpy(recv, send, sb[0]);
}

std::vector<std::size_t> scaled(const std::vector<std::size_t>& rows, std::size_t bytes_per_row) {
  std::vector<std::size_t> out(rows.size());
  for (std::size_t i = 0; i < rows.size(); i++) out[i] = rows[i] * bytes_per_row;
  return out;
}

// Routing of a slice: top-k, gates, send order, the counts exchange and the received rows' layout.
template <class T>
void route(const LayerShape& shape, const T* P, const Mat<T>& a2, MoeRecord<T>& m, const EpAllToAll& ex) {
  const LayerLayout L = LayerLayout::of(shape);
  const int n = static_cast<int>(a2.rows()), h = shape.hidden, E = shape.experts, k = shape.top_k, ep = shape.ep,
            local = shape.local_experts();
  const Mat<T> logits = a2 * CMap<T>(P + L.w_router, h, E);
  m.sel.assign(static_cast<std::size_t>(n) * k, 0);
  m.gates.resize(n, k);
  std::vector<double> row(static_cast<std::size_t>(E));
  std::vector<std::int64_t> count(static_cast<std::size_t>(E), 0);
  for (int t = 0; t < n; t++) {
    for (int e = 0; e < E; e++) row[static_cast<std::size_t>(e)] = static_cast<double>(logits(t, e));
    const std::vector<int> top = top_k_experts(row.data(), E, k);
    T sum = 0;
    for (int i = 0; i < k; i++) {  // softmax over the selected logits; top[0] holds the largest
      m.sel[static_cast<std::size_t>(t) * k + i] = top[static_cast<std::size_t>(i)];
      m.gates(t, i) = std::exp(logits(t, top[static_cast<std::size_t>(i)]) - logits(t, top[0]));
      sum += m.gates(t, i);
      count[static_cast<std::size_t>(top[static_cast<std::size_t>(i)])]++;
    }
    m.gates.row(t) /= sum;
  }
  std::vector<std::size_t> next(static_cast<std::size_t>(E), 0);  // send order: by expert, then token
  for (int e = 1; e < E; e++) next[e] = next[e - 1] + static_cast<std::size_t>(count[e - 1]);
  m.pos.resize(m.sel.size());
  for (std::size_t r = 0; r < m.sel.size(); r++) m.pos[r] = next[static_cast<std::size_t>(m.sel[r])]++;
  m.send_rows.assign(static_cast<std::size_t>(ep), 0);
  for (int e = 0; e < E; e++) m.send_rows[static_cast<std::size_t>(e / local)] += static_cast<std::size_t>(count[e]);
  m.recv_counts.assign(static_cast<std::size_t>(E), 0);  // ep members x local experts
  const std::vector<std::size_t> cb(static_cast<std::size_t>(ep), sizeof(std::int64_t) * local);
  ep_exchange(ex, ep, EpExchange::kCounts, count.data(), cb, m.recv_counts.data(), cb);
  m.recv_rows.assign(static_cast<std::size_t>(ep), 0);
  for (int i = 0; i < ep; i++)
    for (int e = 0; e < local; e++) {
      const std::int64_t c = m.recv_counts[static_cast<std::size_t>(i * local + e)];
      if (c < 0) throw KernelError("MoE layer: a member sent a negative row count");
      m.recv_rows[static_cast<std::size_t>(i)] += static_cast<std::size_t>(c);
    }
}

// Calls f(expert, first row, rows) for each block of received rows (member, local expert), in receive order.
template <class T, class F>
void for_blocks(const LayerShape& shape, const MoeRecord<T>& m, F&& f) {
  const int local = shape.local_experts();
  long at = 0;
  for (int i = 0; i < shape.ep; i++)
    for (int e = 0; e < local; e++) {
      const long c = static_cast<long>(m.recv_counts[static_cast<std::size_t>(i * local + e)]);
      if (c > 0) f(e, at, c);
      at += c;
    }
}

template <class T>
void routed_forward(const LayerShape& shape, const T* P, const T* X, const Mat<T>& a2, MoeRecord<T>& m, Mat<T>& y,
                    const EpAllToAll& ex) {
  const ExpertLayout EL = ExpertLayout::of(shape);
  const int h = shape.hidden, fe = shape.expert_ffn, k = shape.top_k;
  const long n = a2.rows();
  route(shape, P, a2, m, ex);
  Mat<T> xs(n * k, h);
  for (std::size_t r = 0; r < m.sel.size(); r++) xs.row(static_cast<long>(m.pos[r])) = a2.row(static_cast<long>(r) / k);
  const std::size_t row_bytes = sizeof(T) * static_cast<std::size_t>(h);
  const long nr = static_cast<long>(std::accumulate(m.recv_rows.begin(), m.recv_rows.end(), std::size_t{0}));
  m.xr.resize(nr, h);
  ep_exchange(ex, shape.ep, EpExchange::kTokens, xs.data(), scaled(m.send_rows, row_bytes), m.xr.data(),
              scaled(m.recv_rows, row_bytes));
  m.u.resize(nr, fe);
  m.g.resize(nr, fe);
  Mat<T> out(nr, h);
  for_blocks(shape, m, [&](int e, long at, long c) {
    const T* W = X + EL.size * static_cast<std::size_t>(e);
    m.u.middleRows(at, c).noalias() = m.xr.middleRows(at, c) * CMap<T>(W + EL.w_fc1, h, fe);
    m.u.middleRows(at, c).rowwise() += CRow<T>(W + EL.b_fc1, fe);
    m.g.middleRows(at, c) = m.u.middleRows(at, c).unaryExpr([](T v) { return gelu(v); });
    out.middleRows(at, c).noalias() = m.g.middleRows(at, c) * CMap<T>(W + EL.w_fc2, fe, h);
    out.middleRows(at, c).rowwise() += CRow<T>(W + EL.b_fc2, h);
  });
  m.yb.resize(n * k, h);
  ep_exchange(ex, shape.ep, EpExchange::kTokens, out.data(), scaled(m.recv_rows, row_bytes), m.yb.data(),
              scaled(m.send_rows, row_bytes));
  for (long t = 0; t < n; t++)
    for (int i = 0; i < k; i++)
      y.row(t) += m.gates(t, i) * m.yb.row(static_cast<long>(m.pos[static_cast<std::size_t>(t * k + i)]));
  m.filled = true;
}

// Gradients of the router and of the local experts; returns the routed part's gradient w.r.t. LN2's output.
template <class T>
Mat<T> routed_backward(const LayerShape& shape, const T* P, const T* X, const LayerRecord<T>& r, const Mat<T>& dy, T* G,
                       T* GX, const EpAllToAll& ex) {
  const LayerLayout L = LayerLayout::of(shape);
  const ExpertLayout EL = ExpertLayout::of(shape);
  const MoeRecord<T>& m = r.moe;
  const int h = shape.hidden, fe = shape.expert_ffn, k = shape.top_k, E = shape.experts;
  const long n = r.a2.rows();
  if (!m.filled) throw KernelError("moe_layer_backward: the record holds no MoE forward");
  Mat<T> dgate(n, k), dyb(n * k, h);
  for (long t = 0; t < n; t++)
    for (int i = 0; i < k; i++) {
      const long p = static_cast<long>(m.pos[static_cast<std::size_t>(t * k + i)]);
      dgate(t, i) = dy.row(t).dot(m.yb.row(p));
      dyb.row(p) = m.gates(t, i) * dy.row(t);
    }
  const std::size_t row_bytes = sizeof(T) * static_cast<std::size_t>(h);
  Mat<T> dout(m.xr.rows(), h), dxr(m.xr.rows(), h);
  ep_exchange(ex, shape.ep, EpExchange::kTokens, dyb.data(), scaled(m.send_rows, row_bytes), dout.data(),
              scaled(m.recv_rows, row_bytes));
  for_blocks(shape, m, [&](int e, long at, long c) {
    const std::size_t b = EL.size * static_cast<std::size_t>(e);
    const auto d = dout.middleRows(at, c);
    MMap<T>(GX + b + EL.w_fc2, fe, h).noalias() += m.g.middleRows(at, c).transpose() * d;
    MRow<T>(GX + b + EL.b_fc2, h) += d.colwise().sum();
    Mat<T> du = d * CMap<T>(X + b + EL.w_fc2, fe, h).transpose();
    du.array() *= m.u.middleRows(at, c).unaryExpr([](T v) { return gelu_grad(v); }).array();
    MMap<T>(GX + b + EL.w_fc1, h, fe).noalias() += m.xr.middleRows(at, c).transpose() * du;
    MRow<T>(GX + b + EL.b_fc1, fe) += du.colwise().sum();
    dxr.middleRows(at, c).noalias() = du * CMap<T>(X + b + EL.w_fc1, h, fe).transpose();
  });
  Mat<T> dxs(n * k, h);
  ep_exchange(ex, shape.ep, EpExchange::kTokens, dxr.data(), scaled(m.recv_rows, row_bytes), dxs.data(),
              scaled(m.send_rows, row_bytes));
  Mat<T> da2 = Mat<T>::Zero(n, h), dlogits = Mat<T>::Zero(n, E);
  for (long t = 0; t < n; t++) {
    T dot = 0;
    for (int i = 0; i < k; i++) {
      da2.row(t) += dxs.row(static_cast<long>(m.pos[static_cast<std::size_t>(t * k + i)]));
      dot += dgate(t, i) * m.gates(t, i);
    }
    // Softmax over the selected logits; the others get no gradient (the top-k choice is not differentiated).
    for (int i = 0; i < k; i++)
      dlogits(t, m.sel[static_cast<std::size_t>(t * k + i)]) = m.gates(t, i) * (dgate(t, i) - dot);
  }
  MMap<T>(G + L.w_router, h, E).noalias() += r.a2.transpose() * dlogits;
  da2.noalias() += dlogits * CMap<T>(P + L.w_router, h, E).transpose();
  return da2;
}

void require_moe(const LayerShape& shape, const char* what) {
  if (!shape.moe()) throw KernelError(std::string(what) + ": a dense layer (experts = 0)");
}

}  // namespace

template <class T>
void moe_layer_forward(const LayerShape& shape, const T* P, const T* X, const Mat<T>& x, const Slice& sl,
                       KVCache<T>& kv, LayerRecord<T>& r, Mat<T>& y, const EpAllToAll& ex) {
  require_moe(shape, "moe_layer_forward");
  layer_forward(shape, P, x, sl, kv, r, y);  // attention, and the shared experts as the dense MLP of width ffn
  routed_forward(shape, P, X, r.a2, r.moe, y, ex);
}

template <class T>
void moe_layer_backward(const LayerShape& shape, const T* P, const T* X, const LayerRecord<T>& r, KVCache<T>& kv,
                        const Mat<T>& dy, T* G, T* GX, Mat<T>& dx, const EpAllToAll& ex) {
  require_moe(shape, "moe_layer_backward");
  if (!r.filled) throw KernelError("moe_layer_backward: the activation record holds no forward");
  check_rows("moe_layer_backward dy", dy.rows(), dy.cols(), r.slice.rows(), shape.hidden);
  kv.state.check_backward(r.slice);  // before any exchange: a protocol error must not leave the peers waiting
  const Mat<T> da2 = routed_backward(shape, P, X, r, dy, G, GX, ex);
  LayerGrads<T> d;
  backward_input(shape, P, r, kv, dy, d, dx, {}, "moe_layer_backward", &da2);
  backward_weight(shape, r, dy, d, G);
}

namespace {

void check_ids(const char* what, const std::vector<std::int32_t>& ids, const Slice& sl, int lo, int vocab) {
  if (ids.size() != static_cast<std::size_t>(sl.rows()))
    throw KernelError(std::string(what) + ": expected " + std::to_string(sl.rows()) + " ids (b * l), got " +
                      std::to_string(ids.size()));
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < lo || ids[i] >= vocab)
      throw KernelError(std::string(what) + ": id " + std::to_string(ids[i]) + " at " + std::to_string(i) +
                        " outside [" + std::to_string(lo) + ", " + std::to_string(vocab) + ")");
}

void check_positions(const ModelShape& m, const Slice& sl) {
  if (sl.batch <= 0 || sl.len <= 0 || sl.begin < 0 || sl.end() > m.max_seq)
    throw KernelError("embedding: slice [" + std::to_string(sl.begin) + ", " + std::to_string(sl.end()) + ") x " +
                      std::to_string(sl.batch) + " outside the position table [0, " + std::to_string(m.max_seq) + ")");
}

}  // namespace

template <class T>
void embedding_forward(const ModelShape& m, const T* P, const std::vector<std::int32_t>& tokens, const Slice& sl,
                       Mat<T>& x) {
  const EmbeddingLayout E = EmbeddingLayout::of(m);
  check_positions(m, sl);
  check_ids("embedding_forward tokens", tokens, sl, 0, m.vocab);
  const int h = m.layer.hidden, l = sl.len;
  x.resize(sl.rows(), h);
  for (int s = 0; s < sl.batch; ++s)
    for (int t = 0; t < l; ++t)
      x.row(s * l + t) = CRow<T>(P + E.tok + static_cast<std::size_t>(tokens[s * l + t]) * h, h) +
                         CRow<T>(P + E.pos + static_cast<std::size_t>(sl.begin + t) * h, h);
}

template <class T>
void embedding_backward(const ModelShape& m, const std::vector<std::int32_t>& tokens, const Slice& sl, const Mat<T>& dx,
                        T* G) {
  const EmbeddingLayout E = EmbeddingLayout::of(m);
  check_positions(m, sl);
  check_ids("embedding_backward tokens", tokens, sl, 0, m.vocab);
  const int h = m.layer.hidden, l = sl.len;
  check_rows("embedding_backward dx", dx.rows(), dx.cols(), sl.rows(), h);
  for (int s = 0; s < sl.batch; ++s)
    for (int t = 0; t < l; ++t) {
      MRow<T>(G + E.tok + static_cast<std::size_t>(tokens[s * l + t]) * h, h) += dx.row(s * l + t);
      MRow<T>(G + E.pos + static_cast<std::size_t>(sl.begin + t) * h, h) += dx.row(s * l + t);
    }
}

template <class T>
double head_forward(const ModelShape& m, const T* P, const Mat<T>& x, const std::vector<std::int32_t>& targets,
                    const Slice& sl, double loss_norm, double loss_scale, HeadRecord<T>& r) {
  const HeadLayout H = HeadLayout::of(m);
  const int h = m.layer.hidden, V = m.vocab, n = sl.rows();
  check_rows("head_forward x", x.rows(), x.cols(), n, h);
  check_ids("head_forward targets", targets, sl, -1, V);
  if (!(loss_norm > 0)) throw KernelError("head_forward: loss_norm must be positive (target count of the batch)");
  if (r.has_da)
    throw KernelError("head_forward: the record's weight gradients are pending (run head_backward_weight first)");
  r.slice = sl;
  r.x = x;
  ln_forward(x, P + H.lnf_g, P + H.lnf_b, r.a, r.mu, r.rstd);
  Mat<T> logits = r.a * CMap<T>(P + H.w_vocab, h, V);
  r.dlogits.setZero(n, V);
  const T coef = T(loss_scale / loss_norm);
  double loss = 0;
  for (int i = 0; i < n; ++i) {
    const int y = targets[i];
    if (y < 0) continue;
    const T mx = logits.row(i).maxCoeff();
    const RowVec<T> e = (logits.row(i).array() - mx).exp().matrix();
    const T sum = e.sum();
    loss += static_cast<double>(mx + std::log(sum) - logits(i, y));
    r.dlogits.row(i) = e * (coef / sum);
    r.dlogits(i, y) -= coef;
  }
  r.filled = true;
  return loss / loss_norm;
}

template <class T>
void head_backward(const ModelShape& m, const T* P, const HeadRecord<T>& r, T* G, Mat<T>& dx) {
  const HeadLayout H = HeadLayout::of(m);
  const int h = m.layer.hidden, V = m.vocab;
  if (!r.filled) throw KernelError("head_backward: the record holds no forward");
  MMap<T>(G + H.w_vocab, h, V).noalias() += r.a.transpose() * r.dlogits;
  const Mat<T> da = r.dlogits * CMap<T>(P + H.w_vocab, h, V).transpose();
  dx.setZero(r.x.rows(), h);
  ln_backward_params(r.x, r.mu, r.rstd, da, G + H.lnf_g, G + H.lnf_b);
  ln_backward_input(r.x, r.mu, r.rstd, P + H.lnf_g, da, dx);
}

template <class T>
void head_backward_input(const ModelShape& m, const T* P, HeadRecord<T>& r, Mat<T>& dx) {
  const HeadLayout H = HeadLayout::of(m);
  const int h = m.layer.hidden, V = m.vocab;
  if (!r.filled) throw KernelError("head_backward_input: the record holds no forward");
  if (r.has_da) throw KernelError("head_backward_input: already ran for this record (its W is pending)");
  r.da.noalias() = r.dlogits * CMap<T>(P + H.w_vocab, h, V).transpose();
  dx.setZero(r.x.rows(), h);
  ln_backward_input(r.x, r.mu, r.rstd, P + H.lnf_g, r.da, dx);
  r.has_da = true;
}

template <class T>
void head_backward_weight(const ModelShape& m, HeadRecord<T>& r, T* G) {
  const HeadLayout H = HeadLayout::of(m);
  const int h = m.layer.hidden, V = m.vocab;
  if (!r.filled || !r.has_da)
    throw KernelError("head_backward_weight: the record holds no backward for inputs (run head_backward_input)");
  if (r.dlogits.cols() != V || r.a.cols() != h)
    throw KernelError("head_backward_weight: the record was made for another model shape");
  MMap<T>(G + H.w_vocab, h, V).noalias() += r.a.transpose() * r.dlogits;
  ln_backward_params(r.x, r.mu, r.rstd, r.da, G + H.lnf_g, G + H.lnf_b);
  r = HeadRecord<T>();  // consumed
}

template <class T>
void adam_step(const AdamConfig& cfg, int step, std::size_t n, T* p, const T* g, T* m, T* v) {
  if (step < 1) throw KernelError("adam_step: step counts from 1, got " + std::to_string(step));
  const double c1 = 1.0 - std::pow(cfg.beta1, step), c2 = 1.0 - std::pow(cfg.beta2, step);
  for (std::size_t i = 0; i < n; ++i) {
    const double gi = static_cast<double>(g[i]) * cfg.grad_scale;
    const double mi = cfg.beta1 * static_cast<double>(m[i]) + (1.0 - cfg.beta1) * gi;
    const double vi = cfg.beta2 * static_cast<double>(v[i]) + (1.0 - cfg.beta2) * gi * gi;
    const double upd = (mi / c1) / (std::sqrt(vi / c2) + cfg.eps) + cfg.weight_decay * static_cast<double>(p[i]);
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    p[i] = static_cast<T>(static_cast<double>(p[i]) - cfg.lr * upd);
  }
}

#define PIPESCOPE_REF_INSTANTIATE(T)                                                                                  \
  template struct KVCache<T>;                                                                                         \
  template void layer_forward<T>(const LayerShape&, const T*, const Mat<T>&, const Slice&, KVCache<T>&,               \
                                 LayerRecord<T>&, Mat<T>&, const TpSum<T>&);                                          \
  template void layer_backward<T>(const LayerShape&, const T*, const LayerRecord<T>&, KVCache<T>&, const Mat<T>&, T*, \
                                  Mat<T>&, const TpSum<T>&);                                                          \
  template void embedding_forward<T>(const ModelShape&, const T*, const std::vector<std::int32_t>&, const Slice&,     \
                                     Mat<T>&);                                                                        \
  template void embedding_backward<T>(const ModelShape&, const std::vector<std::int32_t>&, const Slice&,              \
                                      const Mat<T>&, T*);                                                             \
  template double head_forward<T>(const ModelShape&, const T*, const Mat<T>&, const std::vector<std::int32_t>&,       \
                                  const Slice&, double, double, HeadRecord<T>&);                                      \
  template void head_backward<T>(const ModelShape&, const T*, const HeadRecord<T>&, T*, Mat<T>&);                     \
  template void layer_backward_input<T>(const LayerShape&, const T*, LayerRecord<T>&, KVCache<T>&, const Mat<T>&,     \
                                        Mat<T>&, const TpSum<T>&);                                                    \
  template void layer_backward_weight<T>(const LayerShape&, LayerRecord<T>&, T*);                                     \
  template void head_backward_input<T>(const ModelShape&, const T*, HeadRecord<T>&, Mat<T>&);                         \
  template void head_backward_weight<T>(const ModelShape&, HeadRecord<T>&, T*);                                       \
  template void adam_step<T>(const AdamConfig&, int, std::size_t, T*, const T*, T*, T*);                              \
  template void moe_layer_forward<T>(const LayerShape&, const T*, const T*, const Mat<T>&, const Slice&, KVCache<T>&, \
                                     LayerRecord<T>&, Mat<T>&, const EpAllToAll&);                                    \
  template void moe_layer_backward<T>(const LayerShape&, const T*, const T*, const LayerRecord<T>&, KVCache<T>&,      \
                                      const Mat<T>&, T*, T*, Mat<T>&, const EpAllToAll&);

PIPESCOPE_REF_INSTANTIATE(double)
PIPESCOPE_REF_INSTANTIATE(float)
#undef PIPESCOPE_REF_INSTANTIATE

}  // namespace pipescope::kernels::ref

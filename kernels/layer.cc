#include "kernels/layer.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

namespace pipescope::kernels {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF64:
      return "f64";
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
  }
  return "?";
}

std::size_t dtype_bytes(DType t) {
  switch (t) {
    case DType::kF64:
      return 8;
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
  }
  return 0;
}

void LayerShape::validate() const {
  if (moe()) {
    if (top_k < 1 || top_k > experts || expert_ffn <= 0 || ffn < 0)
      throw KernelError(
          "LayerShape: an MoE layer needs 1 <= top_k <= experts and expert_ffn > 0, ffn >= 0 (got "
          "experts=" +
          std::to_string(experts) + ", top_k=" + std::to_string(top_k) + ", expert_ffn=" + std::to_string(expert_ffn) +
          ", ffn=" + std::to_string(ffn) + ")");
    if (ep < 1 || experts % ep != 0)
      throw KernelError("LayerShape: the expert-parallel degree ep (" + std::to_string(ep) +
                        ") must be >= 1 and divide experts (" + std::to_string(experts) + ")");
    if (tp != 1) throw KernelError("LayerShape: MoE layers are not tensor-parallel (tp = " + std::to_string(tp) + ")");
  }
  if (hidden <= 0 || heads <= 0 || (ffn <= 0 && !moe()))
    throw KernelError("LayerShape: hidden, heads and ffn must be positive (got hidden=" + std::to_string(hidden) +
                      ", heads=" + std::to_string(heads) + ", ffn=" + std::to_string(ffn) + ")");
  if (hidden % heads != 0)
    throw KernelError("LayerShape: heads (" + std::to_string(heads) + ") must divide hidden (" +
                      std::to_string(hidden) + ")");
  if (tp < 1 || heads % tp != 0 || ffn % tp != 0)
    throw KernelError("LayerShape: the tensor-parallel degree tp (" + std::to_string(tp) +
                      ") must be >= 1 and divide heads (" + std::to_string(heads) + ") and ffn (" +
                      std::to_string(ffn) + ")");
}

void ModelShape::validate() const {
  layer.validate();
  if (vocab <= 0 || max_seq <= 0)
    throw KernelError("ModelShape: vocab and max_seq must be positive (got vocab=" + std::to_string(vocab) +
                      ", max_seq=" + std::to_string(max_seq) + ")");
}

LayerLayout LayerLayout::of(const LayerShape& s) {
  s.validate();
  const std::size_t h = s.hidden, w = s.shard_width(), f = s.shard_ffn();
  LayerLayout L{};
  std::size_t o = 0;
  auto take = [&o](std::size_t n) {
    std::size_t at = o;
    o += n;
    return at;
  };
  L.ln1_g = take(h);
  L.ln1_b = take(h);
  L.w_qkv = take(h * 3 * w);
  L.b_qkv = take(3 * w);
  L.w_o = take(w * h);
  L.b_o = take(h);
  L.ln2_g = take(h);
  L.ln2_b = take(h);
  L.w_fc1 = take(h * f);
  L.b_fc1 = take(f);
  L.w_fc2 = take(f * h);
  L.b_fc2 = take(h);
  L.w_router = take(h * static_cast<std::size_t>(s.experts));
  L.size = o;
  return L;
}

ExpertLayout ExpertLayout::of(const LayerShape& s) {
  s.validate();
  if (!s.moe()) throw KernelError("ExpertLayout: a dense layer (experts = 0) has no routed experts");
  const std::size_t h = s.hidden, f = s.expert_ffn;
  ExpertLayout L{};
  L.w_fc1 = 0;
  L.b_fc1 = h * f;
  L.w_fc2 = L.b_fc1 + f;
  L.b_fc2 = L.w_fc2 + f * h;
  L.size = L.b_fc2 + h;
  return L;
}

EmbeddingLayout EmbeddingLayout::of(const ModelShape& m) {
  m.validate();
  const std::size_t h = m.layer.hidden;
  EmbeddingLayout E{};
  E.tok = 0;
  E.pos = static_cast<std::size_t>(m.vocab) * h;
  E.size = E.pos + static_cast<std::size_t>(m.max_seq) * h;
  return E;
}

HeadLayout HeadLayout::of(const ModelShape& m) {
  m.validate();
  const std::size_t h = m.layer.hidden;
  HeadLayout H{};
  H.lnf_g = 0;
  H.lnf_b = h;
  H.w_vocab = 2 * h;
  H.size = H.w_vocab + h * static_cast<std::size_t>(m.vocab);
  return H;
}

KVState::KVState(int batch, int max_len) : batch_(batch), max_len_(max_len) {
  if (batch <= 0 || max_len <= 0)
    throw KernelError("KVCache: batch and max_len must be positive (got batch=" + std::to_string(batch) +
                      ", max_len=" + std::to_string(max_len) + ")");
}

void KVState::check_batch(const Slice& s, const char* what) const {
  if (s.batch != batch_)
    throw KernelError(std::string(what) + ": slice has " + std::to_string(s.batch) + " sequences, K/V cache " +
                      std::to_string(batch_));
  if (s.begin < 0 || s.len <= 0 || s.end() > max_len_)
    throw KernelError(std::string(what) + ": slice [" + std::to_string(s.begin) + ", " + std::to_string(s.end()) +
                      ") outside the K/V cache [0, " + std::to_string(max_len_) + ")");
}

void KVState::check_forward(const Slice& s) const {
  check_batch(s, "layer_forward");
  if (s.begin == 0) {
    if (bwd_end_ != 0)
      throw KernelError(
          "layer_forward: slice at token 0 but the K/V cache still holds a micro-batch whose backward "
          "has not finished (tokens [0, " +
          std::to_string(bwd_end_) + ") pending); call reset() to discard it");
    return;
  }
  if (s.begin != len_ || bwd_end_ != len_)
    throw KernelError("layer_forward: slice [" + std::to_string(s.begin) + ", " + std::to_string(s.end()) +
                      ") out of order: the K/V cache holds tokens [0, " + std::to_string(len_) +
                      (bwd_end_ != len_ ? ") and its backward has started" : ")"));
}

void KVState::commit_forward(const Slice& s) {
  len_ = s.end();
  bwd_end_ = len_;
}

void KVState::check_backward(const Slice& s) const {
  check_batch(s, "layer_backward");
  if (s.end() != bwd_end_)
    throw KernelError("layer_backward: slice [" + std::to_string(s.begin) + ", " + std::to_string(s.end()) +
                      ") out of order: backward must next process the slice ending at token " +
                      std::to_string(bwd_end_) + " (slices run in reverse order)");
}

void KVState::commit_backward(const Slice& s) { bwd_end_ = s.begin; }

void KVState::rewind(int len) {
  if (len < 0 || len > len_)
    throw KernelError("KVCache::rewind: length " + std::to_string(len) + " outside [0, " + std::to_string(len_) + "]");
  len_ = bwd_end_ = len;
}

std::size_t param_count(ModuleKind kind, const ModelShape& m) {
  switch (kind) {
    case ModuleKind::kLayer:
      return LayerLayout::of(m.layer).size;
    case ModuleKind::kEmbedding:
      return EmbeddingLayout::of(m).size;
    case ModuleKind::kHead:
      return HeadLayout::of(m).size;
    case ModuleKind::kExperts:
      return ExpertLayout::of(m.layer).size * static_cast<std::size_t>(m.layer.local_experts());
  }
  throw KernelError("param_count: unknown module kind");
}

std::vector<TensorSpan> module_tensor_spans(ModuleKind kind, const ModelShape& m) {
  std::vector<std::pair<const char*, std::size_t>> at;  // name, offset; each tensor ends where the next begins
  std::size_t size = 0;
  switch (kind) {
    case ModuleKind::kEmbedding: {
      const auto L = EmbeddingLayout::of(m);
      at = {{"tok", L.tok}, {"pos", L.pos}};
      size = L.size;
      break;
    }
    case ModuleKind::kHead: {
      const auto L = HeadLayout::of(m);
      at = {{"lnf_g", L.lnf_g}, {"lnf_b", L.lnf_b}, {"w_vocab", L.w_vocab}};
      size = L.size;
      break;
    }
    case ModuleKind::kLayer: {
      const auto L = LayerLayout::of(m.layer);
      at = {{"ln1_g", L.ln1_g}, {"ln1_b", L.ln1_b}, {"w_qkv", L.w_qkv}, {"b_qkv", L.b_qkv},
            {"w_o", L.w_o},     {"b_o", L.b_o},     {"ln2_g", L.ln2_g}, {"ln2_b", L.ln2_b},
            {"w_fc1", L.w_fc1}, {"b_fc1", L.b_fc1}, {"w_fc2", L.w_fc2}, {"b_fc2", L.b_fc2}};
      if (m.layer.moe()) at.push_back({"w_router", L.w_router});
      size = L.size;
      break;
    }
    case ModuleKind::kExperts: {  // names by the module's own (local) expert index
      const auto L = ExpertLayout::of(m.layer);
      static const char* const kNames[] = {"w_fc1", "b_fc1", "w_fc2", "b_fc2"};
      std::vector<TensorSpan> out;
      for (int e = 0; e < m.layer.local_experts(); e++) {
        const std::size_t base = L.size * static_cast<std::size_t>(e);
        const std::size_t off[] = {L.w_fc1, L.b_fc1, L.w_fc2, L.b_fc2, L.size};
        for (int k = 0; k < 4; k++)
          out.push_back({"expert" + std::to_string(e) + "." + kNames[k], base + off[k], off[k + 1] - off[k]});
      }
      return out;
    }
  }
  if (at.empty()) throw KernelError("module_tensor_spans: unknown module kind");
  std::vector<TensorSpan> out;
  for (std::size_t i = 0; i < at.size(); i++) {
    const std::size_t end = i + 1 < at.size() ? at[i + 1].second : size;
    out.push_back({at[i].first, at[i].second, end - at[i].second});
  }
  return out;
}

namespace {

// Box-Muller over mt19937_64 bits: std::normal_distribution differs between standard libraries.
class Normal {
 public:
  explicit Normal(std::uint64_t seed) : rng_(seed) {}
  double operator()() {
    const double u1 = (static_cast<double>(rng_() >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::mt19937_64 rng_;
};

void fill(std::vector<double>& p, std::size_t at, std::size_t n, double base, double sd, Normal& rnd) {
  for (std::size_t i = 0; i < n; ++i) p[at + i] = base + (sd > 0 ? sd * rnd() : 0.0);
}

}  // namespace

std::vector<double> init_params(ModuleKind kind, const ModelShape& m, std::uint64_t seed, double std_dev,
                                double perturb) {
  if (kind == ModuleKind::kLayer && m.layer.tp != 1)
    throw KernelError("init_params: a tensor-parallel layer shard (tp = " + std::to_string(m.layer.tp) +
                      "); draw the unsharded layer and cut it with shard_params");
  Normal rnd(seed);
  const std::size_t h = m.layer.hidden, f = m.layer.ffn, v = m.vocab;
  std::vector<double> p(param_count(kind, m), 0.0);
  switch (kind) {
    case ModuleKind::kLayer: {
      const LayerLayout L = LayerLayout::of(m.layer);
      fill(p, L.ln1_g, h, 1.0, perturb, rnd);
      fill(p, L.ln1_b, h, 0.0, perturb, rnd);
      fill(p, L.w_qkv, 3 * h * h, 0.0, std_dev, rnd);
      fill(p, L.b_qkv, 3 * h, 0.0, perturb, rnd);
      fill(p, L.w_o, h * h, 0.0, std_dev, rnd);
      fill(p, L.b_o, h, 0.0, perturb, rnd);
      fill(p, L.ln2_g, h, 1.0, perturb, rnd);
      fill(p, L.ln2_b, h, 0.0, perturb, rnd);
      fill(p, L.w_fc1, h * f, 0.0, std_dev, rnd);
      fill(p, L.b_fc1, f, 0.0, perturb, rnd);
      fill(p, L.w_fc2, f * h, 0.0, std_dev, rnd);
      fill(p, L.b_fc2, h, 0.0, perturb, rnd);
      fill(p, L.w_router, h * static_cast<std::size_t>(m.layer.experts), 0.0, std_dev, rnd);
      break;
    }
    case ModuleKind::kExperts: {
      if (m.layer.ep != 1)
        throw KernelError("init_params: an expert-parallel shard (ep = " + std::to_string(m.layer.ep) +
                          "); draw all experts and cut them with expert_shard");
      const ExpertLayout L = ExpertLayout::of(m.layer);
      const std::size_t fe = m.layer.expert_ffn;
      for (int e = 0; e < m.layer.experts; e++) {
        const std::size_t b = L.size * static_cast<std::size_t>(e);
        fill(p, b + L.w_fc1, h * fe, 0.0, std_dev, rnd);
        fill(p, b + L.b_fc1, fe, 0.0, perturb, rnd);
        fill(p, b + L.w_fc2, fe * h, 0.0, std_dev, rnd);
        fill(p, b + L.b_fc2, h, 0.0, perturb, rnd);
      }
      break;
    }
    case ModuleKind::kEmbedding:
      fill(p, 0, p.size(), 0.0, std_dev, rnd);
      break;
    case ModuleKind::kHead: {
      const HeadLayout H = HeadLayout::of(m);
      fill(p, H.lnf_g, h, 1.0, perturb, rnd);
      fill(p, H.lnf_b, h, 0.0, perturb, rnd);
      fill(p, H.w_vocab, h * v, 0.0, std_dev, rnd);
      break;
    }
  }
  return p;
}

std::vector<double> shard_params(ModuleKind kind, const ModelShape& shard, int rank, const std::vector<double>& full) {
  ModelShape whole = shard;
  whole.layer.tp = 1;
  const std::size_t want = param_count(kind, whole);
  if (full.size() != want)
    throw KernelError("shard_params: expected the " + std::to_string(want) + " values of the unsharded module, got " +
                      std::to_string(full.size()));
  const int tp = shard.layer.tp;
  if (rank < 0 || rank >= tp)
    throw KernelError("shard_params: rank " + std::to_string(rank) + " outside [0, " + std::to_string(tp) + ")");
  if (kind != ModuleKind::kLayer || tp == 1) return full;
  const LayerLayout F = LayerLayout::of(whole.layer), S = LayerLayout::of(shard.layer);
  const std::size_t h = shard.layer.hidden, w = shard.layer.shard_width(), ffn = shard.layer.ffn,
                    f = shard.layer.shard_ffn();
  std::vector<double> out(S.size);
  auto copy = [&](std::size_t from, std::size_t to, std::size_t n) {
    std::copy(full.begin() + static_cast<std::ptrdiff_t>(from), full.begin() + static_cast<std::ptrdiff_t>(from + n),
              out.begin() + static_cast<std::ptrdiff_t>(to));
  };
  // Row-major [rows, cols] at `from` -> its columns [c0, c0 + n) as a [rows, n] block at `to`.
  auto columns = [&](std::size_t from, std::size_t cols, std::size_t rows, std::size_t c0, std::size_t n,
                     std::size_t to) {
    for (std::size_t r = 0; r < rows; r++) copy(from + r * cols + c0, to + r * n, n);
  };
  const std::size_t r = static_cast<std::size_t>(rank);
  copy(F.ln1_g, S.ln1_g, 2 * h);                  // ln1_g, ln1_b
  for (std::size_t part = 0; part < 3; part++) {  // q, k, v: the columns of this shard's heads
    for (std::size_t row = 0; row < h; row++)
      copy(F.w_qkv + row * 3 * h + part * h + r * w, S.w_qkv + row * 3 * w + part * w, w);
    copy(F.b_qkv + part * h + r * w, S.b_qkv + part * w, w);
  }
  copy(F.w_o + r * w * h, S.w_o, w * h);  // rows of its heads
  copy(F.b_o, S.b_o, h);
  copy(F.ln2_g, S.ln2_g, 2 * h);  // ln2_g, ln2_b
  columns(F.w_fc1, ffn, h, r * f, f, S.w_fc1);
  copy(F.b_fc1 + r * f, S.b_fc1, f);
  copy(F.w_fc2 + r * f * h, S.w_fc2, f * h);
  copy(F.b_fc2, S.b_fc2, h);
  return out;
}

std::vector<double> expert_shard(const ModelShape& shard, int rank, const std::vector<double>& full) {
  ModelShape whole = shard;
  whole.layer.ep = 1;
  const std::size_t want = param_count(ModuleKind::kExperts, whole);
  if (full.size() != want)
    throw KernelError("expert_shard: expected the " + std::to_string(want) + " values of all experts, got " +
                      std::to_string(full.size()));
  if (rank < 0 || rank >= shard.layer.ep)
    throw KernelError("expert_shard: rank " + std::to_string(rank) + " outside [0, " + std::to_string(shard.layer.ep) +
                      ")");
  const std::size_t n = param_count(ModuleKind::kExperts, shard);
  const auto from = full.begin() + static_cast<std::ptrdiff_t>(n * static_cast<std::size_t>(rank));
  return {from, from + static_cast<std::ptrdiff_t>(n)};
}

std::vector<int> top_k_experts(const double* logits, int n, int k) {
  if (k < 1 || k > n)
    throw KernelError("top_k_experts: k = " + std::to_string(k) + " outside [1, " + std::to_string(n) + "]");
  std::vector<int> idx(static_cast<std::size_t>(n));
  for (int e = 0; e < n; e++) idx[static_cast<std::size_t>(e)] = e;
  // Larger logit first; among equal logits the lower index (a strict weak order: the result is unique).
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  idx.resize(static_cast<std::size_t>(k));
  return idx;
}

std::size_t count_targets(const std::vector<std::int32_t>& targets) {
  std::size_t n = 0;
  for (std::int32_t t : targets) n += t >= 0 ? 1 : 0;
  return n;
}

double layer_forward_flops(const LayerShape& s, const Slice& sl) {
  const double b = sl.batch, l = sl.len, c = sl.begin, h = s.hidden, f = s.ffn;
  // QKV 6 b l h^2, projection 2 b l h^2, MLP 4 b l h ffn: 24 b l h^2 when ffn = 4h.
  const double linear = 2.0 * b * l * h * (3.0 * h + h + 2.0 * f);
  return (linear + 4.0 * b * h * (l * c + l * (l + 1.0) / 2.0)) / s.tp;
}

}  // namespace pipescope::kernels

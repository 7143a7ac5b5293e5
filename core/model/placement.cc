#include "core/model/placement.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "core/model/schedule_registry.h"

namespace pipescope {
namespace {

// NVLink count between two GPUs of a p3.16xlarge / DGX-1V node (docs/calibration.md, `nvidia-smi topo -m`):
// 0 = no NVLink (PCIe/SYS), 1 = NV1, 2 = NV2. Kept here as well as in sim/platform.cc because core does not
// depend on sim.
constexpr int kCubeMesh[8][8] = {
    {0, 1, 1, 2, 2, 0, 0, 0}, {1, 0, 2, 1, 0, 2, 0, 0}, {1, 2, 0, 2, 0, 0, 1, 0}, {2, 1, 2, 0, 0, 0, 0, 1},
    {2, 0, 0, 0, 0, 1, 1, 2}, {0, 2, 0, 0, 1, 0, 2, 1}, {0, 0, 1, 0, 1, 2, 0, 2}, {0, 0, 0, 1, 2, 1, 2, 0},
};

// Communication pairs among the local slots of one node, in slot numbers (slot = rank % gpus_per_node).
struct NodePairs {
  std::vector<std::pair<int, int>> tp;    // every pair inside a tensor-parallel group
  std::vector<std::pair<int, int>> pipe;  // pipeline neighbours (same tp rank, and TeraPipe's last -> first hop)
  bool operator<(const NodePairs& o) const { return std::tie(tp, pipe) < std::tie(o.tp, o.pipe); }
};

// Best slot -> physical GPU map for a cube-mesh node: exhaustive over the G! orders (G <= 8: 40320), scored
// lexicographically by (TP pairs without NVLink, pipeline pairs without NVLink, -NVLink count over all
// pairs); the first best order in lexicographic order wins, so the result is deterministic.
std::vector<int> best_cube_mesh_order(int G, const NodePairs& pairs) {
  std::vector<int> perm(G), best;
  std::iota(perm.begin(), perm.end(), 0);
  std::tuple<int, int, int> best_score{1 << 30, 0, 0};
  do {
    int tp_missing = 0, pipe_missing = 0, links = 0;
    for (const auto& [a, b] : pairs.tp) {
      const int k = kCubeMesh[perm[a]][perm[b]];
      tp_missing += k == 0;
      links += k;
    }
    for (const auto& [a, b] : pairs.pipe) {
      const int k = kCubeMesh[perm[a]][perm[b]];
      pipe_missing += k == 0;
      links += k;
    }
    const std::tuple<int, int, int> score{tp_missing, pipe_missing, -links};
    if (best.empty() || score < best_score) best_score = score, best = perm;
  } while (std::next_permutation(perm.begin(), perm.end()));
  return best;
}

}  // namespace

int cube_mesh_nvlinks(int a, int b) {
  if (a < 0 || a >= 8 || b < 0 || b >= 8) throw std::out_of_range("cube_mesh_nvlinks: GPU index outside 0..7");
  return kCubeMesh[a][b];
}

Placement make_placement(const std::string& layout, int dp, int p, int tp, const ClusterSpec& cluster, int cp) {
  if (dp < 1 || p < 1 || tp < 1 || cp < 1)
    throw std::invalid_argument("placement: dp, pp, tp and cp must be >= 1, got dp " + std::to_string(dp) + ", pp " +
                                std::to_string(p) + ", tp " + std::to_string(tp) + ", cp " + std::to_string(cp));
  if (cluster.gpus_per_node < 1 || cluster.nodes < 1)
    throw std::invalid_argument("placement: the cluster has no GPUs (nodes " + std::to_string(cluster.nodes) +
                                ", gpus_per_node " + std::to_string(cluster.gpus_per_node) + ")");
  const long long n = 1LL * dp * p * tp * cp;
  if (n > cluster.total_gpus())
    throw std::invalid_argument(std::string("placement: dp * pp * tp") + (cp > 1 ? " * cp" : "") + " = " +
                                std::to_string(dp) + " * " + std::to_string(p) + " * " + std::to_string(tp) +
                                (cp > 1 ? " * " + std::to_string(cp) : "") + " = " + std::to_string(n) +
                                " GPUs, but the cluster has " + std::to_string(cluster.total_gpus()));
  if (cp > 1 && layout == "terapipe")
    throw std::invalid_argument("placement terapipe: no context parallelism (cp = " + std::to_string(cp) + ")");
  Placement pl;
  pl.dp = dp;
  pl.p = p;
  pl.tp = tp;
  pl.cp = cp;
  pl.gpus_per_node = cluster.gpus_per_node;
  pl.gpu.assign(static_cast<std::size_t>(n), -1);
  const int width = tp * cp;  // a worker's GPUs: its TP groups of its context-parallel ranks, side by side
  auto index = [&](int d, int r, int t) { return (static_cast<std::size_t>(d) * p + r) * width + t; };

  if (layout == "megatron" || layout == "stage-major") {
    // docs/papers.md#megatron: TP innermost, then CP, then DP; pipeline neighbours n/p ranks apart (other nodes).
    const long long block = n / p;
    for (int d = 0; d < dp; d++)
      for (int r = 0; r < p; r++)
        for (int t = 0; t < width; t++) pl.gpu[index(d, r, t)] = static_cast<std::int32_t>(r * block + d * width + t);
    return pl;
  }
  if (layout != "replica-major" && layout != "terapipe")
    throw std::invalid_argument("placement: unknown layout \"" + layout +
                                "\"; valid: megatron, stage-major, replica-major, terapipe");

  // replica-major, and TeraPipe's rank order (docs/papers.md#terapipe): rank = d * (p * tp) + r * tp + t.
  std::vector<int> rank_d(n), rank_r(n), rank_t(n);
  for (int d = 0; d < dp; d++)
    for (int r = 0; r < p; r++)
      for (int t = 0; t < width; t++) {
        const auto rank = index(d, r, t);
        pl.gpu[rank] = static_cast<std::int32_t>(rank);
        rank_d[rank] = d, rank_r[rank] = r, rank_t[rank] = t;
      }
  if (layout == "replica-major") return pl;

  const int G = cluster.gpus_per_node;
  if (G % tp != 0)
    throw std::invalid_argument("placement terapipe: tensor-parallel groups stay inside a node, but tp = " +
                                std::to_string(tp) + " does not divide gpus_per_node = " + std::to_string(G));
  // With NVSwitch or PCIe-only nodes every GPU pair is alike, so the rank order is the placement. On a cube
  // mesh the ranks of each node are permuted onto its GPUs so that TP groups and pipeline neighbours sit on
  // NVLink pairs (docs/calibration.md: e.g. GPU0 -> GPU5 has no NVLink): with 8 stages per node this is the
  // all-NV2 ring 0-3-2-1-5-6-7-4. Nodes with the same pair pattern share one search.
  if (cluster.fabric != IntraNodeFabric::CubeMesh || G == 1) return pl;
  if (G > 8) throw std::invalid_argument("placement terapipe: a cube-mesh node has at most 8 GPUs");
  std::map<NodePairs, std::vector<int>> cache;
  for (long long base = 0; base < n; base += G) {
    const int used = static_cast<int>(std::min<long long>(G, n - base));
    NodePairs pairs;
    for (int a = 0; a < used; a++) {
      const long long ra = base + a;
      for (int b = a + 1; b < used; b++) {
        const long long rb = base + b;
        if (rank_d[ra] != rank_d[rb]) continue;
        if (rank_r[ra] == rank_r[rb]) {
          pairs.tp.emplace_back(a, b);
        } else if (rank_r[rb] == rank_r[ra] + 1 &&
                   (rank_t[ra] == rank_t[rb] || (rank_t[ra] == tp - 1 && rank_t[rb] == 0))) {
          // Same-rank hops (scatter/gather p2p) and TeraPipe's last-TP-rank -> first-TP-rank transfer.
          pairs.pipe.emplace_back(a, b);
        }
      }
    }
    auto it = cache.find(pairs);
    if (it == cache.end()) it = cache.emplace(pairs, best_cube_mesh_order(G, pairs)).first;
    for (int a = 0; a < used; a++) pl.gpu[base + a] = static_cast<std::int32_t>(base + it->second[a]);
  }
  return pl;
}

// ---------------------------------------------------------------- layer placement

std::vector<int> ends_lighter_split(int layers, int stages) {
  if (stages < 1 || layers % stages == 0) return {};
  const int base = (layers + stages - 1) / stages;
  std::vector<int> out(static_cast<std::size_t>(stages), base);
  int deficit = base * stages - layers;
  for (int i = 0; deficit > 0; i++, deficit--) out[static_cast<std::size_t>(i % 2 == 0 ? i / 2 : stages - 1 - i / 2)]--;
  return out;
}

void check_stage_layers(int layers, const std::vector<int>& stage_layers, int stages) {
  if (stages < 1) throw std::invalid_argument("layer placement: pp * v = " + std::to_string(stages) + " stages");
  if (stage_layers.empty()) {
    if (layers < stages || layers % stages != 0)
      throw std::invalid_argument("model.layers = " + std::to_string(layers) +
                                  " cannot be split evenly over pp * v = " + std::to_string(stages) +
                                  " virtual stages (give parallel.stage_layers for an uneven split)");
    return;
  }
  if (static_cast<int>(stage_layers.size()) != stages)
    throw std::invalid_argument("parallel.stage_layers lists " + std::to_string(stage_layers.size()) +
                                " stages, but pp * v = " + std::to_string(stages) + " (one entry per virtual stage)");
  long long sum = 0;
  for (std::size_t g = 0; g < stage_layers.size(); g++) {
    // The first and last may hold the embedding or the loss alone (Megatron's account-for split).
    const bool end = g == 0 || g + 1 == stage_layers.size();
    if (stage_layers[g] < (end ? 0 : 1))
      throw std::invalid_argument("parallel.stage_layers[" + std::to_string(g) +
                                  "] = " + std::to_string(stage_layers[g]) +
                                  "; a stage between the first and the last needs at least one layer");
    sum += stage_layers[g];
  }
  if (sum != layers)
    throw std::invalid_argument("parallel.stage_layers sums to " + std::to_string(sum) +
                                " layers, but model.layers = " + std::to_string(layers));
}

LayerRange stage_layer_range(int layers, const std::vector<int>& stage_layers, int stages, int stage) {
  check_stage_layers(layers, stage_layers, stages);
  if (stage < 0 || stage >= stages)
    throw std::invalid_argument("layer placement: stage " + std::to_string(stage) + " outside 0.." +
                                std::to_string(stages - 1));
  if (stage_layers.empty()) return {stage * (layers / stages), layers / stages};
  const int first = std::accumulate(stage_layers.begin(), stage_layers.begin() + stage, 0);
  return {first, stage_layers[static_cast<std::size_t>(stage)]};
}

LayerRange stage_layer_range(const Scenario& s, int stage) {
  const StageStyle style = scenario_stage_style(s);
  const int stages = s.parallel.pp * s.parallel.v;
  if (stage < 0 || stage >= stages)
    throw std::invalid_argument("layer placement: stage " + std::to_string(stage) + " outside 0.." +
                                std::to_string(stages - 1));
  return stage_layer_range(s.model.layers, s.parallel.stage_layers,
                           model_stage_count(style, s.parallel.pp, s.parallel.v),
                           model_stage_of(style, s.parallel.pp, stage));
}

int scenario_model_stages(const Scenario& s) {
  return model_stage_count(scenario_stage_style(s), s.parallel.pp, s.parallel.v);
}

int stage_copies(const Scenario& s) { return (s.parallel.pp * s.parallel.v) / scenario_model_stages(s); }

bool holds_embedding(const Scenario& s, int stage) {
  return model_stage_of(scenario_stage_style(s), s.parallel.pp, stage) == 0;
}

bool holds_head(const Scenario& s, int stage) {
  return model_stage_of(scenario_stage_style(s), s.parallel.pp, stage) == scenario_model_stages(s) - 1;
}

int rank_layer_count(const Scenario& s, int rank) {
  const StageStyle style = scenario_stage_style(s);
  const int stages = s.parallel.pp * s.parallel.v;
  int n = 0;
  for (int g = 0; g < stages; g++)
    if (stage_rank(style, s.parallel.pp, g) == rank) n += stage_layer_range(s, g).count;
  return n;
}

int stage_moe_layer_count(const Scenario& s, int stage) {
  if (!s.model.moe()) return 0;
  const LayerRange r = stage_layer_range(s, stage);
  int n = 0;
  for (int i = r.first; i < r.first + r.count; i++) n += s.model.moe_layer(i) ? 1 : 0;
  return n;
}

int rank_moe_layer_count(const Scenario& s, int rank) {
  const StageStyle style = scenario_stage_style(s);
  const int stages = s.parallel.pp * s.parallel.v;
  int n = 0;
  for (int g = 0; g < stages; g++)
    if (stage_rank(style, s.parallel.pp, g) == rank) n += stage_moe_layer_count(s, g);
  return n;
}

}  // namespace pipescope

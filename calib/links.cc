#include "calib/links.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "calib/fit.h"

namespace pipescope::calib {

bool known_link_op(const std::string& op) {
  return op == "p2p" || op == "sendrecv" || op == "allreduce" || op == "allgather" || op == "reducescatter";
}

double bus_factor(const std::string& op, int n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "allgather" || op == "reducescatter") return static_cast<double>(n - 1) / n;
  if (op == "sendrecv" || op == "p2p") return 1.0;
  throw std::invalid_argument("unknown link benchmark '" + op +
                              "' (p2p, sendrecv, allreduce, allgather, reducescatter)");
}

LinkRun read_link_results(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot open link benchmark results");
  LinkRun run;
  try {
    const nlohmann::json j = nlohmann::json::parse(f);
    run.library = j.at("library").get<std::string>();
    run.host = j.at("host").get<std::string>();
    for (const auto& r : j.at("results")) {
      LinkResult x;
      x.op = r.at("op").get<std::string>();
      x.ranks = r.at("ranks").get<int>();
      x.bytes = r.at("bytes").get<double>();
      x.time_s = r.at("time_us").get<double>() * 1e-6;
      x.algbw_Bps = r.at("algbw_GBps").get<double>() * 1e9;
      x.busbw_Bps = r.at("busbw_GBps").get<double>() * 1e9;
      x.holdout = r.contains("holdout") && r.at("holdout").get<bool>();
      x.ci_s = r.contains("ci_us") ? r.at("ci_us").get<double>() * 1e-6 : 0.0;
      if (!known_link_op(x.op) || x.ranks < 2 || !(x.bytes > 0) || !(x.time_s > 0) || !(x.ci_s >= 0))
        throw std::runtime_error("implausible entry for op '" + x.op + "'");
      run.results.push_back(x);
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": malformed link benchmark results: " + e.what());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  return run;
}

namespace {

LinkFit link_fit(const std::vector<std::pair<double, double>>& pts, const AlphaBeta& ab, const PiecewiseFit& pw,
                 const std::vector<std::pair<double, double>>& held) {
  LinkFit l;
  l.latency_s = ab.alpha_s;
  l.bw_Bps = ab.bw_Bps;
  l.holdout_rel_err = pw.holdout_rel_err;
  l.model = "piecewise";
  l.points = pts;
  l.holdout_points = held;
  return l;
}

}  // namespace

void fit_links(const LinkRun& run, const std::string& link_class, DeviceProfile& p) {
  std::map<std::pair<std::string, int>, std::vector<std::pair<double, double>>> by, held;
  std::map<std::pair<std::string, int>, std::vector<double>> held_ci;
  for (const auto& r : run.results) {
    (r.holdout ? held : by)[{r.op, r.ranks}].emplace_back(r.bytes, r.time_s);
    if (r.holdout) held_ci[{r.op, r.ranks}].push_back(r.ci_s);
  }
  // The pipeline's link table comes from the one-way p2p benchmark when the run has it (the transfer as a pipeline
  // makes it); older runs have only the warm sendrecv exchange.
  const bool has_p2p =
      std::any_of(run.results.begin(), run.results.end(), [](const LinkResult& r) { return r.op == "p2p"; });
  for (auto& [key, pts] : by) {
    const auto& [op, n] = key;
    std::sort(pts.begin(), pts.end());
    const auto h = held.find(key);
    const std::vector<std::pair<double, double>> none, &held_pts = h == held.end() ? none : h->second;
    const PiecewiseFit pw = held_pts.empty() ? fit_piecewise(pts) : holdout_piecewise(pts, held_pts, held_ci[key]);
    // t = alpha + S f / busbw: fit alpha-beta on (S f, t), so bw is the bus bandwidth.
    std::vector<std::pair<double, double>> scaled;
    const double f = bus_factor(op, n);
    for (const auto& [s, t] : pts) scaled.emplace_back(s * f, t);
    const AlphaBeta ab = fit_alpha_beta(scaled);
    if (op == (has_p2p ? "p2p" : "sendrecv") && n == 2) p.links[link_class] = link_fit(pts, ab, pw, held_pts);
    if (op == "p2p") continue;  // a link, not a collective
    CollectiveFit c;
    c.op = op;
    c.ranks = n;
    c.link_class = link_class;
    c.alpha_s = ab.alpha_s;
    c.busbw_Bps = ab.bw_Bps;
    c.holdout_rel_err = pw.holdout_rel_err;
    c.model = "piecewise";
    c.points = pts;
    c.holdout_points = held_pts;
    p.collectives.push_back(c);
  }
}

}  // namespace pipescope::calib

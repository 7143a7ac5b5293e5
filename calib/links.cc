#include "calib/links.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "calib/fit.h"

namespace pipescope::calib {

bool known_link_op(const std::string& op) {
  return op == "sendrecv" || op == "allreduce" || op == "allgather" || op == "reducescatter";
}

double bus_factor(const std::string& op, int n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "allgather" || op == "reducescatter") return static_cast<double>(n - 1) / n;
  if (op == "sendrecv") return 1.0;
  throw std::invalid_argument("unknown link benchmark '" + op + "' (sendrecv, allreduce, allgather, reducescatter)");
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
      if (!known_link_op(x.op) || x.ranks < 2 || !(x.bytes > 0) || !(x.time_s > 0))
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

void fit_links(const LinkRun& run, const std::string& link_class, DeviceProfile& p) {
  std::map<std::pair<std::string, int>, std::vector<std::pair<double, double>>> by, held;
  for (const auto& r : run.results) (r.holdout ? held : by)[{r.op, r.ranks}].emplace_back(r.bytes, r.time_s);
  for (auto& [key, pts] : by) {
    const auto& [op, n] = key;
    std::sort(pts.begin(), pts.end());
    const auto h = held.find(key);
    const PiecewiseFit pw = h == held.end() ? fit_piecewise(pts) : holdout_piecewise(pts, h->second);
    // t = alpha + S f / busbw: fit alpha-beta on (S f, t), so bw is the bus bandwidth.
    std::vector<std::pair<double, double>> scaled;
    const double f = bus_factor(op, n);
    for (const auto& [s, t] : pts) scaled.emplace_back(s * f, t);
    const AlphaBeta ab = fit_alpha_beta(scaled);
    CollectiveFit c;
    c.op = op;
    c.ranks = n;
    c.link_class = link_class;
    c.alpha_s = ab.alpha_s;
    c.busbw_Bps = ab.bw_Bps;
    c.holdout_rel_err = pw.holdout_rel_err;
    c.model = "piecewise";
    c.points = pts;
    if (h != held.end()) c.holdout_points = h->second;
    p.collectives.push_back(c);
    if (op == "sendrecv" && n == 2) {
      LinkFit l;
      l.latency_s = ab.alpha_s;
      l.bw_Bps = ab.bw_Bps;
      l.holdout_rel_err = pw.holdout_rel_err;
      l.model = "piecewise";
      l.points = pts;
      l.holdout_points = c.holdout_points;
      p.links[link_class] = l;
    }
  }
}

}  // namespace pipescope::calib

#include "calib/drift.h"

#include <cstdio>

#include "calib/benches.h"
#include "calib/calibrate.h"
#include "core/model/backends.h"

namespace pipescope::calib {

std::string DriftProbe::describe() const {
  char b[160];
  std::snprintf(b, sizeof b, "layer h %d, %d heads, ffn %d, b %d, l %d", hidden, heads, ffn, micro_batch, l);
  return b;
}

std::optional<DriftProbe> drift_probe_of(const DeviceProfile& p, const std::string& backend, std::string& why) {
  if (p.kind != "measured" || p.layers.empty() || p.layers.front().slices.empty()) {
    why = "the profile has no measured layer table";
    return std::nullopt;
  }
  const auto it = p.provenance.find("backend");
  if (it == p.provenance.end() || it->second != backend) {
    why = "the profile was measured with another backend";
    return std::nullopt;
  }
  if (backend_named(backend).device != BackendDevice::Cpu) {
    why = "GPU kernels run only in the rank program";
    return std::nullopt;
  }
  const LayerTable& t = p.layers.front();
  // The longest measured length up to half the sequence: long enough to be the model's kind of work, short
  // enough that forward and backward re-time in well under a second.
  const SlicePoint* pt = &t.slices.front();
  for (const auto& s : t.slices)
    if (2 * s.l <= t.seq_len) pt = &s;
  DriftProbe d;
  d.hidden = t.hidden;
  d.heads = t.heads;
  d.ffn = t.ffn;
  d.vocab = t.vocab;
  d.micro_batch = t.micro_batch;
  d.seq_len = t.seq_len;
  d.l = pt->l;
  d.profile_fwd_s = pt->fwd.median_s;
  d.profile_bwd_s = pt->bwd.median_s;
  const auto timer = p.provenance.find("timer");
  d.cpu_clock = timer != p.provenance.end() && timer->second.rfind("thread CPU time", 0) == 0;
  return d;
}

DriftReading retime_probe(const DriftProbe& d, const std::string& backend) {
  auto be = measuring_backend(backend);
  ComputeConfig cfg;
  cfg.shape.layer = kernels::LayerShape{d.hidden, d.heads, d.ffn, 1};
  cfg.shape.vocab = d.vocab;
  cfg.shape.max_seq = d.seq_len;
  cfg.policy = quick_policy();
  cfg.progress = false;
  auto timer = d.cpu_clock ? thread_cpu_timer() : steady_timer([&] { be->synchronize(); });
  const auto [f, b] = time_layer_point(*be, *timer, cfg, d.micro_batch, d.l, 0);
  return DriftReading{f.median_s, b.median_s};
}

double drift_change(const DriftProbe& d, const DriftReading& r) {
  return (r.fwd_s + r.bwd_s) / (d.profile_fwd_s + d.profile_bwd_s) - 1;
}

}  // namespace pipescope::calib

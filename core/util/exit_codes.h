// Exit codes of every pipescope program, the one table (README.md "Exit codes" repeats it): 0 ok, 1 bad input
// (scenario, flags, files, CLI11's own parse errors), 2 schedule rejected by the static checker or deadlocked,
// 3 environment (no MPI launcher, no GPU, a job killed from outside, the launcher gone), 4 internal error,
// 5 calibration refused by a quality gate (calib/gates.h; no profile written), 6 `fidelity --baseline`: a development
// set worse than the baseline (sim/fidelity.h), 128 + N interrupted by signal N.
// Only main functions return them (and parent_watch's exit when the launcher is gone).
#pragma once

namespace pipescope {

inline constexpr int kExitOk = 0;
inline constexpr int kExitInput = 1;
inline constexpr int kExitSchedule = 2;
inline constexpr int kExitEnvironment = 3;
inline constexpr int kExitInternal = 4;
inline constexpr int kExitPoorFit = 5;
inline constexpr int kExitRegression = 6;

}  // namespace pipescope

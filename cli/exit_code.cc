// The exit code of an error (cli/commands.h's table), in one place: main's last handler and the repro tables
// (which keep going past a failed row and exit with the first failure's code) both ask here.
#include <new>

#include "cli/commands.h"
#include "core/lower/checks.h"
#include "core/model/profile.h"
#include "core/model/scenario.h"
#include "core/plan/work_estimate.h"
#include "core/util/atomic_file.h"
#include "core/util/input_file.h"

namespace pipescope::cli {

template <class T>
bool is(const std::exception& e) {
  return dynamic_cast<const T*>(&e) != nullptr;
}

int exit_code_of(const std::exception& e) {
  if (is<ProfileError>(e) || is<ScenarioError>(e) || is<InputError>(e) || is<std::invalid_argument>(e) ||
      is<InputFileError>(e) || is<WorkTooLarge>(e) || is<OutputPathError>(e))
    return kExitInput;
  if (is<OutputWriteError>(e) || is<EnvironmentError>(e)) return kExitEnvironment;
  if (is<Interrupted>(e)) return 128 + dynamic_cast<const Interrupted&>(e).signal;
  if (is<CheckError>(e)) return kExitSchedule;
  return kExitInternal;  // std::bad_alloc included: the work estimate should have refused the run
}

}  // namespace pipescope::cli

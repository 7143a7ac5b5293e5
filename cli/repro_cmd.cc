// `pipescope repro <paper> ...`: registry of paper reproductions (cli/repro.h); the tables are in sim/repro_*.h.
#include <memory>
#include <vector>

#include "cli/repro.h"

namespace pipescope::cli {

int failure_code(const std::exception_ptr& first_failure) {
  if (!first_failure) return 0;
  try {
    std::rethrow_exception(first_failure);
  } catch (const std::exception& e) {
    return exit_code_of(e);
  } catch (...) {
    return kExitInternal;
  }
}

Command add_repro(CLI::App& app) {
  auto* sub = app.add_subcommand("repro", "Reproduce a paper's results table in simulation");
  sub->require_subcommand(1);
  // One line per paper.
  auto papers = std::make_shared<std::vector<Command>>(std::vector<Command>{
      add_repro_terapipe(*sub),
      add_repro_megatron(*sub),
      add_repro_seq1f1b(*sub),
      add_repro_vtrain(*sub),
  });
  return {sub, [papers] {
            for (auto& c : *papers)
              if (c.app->parsed()) return c.run();
            return kExitInput;
          }};
}

}  // namespace pipescope::cli

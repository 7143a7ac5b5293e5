// `pipescope repro <paper> ...`: registry of paper reproductions (cli/repro.h).
#include <memory>
#include <vector>

#include "cli/repro.h"

namespace pipescope::cli {

Command add_repro(CLI::App& app) {
  auto* sub = app.add_subcommand("repro", "Reproduce a paper's results table in simulation");
  sub->require_subcommand(1);
  // One line per paper.
  auto papers = std::make_shared<std::vector<Command>>(std::vector<Command>{
      add_repro_terapipe(*sub),
      add_repro_megatron(*sub),
      add_repro_seq1f1b(*sub),
  });
  return {sub, [papers] {
            for (auto& c : *papers)
              if (c.app->parsed()) return c.run();
            return kExitInput;
          }};
}

}  // namespace pipescope::cli

#pragma once
// Where the shipped data files (scenarios/, calib/profiles/) are, so that commands with default data paths
// (`pipescope repro terapipe`) work from any directory and from an installed prefix. A relative path is looked
// up, in order: as given (relative to the working directory); under $PIPESCOPE_DATA_DIR; under
// <prefix>/share/pipescope for the running executable's <prefix>/bin (the layout `cmake --install` writes);
// under the source tree this binary was built from, while it runs from its build tree.

#include <string>
#include <vector>

namespace pipescope {

// The directories searched after the working directory, in order (those that exist).
std::vector<std::string> data_roots();
// `path` itself when absolute or present relative to the working directory, else the first data root holding
// it. Throws std::invalid_argument naming every place looked at when none does.
std::string data_path(const std::string& path);

}  // namespace pipescope

// Command lines given as one string (--launcher) and the data-file lookup of an installed or moved pipescope.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>

#include "core/util/data_path.h"
#include "core/util/shell_words.h"

namespace pipescope {
namespace {

using Words = std::vector<std::string>;

TEST(ShellWords, SplitsOnBlanks) {
  EXPECT_EQ(split_shell_words("  mpirun  --oversubscribe\t-x A "), (Words{"mpirun", "--oversubscribe", "-x", "A"}));
  EXPECT_TRUE(split_shell_words("   ").empty());
}

TEST(ShellWords, QuotedArgumentsStayWhole) {
  // Split on whitespace, these were 4 and 3 words.
  EXPECT_EQ(split_shell_words("srun --export='A=a b' x"), (Words{"srun", "--export=A=a b", "x"}));
  EXPECT_EQ(split_shell_words(R"(env "B=one two" mpirun)"), (Words{"env", "B=one two", "mpirun"}));
  EXPECT_EQ(split_shell_words(R"(a\ b "c\"d" 'e\f' "")"), (Words{"a b", "c\"d", "e\\f", ""}));
}

TEST(ShellWords, UnterminatedQuoteIsAnError) {
  EXPECT_THROW(split_shell_words("mpirun 'oops"), std::invalid_argument);
  EXPECT_THROW(split_shell_words("mpirun \"oops"), std::invalid_argument);
  EXPECT_THROW(split_shell_words("mpirun oops\\"), std::invalid_argument);
}

TEST(DataPath, FindsShippedScenariosFromAnyDirectory) {
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path("/");
  const std::string p = data_path("scenarios/terapipe");
  std::filesystem::current_path(cwd);
  EXPECT_TRUE(std::filesystem::is_directory(p)) << p;
  EXPECT_EQ(std::filesystem::path(p).filename(), "terapipe");
}

TEST(DataPath, EnvironmentComesFirstAndMissingFilesAreNamed) {
  const std::string tmp = PIPESCOPE_BINARY_DIR "/data_path_env";
  std::filesystem::create_directories(tmp + "/scenarios/only-here");
  setenv("PIPESCOPE_DATA_DIR", tmp.c_str(), 1);
  EXPECT_EQ(data_path("scenarios/only-here"), tmp + "/scenarios/only-here");
  try {
    data_path("scenarios/no-such-dir");
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("scenarios/no-such-dir: not found (looked at ./scenarios/no-such-dir, " + tmp),
              std::string::npos)
        << e.what();
  }
  unsetenv("PIPESCOPE_DATA_DIR");
}

}  // namespace
}  // namespace pipescope

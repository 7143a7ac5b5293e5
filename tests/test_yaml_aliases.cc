// YAML aliases checked before a document is loaded (core/model/yaml_aliases.h): a recursive alias and aliases of
// aliases are refused with their position; plain aliases load as before.
#include <gtest/gtest.h>

#include <string>

#include "core/model/profile.h"
#include "core/model/yaml_aliases.h"

namespace pipescope {
namespace {

TEST(YamlAliases, PlainAliasesAreFine) {
  YAML::Mark at;
  EXPECT_EQ(yaml_alias_problem("a: &x {b: 1}\nc: *x\nd: [*x, *x]\n", at), "");
  EXPECT_EQ(yaml_alias_problem("a: &x 1\nb: *x\n", at), "");
}

TEST(YamlAliases, AnAliasToAnOpenNodeIsRefused) {
  YAML::Mark at;
  const std::string own = yaml_alias_problem("m: &m {preset: x, y: *m}\n", at);
  EXPECT_NE(own.find("refers to a node that contains it"), std::string::npos) << own;
  EXPECT_EQ(at.line, 0);
  EXPECT_EQ(at.column, 21);
  // An enclosing node's anchor, two levels up.
  EXPECT_NE(yaml_alias_problem("a: &a {b: {c: [*a]}}\n", at), "");
}

TEST(YamlAliases, AliasesOfAliasesAreCountedExpanded) {
  std::string text = "x: [&a [1,1,1,1,1,1,1,1,1]";
  std::string prev = "a";
  for (const char* n : {"b", "c", "d", "e", "f"}) {
    text += std::string(", &") + n + " [";
    for (int i = 0; i < 9; i++) text += (i ? ",*" : "*") + prev;
    text += "]";
    prev = n;
  }
  YAML::Mark at;
  EXPECT_EQ(yaml_alias_problem(text + "]\n", at), "");  // f: 9^6 = 531441 items (with a to e: 597870), under
  text += ", &g [";
  for (int i = 0; i < 9; i++) text += (i ? ",*" : "*") + prev;
  const std::string p = yaml_alias_problem(text + "]]\n", at);  // g: 9^7 more
  EXPECT_NE(p.find("more than 1000000 nodes"), std::string::npos) << p;
}

TEST(YamlAliases, AMillionValuesWithoutAliasesAreRefusedAsSuch) {
  std::string text = "x: [1";
  for (int i = 0; i < 1000000; i++) text += ",1";
  YAML::Mark at;
  const std::string p = yaml_alias_problem(text + "]\n", at);
  EXPECT_NE(p.find("the document has more than 1000000 values"), std::string::npos) << p;
}

TEST(YamlAliases, AProfileWithARecursiveAliasIsRefused) {
  try {
    parse_profile("pipescope_profile: 1\nkind: &k [*k]\n", "p.yaml");
    FAIL() << "accepted";
  } catch (const ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find("p.yaml:2:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("recursive YAML alias"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pipescope

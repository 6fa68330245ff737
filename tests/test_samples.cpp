// Every sample, run through its scenario at small sizes on the tests' 8-device runtime: each
// prints the tutorials' results and checks them itself (exit code 0 only when every check
// passed), so this is what makes the README's "samples double as smoke tests" true under ctest.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "meshvk/meshvk.hpp"
#include "scenario.hpp"
#include "test_support.hpp"

namespace {

// Sizes that keep each sample within seconds on lavapipe; the rest run as the README shows them.
const std::map<std::string, std::vector<std::string>> kSmall = {
    {"mlp_training", {"--batch", "256", "--steps", "2"}},
    {"automatic_parallelism", {"--size", "512", "--matmul-size", "256"}},
    {"sharding_basics", {"--size", "512"}},
    {"scaling_shard_map", {"--bdf", "64,128,256"}},
    {"gpt", {"--steps", "2"}},
};

}  // namespace

TEST(Samples, EveryScenarioPassesItsOwnChecks) {
  ASSERT_EQ(meshvk::scenarios::all().size(), 9u);
  for (const auto& scenario : meshvk::scenarios::all()) {
    std::ostringstream out, err;
    meshvk::scenarios::ScenarioContext ctx;
    if (const auto it = kSmall.find(scenario.name); it != kSmall.end()) ctx.args = it->second;
    ctx.out = &out;
    ctx.err = &err;
    int rc = -1;
    try {
      rc = scenario.run(ctx);
    } catch (const meshvk::Error& e) {
      ADD_FAILURE() << scenario.name << " threw: " << e.what();
    }
    EXPECT_EQ(rc, 0) << scenario.name << "\n--- stdout (tail) ---\n"
                     << out.str().substr(out.str().size() > 4000 ? out.str().size() - 4000 : 0)
                     << "\n--- stderr ---\n"
                     << err.str();
    EXPECT_EQ(out.str().find("NOT EQUAL"), std::string::npos) << scenario.name;
  }
}

TEST(Samples, BadArgumentsAreUsageErrors) {
  for (const auto& scenario : meshvk::scenarios::all()) {
    std::ostringstream out, err;
    meshvk::scenarios::ScenarioContext ctx;
    ctx.out = &out;
    ctx.err = &err;
    ctx.args = {"--no-such-flag"};
    EXPECT_EQ(scenario.run(ctx), 2) << scenario.name;
    EXPECT_NE(err.str().find("--no-such-flag"), std::string::npos)
        << scenario.name << ": " << err.str();
    ctx.args = {"--help"};
    EXPECT_EQ(scenario.run(ctx), 0) << scenario.name;
  }
}

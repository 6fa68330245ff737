// MESHVK_PROCESS_TRANSPORT (issue 16): how bytes move between the processes of a job, shared
// (the node's shared memory) or staged (MPI messages, as between nodes). The transports
// themselves run under mpirun (tests/processes: processes_process_workload_staged); here, a
// value that is neither is an Error naming the variable and both values, in any runtime (so a
// typo fails where it is made, not first on a cluster), and the runtime still starts after.
//
// A binary of its own: the environment is read when a Runtime is made.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;

namespace {

std::string error_of(const char* value) {
  const ScopedEnv env("MESHVK_PROCESS_TRANSPORT", value);
  try {
    mv::Runtime rt;
  } catch (const mv::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ProcessTransport, AnotherValueIsAnErrorNamingTheValidOnes) {
  for (const char* bad : {"tcp", "Staged", "shared,staged"}) {
    const std::string e = error_of(bad);
    EXPECT_NE(e.find(std::string("MESHVK_PROCESS_TRANSPORT=") + bad + ":"), std::string::npos) << e;
    EXPECT_NE(e.find("shared"), std::string::npos) << e;
    EXPECT_NE(e.find("staged"), std::string::npos) << e;
  }
}

TEST(ProcessTransport, EitherValueIsAcceptedAndTheRuntimeStillWorks) {
  for (const char* good : {"shared", "staged", static_cast<const char*>(nullptr)}) {
    EXPECT_EQ(error_of(good), "(no error)") << (good ? good : "unset");
  }
  // One process: nothing moves between processes, whatever the setting.
  const ScopedEnv env("MESHVK_PROCESS_TRANSPORT", "staged");
  mv::Runtime rt;
  EXPECT_EQ(mv::process_count(), 1);
  const auto mesh = mv::make_mesh({rt.num_devices()}, {"x"});
  std::vector<float> host(static_cast<size_t>(rt.num_devices()) * 4, 1.0f);
  const auto x = mv::device_put(std::span<const float>(host), {static_cast<int64_t>(host.size())},
                                mv::NamedSharding(mesh, mv::P("x")));
  const auto total = mv::shard_map([](const mv::Array& v) { return mv::psum(v, "x"); }, mesh,
                                   {mv::P("x")}, mv::P("x"));
  const auto sum = total(x).to_host<float>();
  EXPECT_EQ(sum[0], static_cast<float>(rt.num_devices()));
}

}  // namespace

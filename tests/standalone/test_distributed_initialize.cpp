// distributed::initialize in a process of its own (not under mpirun): a refused initialize
// (num_processes or process_id that Open MPI contradicts) left is_initialized() true; the group
// is kept only once the arguments agree, and the runtime still works after the refusals.
//
// A binary of its own: initialize() starts Open MPI, whose components (loaded and unloaded by
// it) leave allocations LeakSanitizer cannot attribute, so leak checking is off for this test
// alone (tests/CMakeLists.txt), not for the other API tests.
#include <gtest/gtest.h>

#include <string>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;

TEST(DistributedInitialize, RefusedInitializeLeavesNothingInitialized) {
  ASSERT_FALSE(mv::distributed::is_initialized());
  expect_error([] { mv::distributed::initialize({.num_processes = 2}); }, "num_processes = 2");
  EXPECT_FALSE(mv::distributed::is_initialized());
  expect_error([] { mv::distributed::initialize({.process_id = 1}); }, "process_id = 1");
  EXPECT_FALSE(mv::distributed::is_initialized());
  EXPECT_EQ(mv::process_count(), 1);
  EXPECT_EQ(mv::process_index(), 0);
  mv::Runtime rt;
  expect_runtime_usable();
}

// Shared main of every test binary: one runtime for the whole binary (8 virtual devices and the
// Khronos validation layer under ctest), and a listener that fails any test during which the
// validation layer reported a message.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdlib>
#include <memory>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace {

std::unique_ptr<meshvk::Runtime> g_runtime;

class ValidationListener : public testing::EmptyTestEventListener {
  void OnTestStart(const testing::TestInfo&) override {
    before_ = meshvk::Runtime::validation_messages_in_process();
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (!g_runtime) return;
    // Every Runtime of the process counts, not just the shared one: tests make their own too.
    const uint64_t after = meshvk::Runtime::validation_messages_in_process();
    if (after != before_) {
      std::fprintf(stderr, "FAILED: %s.%s: the Vulkan validation layer reported %llu message(s)\n",
                   info.test_suite_name(), info.name(),
                   static_cast<unsigned long long>(after - before_));
      ++failed_tests;
    }
  }

 public:
  static inline int failed_tests = 0;

 private:
  uint64_t before_ = 0;
};

}  // namespace

meshvk::Runtime& test_runtime() { return *g_runtime; }

// Under LeakSanitizer: the Vulkan loader unloads the driver and layers at vkDestroyInstance,
// before leaks are reported, so their frames would be nameless and tests/lsan.supp could not
// match them. Loading them once more with RTLD_NODELETE keeps them mapped.
static void keep_vulkan_modules_loaded() {
#if defined(__SANITIZE_ADDRESS__)
  for (const char* lib : {"libvulkan_lvp.so", "libVkLayer_khronos_validation.so"})
    dlopen(lib, RTLD_NOW | RTLD_NODELETE);
#endif
}

int main(int argc, char** argv) {
  keep_vulkan_modules_loaded();
  testing::InitGoogleTest(&argc, argv);
  g_runtime = std::make_unique<meshvk::Runtime>();
  const char* want = std::getenv("MESHVK_VALIDATION");
  if (want && std::string(want) == "1" && !g_runtime->validation_enabled()) {
    std::fprintf(stderr, "MESHVK_VALIDATION=1 but the Khronos validation layer could not be loaded\n");
    return 1;
  }
  testing::UnitTest::GetInstance()->listeners().Append(new ValidationListener);
  int rc = RUN_ALL_TESTS();
  g_runtime.reset();
  // A validation message fails the binary even where gtest already closed the test's result.
  if (ValidationListener::failed_tests > 0) rc = 1;
  return rc;
}

#pragma once
#include <stdexcept>
#include <string>

namespace meshvk {

// Every misuse of meshvk raises this; the message names the operation, the values involved and
// what would have been valid. The runtime stays usable after one is thrown.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace meshvk

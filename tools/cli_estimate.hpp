#pragma once
// meshvk estimate: the samples' programs projected onto hardware descriptions (meshvk/estimate.hpp).
#include "cli_args.hpp"

namespace meshvk_cli {

// Status 0, or 1 when the runtime fails; a wrong name throws UsageError.
int run_estimate(const EstimateArgs& args);

}  // namespace meshvk_cli

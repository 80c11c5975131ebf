// Helpers shared by the decode and prefill attention tests.
#pragma once

#include "rill/kernels/common.h"

namespace rill::testing {

/// Slot offset of rel index `rel` in a ring of `ring` slots (non-negative modulo).
inline int ring_offset(long long rel, long long ring) {
  long long r = rel % ring;
  if (r < 0) r += ring;
  return static_cast<int>(r);
}

/// Normalized-error and max-abs tolerances of attention outputs from rounded inputs.
inline double tolerance(kernels::DType t) { return t == kernels::DType::kF16 ? 2e-3 : 1e-2; }
inline double max_abs_tolerance(kernels::DType t) { return t == kernels::DType::kF16 ? 1e-2 : 4e-2; }

}  // namespace rill::testing

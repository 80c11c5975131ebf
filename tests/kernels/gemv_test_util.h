// The GemvParams the GEMV tests start from (gemv_test.cc, gemv_silu_test.cc).
#pragma once

#include "rill/kernels/gemv.h"

namespace rill::testing {

/// y = x w^T for M rows, weights [N, K], CTA shape `config` (-1: the default); kStore.
inline kernels::GemvParams gemv_params(kernels::DType dt, int M, int N, int K, const void* x,
                                       const void* w, void* y, int config) {
  kernels::GemvParams p = kernels::gemv_params(dt, M, N, K, x, w, y);
  p.config = config;
  return p;
}

}  // namespace rill::testing

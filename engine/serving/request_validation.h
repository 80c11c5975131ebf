// The checks a request passes before it is queued: everything that would make it fail later, or
// never run, is refused at submit() with kInvalidArgument and a message naming the limit.
#pragma once

#include "engine/kv/kv_cache_manager.h"
#include "engine/model/model_config.h"
#include "engine/scheduler/scheduler_config.h"
#include "engine/serving/request.h"
#include "engine/serving/session.h"

namespace rill {

/// Stop strings a request may carry, and their length in bytes.
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 256;

/// Throws rill::Error(kInvalidArgument) naming the first problem. `kv` is read for its geometry
/// only (block size, context, pool size): safe from any thread.
void validate_request(const Request& r, const ModelConfig& model, const KvCacheManager& kv,
                      int kv_blocks_total, const SchedulerConfig& config);

/// Likewise for a session: a streaming policy within the limits and the pool, sampling defaults.
void validate_session_options(const SessionOptions& options, const KvCacheManager& kv,
                              int kv_blocks_total, const SchedulerConfig& config);

/// Throws rill::Error(kInvalidArgument) naming the first field out of range.
void validate_scheduler_config(const SchedulerConfig& c);

}  // namespace rill

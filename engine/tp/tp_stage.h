// What each rank thread of a tensor-parallel group is doing, for the group's watchdog and for
// tracing a hang: the TpRunner's worker threads own a stage slot each; the rank code (CudaRunner,
// CpuRunner) names its stages with set_stage. With RILL_TP_TRACE=1 every stage is logged at info
// level (else at debug level), so a hang's log ends at the stage each rank is stuck in.
#pragma once

#include <atomic>

namespace rill::tp {

/// Binds the calling thread to rank `rank`'s stage slot (nullptr: unbinds). TpRunner's workers.
void bind_stage_slot(int rank, std::atomic<const char*>* slot);

/// Records (and traces) that the calling rank thread enters `what` (a string literal: kept by
/// pointer). A no-op but for the trace on threads that are not a group's rank.
void set_stage(const char* what);

/// Whether RILL_TP_TRACE is set to something other than 0 (read once).
bool tracing();

}  // namespace rill::tp

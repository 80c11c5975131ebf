// Kernel timeline of CUDA-graph replays, recorded by CUPTI's activity API, and where a decode
// step's time goes on its critical path.
//
// With programmatic dependent launch a kernel is resident (and "running") long before its
// predecessor ends, so kernel durations overlap and their sum means little. Instead each instant
// of the step is charged to the resident kernel that started first (in a PDL chain, the kernel
// the others are waiting for), or to "no kernel resident": a kernel's charge is what it adds to
// the step's critical path, one hidden inside another costs nothing, and the charges add up to
// the step's span, first start to last end.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rill::bench {

struct KernelRecord {
  std::string name;    // demangled function name without namespaces and template arguments
  uint64_t start = 0;  // ns, GPU clock
  uint64_t end = 0;
  uint32_t launch = 0;  // correlation id of the launching API call: one per graph replay
  int grid = 0;         // CTAs (x * y * z)
};

/// True when this build records kernel traces (CUPTI was found at configure time).
bool kernel_trace_available();

/// Records every kernel from construction to stop(). One at a time per process.
class KernelTrace {
 public:
  KernelTrace();  // throws std::runtime_error when CUPTI is unavailable or fails
  ~KernelTrace();
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;
  /// Flushes CUPTI's buffers and returns the kernels recorded so far, ordered by start.
  std::vector<KernelRecord> stop();

 private:
  bool active_ = false;
};

/// Per kernel label ("name [CTAs] after previous-name", the kernel that started before it, so
/// that launches of one kernel in different places stay apart), summed over the step: launches,
/// marginal (critical-path) time and median resident time, averaged over the replays in `records`
/// (grouped by launch).
struct StepAttribution {
  struct Row {
    std::string label;
    double launches = 0;     // per step
    double marginal_ms = 0;  // per step
    double resident_us = 0;  // median end - start of one launch
  };
  int steps = 0;
  double span_ms = 0;     // median first start -> last end of a step
  std::vector<Row> rows;  // largest marginal first; "(no kernel resident)" holds the gaps
};
StepAttribution attribute_steps(const std::vector<KernelRecord>& records);

}  // namespace rill::bench

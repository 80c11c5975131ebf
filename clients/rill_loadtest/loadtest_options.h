// rill-loadtest's command line: target, load shape, workload, SLOs and outputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "clients/rill_loadtest/background_streams.h"
#include "clients/rill_loadtest/stats.h"
#include "clients/rill_loadtest/stream_client.h"
#include "clients/rill_loadtest/workload.h"

namespace rill::loadtest {

/// Exit codes; scripts tell the outcomes apart by them.
enum class ExitCode : int {
  kOk = 0,
  kRequestsFailed = 1,  // the run finished but some requests failed
  kBadFlags = 2,
  kUnreachable = 3,  // the server could not be reached for set-up
  kCheckFailed = 4,  // the server's /metrics disagree with the client's counts
};

struct LoadTestOptions {
  bool use_grpc = false;
  TransportOptions transport;  // target, model, timeout, io threads, channels
  std::string metrics_url;     // default: http://HOST:PORT/metrics (HTTP), HOST:8000 for gRPC

  // Load: open loop at `rate` unless `concurrency` is set (closed loop).
  double rate = 0;  // +inf: every request at once
  double burstiness = 1;
  bool constant_arrivals = false;
  std::optional<int> concurrency;
  double ramp_up_s = 0;
  int64_t num_requests = 0;  // 0 with a duration: unbounded
  double duration_s = 0;
  int64_t warmup_requests = 0;
  std::vector<double> sweep;  // rates, or concurrencies with --concurrency
  double saturation_throughput_ratio = 0.9;
  double saturation_ttft_factor = 5;

  WorkloadConfig workload;
  Slo slo;
  std::string slo_spec;
  std::string targets_spec;  // --targets, as given
  StreamsOptions streams;    // --streams: long-lived streams beside the load

  std::string out_prefix;  // PREFIX.json and PREFIX.csv
  std::string html_path;
  bool progress = false;  // forced on; else only when stderr is a terminal
  unsigned long long seed = 0;
  std::vector<std::string> argv;  // as given, for the report
};

/// Parses argv: the options, or the exit code to leave with (--help: 0; bad flags: 2, after
/// the message was printed).
std::variant<LoadTestOptions, int> parse_options(int argc, char** argv);

/// Parses a comma-separated list of positive numbers ("1,2,4.5"); throws std::invalid_argument.
std::vector<double> parse_number_list(const std::string& text);

}  // namespace rill::loadtest

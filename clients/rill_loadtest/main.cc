// rill-loadtest: drives rill-server with open- or closed-loop load over gRPC or HTTP/SSE and
// reports vLLM-style latency and throughput figures, the server's own figures beside them, and
// optional JSON / CSV / HTML outputs. Exit codes: ExitCode (loadtest_options.h).
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "clients/rill_loadtest/loadtest_options.h"
#include "clients/rill_loadtest/reports.h"
#include "clients/rill_loadtest/run_session.h"

namespace rill::loadtest {
namespace {

// Every stream is a socket: lift the soft descriptor limit to the hard one (1,024 by default
// would cap a closed loop below 1,000 HTTP streams).
void raise_fd_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

int exit_code(const RunReport& report) {
  for (const PhaseReport& p : report.phases)
    if (p.summary.failed > 0) return static_cast<int>(ExitCode::kRequestsFailed);
  for (const PhaseReport& p : report.phases)
    for (const ConsistencyCheck& c : p.checks)
      if (!c.passed) return static_cast<int>(ExitCode::kCheckFailed);
  return static_cast<int>(ExitCode::kOk);
}

int run(const LoadTestOptions& options) {
  raise_fd_limit();
  const bool terminal = isatty(STDERR_FILENO);
  ProgressBar progress(options.progress || terminal, terminal);
  RunReport report;
  try {
    report = run_session(options, progress);
  } catch (const SetupError& e) {
    std::cerr << "rill-loadtest: " << e.what() << "\n";
    return static_cast<int>(ExitCode::kUnreachable);
  }
  print_console_report(report, stdout);
  std::fflush(stdout);
  try {
    if (!options.out_prefix.empty()) write_json_and_csv(report, options.out_prefix);
    if (!options.html_path.empty()) write_html_report(report, options.html_path);
  } catch (const std::exception& e) {
    std::cerr << "rill-loadtest: " << e.what() << "\n";
    return static_cast<int>(ExitCode::kRequestsFailed);
  }
  return exit_code(report);
}

}  // namespace
}  // namespace rill::loadtest

int main(int argc, char** argv) {
  auto parsed = rill::loadtest::parse_options(argc, argv);
  if (const int* code = std::get_if<int>(&parsed)) return *code;
  return rill::loadtest::run(std::get<rill::loadtest::LoadTestOptions>(parsed));
}

#include "clients/rill_loadtest/loadtest_options.h"

#include <cmath>
#include <iostream>
#include <limits>
#include <stdexcept>

#include <CLI/CLI.hpp>

#include "clients/common/host_port.h"

namespace rill::loadtest {
namespace {

// The flags as plain values before validation.
struct RawFlags {
  std::string grpc, http, rate = "inf", sweep, slo, targets, input_dist = "fixed",
                          output_dist = "fixed";
  std::string cache;
  int input_len = 32, output_len = 64, concurrency = 0;
  double temperature = 0;
};

void add_flags(CLI::App& app, LoadTestOptions& o, RawFlags& f) {
  app.add_option("--grpc", f.grpc, "rill-server's gRPC address, HOST:PORT");
  app.add_option("--http", f.http, "rill-server's HTTP address, HOST:PORT");
  app.add_option("--metrics-url", o.metrics_url,
                 "the server's /metrics (default http://HOST:PORT/metrics; HOST:8000 with --grpc)");
  app.add_option("--model", o.transport.model, "model name sent over HTTP (default: none)");
  app.add_option("--rate", f.rate, "open loop: requests per second, or inf (the default)");
  app.add_option("--burstiness", o.burstiness, "gamma shape of the arrival gaps (1: Poisson)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--constant", o.constant_arrivals, "fixed arrival gaps of 1/rate");
  app.add_option("--concurrency", f.concurrency, "closed loop: client slots")
      ->check(CLI::PositiveNumber);
  app.add_option("--ramp-up", o.ramp_up_s, "seconds over which rate/concurrency grow linearly")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--num-requests", o.num_requests, "requests per run (default 100)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--duration", o.duration_s, "seconds after which no request starts")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-requests", o.warmup_requests, "requests before the measured run")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--sweep", f.sweep, "rates (or concurrencies with --concurrency): 1,2,4");
  app.add_option("--saturation-throughput", o.saturation_throughput_ratio,
                 "sweep stops once achieved/offered request rate falls below this")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--saturation-ttft-factor", o.saturation_ttft_factor,
                 "sweep stops once median TTFT exceeds this times the first point's")
      ->check(CLI::PositiveNumber);
  app.add_option("--input-len", f.input_len, "prompt tokens (synthetic prompts)")
      ->check(CLI::PositiveNumber);
  app.add_option("--input-len-dist", f.input_dist, "fixed | uniform:R | normal:R");
  app.add_option("--output-len", f.output_len, "max_tokens of each request")
      ->check(CLI::PositiveNumber);
  app.add_option("--output-len-dist", f.output_dist, "fixed | uniform:R | normal:R");
  app.add_option("--prompts", o.workload.prompts_file, "prompts: text (one a line) or .jsonl");
  app.add_option("--shared-prefix-groups", o.workload.shared_prefix_groups,
                 "groups of requests sharing a system prompt (before --input-len tokens each)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--shared-prefix-len", o.workload.shared_prefix_len,
                 "tokens of each group's shared system prompt")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--turns", o.workload.turns, "requests per conversation (chat history)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--chat", o.workload.chat, "chat requests even for single turns");
  app.add_flag("--ignore-eos,!--no-ignore-eos", o.workload.ignore_eos,
               "generate exactly max_tokens (default on)");
  app.add_option("--temperature", f.temperature, "sampling temperature (default: the server's)");
  app.add_option("--cache", f.cache, "KV cache policy")
      ->check(CLI::IsMember({"full", "streaming"}));
  app.add_option("--sink", o.workload.sink, "attention sinks (--cache streaming)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--window", o.workload.window, "window tokens (--cache streaming)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--cancel-fraction", o.workload.cancel_fraction,
                 "fraction of requests cancelled mid-stream")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--slo", f.slo, "goodput objectives in ms: ttft:MS,tpot:MS,e2e:MS");
  app.add_option("--targets", f.targets,
                 "latency targets each request sends, in ms: ttft:MS,tpot:MS (0: none)");
  app.add_option("--streams", o.streams.count,
                 "long-lived streams decoding beside the load (their ITL before and during it)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--stream-prompt-len", o.streams.prompt_len, "prompt tokens of each stream")
      ->check(CLI::PositiveNumber);
  app.add_option("--stream-sink", o.streams.sink, "the streams' attention sinks")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--stream-window", o.streams.window, "the streams' window tokens")
      ->check(CLI::PositiveNumber);
  app.add_option("--stream-settle", o.streams.settle_s,
                 "seconds of steady decoding before the load starts")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--timeout", o.transport.timeout_s, "seconds per request (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--io-threads", o.transport.io_threads, "HTTP event-loop threads")
      ->check(CLI::PositiveNumber);
  app.add_option("--grpc-channels", o.transport.channels, "gRPC connections")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "random seed of arrivals and workload");
  app.add_option("--out", o.out_prefix, "write PREFIX.json and PREFIX.csv");
  app.add_option("--html", o.html_path, "write a self-contained HTML report");
  app.add_flag("--progress", o.progress, "progress bar on stderr even when it is not a terminal");
}

// Checks the combination of flags and fills the derived fields.
void finish_options(CLI::App& app, LoadTestOptions& o, const RawFlags& f) {
  if (f.grpc.empty() == f.http.empty())
    throw std::invalid_argument("exactly one of --grpc HOST:PORT or --http HOST:PORT is required");
  o.use_grpc = !f.grpc.empty();
  o.transport.target = o.use_grpc ? f.grpc : f.http;
  const auto [host, port] = rill::client::split_host_port(o.transport.target);
  if (o.metrics_url.empty())
    o.metrics_url = "http://" + host + ":" + (o.use_grpc ? "8000" : port) + "/metrics";
  if (app.count("--concurrency")) {
    if (app.count("--rate"))
      throw std::invalid_argument("--rate and --concurrency exclude each other");
    o.concurrency = f.concurrency;
  }
  if (f.rate == "inf") {
    o.rate = std::numeric_limits<double>::infinity();
  } else {
    size_t used = 0;
    try {
      o.rate = std::stod(f.rate, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != f.rate.size())
      throw std::invalid_argument("--rate: expected a number or inf, got '" + f.rate + "'");
  }
  if (!(o.rate > 0)) throw std::invalid_argument("--rate must be > 0 or inf");
  if (!f.sweep.empty()) o.sweep = parse_number_list(f.sweep);
  if (o.concurrency)
    for (double c : o.sweep)
      if (c != std::floor(c)) throw std::invalid_argument("--sweep: concurrencies are integers");
  if (o.num_requests == 0 && o.duration_s == 0) o.num_requests = 100;
  if (o.num_requests == 0 && !o.concurrency && std::isinf(o.rate) && o.sweep.empty())
    throw std::invalid_argument("--rate inf needs --num-requests");
  if (!f.slo.empty()) o.slo = parse_slo(f.slo);
  o.slo_spec = f.slo;
  if (!f.targets.empty()) {
    const Targets t = parse_targets(f.targets);
    o.workload.ttft_target_ms = t.ttft_ms;
    o.workload.tpot_target_ms = t.tpot_ms;
  }
  o.targets_spec = f.targets;
  o.workload.input_len = parse_length_dist(f.input_len, f.input_dist);
  o.workload.output_len = parse_length_dist(f.output_len, f.output_dist);
  if (app.count("--temperature")) o.workload.temperature = f.temperature;
  if ((o.workload.shared_prefix_groups > 0) != (o.workload.shared_prefix_len > 0))
    throw std::invalid_argument("--shared-prefix-groups and --shared-prefix-len go together");
  if (o.workload.shared_prefix_groups > 0 && !o.workload.prompts_file.empty())
    throw std::invalid_argument("--shared-prefix-groups makes synthetic prompts: no --prompts");
  o.workload.cache = f.cache;
  if (f.cache == "streaming" && o.workload.window <= 0)
    throw std::invalid_argument("--cache streaming needs --window");
  o.workload.seed = o.seed;
}

}  // namespace

std::vector<double> parse_number_list(const std::string& text) {
  std::vector<double> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || !(v > 0))
      throw std::invalid_argument("'" + item + "' in '" + text + "' is not a positive number");
    out.push_back(v);
    pos = comma + 1;
  }
  return out;
}

std::variant<LoadTestOptions, int> parse_options(int argc, char** argv) {
  CLI::App app{"rill-loadtest: load generator for rill-server (gRPC or HTTP/SSE)"};
  LoadTestOptions o;
  o.transport.timeout_s = 600;
  RawFlags f;
  add_flags(app, o, f);
  for (int i = 0; i < argc; ++i) o.argv.emplace_back(argv[i]);
  try {
    app.parse(argc, argv);
    finish_options(app, o, f);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : static_cast<int>(ExitCode::kBadFlags);
  } catch (const std::exception& e) {
    std::cerr << "rill-loadtest: " << e.what() << "\n";
    return static_cast<int>(ExitCode::kBadFlags);
  }
  return o;
}

}  // namespace rill::loadtest

#include "server/server_config.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/scheduler/latency_targets.h"
#include "engine/toolcall/family.h"
#include "engine/util/utf8.h"
#include "server/sampling_json.h"

namespace rill::server {
namespace {

using Target = std::variant<int*, int64_t*, double*, bool*, std::string*,
                            std::chrono::milliseconds*, SamplingOverrides*>;

// The values a numeric field may take (engine_options.h). Every size, count and duration has a
// maximum, so no setting can overflow the arithmetic that uses it (a deadline is
// `now + duration` in nanoseconds: about 292 years from boot).
using Range = OptionRange;

constexpr double kKiB = 1024.0, kMiB = kKiB * 1024, kGiB = kMiB * 1024, kTiB = kGiB * 1024;
constexpr double kMaxMs = static_cast<double>(kMaxSchedulerDuration.count());  // 30 days
constexpr Range kDuration{1, kMaxMs};
constexpr Range kFraction{0, 1};
// Latency targets (0: auto) are not deadlines: at most an hour (latency_targets.h).
constexpr Range kLatencyTarget{0, static_cast<double>(kMaxLatencyTarget.count())};

// One configurable value: its JSON place ("section.key" or "key"), its flag, its help and, for
// a number, its range (checked by validate_config, shown by --help, listed in docs/api.md).
struct Field {
  std::string path;  // JSON: "http_port", "engine.block_size", "scheduler.max_num_seqs"
  std::string flag;  // command line: "--http-port"
  std::string help;
  Target target;
  std::optional<Range> range = std::nullopt;
};

// The engine's rows come from its option table (engine_options.h), which the tools share.
void add_engine_fields(std::vector<Field>& out, EngineOptions& e) {
  for (const EngineOption& o : engine_option_table(e))
    out.push_back({std::string("engine.") + o.key, o.flag, o.help,
                   std::visit([](auto* p) -> Target { return p; }, o.target), o.range});
}

std::vector<Field> fields(ServerConfig& c) {
  SchedulerConfig& s = c.scheduler;
  std::vector<Field> out = {
      {"model", "--model", "model directory (Hugging Face) or llama2.c checkpoint", &c.model},
      {"served_model_name", "--served-model-name",
       "model name clients use (default: the directory name)", &c.served_model_name},
      {"host", "--host", "bind address of the HTTP and gRPC listeners", &c.host},
      {"http_port", "--http-port", "HTTP port (0: ephemeral)", &c.http_port, Range{0, 65535}},
      {"grpc_port", "--grpc-port", "gRPC port (0: ephemeral)", &c.grpc_port, Range{0, 65535}},
      {"http_threads", "--http-threads", "threads serving HTTP connections", &c.http_threads,
       Range{1, 256}},
      {"max_connections", "--max-connections",
       "open HTTP connections at most (fewer when RLIMIT_NOFILE is lower); at the cap the "
       "longest-idle one makes room, else 503",
       &c.max_connections, Range{1, 1'000'000}},
      {"max_body_bytes", "--max-body-bytes", "largest HTTP request body (else 413)",
       &c.max_body_bytes, Range{kKiB, kGiB}},
      {"max_buffered_body_bytes", "--max-buffered-body-bytes",
       "bytes of unfinished request bodies all HTTP connections may buffer (else 503)",
       &c.max_buffered_body_bytes, Range{kKiB, kTiB}},
      {"max_stream_buffer_bytes", "--max-stream-buffer-bytes",
       "unsent streamed bytes before a slow reader is cancelled", &c.max_stream_buffer_bytes,
       Range{4 * kKiB, kGiB}},
      {"max_prompt_tokens", "--max-prompt-tokens",
       "longest prompt accepted (0: the model's context)", &c.max_prompt_tokens, Range{0, kGiB}},
      {"drain_timeout_s", "--drain-timeout", "seconds to finish in-flight requests on SIGTERM",
       &c.drain_timeout_s, Range{0, 86400}},
      {"log_level", "--log-level", "trace, debug, info, warn, error, critical or off",
       &c.log_level},
      {"access_log", "--access-log", "one log line per request", &c.access_log},
      {"generation_config", "--generation-config",
       "sampling defaults: auto (the model's generation_config.json), none, or a file or directory",
       &c.generation_config},
      {"default_sampling", "--default-sampling",
       "sampling defaults over the model's, as a JSON object ('{\"temperature\": 0.7}')",
       &c.default_sampling},
      {"tool_call_parser", "--tool-call-parser",
       "tool-call format parsed from chat replies: auto (from the chat template), hermes, "
       "llama3_json, mistral, mistral_v11 or none",
       &c.tool_call_parser},
      {"scheduler.max_num_seqs", "--max-num-seqs",
       "sequences in one step (unset: 256 on CUDA, 64 on the CPU)", &s.max_num_seqs,
       Range{1, 65536}},
      {"scheduler.max_num_batched_tokens", "--max-num-batched-tokens",
       "tokens in one step (unset: 8192 on CUDA, 512 on the CPU; with --tpot-aware an upper bound)",
       &s.max_num_batched_tokens, Range{1, kMiB}},
      {"scheduler.tpot_aware", "--tpot-aware",
       "size each step's prefill by the step-cost model within the streams' TPOT targets",
       &s.tpot_aware},
      {"scheduler.ttft_target_ms", "--ttft-target-ms",
       "TTFT target of requests that set none (0: auto, 2x the unqueued TTFT)", &s.ttft_target,
       kLatencyTarget},
      {"scheduler.tpot_target_ms", "--tpot-target-ms",
       "TPOT target of requests that set none (0: auto, 2x the steady decode step)", &s.tpot_target,
       kLatencyTarget},
      {"scheduler.min_prefill_tokens", "--min-prefill-tokens",
       "prompt tokens a step feeds at least when some wait, whatever the targets",
       &s.min_prefill_tokens, Range{1, kMiB}},
      {"scheduler.warmup_prefill_tokens", "--warmup-prefill-tokens",
       "prompt tokens per step beside targeted streams while the step-cost model warms up",
       &s.warmup_prefill_tokens, Range{1, kMiB}},
      {"scheduler.max_queued_requests", "--max-queued-requests",
       "waiting requests before refusing (503)", &s.max_queued_requests, Range{1, kMiB}},
      {"scheduler.max_queued_prompt_tokens", "--max-queued-prompt-tokens",
       "waiting prompt tokens before refusing", &s.max_queued_prompt_tokens, Range{1, kTiB}},
      {"scheduler.queue_timeout_ms", "--queue-timeout-ms", "default longest wait to be scheduled",
       &s.queue_timeout, kDuration},
      {"scheduler.stall_timeout_ms", "--stall-timeout-ms",
       "work pending and no step this long: stalled", &s.stall_timeout, kDuration},
      {"scheduler.max_buffered_chunks", "--max-buffered-chunks",
       "untaken chunks before a slow consumer is cancelled", &s.max_buffered_chunks,
       Range{1, kMiB}},
      {"scheduler.max_sink", "--max-sink",
       "streaming cache: most sink tokens a request may ask for", &s.max_sink, Range{0, kMiB}},
      {"scheduler.max_window", "--max-window",
       "streaming cache: largest window a request may ask for", &s.max_window, Range{1, kGiB}},
      {"scheduler.aging_per_s", "--aging-per-s", "priority aging per second waited", &s.aging_per_s,
       Range{0, 1e6}},
      {"scheduler.policy", "--scheduling-policy",
       "scheduling policy: priority (with aging) or fcfs (arrival order)", &s.policy},
      {"scheduler.kv_watermark", "--kv-watermark",
       "share of KV blocks kept free for running sequences", &s.kv_watermark,
       Range{0, 1, false, /*max_open=*/true}},
      {"scheduler.enable_prefix_caching", "--prefix-caching",
       "automatic prefix caching: requests reuse the KV blocks of shared prefixes",
       &s.enable_prefix_caching},
      {"scheduler.max_sessions", "--max-sessions", "live sessions at most (POST /v1/sessions: 503)",
       &s.max_sessions, Range{0, kMiB}},
      {"scheduler.session_gpu_fraction", "--session-gpu-fraction",
       "share of the KV pool idle sessions may keep", &s.session_gpu_fraction, kFraction},
      {"scheduler.session_idle_ttl_ms", "--session-idle-ttl-ms",
       "idle sessions expire after this long", &s.session_idle_ttl, kDuration},
      {"scheduler.max_restores_per_step", "--max-restores-per-step",
       "offloaded session caches copied back per step", &s.max_restores_per_step, Range{1, 65536}},
  };
  // Engine rows after the top-level ones and before the scheduler's, as docs/api.md lists them.
  const auto scheduler_begin = std::find_if(
      out.begin(), out.end(), [](const Field& f) { return f.path.starts_with("scheduler."); });
  std::vector<Field> engine;
  add_engine_fields(engine, c.engine);
  out.insert(scheduler_begin, engine.begin(), engine.end());
  return out;
}

// 1099511627776 rather than 1.09951e+12: ranges and values read as they are typed.
std::string number_text(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15)
    return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// A value as given: integers exactly (9223372036854775807, not 9.22337e+18).
std::string value_text(const Target& t) {
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::chrono::milliseconds>)
          return std::to_string(p->count());
        else if constexpr (std::is_same_v<T, double>)
          return number_text(*p);
        else if constexpr (std::is_integral_v<T>)
          return std::to_string(*p);
        else
          return {};
      },
      t);
}

std::string range_text(const Range& r) {
  return option_range_text(r);
}

// A numeric field's value as a double (exact for every value within a range: at most 2^40).
double numeric_value(const Target& t) {
  return std::visit(
      [](auto* p) -> double {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::chrono::milliseconds>)
          return static_cast<double>(p->count());
        else if constexpr (std::is_arithmetic_v<T>)
          return static_cast<double>(*p);
        else
          return 0;
      },
      t);
}

[[noreturn]] void bad(const std::string& field, const std::string& why) {
  throw Error(ErrorCode::kInvalidArgument, field + ": " + why);
}

void set_from_json(const Field& f, const nlohmann::json& v) {
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (!v.is_string()) bad(f.path, "expected a string");
          *p = v.get<std::string>();
        } else if constexpr (std::is_same_v<T, SamplingOverrides>) {
          *p = sampling_overrides_from_json(v, f.path);
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean()) bad(f.path, "expected true or false");
          *p = v.get<bool>();
        } else if constexpr (std::is_same_v<T, double>) {
          if (!v.is_number()) bad(f.path, "expected a number");
          *p = v.get<double>();
        } else {
          if (!v.is_number_integer()) bad(f.path, "expected an integer");
          // An unsigned beyond int64 would wrap to a negative number.
          if (v.is_number_unsigned() &&
              v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            bad(f.path, "out of range");
          const auto x = v.get<int64_t>();
          if constexpr (std::is_same_v<T, int>) {
            if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
              bad(f.path, "out of range");
            *p = static_cast<int>(x);
          } else if constexpr (std::is_same_v<T, std::chrono::milliseconds>) {
            *p = std::chrono::milliseconds(x);
          } else {
            *p = x;
          }
        }
      },
      f.target);
}

// --default-sampling's JSON text: the table's fields and checks (sampling_json.h), whose
// FieldError (kInvalidArgument) names "default_sampling.<field>".
SamplingOverrides sampling_overrides_text(const std::string& text, const std::string& path) {
  nlohmann::json v;
  try {
    v = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    bad(path, std::string("expected a JSON object: ") + e.what());
  }
  return sampling_overrides_from_json(v, path);
}

// Every boolean flag has a "--no-" form that sets it false: --prefix-caching ->
// --no-prefix-caching.
std::string negated(const std::string& flag) {
  return "--no-" + flag.substr(2);
}

void check(bool ok, const std::string& field, const std::string& why) {
  if (!ok) bad(field, why);
}

void check_range(const Field& f) {
  const Range& r = *f.range;
  const double v = numeric_value(f.target);
  const bool ok = std::isfinite(v) && (r.min_open ? v > r.min : v >= r.min) &&
                  (r.max_open ? v < r.max : v <= r.max);
  check(ok, f.path, "must be in " + range_text(r) + " (got " + value_text(f.target) + ")");
}

// A configuration file's text: a regular, readable file of at most 1 MiB (a directory, a
// device or an unreadable file is refused with a message naming it).
constexpr std::uintmax_t kMaxConfigFileBytes = 1 << 20;

std::string read_config_text(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status))
    throw Error(ErrorCode::kNotFound, "config " + path + ": no such file");
  if (std::filesystem::is_directory(status))
    throw Error(ErrorCode::kInvalidArgument, "config " + path + ": is a directory, not a file");
  if (!std::filesystem::is_regular_file(status))
    throw Error(ErrorCode::kInvalidArgument, "config " + path + ": not a regular file");
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size > kMaxConfigFileBytes)
    throw Error(ErrorCode::kInvalidArgument, "config " + path + ": larger than " +
                                                 std::to_string(kMaxConfigFileBytes) + " bytes");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ErrorCode::kInvalidArgument,
                "config " + path + ": cannot open: " + std::strerror(errno));
  std::string text;
  try {
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kInvalidArgument, "config " + path + ": cannot read: " + e.what());
  }
  if (in.bad()) throw Error(ErrorCode::kInvalidArgument, "config " + path + ": cannot read");
  return text;
}

bool is_ip_address(const std::string& host) {
  unsigned char addr[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), addr) == 1 ||
         inet_pton(AF_INET6, host.c_str(), addr) == 1;
}

// A served name is echoed in every JSON answer, the metrics labels and the ready line.
constexpr size_t kMaxServedNameBytes = 256;

void check_served_name(const std::string& name) {
  check(name.size() <= kMaxServedNameBytes, "served_model_name",
        "must be at most " + std::to_string(kMaxServedNameBytes) + " bytes");
  check(utf8::is_valid(name), "served_model_name", "must be valid UTF-8");
  for (const char ch : name)
    check(static_cast<unsigned char>(ch) >= 0x20 && ch != 0x7f, "served_model_name",
          "must not contain control characters");
}

}  // namespace

ServerConfig load_config_file(const std::string& path) {
  const std::string text = read_config_text(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::kInvalidArgument, "config " + path + ": " + e.what());
  }
  if (!j.is_object())
    throw Error(ErrorCode::kInvalidArgument, "config " + path + ": expected a JSON object");
  ServerConfig c;
  const std::vector<Field> fs = fields(c);
  auto find = [&](const std::string& p) -> const Field* {
    for (const Field& f : fs)
      if (f.path == p) return &f;
    return nullptr;
  };
  for (const auto& [key, value] : j.items()) {
    if (key == "engine" || key == "scheduler") {
      if (!value.is_object()) bad(key, "expected an object");
      for (const auto& [k2, v2] : value.items()) {
        const Field* f = find(key + "." + k2);
        if (!f) bad(key + "." + k2, "unknown field");
        set_from_json(*f, v2);
        c.explicit_fields.insert(f->path);
      }
      continue;
    }
    if (key.starts_with("_")) continue;  // comments ("_comment": ...)
    const Field* f = find(key);
    if (!f) bad(key, "unknown field");
    set_from_json(*f, value);
    c.explicit_fields.insert(f->path);
  }
  return c;
}

void validate_config(const ServerConfig& config) {
  ServerConfig copy = config;  // fields() points into a configuration it may write
  for (const Field& f : fields(copy))
    if (f.range) check_range(f);
  const ServerConfig& c = config;
  check(!c.model.empty(), "model", "must not be empty");
  check_served_name(c.served_model_name);
  check(!c.generation_config.empty(), "generation_config",
        "must be auto, none, or a generation_config.json file or its directory");
  check(is_ip_address(c.host), "host", "must be an IPv4 or IPv6 address (got '" + c.host + "')");
  check(c.http_port == 0 || c.http_port != c.grpc_port, "grpc_port", "must differ from http_port");
  check(c.max_buffered_body_bytes >= c.max_body_bytes, "max_buffered_body_bytes",
        "must be at least max_body_bytes (" + std::to_string(c.max_body_bytes) + ")");
  static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  bool level_ok = false;
  for (const char* l : kLevels) level_ok |= c.log_level == l;
  check(level_ok, "log_level", "must be one of trace, debug, info, warn, error, critical, off");
  toolcall::ToolFamily family{};
  bool detect = false;
  check(toolcall::parse_tool_parser_flag(c.tool_call_parser, family, detect), "tool_call_parser",
        "must be auto, hermes, llama3_json, mistral, mistral_v11 or none");
  check(c.scheduler.policy == "priority" || c.scheduler.policy == "fcfs", "scheduler.policy",
        "must be priority or fcfs");
  EngineOptions e = c.engine;  // the table points into its argument
  for (const EngineOption& o : engine_option_table(e))
    if (const std::string why = engine_option_problem(o); !why.empty())
      bad(std::string("engine.") + o.key, why);
}

std::vector<ConfigFieldInfo> config_fields() {
  ServerConfig c;
  std::vector<ConfigFieldInfo> out;
  for (const Field& f : fields(c))
    out.push_back({f.path, f.flag, f.range ? range_text(*f.range) : std::string()});
  return out;
}

bool parse_command_line(int argc, char** argv, ServerConfig& config) {
  // The file first (wherever --config appears), then every flag on top of it.
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--config" && i + 1 < argc)
      config = load_config_file(argv[i + 1]);
    else if (a.starts_with("--config="))
      config = load_config_file(a.substr(9));
  }
  const std::vector<Field> fs = fields(config);
  CLI::App app{"rill-server: streaming LLM inference over gRPC and an OpenAI-compatible HTTP API"};
  app.option_defaults()->multi_option_policy(
      CLI::MultiOptionPolicy::TakeLast);  // the last flag wins
  std::string config_path;
  app.add_option("--config", config_path, "JSON configuration file (configs/); flags override it");
  for (const Field& f : fs) {
    const std::string help = f.range ? f.help + " " + range_text(*f.range) : f.help;
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, std::chrono::milliseconds>) {
            app.add_option_function<int64_t>(
                   f.flag, [p](const int64_t& v) { *p = std::chrono::milliseconds(v); }, help)
                ->default_str(std::to_string(p->count()));
          } else if constexpr (std::is_same_v<T, SamplingOverrides>) {
            app.add_option_function<std::string>(
                f.flag, [p, &f](const std::string& v) { *p = sampling_overrides_text(v, f.path); },
                help);
          } else if constexpr (std::is_same_v<T, bool>) {
            // `--flag` alone means true (CLI11 reads the missing value as default_str, and
            // the variable keeps its default when the flag is absent); `--flag false` too.
            app.add_option(f.flag, *p, help + " (true/false; alone: true)")
                ->expected(0, 1)
                ->default_str("true");
            app.add_flag_callback(
                negated(f.flag), [p] { *p = false; }, "same as " + f.flag + " false");
          } else {
            app.add_option(f.flag, *p, help)->capture_default_str();
          }
        },
        f.target);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return false;
  } catch (const CLI::ParseError& e) {
    throw Error(ErrorCode::kInvalidArgument, e.what());
  }
  for (const Field& f : fs)
    if (app.get_option(f.flag)->count() > 0 ||
        (std::holds_alternative<bool*>(f.target) && app.get_option(negated(f.flag))->count() > 0))
      config.explicit_fields.insert(f.path);
  return true;
}

void apply_scheduler_defaults(ServerConfig& config, const SchedulerConfig& defaults) {
  ServerConfig d;
  d.scheduler = defaults;
  const std::vector<Field> to = fields(config), from = fields(d);
  for (size_t i = 0; i < to.size(); ++i) {
    if (!to[i].path.starts_with("scheduler.") || config.explicit_fields.count(to[i].path)) continue;
    std::visit([&](auto* dst) { *dst = *std::get<decltype(dst)>(from[i].target); }, to[i].target);
  }
}

namespace {

nlohmann::json field_value(const Field& f) {
  return std::visit(
      [](auto* p) -> nlohmann::json {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::chrono::milliseconds>)
          return p->count();
        else if constexpr (std::is_same_v<T, SamplingOverrides>)
          return sampling_overrides_json(*p);
        else
          return *p;
      },
      f.target);
}

// Invalid UTF-8 in a path is written as U+FFFD rather than throwing from the log line.
std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string config_to_json(const ServerConfig& config, bool unset_scheduler) {
  ServerConfig c = config;
  nlohmann::json j = nlohmann::json::object();
  for (const Field& f : fields(c)) {
    const auto dot = f.path.find('.');
    if (dot == std::string::npos) {
      j[f.path] = field_value(f);
      continue;
    }
    const std::string section = f.path.substr(0, dot);
    if (!unset_scheduler && section == "scheduler" && !config.explicit_fields.count(f.path)) {
      if (!j.contains(section)) j[section] = nlohmann::json::object();
      continue;
    }
    j[section][f.path.substr(dot + 1)] = field_value(f);
  }
  return dump(j);
}

std::string scheduler_to_json(const ServerConfig& config) {
  ServerConfig c = config;
  nlohmann::json j = nlohmann::json::object();
  for (const Field& f : fields(c))
    if (f.path.starts_with("scheduler.")) j[f.path.substr(10)] = field_value(f);
  return dump(j);
}

}  // namespace rill::server

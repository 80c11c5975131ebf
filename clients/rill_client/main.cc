// rill-client: streams a completion or a chat from rill-server over gRPC or HTTP, then prints
// usage and timings (stderr), or one JSON object (--json) for scripts. Exit codes: ExitCode.
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "clients/rill_client/client_options.h"
#include "clients/rill_client/transport.h"

namespace rill::client {
namespace {

using Clock = std::chrono::steady_clock;

struct ClientTimings {
  double ttft_s = 0;  // request sent -> first token
  double tpot_s = 0;  // mean time per output token after the first
  double e2e_s = 0;   // request sent -> end of the stream
};

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

void print_summary(const Generation& g, const ClientTimings& t) {
  std::fprintf(stderr,
               "\n[finish_reason=%s prompt_tokens=%lld completion_tokens=%lld ttft=%.3fs "
               "tpot=%.4fs e2e=%.3fs]\n",
               g.finish_reason.c_str(), static_cast<long long>(g.prompt_tokens),
               static_cast<long long>(g.completion_tokens), t.ttft_s, t.tpot_s, t.e2e_s);
  if (g.server_timings) {
    const ServerTimings& s = *g.server_timings;
    std::fprintf(stderr, "[server: queue=%.3fs ttft=%.3fs tpot=%.4fs e2e=%.3fs]\n", s.queue_s,
                 s.ttft_s, s.tpot_s, s.e2e_s);
  }
}

void print_json(const Generation& g, const ClientTimings& t, bool grpc) {
  nlohmann::json j = {
      {"text", g.text},
      {"finish_reason", g.finish_reason},
      {"usage",
       {{"prompt_tokens", g.prompt_tokens},
        {"completion_tokens", g.completion_tokens},
        {"total_tokens", g.prompt_tokens + g.completion_tokens}}},
      {"timings", {{"ttft_s", t.ttft_s}, {"tpot_s", t.tpot_s}, {"e2e_s", t.e2e_s}}},
  };
  if (grpc) j["token_ids"] = g.token_ids;
  if (g.server_timings) {
    const ServerTimings& s = *g.server_timings;
    j["server_timings"] = {
        {"queue_s", s.queue_s}, {"ttft_s", s.ttft_s}, {"tpot_s", s.tpot_s}, {"e2e_s", s.e2e_s}};
  }
  std::cout << j.dump() << std::endl;
}

// Sends one request, streams its text (unless --json), prints the summary; returns the text.
std::string run_one(const ClientOptions& o, const GenerateInput& input) {
  const Clock::time_point start = Clock::now();
  std::optional<Clock::time_point> first, last;
  const auto on_chunk = [&](std::string_view text) {
    last = Clock::now();
    if (!first) first = last;
    if (!o.json && !text.empty()) {
      std::cout << text;
      std::cout.flush();
    }
  };
  const Generation g =
      o.use_grpc ? grpc_generate(o, input, on_chunk) : http_generate(o, input, on_chunk);
  ClientTimings t;
  t.e2e_s = seconds(Clock::now() - start);
  if (first) {
    t.ttft_s = seconds(*first - start);
    if (g.completion_tokens > 1)
      t.tpot_s = seconds(*last - *first) / static_cast<double>(g.completion_tokens - 1);
  }
  if (o.json) {
    print_json(g, t, o.use_grpc);
  } else {
    std::cout.flush();
    print_summary(g, t);
  }
  return g.text;
}

int run(const ClientOptions& o) {
  if (!o.chat) {
    run_one(o, GenerateInput{&*o.prompt, nullptr});
    return 0;
  }
  std::vector<ChatMessage> messages;
  if (o.system) messages.push_back({"system", *o.system});
  if (o.prompt) {
    messages.push_back({"user", *o.prompt});
    run_one(o, GenerateInput{nullptr, &messages});
    return 0;
  }
  // Interactive: one user message a line, the history kept, until EOF.
  const bool tty = isatty(STDIN_FILENO) != 0;
  std::string line;
  while (true) {
    if (tty) std::cerr << "> " << std::flush;
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    messages.push_back({"user", line});
    const std::string answer = run_one(o, GenerateInput{nullptr, &messages});
    if (!o.json) std::cout << std::endl;  // one answer a line block; single shots end as streamed
    messages.push_back({"assistant", answer});
  }
  return 0;
}

}  // namespace
}  // namespace rill::client

int main(int argc, char** argv) {
  using namespace rill::client;
  auto parsed = parse_options(argc, argv);
  if (const int* code = std::get_if<int>(&parsed)) return *code;
  try {
    return run(std::get<ClientOptions>(parsed));
  } catch (const ClientError& e) {
    std::cout.flush();
    std::cerr << "rill-client: " << e.what() << std::endl;
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "rill-client: " << e.what() << std::endl;
    return static_cast<int>(ExitCode::kClientError);
  }
}

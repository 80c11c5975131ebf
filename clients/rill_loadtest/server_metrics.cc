#include "clients/rill_loadtest/server_metrics.h"

#include <cmath>
#include <stdexcept>

#include "clients/rill_loadtest/sync_http.h"

namespace rill::loadtest {
namespace {

std::optional<double> mean_delta(const PromSnapshot& a, const PromSnapshot& b,
                                 const std::string& histogram) {
  const double count = b.sum(histogram + "_count") - a.sum(histogram + "_count");
  if (count <= 0) return std::nullopt;
  return (b.sum(histogram + "_sum") - a.sum(histogram + "_sum")) / count;
}

std::string pair_text(double client, double server) {
  return "client " + std::to_string(static_cast<int64_t>(std::llround(client))) + ", server " +
         std::to_string(static_cast<int64_t>(std::llround(server)));
}

}  // namespace

std::optional<PromSnapshot> scrape_metrics(const std::string& url, std::string& error) {
  try {
    const HttpReply reply = http_call("GET", url, "");
    if (reply.status != 200) {
      error = "GET " + url + ": HTTP " + std::to_string(reply.status);
      return std::nullopt;
    }
    return PromSnapshot::parse(reply.body);
  } catch (const std::exception& e) {
    error = e.what();
    return std::nullopt;
  }
}

ServerDelta server_delta(const PromSnapshot& before, const PromSnapshot& after) {
  ServerDelta d;
  for (const std::string& reason : after.label_values("rill_requests_total", "finished_reason")) {
    const std::map<std::string, std::string> match = {{"finished_reason", reason}};
    d.requests_by_reason[reason] =
        after.sum("rill_requests_total", match) - before.sum("rill_requests_total", match);
  }
  d.requests = after.sum("rill_requests_total") - before.sum("rill_requests_total");
  d.generation_tokens =
      after.sum("rill_generation_tokens_total") - before.sum("rill_generation_tokens_total");
  d.prompt_tokens = after.sum("rill_prompt_tokens_total") - before.sum("rill_prompt_tokens_total");
  d.rejected =
      after.sum("rill_requests_rejected_total") - before.sum("rill_requests_rejected_total");
  d.evicted_tokens =
      after.sum("rill_kv_evicted_tokens_total") - before.sum("rill_kv_evicted_tokens_total");
  d.prefix_cache_queries =
      after.sum("rill_prefix_cache_queries_total") - before.sum("rill_prefix_cache_queries_total");
  d.prefix_cache_hits =
      after.sum("rill_prefix_cache_hits_total") - before.sum("rill_prefix_cache_hits_total");
  d.prefix_cache_evictions = after.sum("rill_prefix_cache_evictions_total") -
                             before.sum("rill_prefix_cache_evictions_total");
  d.ttft_mean_s = mean_delta(before, after, "rill_time_to_first_token_seconds");
  d.tpot_mean_s = mean_delta(before, after, "rill_time_per_output_token_seconds");
  d.itl_mean_s = mean_delta(before, after, "rill_inter_token_latency_seconds");
  d.e2e_mean_s = mean_delta(before, after, "rill_e2e_request_latency_seconds");
  d.itl_p50_s = histogram_quantile(before, after, "rill_inter_token_latency_seconds", 0.5);
  d.itl_p99_s = histogram_quantile(before, after, "rill_inter_token_latency_seconds", 0.99);
  d.running_before = before.sum("rill_requests_running");
  d.running_after = after.sum("rill_requests_running");
  return d;
}

std::vector<ConsistencyCheck> check_consistency(const RunSummary& client, const ServerDelta& server,
                                                bool background_streams) {
  std::vector<ConsistencyCheck> checks;
  std::map<std::string, double> expected;
  for (const auto& [reason, n] : client.finish_reasons) expected[reason] += static_cast<double>(n);
  if (client.cancelled > 0) expected["cancelled"] += static_cast<double>(client.cancelled);
  for (const auto& [reason, n] : server.requests_by_reason)
    if (n != 0 && !expected.count(reason)) expected[reason] = 0;
  for (const auto& [reason, n] : expected) {
    const auto it = server.requests_by_reason.find(reason);
    const double got = it == server.requests_by_reason.end() ? 0 : it->second;
    checks.push_back({"requests_" + reason, got == n, pair_text(n, got)});
  }
  const double tokens = static_cast<double>(client.output_tokens_all);
  const bool tokens_ok = client.cancelled > 0 || background_streams
                             ? server.generation_tokens >= tokens
                             : server.generation_tokens == tokens;
  checks.push_back({"generation_tokens", tokens_ok, pair_text(tokens, server.generation_tokens)});
  checks.push_back({"running_back_to_baseline", server.running_after == server.running_before,
                    "before " + std::to_string(std::llround(server.running_before)) + ", after " +
                        std::to_string(std::llround(server.running_after))});
  return checks;
}

}  // namespace rill::loadtest

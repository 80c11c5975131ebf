// What each request of a run asks: prompts (synthetic, or from a text / JSONL file), groups
// sharing a system prompt, output lengths, multi-turn histories, the cache policy and which
// requests the client cancels.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "clients/rill_loadtest/length_dist.h"
#include "clients/rill_loadtest/request.h"

namespace rill::loadtest {

struct WorkloadConfig {
  std::string prompts_file;  // "": synthetic prompts; *.jsonl: JSON lines; else one per line
  LengthDist input_len, output_len;
  // Shared-prefix groups (SGLang's generated-shared-prefix): each request belongs to one of
  // `shared_prefix_groups` groups, whose common system prompt of `shared_prefix_len` tokens
  // comes before the request's own question of input_len tokens. 0 groups: none.
  int shared_prefix_groups = 0;
  int shared_prefix_len = 0;
  int turns = 1;      // requests per conversation
  bool chat = false;  // chat messages even for single turns (always so when turns > 1)
  bool ignore_eos = true;
  std::optional<double> temperature;
  std::string cache;  // "", "full", "streaming"
  int32_t sink = 0, window = 0;
  double cancel_fraction = 0;  // of requests, cancelled after a random number of tokens
  std::optional<int> ttft_target_ms, tpot_target_ms;  // latency targets sent (--targets)
  unsigned long long seed = 0;
};

/// One prompt of a file: a completion prompt or a chat history.
struct PromptEntry {
  std::string prompt;
  std::vector<ChatMessage> messages;  // set for a JSONL {"messages": [...]} line
};

/// Reads a prompts file: JSONL ({"prompt": "..."} or {"messages": [...]} per line) when the
/// name ends in .jsonl, else one prompt per non-empty line. Throws std::runtime_error.
std::vector<PromptEntry> read_prompts(const std::string& path);

/// Builds requests. Not thread-safe: the runner calls it from its one thread.
class Workload {
 public:
  /// `token_pool` is a tokenized passage of natural text (synthetic prompts are slices of it);
  /// `words` the same passage's words with `tokens_per_word` measured on it (synthetic chat
  /// text is drawn from them).
  Workload(WorkloadConfig config, std::vector<PromptEntry> prompts, std::vector<int32_t> token_pool,
           std::vector<std::string> words, double tokens_per_word);

  /// The first request of a conversation.
  RequestSpec first_turn();

  /// The request that follows `previous` in its conversation, given the answer it got.
  RequestSpec next_turn(const RequestSpec& previous, const std::string& answer);

  /// A long-lived stream (--streams): `prompt_len` synthetic prompt tokens, a cache of `sink`
  /// sinks + `window`, EOS ignored and max_tokens at the server's limit (2^24), so it decodes
  /// until the client stops it; no latency targets (the server's defaults).
  RequestSpec long_stream(int prompt_len, int sink, int window);

  const WorkloadConfig& config() const { return config_; }

 private:
  RequestSpec base_spec();
  std::string synthetic_text(int tokens, std::mt19937_64& rng);
  std::vector<int32_t> synthetic_ids(int tokens, std::mt19937_64& rng);
  std::string next_user_text();

  WorkloadConfig config_;
  std::vector<PromptEntry> prompts_;
  std::vector<int32_t> token_pool_;
  std::vector<std::string> words_;
  double tokens_per_word_;
  size_t next_prompt_ = 0;
  std::mt19937_64 rng_;
  // Shared-prefix groups: each group's system prompt, as token ids and as text.
  std::vector<std::vector<int32_t>> group_ids_;
  std::vector<std::string> group_text_;
};

/// A passage of plain English written for rill-loadtest, the source of synthetic prompts.
const std::string& synthetic_passage();

}  // namespace rill::loadtest

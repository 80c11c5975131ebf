// Helpers of the grammar tests: a small vocabulary and an independent viability check (a fresh
// Earley parser over the whole byte string, no token tables).
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/grammar/constraint.h"
#include "engine/grammar/earley.h"

namespace rill::grammar::testing {

/// Ids 0 (EOS) and 1 special; then every single byte; then `extra` random tokens over an
/// alphabet of JSON punctuation, letters, digits, spaces and split UTF-8 sequences.
inline std::shared_ptr<const Vocabulary> small_vocab(uint32_t seed, int extra) {
  std::vector<std::string> bytes{"", ""};
  std::vector<uint8_t> special{1, 1};
  for (int b = 0; b < 256; ++b) {
    bytes.emplace_back(1, static_cast<char>(b));
    special.push_back(0);
  }
  static const std::vector<std::string> kPieces = {
      "{",  "}",    "[",     "]",    "\"",   ":",    ",",        " ",  "\n", "a", "b",
      "c",  "x",    "y",     "z",    "0",    "1",    "5",        "9",  "-",  ".", "e",
      "\\", "true", "false", "null", "\xC3", "\xA9", "\xC3\xA9", "ab", "d"};
  std::mt19937 rng(seed);
  for (int i = 0; i < extra; ++i) {
    std::string t;
    const int n = 2 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) t += kPieces[rng() % kPieces.size()];
    bytes.push_back(t);
    special.push_back(0);
  }
  return std::make_shared<const Vocabulary>(std::move(bytes), std::move(special),
                                            std::vector<int32_t>{0});
}

/// True when `text` is a prefix of some sentence of the grammar.
inline bool viable(const CompiledGrammar& g, const std::string& text) {
  EarleyParser p(g, 1 << 16);
  p.reset(g.rule_start(g.root_rule()));
  for (char c : text)
    if (!p.push(static_cast<uint8_t>(c))) return false;
  return true;
}

/// True when `text` is a sentence of the grammar.
inline bool complete(const CompiledGrammar& g, const std::string& text) {
  EarleyParser p(g, 1 << 16);
  p.reset(g.rule_start(g.root_rule()));
  for (char c : text)
    if (!p.push(static_cast<uint8_t>(c))) return false;
  return p.exited();
}

inline std::shared_ptr<const CompiledConstraint> compile(ConstraintKind kind,
                                                         const std::string& text,
                                                         std::shared_ptr<const Vocabulary> v,
                                                         const GrammarLimits& limits = {}) {
  ConstraintSpec s;
  s.kind = kind;
  s.text = text;
  return compile_constraint(s, std::move(v), limits);
}

}  // namespace rill::grammar::testing

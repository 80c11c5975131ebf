#include "engine/serving/stop_filter.h"

#include <algorithm>

namespace rill {

StopFilter::StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

void StopFilter::add(int32_t id, std::string_view piece, const SampleLogprobs* logprobs) {
  if (matched_) return;
  text_ += piece;
  pending_.push_back(
      {id, true, logprobs ? std::optional<SampleLogprobs>(*logprobs) : std::nullopt, text_.size()});
  scan();
}

void StopFilter::add_text(std::string_view piece) {
  if (matched_ || piece.empty()) return;
  text_ += piece;
  pending_.push_back({0, false, std::nullopt, text_.size()});
  scan();
}

size_t StopFilter::held_suffix() const {
  size_t best = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, text_.size());
    for (size_t len = max_len; len > best; --len)
      if (text_.compare(text_.size() - len, len, s, 0, len) == 0) {
        best = len;
        break;
      }
  }
  return best;
}

// Decides how many pending tokens (and bytes of text) can go: all of them without stop strings;
// up to a match; else those whose text ends before the held-back suffix.
void StopFilter::scan() {
  if (stops_.empty()) {
    ready_tokens_ = pending_.size();
    ready_bytes_ = text_.size();
    return;
  }
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t p = text_.find(s);
    if (p != std::string::npos && p < cut) {
      cut = p;
      matched_ = s;
    }
  }
  if (cut != std::string::npos) {
    size_t n = 0, start = 0;
    // Tokens that start before the cut, and the one whose text starts at it.
    while (n < pending_.size() && (start < cut || (start == cut && pending_[n].end > cut)))
      start = pending_[n++].end;
    ready_tokens_ = n;
    ready_bytes_ = cut;
    return;
  }
  const size_t safe = text_.size() - held_suffix();
  size_t n = 0;
  while (n < pending_.size() && pending_[n].end <= safe) ++n;
  ready_tokens_ = n;
  ready_bytes_ = n ? pending_[n - 1].end : 0;
}

void StopFilter::take_ready(TokenChunk& out) {
  for (size_t i = 0; i < ready_tokens_; ++i) {
    if (!pending_[i].has_id) continue;
    out.ids.push_back(pending_[i].id);
    if (pending_[i].logprobs) out.logprobs.push_back(std::move(*pending_[i].logprobs));
  }
  out.text.append(text_, 0, ready_bytes_);
  if (matched_) {
    pending_.clear();
    text_.clear();
  } else {
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(ready_tokens_));
    text_.erase(0, ready_bytes_);
    for (Pending& p : pending_) p.end -= ready_bytes_;
  }
  ready_tokens_ = ready_bytes_ = 0;
}

void StopFilter::take_rest(TokenChunk& out) {
  if (matched_) return take_ready(out);
  ready_tokens_ = pending_.size();
  ready_bytes_ = text_.size();
  take_ready(out);
}

}  // namespace rill

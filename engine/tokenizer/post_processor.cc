#include "engine/tokenizer/post_processor.h"

namespace rill {

void TemplatePostProcessor::process(std::vector<int32_t>& ids, bool add_special_tokens) const {
  if (!add_special_tokens) return;
  std::vector<int32_t> out;
  out.reserve(ids.size() + 4);
  for (const Item& item : single_) {
    if (item.is_sequence) {
      out.insert(out.end(), ids.begin(), ids.end());
    } else {
      out.insert(out.end(), item.ids.begin(), item.ids.end());
    }
  }
  ids = std::move(out);
}

void WrapPostProcessor::process(std::vector<int32_t>& ids, bool add_special_tokens) const {
  if (!add_special_tokens) return;
  ids.insert(ids.begin(), cls_id_);
  ids.push_back(sep_id_);
}

void SequencePostProcessor::process(std::vector<int32_t>& ids, bool add_special_tokens) const {
  for (const auto& step : steps_) step->process(ids, add_special_tokens);
}

}  // namespace rill

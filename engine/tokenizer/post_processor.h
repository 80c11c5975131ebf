// Post-processors of Hugging Face tokenizers (processors/*), reduced to what matters for a
// single sequence of ids: the special tokens that wrap it when add_special_tokens is true.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace rill {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual void process(std::vector<int32_t>& ids, bool add_special_tokens) const = 0;
};

/// TemplateProcessing's "single" template: each item is either the sequence ($A) or the ids
/// of a special token.
class TemplatePostProcessor : public PostProcessor {
 public:
  struct Item {
    bool is_sequence;
    std::vector<int32_t> ids;  // special token ids (empty for the sequence)
  };
  explicit TemplatePostProcessor(std::vector<Item> single) : single_(std::move(single)) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override;

 private:
  std::vector<Item> single_;
};

/// RobertaProcessing / BertProcessing: cls + ids + sep.
class WrapPostProcessor : public PostProcessor {
 public:
  WrapPostProcessor(int32_t cls_id, int32_t sep_id) : cls_id_(cls_id), sep_id_(sep_id) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override;

 private:
  int32_t cls_id_;
  int32_t sep_id_;
};

class SequencePostProcessor : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override;

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

}  // namespace rill

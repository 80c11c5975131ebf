// The structured-output fields of GenerateRequest and SessionTurn (the `constraint` oneof,
// fields 20-23) and the call tool_choice forces, onto a Request, checked as HTTP checks them
// (constraint_fields.h): a bad one is a FieldError naming the field.
#pragma once

#include <optional>

#include "engine/serving/serving_engine.h"
#include "engine/toolcall/family.h"
#include "engine/toolcall/tools.h"
#include "server/constraint_fields.h"

namespace rill::server {

inline constexpr size_t kMaxGrpcChoices = 4096;

template <typename Message>
std::optional<FieldConstraint> constraint_from_pb(const Message& in) {
  FieldConstraint c;
  switch (in.constraint_case()) {
    case Message::kJsonSchema:
      c.field = "json_schema";
      c.constraint.spec.kind = grammar::ConstraintKind::kJsonSchema;
      c.constraint.spec.text = in.json_schema();
      return c;
    case Message::kRegex:
      c.field = "regex";
      c.constraint.spec.kind = grammar::ConstraintKind::kRegex;
      c.constraint.spec.text = in.regex();
      return c;
    case Message::kChoice:
      c.field = "choice";
      if (in.choice().choices_size() == 0 ||
          in.choice().choices_size() > static_cast<int>(kMaxGrpcChoices))
        throw FieldError("choice",
                         "'choice' must hold 1 to " + std::to_string(kMaxGrpcChoices) + " strings");
      c.constraint.spec.kind = grammar::ConstraintKind::kChoice;
      c.constraint.spec.choices.assign(in.choice().choices().begin(), in.choice().choices().end());
      return c;
    case Message::kGrammar:
      c.field = "grammar";
      c.constraint.spec.kind = grammar::ConstraintKind::kGrammar;
      c.constraint.spec.text = in.grammar();
      return c;
    default:
      return std::nullopt;
  }
}

/// Sets r.constraint from the message's constraint or the call `tools` forces (not both).
template <typename Message>
void apply_constraint_fields(const Message& in, const toolcall::ToolSpec& tools,
                             toolcall::ToolFamily family, ServingEngine& engine, Request& r) {
  std::optional<FieldConstraint> c = constraint_from_pb(in);
  if (auto call = tool_call_constraint(family, tools, engine.tokenizer())) {
    if (c)
      throw FieldError(c->field, "at most one constraint per request: '" + c->field +
                                     "' and a tool_choice that requires a call were both given");
    c = std::move(call);
  }
  if (!c) return;
  check_field_constraint(engine, *c);
  r.constraint = std::move(c->constraint);
}

}  // namespace rill::server

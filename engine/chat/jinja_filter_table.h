// The filter table, filled by the files that implement filters: jinja_filters.cc (values,
// numbers, strings), jinja_filters_seq.cc (sequences and mappings) and jinja_filters_text.cc
// (text and markup). Internal to engine/chat.
#pragma once

#include <string>
#include <unordered_map>

#include "engine/chat/jinja_value.h"

namespace rill::jinja {

using FilterFn = Value (*)(const Value&, const CallArgs&);
using FilterTable = std::unordered_map<std::string, FilterFn>;

void add_sequence_filters(FilterTable& table);
void add_text_filters(FilterTable& table);

/// jinja2's make_attrgetter: "a.b.0" looked up part by part with getitem semantics (a key
/// first, then an attribute; digit parts index lists); an int attribute indexes directly.
/// Undefined parts give `fallback` when it is not undefined.
Value lookup_path(const Value& item, const Value& attribute, const Value& fallback = Value());

/// Python's len(); undefined counts as 0, as jinja2's length filter does.
int64_t length_of(const Value& v);

}  // namespace rill::jinja

// Jinja filters on sequences and mappings (jinja2 3.1 semantics): items, list, map, select,
// reject, selectattr, rejectattr, unique, sort, dictsort, groupby, slice, batch, reverse,
// min, max, sum.
#include <algorithm>

#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_filter_table.h"
#include "engine/chat/jinja_ops.h"

namespace rill::jinja {
namespace {

// A bound on the number of slices / batch padding a template may ask for.
constexpr int64_t kMaxPieces = 1'000'000;

// jinja2's ignore_case postprocessing: strings compare lowercased.
Value ignore_case(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.as_string()));
  return v;
}

// The key an item is compared by: itself, or its attribute path.
Value key_of(const Value& item, const Value& attribute, bool case_sensitive) {
  const Value k =
      attribute.is_none() || attribute.is_undefined() ? item : lookup_path(item, attribute);
  return ignore_case(k, case_sensitive);
}

// Python's sorted(items, key=..., reverse=...): stable, and reverse keeps equal items in order.
void sort_by(ValueList& items, const ValueList& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const int c = compare_values(keys[x], keys[y]);
    return reverse ? c > 0 : c < 0;
  });
  ValueList sorted;
  sorted.reserve(items.size());
  for (size_t i : order) sorted.push_back(std::move(items[i]));
  items = std::move(sorted);
}

Value f_items(const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::lazy({});
  if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::list({k, x}, true));
  return Value::lazy(std::move(out));
}

Value f_list(const Value& v, const CallArgs&) {
  return Value::list(v.iterate());
}

Value f_map(const Value& v, const CallArgs& a) {
  ValueList out;
  if (a.args.empty()) {
    Value attribute, fallback;
    for (const auto& [k, x] : a.kwargs) {
      if (k == "attribute")
        attribute = x;
      else if (k == "default")
        fallback = x.is_none() ? Value() : x;
      else
        fail("Unexpected keyword argument '" + k + "'");
    }
    if (attribute.is_undefined()) fail("map requires a filter argument");
    for (const Value& item : v.iterate()) out.push_back(lookup_path(item, attribute, fallback));
    return Value::lazy(std::move(out));
  }
  const std::string name = a.args[0].str();
  if (!is_filter(name)) fail("No filter named '" + name + "'.");
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (const Value& item : v.iterate()) out.push_back(apply_filter(name, item, rest));
  return Value::lazy(std::move(out));
}

// select / reject / selectattr / rejectattr.
Value select_impl(const Value& v, const CallArgs& a, bool by_attr, bool keep) {
  size_t next = 0;
  Value attribute;
  if (by_attr) {
    if (a.args.empty()) fail("Missing parameter for attribute name");
    attribute = a.args[next++];
  }
  std::string test;
  if (next < a.args.size()) test = a.args[next++].str();
  const bool has_test = by_attr ? a.args.size() > 1 : !a.args.empty();
  if (has_test && !is_test(test)) fail("No test named '" + test + "'.");
  CallArgs test_args;
  test_args.args.assign(a.args.begin() + static_cast<std::ptrdiff_t>(next), a.args.end());
  test_args.kwargs = a.kwargs;
  ValueList out;
  for (const Value& item : v.iterate()) {
    const Value x = by_attr ? lookup_path(item, attribute) : item;
    const bool pass = has_test ? apply_test(test, x, test_args) : x.truthy();
    if (pass == keep) out.push_back(item);
  }
  return Value::lazy(std::move(out));
}
Value f_select(const Value& v, const CallArgs& a) {
  return select_impl(v, a, false, true);
}
Value f_reject(const Value& v, const CallArgs& a) {
  return select_impl(v, a, false, false);
}
Value f_selectattr(const Value& v, const CallArgs& a) {
  return select_impl(v, a, true, true);
}
Value f_rejectattr(const Value& v, const CallArgs& a) {
  return select_impl(v, a, true, false);
}

Value f_unique(const Value& v, const CallArgs& a) {
  const bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
  const Value attribute = a.get(1, "attribute", Value(None{}));
  ValueList out, seen;
  for (const Value& item : v.iterate()) {
    const Value k = key_of(item, attribute, case_sensitive);
    k.check_hashable();  // Python collects the keys in a set
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return s.equals(k); }))
      continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return Value::lazy(std::move(out));
}

// sort(reverse, case_sensitive, attribute): "a,b" sorts by a, then b.
Value f_sort(const Value& v, const CallArgs& a) {
  const bool reverse = a.get(0, "reverse", Value(false)).truthy();
  const bool case_sensitive = a.get(1, "case_sensitive", Value(false)).truthy();
  const Value attribute = a.get(2, "attribute", Value(None{}));
  ValueList attributes;
  if (attribute.is_string()) {
    const std::string& spec = attribute.as_string();
    for (size_t start = 0;;) {
      const size_t comma = spec.find(',', start);
      attributes.emplace_back(
          spec.substr(start, comma == std::string::npos ? comma : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else {
    attributes.push_back(attribute);
  }
  ValueList items = v.iterate();
  ValueList keys;
  keys.reserve(items.size());
  for (const Value& item : items) {
    ValueList parts;
    for (const Value& attr : attributes) parts.push_back(key_of(item, attr, case_sensitive));
    keys.push_back(Value::list(std::move(parts)));
  }
  sort_by(items, keys, reverse);
  return Value::list(std::move(items));
}

// dictsort(case_sensitive, by='key'|'value', reverse): the items as (key, value) tuples.
Value f_dictsort(const Value& v, const CallArgs& a) {
  const bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
  const std::string by = a.get(1, "by", Value("key")).str();
  const bool reverse = a.get(2, "reverse", Value(false)).truthy();
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  if (!v.is_dict()) fail("'" + v.type_name() + "' object has no attribute 'items'");
  ValueList items, keys;
  for (const auto& [k, x] : v.as_dict().items) {
    items.push_back(Value::list({k, x}, true));
    keys.push_back(ignore_case(by == "key" ? k : x, case_sensitive));
  }
  sort_by(items, keys, reverse);
  return Value::list(std::move(items));
}

// groupby(attribute, default, case_sensitive): (grouper, list) tuples in key order; without
// case_sensitive the grouper is the first item's own value, not the lowercased key.
Value f_groupby(const Value& v, const CallArgs& a) {
  static const std::vector<std::string> kFields = {"grouper", "list"};
  const Value attribute = a.get(0, "attribute");
  if (attribute.is_undefined()) fail("groupby requires an attribute");
  Value fallback = a.get(1, "default", Value(None{}));
  if (fallback.is_none()) fallback = Value();
  const bool case_sensitive = a.get(2, "case_sensitive", Value(false)).truthy();
  ValueList items = v.iterate();
  ValueList keys;
  for (const Value& item : items)
    keys.push_back(ignore_case(lookup_path(item, attribute, fallback), case_sensitive));
  sort_by(items, keys, false);
  keys.clear();
  for (const Value& item : items)
    keys.push_back(ignore_case(lookup_path(item, attribute, fallback), case_sensitive));
  ValueList groups;
  for (size_t i = 0; i < items.size();) {
    size_t j = i + 1;
    while (j < items.size() && keys[j].equals(keys[i])) ++j;
    ValueList members(items.begin() + static_cast<std::ptrdiff_t>(i),
                      items.begin() + static_cast<std::ptrdiff_t>(j));
    const Value grouper = case_sensitive ? keys[i] : lookup_path(items[i], attribute, fallback);
    groups.push_back(
        Value::list({grouper, Value::list(std::move(members))}, true, nullptr, &kFields));
    i = j;
  }
  return Value::list(std::move(groups));
}

// slice(slices, fill_with): the items in `slices` columns.
Value f_slice(const Value& v, const CallArgs& a) {
  const Value count_v = a.get(0, "slices");
  if (!count_v.is_int()) fail("slice requires an integer number of slices");
  const int64_t slices = count_v.as_int();
  if (slices > kMaxPieces) fail("slice count too large");
  const Value fill = a.get(1, "fill_with", Value(None{}));
  const ValueList seq = v.iterate();
  const auto length = static_cast<int64_t>(seq.size());
  if (slices <= 0) {
    if (slices == 0) fail("integer division or modulo by zero");
    return Value::lazy({});
  }
  const int64_t per = length / slices, extra = length % slices;
  ValueList out;
  int64_t offset = 0;
  for (int64_t n = 0; n < slices; ++n) {
    const int64_t start = offset + n * per;
    if (n < extra) ++offset;
    const int64_t end = offset + (n + 1) * per;
    ValueList piece(seq.begin() + start, seq.begin() + end);
    if (!fill.is_none() && n >= extra) piece.push_back(fill);
    out.push_back(Value::list(std::move(piece)));
  }
  return Value::lazy(std::move(out));
}

Value f_batch(const Value& v, const CallArgs& a) {
  const int64_t size = a.get(0, "linecount").as_int();
  if (size <= 0) fail("batch size must be positive");
  if (size > kMaxPieces) fail("batch size too large");
  const Value fill = a.get(1, "fill_with", Value(None{}));
  ValueList out, row;
  for (const Value& item : v.iterate()) {
    row.push_back(item);
    if (static_cast<int64_t>(row.size()) == size)
      out.push_back(Value::list(std::move(row))), row = {};
  }
  if (!row.empty()) {
    if (!fill.is_none())
      while (static_cast<int64_t>(row.size()) < size) row.push_back(fill);
    out.push_back(Value::list(std::move(row)));
  }
  return Value::lazy(std::move(out));
}

Value f_reverse(const Value& v, const CallArgs&) {
  if (v.is_string()) {
    std::vector<std::string> chars = utf8_chars(v.as_string());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return Value(std::move(out));
  }
  // jinja2 returns reversed(value): an iterator for a list; a copy for what reversed() rejects.
  ValueList items = v.iterate();
  std::reverse(items.begin(), items.end());
  const bool reversible = v.is_list() && !v.is_lazy();
  return reversible ? Value::lazy(std::move(items), kReverseIteratorView)
                    : Value::list(std::move(items));
}

Value min_max(const Value& v, const CallArgs& a, bool want_max) {
  const bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
  const Value attribute = a.get(1, "attribute", Value(None{}));
  const ValueList items = v.iterate();
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  Value best = items[0];
  Value best_key = key_of(best, attribute, case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    const Value k = key_of(items[i], attribute, case_sensitive);
    const int c = compare_values(k, best_key);
    if (want_max ? c > 0 : c < 0) best = items[i], best_key = k;
  }
  return best;
}
Value f_min(const Value& v, const CallArgs& a) {
  return min_max(v, a, false);
}
Value f_max(const Value& v, const CallArgs& a) {
  return min_max(v, a, true);
}

Value f_sum(const Value& v, const CallArgs& a) {
  const Value attribute = a.get(0, "attribute", Value(None{}));
  Value total = a.get(1, "start", Value(0));
  for (const Value& x : v.iterate())
    total = binary("+", total, attribute.is_none() ? x : lookup_path(x, attribute));
  return total;
}

}  // namespace

void add_sequence_filters(FilterTable& t) {
  t["items"] = f_items;
  t["list"] = f_list;
  t["map"] = f_map;
  t["select"] = f_select;
  t["reject"] = f_reject;
  t["selectattr"] = f_selectattr;
  t["rejectattr"] = f_rejectattr;
  t["unique"] = f_unique;
  t["sort"] = f_sort;
  t["dictsort"] = f_dictsort;
  t["groupby"] = f_groupby;
  t["slice"] = f_slice;
  t["batch"] = f_batch;
  t["reverse"] = f_reverse;
  t["min"] = f_min;
  t["max"] = f_max;
  t["sum"] = f_sum;
}

}  // namespace rill::jinja

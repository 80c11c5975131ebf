#include "bench/kernel_trace.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>

#ifdef RILL_HAVE_CUPTI
#include <cupti.h>
#endif

namespace rill::bench {

namespace {

// "void rill::kernels::(anonymous namespace)::gemv_kernel<__half, 16, 2>(...)" -> "gemv_kernel".
std::string short_name(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : mangled;
  std::free(d);
  // Cut at the first '<' or '(' outside the return type, then keep the last "::" component.
  size_t cut = s.size();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<' || s[i] == '(') {
      // "(anonymous namespace)" is part of the qualified name, not the parameter list.
      if (s.compare(i, 21, "(anonymous namespace)") == 0) {
        i += 20;
        continue;
      }
      cut = i;
      break;
    }
  }
  s.resize(cut);
  if (const size_t sp = s.rfind(' '); sp != std::string::npos) s = s.substr(sp + 1);
  if (const size_t c = s.rfind("::"); c != std::string::npos) s = s.substr(c + 2);
  return s;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#ifdef RILL_HAVE_CUPTI
std::mutex g_mutex;
std::vector<KernelRecord> g_records;
bool g_in_use = false;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = 8u << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = *buffer ? kBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::vector<KernelRecord> got;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    got.push_back(
        {short_name(k->name), k->start, k->end, k->correlationId, k->gridX * k->gridY * k->gridZ});
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_records.insert(g_records.end(), got.begin(), got.end());
}

void cupti_check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  throw std::runtime_error(std::string("CUPTI ") + what + ": " + (msg ? msg : "unknown error"));
}
#endif

}  // namespace

#ifdef RILL_HAVE_CUPTI
bool kernel_trace_available() {
  return true;
}

KernelTrace::KernelTrace() {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_in_use) throw std::runtime_error("KernelTrace: one trace at a time");
    g_in_use = true;
    g_records.clear();
  }
  try {
    cupti_check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register");
    cupti_check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable");
  } catch (...) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_in_use = false;
    throw;
  }
  active_ = true;
}

KernelTrace::~KernelTrace() {
  if (active_) stop();
  std::lock_guard<std::mutex> lock(g_mutex);
  g_in_use = false;
}

std::vector<KernelRecord> KernelTrace::stop() {
  if (active_) {
    cuptiActivityFlushAll(1);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    active_ = false;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<KernelRecord> out = g_records;
  std::sort(out.begin(), out.end(),
            [](const KernelRecord& a, const KernelRecord& b) { return a.start < b.start; });
  return out;
}
#else
bool kernel_trace_available() {
  return false;
}
KernelTrace::KernelTrace() {
  throw std::runtime_error("built without CUPTI: no kernel traces");
}
KernelTrace::~KernelTrace() = default;
std::vector<KernelRecord> KernelTrace::stop() {
  return {};
}
#endif

StepAttribution attribute_steps(const std::vector<KernelRecord>& records) {
  std::map<uint32_t, std::vector<const KernelRecord*>> steps;
  for (const KernelRecord& r : records) steps[r.launch].push_back(&r);
  struct Acc {
    double launches = 0, marginal_ns = 0;
    std::vector<double> resident_ns;
  };
  std::map<std::string, Acc> acc;
  std::vector<double> spans;
  Acc idle;  // time in which no kernel of the step was resident
  for (auto& [launch, ks] : steps) {
    // Sweep the step's time points; each interval goes to the resident kernel that started
    // first (in a PDL chain, the one the others wait for), or to "idle" when none is resident.
    std::vector<uint64_t> points;
    for (const KernelRecord* k : ks) points.insert(points.end(), {k->start, k->end});
    std::sort(points.begin(), points.end());
    points.erase(std::unique(points.begin(), points.end()), points.end());
    std::vector<double> charged(ks.size(), 0.0);
    for (size_t p = 0; p + 1 < points.size(); ++p) {
      const uint64_t t0 = points[p], t1 = points[p + 1];
      int owner = -1;
      for (size_t i = 0; i < ks.size(); ++i) {
        if (ks[i]->start > t0 || ks[i]->end < t1) continue;  // not resident over [t0, t1]
        if (owner < 0 || ks[i]->start < ks[owner]->start ||
            (ks[i]->start == ks[owner]->start && ks[i]->end < ks[owner]->end))
          owner = static_cast<int>(i);
      }
      (owner < 0 ? idle.marginal_ns : charged[owner]) += static_cast<double>(t1 - t0);
    }
    std::vector<size_t> by_start(ks.size());  // labels name the kernel launched before
    for (size_t i = 0; i < ks.size(); ++i) by_start[i] = i;
    std::stable_sort(by_start.begin(), by_start.end(),
                     [&](size_t x, size_t y) { return ks[x]->start < ks[y]->start; });
    std::vector<std::string> prev(ks.size(), "start");
    for (size_t n = 1; n < by_start.size(); ++n) prev[by_start[n]] = ks[by_start[n - 1]]->name;
    for (size_t i = 0; i < ks.size(); ++i) {
      Acc& a = acc[ks[i]->name + " [" + std::to_string(ks[i]->grid) + "] after " + prev[i]];
      a.launches += 1;
      a.marginal_ns += charged[i];
      a.resident_ns.push_back(static_cast<double>(ks[i]->end - ks[i]->start));
    }
    spans.push_back(static_cast<double>(points.back() - points.front()));
  }
  StepAttribution out;
  out.steps = static_cast<int>(steps.size());
  if (out.steps == 0) return out;
  out.span_ms = median_of(spans) * 1e-6;
  for (auto& [label, a] : acc)
    out.rows.push_back({label, a.launches / out.steps, a.marginal_ns * 1e-6 / out.steps,
                        median_of(a.resident_ns) * 1e-3});
  if (idle.marginal_ns > 0)
    out.rows.push_back({"(no kernel resident)", 0, idle.marginal_ns * 1e-6 / out.steps, 0});
  std::sort(out.rows.begin(), out.rows.end(),
            [](const auto& a, const auto& b) { return a.marginal_ms > b.marginal_ms; });
  return out;
}

}  // namespace rill::bench

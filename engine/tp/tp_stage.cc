#include "engine/tp/tp_stage.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>

namespace rill::tp {
namespace {

thread_local std::atomic<const char*>* t_slot = nullptr;
thread_local int t_rank = -1;

}  // namespace

bool tracing() {
  static const bool on = [] {
    const char* v = std::getenv("RILL_TP_TRACE");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

void bind_stage_slot(int rank, std::atomic<const char*>* slot) {
  t_rank = rank;
  t_slot = slot;
}

void set_stage(const char* what) {
  if (t_slot) t_slot->store(what);
  spdlog::log(tracing() ? spdlog::level::info : spdlog::level::debug, "tensor parallel rank {}: {}",
              t_rank, what);
}

}  // namespace rill::tp

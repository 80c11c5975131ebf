#include "clients/rill_loadtest/progress_bar.h"

#include <algorithm>
#include <cstdio>

namespace rill::loadtest {

void ProgressBar::update(const std::string& label, const PhaseProgress& p) {
  if (!enabled_) return;
  if (!terminal_) {
    // A log gets whole lines, about one a second (and the last one of the phase).
    const bool last = p.in_flight == 0 && p.finished > 0;
    if (drawn_ && p.elapsed_s - last_line_s_ < 1 && !last) return;
    last_line_s_ = p.elapsed_s;
  }
  constexpr int kWidth = 30;
  std::string bar;
  if (p.target > 0) {
    const double frac =
        std::min(1.0, static_cast<double>(p.finished) / static_cast<double>(p.target));
    const int filled = static_cast<int>(frac * kWidth);
    bar.reserve(kWidth + 3);
    bar += '[';
    bar.append(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), '.');
    bar += "] ";
  }
  std::fprintf(stderr, "%s%s %s%lld", terminal_ ? "\r" : "", label.c_str(), bar.c_str(),
               static_cast<long long>(p.finished));
  if (p.target > 0) std::fprintf(stderr, "/%lld", static_cast<long long>(p.target));
  std::fprintf(stderr, " done, %lld in flight, %lld errors, %.1f s   ",
               static_cast<long long>(p.in_flight), static_cast<long long>(p.errors), p.elapsed_s);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (drawn_ && terminal_) std::fputc('\n', stderr);
  drawn_ = false;
}

}  // namespace rill::loadtest

// The outputs of a run: the console table, PREFIX.json, PREFIX.csv and the HTML report.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "clients/rill_loadtest/run_report.h"

namespace rill::loadtest {

/// Prints the summary table of every phase (and, for a sweep, one line a point) to `out`.
void print_console_report(const RunReport& report, std::FILE* out);

/// The whole report as JSON: config, per phase the summary, server deltas, checks, time series
/// and per-request records; the sweep's points. Its layout is documented in docs/loadtest.md.
nlohmann::json report_json(const RunReport& report);

/// Writes PREFIX.json and PREFIX.csv (one row per request); throws std::runtime_error.
void write_json_and_csv(const RunReport& report, const std::string& prefix);

/// Writes the self-contained HTML report (no network access); throws std::runtime_error.
void write_html_report(const RunReport& report, const std::string& path);

}  // namespace rill::loadtest

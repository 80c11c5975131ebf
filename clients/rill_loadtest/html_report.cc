// The HTML report: the static page (html_page.cc) around the report's JSON, which its script
// reads and draws. Per-request records are kept (the distributions are drawn from them).
#include <fstream>
#include <stdexcept>

#include "clients/rill_loadtest/html_page.h"
#include "clients/rill_loadtest/reports.h"

namespace rill::loadtest {

void write_html_report(const RunReport& report, const std::string& path) {
  std::string data = report_json(report).dump();
  // Inside <script>, "</" could close the element early; "<\/" is the same JSON string.
  for (size_t pos = 0; (pos = data.find("</", pos)) != std::string::npos; pos += 3)
    data.replace(pos, 2, "<\\/");
  std::ofstream out(path);
  out << kHtmlHead << data << kHtmlTail;
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace rill::loadtest

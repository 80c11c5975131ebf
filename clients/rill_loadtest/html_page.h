// The static part of the HTML report: styles and the script that draws every chart as inline
// SVG from the report's embedded JSON. No external resource is referenced.
#pragma once

namespace rill::loadtest {

/// The page before the embedded data (ends inside <script id="rill-data" ...>).
extern const char* const kHtmlHead;

/// The page after the embedded data (closes that script, then the drawing script).
extern const char* const kHtmlTail;

}  // namespace rill::loadtest

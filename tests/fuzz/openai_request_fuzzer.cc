// Request JSON -> engine requests, as the HTTP front end converts it: the input is a request body
// given to /v1/completions, /v1/chat/completions (parse_api_request: prompts, chat messages
// through the model's chat template and the tokenizer, sampling fields, stop strings, cache
// policy, logprobs, session turns of the fixture's session "s") and POST /v1/sessions
// (parse_session_options); each resulting request then passes the engine's submit checks. Any
// exception must map to a 4xx answer (serving_fixture.h).
//
// Seeds: tests/fuzz/corpus/openai_request (plain JSON bodies); dictionary: json.dict.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/openai_api.h"
#include "server/session_api.h"
#include "tests/fuzz/serving_fixture.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  rill::fuzz::ServingFixture::get();  // the model loads once, before the first input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rill::server::ApiKind;
  rill::fuzz::ServingFixture& fx = rill::fuzz::ServingFixture::get();
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (const ApiKind kind : {ApiKind::kCompletion, ApiKind::kChat}) {
    rill::fuzz::as_front_end([&] {
      const rill::server::ApiRequest api = rill::server::parse_api_request(fx.ctx(), kind, body);
      fx.validate(api.request);
    });
  }
  rill::fuzz::as_front_end(
      [&] { fx.validate(rill::server::parse_session_options(fx.ctx(), body)); });
  return 0;
}

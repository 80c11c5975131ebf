// The HTTP request path: the bytes a client sends on one connection, read by Beast's parser
// configured as every connection configures it (server/http_request.h: header and body limits),
// in reads of a size the input chooses (so request lines, headers and chunk sizes split across
// reads), one request after another while the connection would stay open. Each request is then
// routed as server/http_routes.cc routes it, and its body goes to the same parsing functions:
// parse_api_request (completions, chat, session turns), parse_session_options, the session
// lookup, /tokenize and /detokenize. Engine requests go through the engine's submit checks.
//
// Input: byte 0 picks the read size (1 to 255 bytes; 0: 64 KiB, as a socket read); the rest is
// the connection's bytes. Seeds: tests/fuzz/corpus/http_request; dictionary: http.dict.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "server/error_mapping.h"
#include "server/http_request.h"
#include "server/json_body.h"
#include "server/openai_api.h"
#include "server/session_api.h"
#include "server/session_turn.h"
#include "tests/fuzz/serving_fixture.h"

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using rill::fuzz::as_front_end;
using rill::fuzz::ServingFixture;

// A SyncReadStream over the input: each read_some returns at most `step` bytes, then EOF, the
// way a socket delivers a client's bytes in pieces.
class InputStream {
 public:
  InputStream(std::string_view data, size_t step) : data_(data), step_(step) {}

  template <class MutableBuffers>
  size_t read_some(const MutableBuffers& buffers, beast::error_code& ec) {
    ec = {};
    if (pos_ == data_.size()) {
      ec = net::error::eof;
      return 0;
    }
    const size_t n = std::min(step_, data_.size() - pos_);
    const size_t copied = net::buffer_copy(buffers, net::buffer(data_.data() + pos_, n));
    pos_ += copied;
    return copied;
  }

  template <class MutableBuffers>
  size_t read_some(const MutableBuffers& buffers) {
    beast::error_code ec;
    const size_t n = read_some(buffers, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }

 private:
  std::string_view data_;
  size_t step_;
  size_t pos_ = 0;
};

// /tokenize and /detokenize as server/http_routes.cc answers them (without building the answer).
void tokenize(rill::server::ServingContext& ctx, const std::string& body) {
  const nlohmann::json b = rill::server::parse_json_object(body);
  const char* key = b.contains("prompt") ? "prompt" : "text";
  if (!b.contains(key) || !b[key].is_string()) throw rill::FieldError("prompt", "string");
  bool add_special = true;
  if (b.contains("add_special_tokens")) {
    if (!b["add_special_tokens"].is_boolean())
      throw rill::FieldError("add_special_tokens", "boolean");
    add_special = b["add_special_tokens"].get<bool>();
  }
  ctx.require_engine().tokenizer().encode(b[key].get<std::string>(), add_special);
}

void detokenize(rill::server::ServingContext& ctx, const std::string& body) {
  const nlohmann::json b = rill::server::parse_json_object(body);
  const rill::Tokenizer& tok = ctx.require_engine().tokenizer();
  if (!b.contains("tokens") || !b["tokens"].is_array()) throw rill::FieldError("tokens", "list");
  std::vector<int32_t> ids;
  for (const nlohmann::json& x : b["tokens"]) {
    if (!x.is_number_integer()) throw rill::FieldError("tokens", "ids");
    const int64_t id = x.get<int64_t>();
    if (id < 0 || id >= tok.vocab_size()) throw rill::FieldError("tokens", "range");
    ids.push_back(static_cast<int32_t>(id));
  }
  rill::server::dump_json({{"prompt", tok.decode(ids)}});
}

void generation(ServingFixture& fx, rill::server::ApiKind kind, const std::string& body) {
  rill::server::ApiRequest api = rill::server::parse_api_request(fx.ctx(), kind, body);
  fx.validate(api.request);
}

// server/http_routes.cc's routing (route_plain, route_session) without its side effects (no
// session is created or closed); returns whether the connection stays open
// (generation answers close it).
bool handle(ServingFixture& fx, const http::request<http::string_body>& req) {
  rill::server::ServingContext& ctx = fx.ctx();
  std::string target(req.target());
  if (const auto q = target.find('?'); q != std::string::npos) target.resize(q);
  const http::verb m = req.method();
  const std::string prefix = "/v1/sessions/";
  bool keep_open = req.keep_alive();
  as_front_end([&] {
    if (target == "/v1/sessions") {
      if (m == http::verb::post) fx.validate(rill::server::parse_session_options(ctx, req.body()));
    } else if (target.rfind(prefix, 0) == 0) {
      const std::string id = target.substr(prefix.size());
      if (id.empty() || id.find('/') != std::string::npos)
        throw rill::Error(rill::ErrorCode::kNotFound, "no route for " + target);
      // GET reads (DELETE would close the fixture's session: its lookup is the same).
      if (m == http::verb::get || m == http::verb::head || m == http::verb::delete_)
        rill::server::get_session(ctx, id);
    } else if (target == "/v1/completions" && m == http::verb::post) {
      keep_open = false;
      generation(fx, rill::server::ApiKind::kCompletion, req.body());
    } else if (target == "/v1/chat/completions" && m == http::verb::post) {
      keep_open = false;
      generation(fx, rill::server::ApiKind::kChat, req.body());
    } else if (target == "/tokenize" && m == http::verb::post) {
      tokenize(ctx, req.body());
    } else if (target == "/detokenize" && m == http::verb::post) {
      detokenize(ctx, req.body());
    } else {
      throw rill::Error(rill::ErrorCode::kNotFound, "no route for " + target);
    }
  });
  return keep_open;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  rill::fuzz::ServingFixture::get();  // the model loads once, before the first input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  ServingFixture& fx = ServingFixture::get();
  const size_t step = data[0] == 0 ? 64 * 1024 : data[0];
  InputStream stream(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1), step);
  beast::flat_buffer buffer;  // a connection's: bytes past one request stay for the next
  for (;;) {
    rill::server::HttpRequestParser parser;
    rill::server::limit_request_parser(parser, fx.ctx().config().max_body_bytes);
    beast::error_code ec;
    http::read(stream, buffer, parser, ec);
    if (ec) return 0;  // the server answers 400 / 413 (or just closes) and closes
    if (!handle(fx, parser.get())) return 0;
  }
}

// rill-client over HTTP: POST /v1/completions or /v1/chat/completions with "stream": true, read
// as server-sent events with Boost.Beast's synchronous API (one connection per request: the
// server closes generation responses).
#include <chrono>
#include <string>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "clients/common/openai_error.h"
#include "clients/common/sse_parser.h"
#include "clients/rill_client/transport.h"

namespace rill::client {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;

// One connection to the server; every operation is bounded by the request's --timeout.
class Connection {
 public:
  explicit Connection(const ClientOptions& o) : options_(o), stream_(io_) {
    const auto [host, port] = split_host_port(o.target);
    host_ = host;
    arm_timer();
    beast::error_code ec;
    tcp::resolver resolver(io_);
    const auto endpoints = resolver.resolve(host, port, ec);
    if (ec)
      throw ClientError(ExitCode::kUnreachable, "cannot reach " + o.target + ": " + ec.message());
    stream_.connect(endpoints, ec);
    if (ec)
      throw ClientError(ExitCode::kUnreachable, "cannot reach " + o.target + ": " + ec.message());
  }

  // Sends a request; reads the response header into parser_.
  void send(http::verb method, const std::string& target, const std::string& body) {
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, host_);
    req.set(http::field::user_agent, "rill-client");
    req.keep_alive(false);
    if (method == http::verb::post) {
      req.set(http::field::content_type, "application/json");
      req.set(http::field::accept, "text/event-stream");
      req.body() = body;
      req.prepare_payload();
    }
    beast::error_code ec;
    arm_timer();
    http::write(stream_, req, ec);
    check(ec, "sending the request");
    parser_.body_limit(boost::none);
    http::read_header(stream_, buffer_, parser_, ec);
    check(ec, "reading the response");
  }

  unsigned status() const { return parser_.get().result_int(); }
  std::string header(http::field f) const { return std::string(parser_.get()[f]); }

  // Reads the next piece of the body (possibly empty) into `out`; false at its end.
  bool read_some(std::string& out) {
    if (parser_.is_done()) return false;
    char tmp[8192];
    parser_.get().body().data = tmp;
    parser_.get().body().size = sizeof tmp;
    beast::error_code ec;
    arm_timer();
    // read_some, not read: read would wait to fill the buffer, holding tokens back.
    http::read_some(stream_, buffer_, parser_, ec);
    if (ec == http::error::need_buffer) ec = {};
    check(ec, "reading the response");
    out.assign(tmp, sizeof tmp - parser_.get().body().size);
    return true;
  }

  std::string read_all() {
    std::string all, piece;
    while (read_some(piece)) all += piece;
    return all;
  }

 private:
  void arm_timer() {
    if (options_.timeout_s > 0 && !deadline_) {
      deadline_ = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(options_.timeout_s));
    }
    if (deadline_) stream_.expires_at(*deadline_);
  }

  void check(const beast::error_code& ec, const char* what) const {
    if (!ec) return;
    if (ec == beast::error::timeout)
      throw ClientError(ExitCode::kServerError,
                        "timed out after " + std::to_string(options_.timeout_s) + " s");
    throw ClientError(ExitCode::kServerError, std::string(what) + ": " + ec.message());
  }

  const ClientOptions& options_;
  asio::io_context io_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::response_parser<http::buffer_body> parser_;
  std::string host_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
};

// Throws for a non-200 response: 503 with Retry-After is overload (exit 4), the rest exit 5.
void check_status(Connection& conn) {
  const unsigned status = conn.status();
  if (status == 200) return;
  const std::string retry_after = conn.header(http::field::retry_after);
  const std::string message = openai_error_message(conn.read_all());
  if (status == 503 && !retry_after.empty())
    throw ClientError(ExitCode::kOverloaded, "server overloaded (HTTP 503: " + message +
                                                 "); retry after " + retry_after + " s");
  throw ClientError(ExitCode::kServerError,
                    "server error HTTP " + std::to_string(status) + ": " + message);
}

std::string default_model(const ClientOptions& o) {
  Connection conn(o);
  conn.send(http::verb::get, "/v1/models", "");
  check_status(conn);
  const json j = json::parse(conn.read_all(), nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id"))
    throw ClientError(ExitCode::kServerError, "GET /v1/models: no model in the answer");
  return j["data"][0]["id"].get<std::string>();
}

json make_body(const ClientOptions& o, const GenerateInput& input, const std::string& model) {
  json body = {{"model", model}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  if (input.messages) {
    json messages = json::array();
    for (const ChatMessage& m : *input.messages)
      messages.push_back({{"role", m.role}, {"content", m.content}});
    body["messages"] = std::move(messages);
  } else {
    body["prompt"] = *input.prompt;
  }
  if (o.max_tokens) body["max_tokens"] = *o.max_tokens;
  if (o.temperature) body["temperature"] = *o.temperature;
  if (o.top_p) body["top_p"] = *o.top_p;
  if (o.top_k) body["top_k"] = *o.top_k;
  if (o.min_p) body["min_p"] = *o.min_p;
  if (o.seed) body["seed"] = *o.seed;
  if (o.presence_penalty) body["presence_penalty"] = *o.presence_penalty;
  if (o.frequency_penalty) body["frequency_penalty"] = *o.frequency_penalty;
  if (o.repetition_penalty) body["repetition_penalty"] = *o.repetition_penalty;
  if (!o.stop.empty()) body["stop"] = o.stop;
  if (o.ignore_eos) body["ignore_eos"] = true;
  if (o.cache) body["cache"] = {{"policy", *o.cache}, {"n_sink", o.sink}, {"window", o.window}};
  if (o.priority) body["priority"] = *o.priority;
  return body;
}

// Applies one SSE data payload to `g`; false on [DONE].
bool apply_event(const std::string& data, bool chat, Generation& g, const ChunkCallback& on_chunk) {
  if (data == "[DONE]") return false;
  const json j = json::parse(data, nullptr, false);
  if (!j.is_object()) throw ClientError(ExitCode::kServerError, "unexpected event: " + data);
  if (j.contains("error"))
    throw ClientError(ExitCode::kServerError,
                      "server error in the stream: " + openai_error_message(data));
  if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
    const json& choice = j["choices"][0];
    const json* text = nullptr;
    if (chat && choice.contains("delta") && choice["delta"].contains("content"))
      text = &choice["delta"]["content"];
    else if (!chat && choice.contains("text"))
      text = &choice["text"];
    if (text && text->is_string()) {
      const std::string piece = text->get<std::string>();
      // Chat's first chunk carries only the role: not a token.
      if (!piece.empty() || !chat) {
        g.text += piece;
        on_chunk(piece);
      }
    }
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string())
      g.finish_reason = choice["finish_reason"].get<std::string>();
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    g.prompt_tokens = j["usage"].value("prompt_tokens", int64_t{0});
    g.completion_tokens = j["usage"].value("completion_tokens", int64_t{0});
  }
  return true;
}

}  // namespace

Generation http_generate(const ClientOptions& o, const GenerateInput& input,
                         const ChunkCallback& on_chunk) {
  const std::string model = o.model ? *o.model : default_model(o);
  const bool chat = input.messages != nullptr;
  Connection conn(o);
  conn.send(http::verb::post, chat ? "/v1/chat/completions" : "/v1/completions",
            make_body(o, input, model).dump());
  check_status(conn);

  Generation g;
  SseParser sse;
  std::string piece;
  bool done = false;
  while (!done && conn.read_some(piece)) {
    for (const std::string& data : sse.feed(piece)) {
      done = !apply_event(data, chat, g, on_chunk);
      if (done) break;
    }
  }
  if (!done) throw ClientError(ExitCode::kServerError, "the stream ended before [DONE]");
  return g;
}

}  // namespace rill::client

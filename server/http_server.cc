// Boost.Beast lives in this translation unit only (compile time).
#include "server/http_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "server/error_mapping.h"
#include "server/json_body.h"
#include "server/metrics_exposition.h"
#include "server/openai_api.h"
#include "server/session_api.h"
#include "server/session_turn.h"

namespace rill::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;

constexpr auto kIdleTimeout = std::chrono::seconds(60);  // keep-alive and request-read timeout

struct Route {
  const char* path;
  http::verb method;
};
constexpr Route kRoutes[] = {
    {"/v1/completions", http::verb::post}, {"/v1/chat/completions", http::verb::post},
    {"/v1/models", http::verb::get},       {"/tokenize", http::verb::post},
    {"/detokenize", http::verb::post},     {"/health", http::verb::get},
    {"/metrics", http::verb::get},
};
// POST /v1/sessions; GET and DELETE /v1/sessions/{id} (routed apart: the path has a parameter).
constexpr const char* kSessions = "/v1/sessions";
constexpr const char* kSessionPrefix = "/v1/sessions/";

bool is_session_path(const std::string& target) {
  return target == kSessions || target.rfind(kSessionPrefix, 0) == 0;
}

// The Allow header of a 405 for `target`.
std::string allowed_methods(const std::string& target) {
  if (target == kSessions) return "POST";
  if (is_session_path(target)) return "GET, HEAD, DELETE";
  for (const Route& r : kRoutes)
    if (target == r.path) return r.method == http::verb::get ? "GET, HEAD" : "POST";
  return {};
}

// Live sessions with a generation in flight, so stop() can wait for them.
struct Registry {
  std::atomic<int> generating{0};
};

// What the engine's notifiers reach the io_context through. They may fire after the server is
// gone (a request cancelled at shutdown): the server closes the gate before destroying the
// io_context, and a closed gate drops the wake-up.
struct Gate {
  std::mutex mu;
  net::io_context* ioc = nullptr;  // null once closed
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, ServingContext& ctx, const MetricsRegistry& metrics, Registry& reg,
          std::shared_ptr<Gate> gate)
      : stream_(std::move(socket)),
        ctx_(ctx),
        metrics_(metrics),
        reg_(reg),
        gate_(std::move(gate)) {}

  ~Session() { release(); }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_request(); });
  }

 private:
  using Response = http::response<http::string_body>;

  void read_request() {
    parser_.emplace();
    parser_->body_limit(static_cast<uint64_t>(ctx_.config().max_body_bytes));
    parser_->header_limit(64 * 1024);
    stream_.expires_after(kIdleTimeout);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted) {
      return close();
    }
    if (ec == http::error::body_limit) {
      return send_error(map_error(ErrorCode::kInvalidArgument,
                                  "the request body is larger than " +
                                      std::to_string(ctx_.config().max_body_bytes) + " bytes"),
                        413, false);
    }
    if (ec) {
      return send_error(
          map_error(ErrorCode::kInvalidArgument, "malformed HTTP request: " + ec.message()), 400,
          false);
    }
    req_ = parser_->release();
    started_ = std::chrono::steady_clock::now();
    route();
  }

  void route() {
    std::string target(req_.target());
    if (const auto q = target.find('?'); q != std::string::npos) target.resize(q);
    method_line_ = std::string(req_.method_string()) + " " + target;
    if (is_session_path(target)) return route_session(target);
    const Route* found = nullptr;
    bool path_known = false;
    for (const Route& r : kRoutes) {
      if (target != r.path) continue;
      path_known = true;
      if (req_.method() == r.method ||
          (r.method == http::verb::get && req_.method() == http::verb::head))
        found = &r;
    }
    if (!path_known)
      return send_error(map_error(ErrorCode::kNotFound, "no route for " + target), 404, true);
    if (!found) {
      ErrorReply e =
          map_error(ErrorCode::kInvalidArgument,
                    "method " + std::string(req_.method_string()) + " is not allowed on " + target);
      e.type = "invalid_request_error";
      return send_error(e, 405, true);
    }
    try {
      if (target == "/v1/completions") return start_generation(ApiKind::kCompletion);
      if (target == "/v1/chat/completions") return start_generation(ApiKind::kChat);
      if (target == "/health") return health();
      if (target == "/metrics") {
        return send(200, kPrometheusContentType, render_prometheus(metrics_.snapshot()), true);
      }
      if (target == "/v1/models") {
        ctx_.require_engine();
        return send(200, "application/json", models_body(ctx_), true);
      }
      if (target == "/tokenize") return tokenize();
      if (target == "/detokenize") return detokenize();
    } catch (const std::exception& e) {
      return send_error(map_exception(e), 0, true);
    }
  }

  // POST /v1/sessions -> 201; GET /v1/sessions/{id} -> 200; DELETE /v1/sessions/{id} -> 200.
  void route_session(const std::string& target) {
    const bool collection = target == kSessions;
    const std::string id = collection ? std::string() : target.substr(std::strlen(kSessionPrefix));
    if (!collection && (id.empty() || id.find('/') != std::string::npos))
      return send_error(map_error(ErrorCode::kNotFound, "no route for " + target), 404, true);
    const http::verb m = req_.method();
    const bool allowed =
        collection ? m == http::verb::post
                   : (m == http::verb::get || m == http::verb::head || m == http::verb::delete_);
    if (!allowed) {
      ErrorReply e =
          map_error(ErrorCode::kInvalidArgument,
                    "method " + std::string(req_.method_string()) + " is not allowed on " + target);
      e.type = "invalid_request_error";
      return send_error(e, 405, true);
    }
    try {
      if (collection) {
        const SessionInfo info = create_session(ctx_, parse_session_options(ctx_, req_.body()));
        return send(201, "application/json", session_body(info), true);
      }
      if (m == http::verb::delete_) {
        if (!delete_session(ctx_, id))
          throw Error(ErrorCode::kNotFound, "session " + id + " not found");
        return send(200, "application/json", session_deleted_body(id), true);
      }
      send(200, "application/json", session_body(get_session(ctx_, id)), true);
    } catch (const std::exception& e) {
      send_error(map_exception(e), 0, true);
    }
  }

  void health() {
    const std::string why = ctx_.unhealthy_reason();
    if (why.empty()) return send(200, "application/json", R"({"status":"ok"})", true);
    send(503, "application/json", dump_json({{"status", why}}), true);
  }

  // vLLM's shapes: {"prompt": text, "add_special_tokens": bool} -> {"tokens", "count",
  // "max_model_len"}.
  void tokenize() {
    const json b = parse_json_object(req_.body());
    const Tokenizer& tok = ctx_.require_engine().tokenizer();
    const char* key = b.contains("prompt") ? "prompt" : "text";
    if (!b.contains(key) || !b[key].is_string())
      throw FieldError("prompt", "'prompt' must be a string");
    bool add_special = true;
    if (b.contains("add_special_tokens")) {
      if (!b["add_special_tokens"].is_boolean())
        throw FieldError("add_special_tokens", "'add_special_tokens' must be a boolean");
      add_special = b["add_special_tokens"].get<bool>();
    }
    const std::vector<int32_t> ids = tok.encode(b[key].get<std::string>(), add_special);
    send(200, "application/json",
         dump_json({{"tokens", ids},
                    {"count", ids.size()},
                    {"max_model_len", ctx_.model().context_length}}),
         true);
  }

  // {"tokens": [ids]} -> {"prompt": text}.
  void detokenize() {
    const json b = parse_json_object(req_.body());
    const Tokenizer& tok = ctx_.require_engine().tokenizer();
    if (!b.contains("tokens") || !b["tokens"].is_array())
      throw FieldError("tokens", "'tokens' must be a list of token ids");
    std::vector<int32_t> ids;
    for (const json& x : b["tokens"]) {
      if (!x.is_number_integer())
        throw FieldError("tokens", "'tokens' must be a list of token ids");
      const int64_t id = x.get<int64_t>();
      if (id < 0 || id >= tok.vocab_size())
        throw FieldError("tokens", "'tokens' has token id " + std::to_string(id) +
                                       " out of range [0, " + std::to_string(tok.vocab_size()) +
                                       ")");
      ids.push_back(static_cast<int32_t>(id));
    }
    send(200, "application/json", dump_json({{"prompt", tok.decode(ids)}}), true);
  }

  // ---- Generation ----

  void start_generation(ApiKind kind) {
    ApiRequest api = parse_api_request(ctx_, kind, req_.body());
    ServingEngine& engine = ctx_.require_engine();
    request_id_ = api.request.id;
    stream_mode_ = api.stream;
    prompt_tokens_ = static_cast<int>(api.request.prompt.size());
    responder_.emplace(api, engine.tokenizer(), api.request.id);
    turn_ = std::move(api.turn);
    std::weak_ptr<Session> weak = weak_from_this();
    auto queued = std::make_shared<std::atomic<bool>>(false);
    EventNotifier notify = [weak, gate = gate_, queued] {
      // On an engine thread: only post a wake-up (then onto this connection's strand).
      if (queued->exchange(true)) return;
      std::lock_guard<std::mutex> lock(gate->mu);
      if (!gate->ioc) return;
      net::post(*gate->ioc, [weak, queued] {
        queued->store(false);
        if (auto self = weak.lock()) {
          net::dispatch(self->stream_.get_executor(), [self] { self->on_events(); });
        }
      });
    };
    handle_ = turn_ ? submit_session_turn(ctx_, std::move(api.request), std::move(notify))
                    : engine.submit(std::move(api.request), std::move(notify));
    generating_ = true;
    reg_.generating.fetch_add(1);
    stream_.expires_never();
    if (stream_mode_) {
      // The kernel's send buffer is part of what a slow reader may leave unsent: bound it by the
      // same setting, so the whole backlog stays within about twice max_stream_buffer_bytes.
      beast::error_code ignored;
      const int64_t bytes =
          std::clamp<int64_t>(ctx_.config().max_stream_buffer_bytes, 4096, 4 << 20);
      stream_.socket().set_option(net::socket_base::send_buffer_size(static_cast<int>(bytes)),
                                  ignored);
    }
    watch_disconnect();
    on_events();
  }

  // A read while the response is produced: the client sends nothing more on a generation
  // request (we answer Connection: close), so any completion means it hung up.
  void watch_disconnect() {
    stream_.socket().async_read_some(net::buffer(probe_), [self = shared_from_this()](
                                                              beast::error_code ec, size_t) {
      if (self->closed_ || self->final_seen_) return;
      if (ec) {
        spdlog::debug("{}: client disconnected ({}); cancelling", self->request_id_, ec.message());
        self->abort("client disconnected");
        return;
      }
      self->watch_disconnect();  // pipelined bytes: ignore
    });
  }

  void on_events() {
    if (closed_ || final_seen_ || !handle_.valid()) return;
    events_.clear();
    handle_.poll(events_);
    for (const RequestEvent& ev : events_) {
      if (const auto* c = std::get_if<TokenChunk>(&ev)) {
        completion_tokens_ += static_cast<int>(c->ids.size());
        if (stream_mode_) begin_stream();
        append_body(responder_->chunk(*c));
        continue;
      }
      on_final(std::get<FinalEvent>(ev));
    }
    if (stream_mode_ &&
        pending_.size() > static_cast<size_t>(ctx_.config().max_stream_buffer_bytes)) {
      spdlog::warn("{}: slow reader ({} bytes unsent); cancelling", request_id_, pending_.size());
      return abort("slow reader");
    }
    flush();
  }

  void on_final(const FinalEvent& f) {
    final_seen_ = true;
    // Before the answer goes out, so the client's next turn finds the history up to date.
    if (turn_) finish_session_turn(ctx_, *turn_, f, responder_->text());
    finish_reason_ = finish_reason_name(f.reason);
    completion_tokens_ = f.usage.completion_tokens;
    timings_ = f.timings;
    if (f.reason == FinishReason::kError) {
      const ErrorReply e = map_error(f.error_code, f.error_message);
      if (!headers_sent_) return send_error(e, 0, false);
      status_ = e.http_status;
      append_body(sse_error(e));
    } else if (stream_mode_) {
      begin_stream();
      append_body(responder_->final(f));
    } else {
      return send(200, "application/json", responder_->final(f), false);
    }
    pending_ += "0\r\n\r\n";  // the last chunk of the chunked body
  }

  void begin_stream() {
    if (headers_sent_) return;
    headers_sent_ = true;
    status_ = 200;
    pending_ +=
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        "Connection: close\r\nTransfer-Encoding: chunked\r\nX-Request-Id: " +
        request_id_ + "\r\n\r\n";
    append_body(responder_->start());
  }

  // Appends `data` as one chunk of the chunked body.
  void append_body(const std::string& data) {
    if (data.empty()) return;
    char size[20];
    std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    pending_ += size;
    pending_ += data;
    pending_ += "\r\n";
  }

  // One write in flight; what arrives meanwhile waits in pending_.
  void flush() {
    if (writing_ || closed_ || pending_.empty()) return;
    writing_ = true;
    inflight_.swap(pending_);
    pending_.clear();
    net::async_write(
        stream_.socket(), net::buffer(inflight_),
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_written(ec); });
  }

  void on_written(beast::error_code ec) {
    writing_ = false;
    inflight_.clear();
    if (ec) return abort("write failed: " + ec.message());
    if (!pending_.empty()) return flush();
    if (final_seen_) finish_generation();
  }

  void finish_generation() {
    log_access();
    close();
  }

  void abort(const std::string& why) {
    if (handle_.valid() && !final_seen_) {
      handle_.cancel();
      // The cache holds what was generated up to now: the session's history keeps it too.
      FinalEvent cancelled;
      cancelled.reason = FinishReason::kCancelled;
      if (turn_) finish_session_turn(ctx_, *turn_, cancelled, responder_->text());
    }
    if (finish_reason_.empty()) finish_reason_ = "cancelled";
    if (!status_) status_ = 499;
    spdlog::debug("{}: {}", request_id_, why);
    log_access();
    close();
  }

  // ---- Plain responses ----

  void send(int status, const char* content_type, std::string body, bool keep_alive) {
    auto res = std::make_shared<Response>(static_cast<http::status>(status), req_.version());
    res->set(http::field::server, "rill");
    res->set(http::field::content_type, content_type);
    if (!request_id_.empty()) res->set("X-Request-Id", request_id_);
    res->keep_alive(keep_alive && req_.keep_alive() && !generating_);
    if (req_.method() != http::verb::head) res->body() = std::move(body);
    res->prepare_payload();
    respond(res, status);
  }

  // `status` 0: the mapped one.
  void send_error(const ErrorReply& e, int status, bool keep_alive) {
    const int code = status ? status : e.http_status;
    auto res = std::make_shared<Response>(static_cast<http::status>(code),
                                          req_.version() ? req_.version() : 11);
    res->set(http::field::server, "rill");
    res->set(http::field::content_type, "application/json");
    if (code == 405) {
      std::string target(req_.target());
      if (const auto q = target.find('?'); q != std::string::npos) target.resize(q);
      res->set(http::field::allow, allowed_methods(target));
    }
    if (e.retry_after_s)
      res->set(http::field::retry_after,
               std::to_string(retry_after_header_seconds(*e.retry_after_s)));
    if (!request_id_.empty()) res->set("X-Request-Id", request_id_);
    res->keep_alive(keep_alive && req_.keep_alive() && !generating_);
    ErrorReply body = e;
    if (code != e.http_status && code == 413)
      body.type = "invalid_request_error", body.code = "request_too_large";
    if (code == 405) body.code = "method_not_allowed";
    res->body() = error_body(body);
    res->prepare_payload();
    respond(res, code);
  }

  void respond(const std::shared_ptr<Response>& res, int status) {
    status_ = status;
    headers_sent_ = true;
    final_seen_ = true;
    if (!generating_) log_access();
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, size_t) {
                        if (ec || !res->keep_alive()) {
                          if (self->generating_) self->log_access();
                          if (!ec && !self->generating_) return self->linger_close();
                          return self->close();
                        }
                        self->reset_for_next();
                        self->read_request();
                      });
  }

  void reset_for_next() {
    request_id_.clear();
    finish_reason_.clear();
    status_ = 0;
    headers_sent_ = final_seen_ = false;
    prompt_tokens_ = completion_tokens_ = 0;
    timings_ = {};
  }

  void log_access() {
    if (logged_) return;
    logged_ = true;
    if (!generating_) {
      // Plain requests: reset so a keep-alive connection logs its next one.
      logged_ = false;
      if (method_line_.find("/health") != std::string::npos ||
          method_line_.find("/metrics") != std::string::npos)
        return;  // probes and scrapes are not worth a line each
    }
    ctx_.access_log(AccessRecord{"http", method_line_, request_id_, status_, finish_reason_,
                                 prompt_tokens_, completion_tokens_, timings_});
  }

  // Half-closes, then reads and discards what the client still sends (e.g. the rest of an
  // oversized body) for up to 5 s, so that it reads our answer instead of a connection reset.
  void linger_close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(5));
    discard();
  }

  void discard() {
    stream_.async_read_some(net::buffer(probe_),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->close();
                              self->discard();
                            });
  }

  // Counts this session out of the generating ones (once).
  void release() {
    if (generating_ && !released_) {
      released_ = true;
      reg_.generating.fetch_sub(1);
    }
  }

  void close() {
    release();
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
    // The handle (if the request is still running) cancels it when the session is freed.
  }

  beast::tcp_stream stream_;
  ServingContext& ctx_;
  const MetricsRegistry& metrics_;
  Registry& reg_;
  std::shared_ptr<Gate> gate_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> req_;
  std::string method_line_;
  std::chrono::steady_clock::time_point started_;
  // Generation state (one request per connection: generation answers close the connection).
  RequestHandle handle_;
  std::optional<ApiResponder> responder_;
  std::optional<TurnPlan> turn_;  // a session turn: what to record when it ends
  std::vector<RequestEvent> events_;
  std::string pending_, inflight_;
  char probe_[64];
  bool generating_ = false, stream_mode_ = false, headers_sent_ = false, final_seen_ = false;
  bool writing_ = false, closed_ = false, logged_ = false, released_ = false;
  // Access log.
  std::string request_id_, finish_reason_;
  int status_ = 0, prompt_tokens_ = 0, completion_tokens_ = 0;
  RequestTimings timings_;
};

}  // namespace

class HttpServer::Impl {
 public:
  Impl(ServingContext& ctx, const MetricsRegistry& metrics, const std::string& host, int port,
       int threads)
      : ctx_(ctx),
        metrics_(metrics),
        ioc_(threads),
        acceptor_(net::make_strand(ioc_)),
        gate_(std::make_shared<Gate>()) {
    gate_->ioc = &ioc_;
    beast::error_code ec;
    const auto addr = net::ip::make_address(host, ec);
    if (ec) throw Error(ErrorCode::kInvalidArgument, "host: '" + host + "' is not an IP address");
    const tcp::endpoint ep(addr, static_cast<unsigned short>(port));
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec)
      throw Error(ErrorCode::kUnavailable, "HTTP: cannot listen on " + host + ":" +
                                               std::to_string(port) + ": " + ec.message());
    port_ = acceptor_.local_endpoint().port();
    accept();
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { ioc_.run(); });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(gate_->mu);
      gate_->ioc = nullptr;
    }
    ioc_.stop();
    for (auto& t : threads_) t.join();
    // The io_context's destructor frees the sessions still queued (their requests cancelled).
  }

  void accept() {
    acceptor_.async_accept(
        net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
          if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
          if (!ec) {
            beast::error_code ignored;
            socket.set_option(tcp::no_delay(true), ignored);
            std::make_shared<Session>(std::move(socket), ctx_, metrics_, reg_, gate_)->start();
          } else {
            spdlog::warn("HTTP accept: {}", ec.message());
          }
          accept();
        });
  }

  void stop_accepting() {
    net::post(acceptor_.get_executor(), [this] {
      beast::error_code ec;
      acceptor_.close(ec);
    });
  }

  ServingContext& ctx_;
  const MetricsRegistry& metrics_;
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  std::shared_ptr<Gate> gate_;
  Registry reg_;
  int port_ = 0;
  std::vector<std::thread> threads_;
};

HttpServer::HttpServer(ServingContext& ctx, const MetricsRegistry& metrics, const std::string& host,
                       int port, int threads)
    : impl_(std::make_unique<Impl>(ctx, metrics, host, port, threads)) {}
HttpServer::~HttpServer() = default;
int HttpServer::port() const {
  return impl_->port_;
}
void HttpServer::stop_accepting() {
  impl_->stop_accepting();
}

void HttpServer::stop(double timeout_s) {
  stop_accepting();
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3));
  while (impl_->reg_.generating.load() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  impl_->ioc_.stop();
}

}  // namespace rill::server

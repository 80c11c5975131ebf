// Boost.Beast lives in this translation unit only (compile time).
#include "server/http_server.h"

#include <sys/resource.h>

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
#include "server/http_limits.h"
#include "server/http_listener.h"
#include "server/http_request.h"
#include "server/http_routes.h"
#include "server/openai_api.h"
#include "server/session_turn.h"

namespace rill::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;

constexpr auto kIdleTimeout = std::chrono::seconds(60);  // keep-alive and request-read timeout

// What every connection shares: the count of generations in flight (so stop() can wait for
// them), the connection table and the budget of buffered request bodies (http_limits.h).
struct Registry {
  Registry(int max_connections, int64_t max_buffered_body_bytes)
      : connections(max_connections), bodies(max_buffered_body_bytes) {}
  std::atomic<int> generating{0};
  ConnectionTable connections;
  BodyBudget bodies;
  LogThrottle body_refusals;
};

// Reads of what a client still sends after its answer (linger_close).
constexpr size_t kDiscardBytes = 16 * 1024;

// What the engine's notifiers reach the io_context through. They may fire after the server is
// gone (a request cancelled at shutdown): the server closes the gate before destroying the
// io_context, and a closed gate drops the wake-up.
struct Gate {
  std::mutex mu;
  net::io_context* ioc = nullptr;  // null once closed
};

// One HTTP connection: reads requests, answers plain ones (keep-alive) and streams a generation
// (which closes the connection after). Its life is one state machine, `state_`:
//
//   kReading --plain request--> kAnswering --written, keep-alive--> kReading
//       |                           +--------written, close------> kLingering --> kClosed
//       +--generation--> kGenerating --first chunk (stream)--> kStreaming
//                             |                                    |
//                             +------final event / abort-----------+--> kFinishing --> kClosed
//
// plus kClosed from anywhere on a read or write error, timeout or eviction. A generation is
// counted in Registry::generating from kGenerating until kClosed (or destruction), and its
// access-log line is written once, when it closes. At most one write is in flight (writing_).
class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  // `conn_id`: the connection's id in reg.connections; 0 for a connection over the cap, which
  // is answered 503 (refuse()) and closed.
  HttpConnection(tcp::socket socket, ServingContext& ctx, const MetricsRegistry& metrics, Registry& reg,
          std::shared_ptr<Gate> gate, uint64_t conn_id)
      : stream_(std::move(socket)),
        ctx_(ctx),
        metrics_(metrics),
        reg_(reg),
        gate_(std::move(gate)),
        conn_id_(conn_id),
        buffer_(static_cast<size_t>(kReadBufferBytes)) {}

  ~HttpConnection() {
    if (in_generation()) reg_.generating.fetch_sub(1);
    release_body_charge();
    if (conn_id_)
      reg_.connections.release(conn_id_);
    else
      reg_.connections.end_refusal();
  }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (self->conn_id_) return self->read_request();
      self->refuse();
    });
  }

 private:
  using Response = http::response<http::string_body>;
  enum class State { kReading, kAnswering, kGenerating, kStreaming, kFinishing, kLingering, kClosed };

  bool in_generation() const {
    return state_ == State::kGenerating || state_ == State::kStreaming ||
           state_ == State::kFinishing;
  }
  // A generation whose final event has not come (its events are still polled).
  bool awaiting_final() const {
    return state_ == State::kGenerating || state_ == State::kStreaming;
  }

  // Over the connection cap: 503 without reading the request, then the connection closes.
  void refuse() {
    ErrorReply e = map_error(ErrorCode::kResourceExhausted,
                             "too many connections: the server has " +
                                 std::to_string(reg_.connections.max_connections()) +
                                 " open (max_connections); retry later");
    send_error(e, 503, false);
  }

  // A request starts. On a connection with nothing buffered the first read waits, evictable
  // (ConnectionTable::set_idle), for its first byte; the rest of the request is read and
  // parsed piecewise so that the body's growth is charged to the shared budget as it arrives.
  void read_request() {
    state_ = State::kReading;
    parser_.emplace();
    limit_request_parser(*parser_, ctx_.config().max_body_bytes);
    stream_.expires_after(kIdleTimeout);
    if (buffer_.size() > 0) return read_some();  // pipelined bytes of the next request
    // An idle connection holds no read buffer: its first bytes land in probe_.
    buffer_.shrink_to_fit();
    std::weak_ptr<HttpConnection> weak = weak_from_this();
    reg_.connections.set_idle(conn_id_, [weak] {
      if (auto self = weak.lock())
        net::post(self->stream_.get_executor(), [self] { self->close(); });
    });
    stream_.async_read_some(
        net::buffer(probe_), [self = shared_from_this()](beast::error_code ec, size_t n) {
          const bool kept = self->reg_.connections.set_busy(self->conn_id_);
          if (ec || !kept) return self->close();  // hung up, timed out or evicted
          self->buffer_.commit(
              net::buffer_copy(self->buffer_.prepare(n), net::buffer(self->probe_, n)));
          self->read_some();
        });
  }

  void read_some() {
    http::async_read_some(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read_some(ec); });
  }

  void on_read_some(beast::error_code ec) {
    if (!ec && !charge_body()) return refuse_body();
    if (!ec && !parser_->is_done()) return read_some();
    release_body_charge();  // complete (or failed): no longer an unfinished body
    on_read(ec);
  }

  // Charges the body's growth since the last read to the shared budget; false when it is spent.
  bool charge_body() {
    const auto size = static_cast<int64_t>(parser_->get().body().size());
    if (size <= body_charged_) return true;
    if (!reg_.bodies.try_charge(size - body_charged_)) return false;
    body_charged_ = size;
    return true;
  }

  void release_body_charge() {
    reg_.bodies.release(body_charged_);
    body_charged_ = 0;
  }

  // The budget of buffered bodies is spent: 503, the partial body freed, the rest discarded.
  void refuse_body() {
    const int64_t held = body_charged_;
    release_body_charge();
    if (const int64_t n = reg_.body_refusals.note())
      spdlog::warn(
          "HTTP: {} request(s) refused since the last report: {} of {} bytes of unfinished "
          "bodies buffered (max_buffered_body_bytes)",
          n, reg_.bodies.used(), reg_.bodies.max_bytes());
    method_line_ =
        std::string(parser_->get().method_string()) + " " + std::string(parser_->get().target());
    req_ = {};
    req_.version(parser_->get().version());
    parser_.reset();
    ErrorReply e = map_error(
        ErrorCode::kResourceExhausted,
        "the server is buffering its limit of " + std::to_string(reg_.bodies.max_bytes()) +
            " bytes of request bodies (max_buffered_body_bytes; this one had " +
            std::to_string(held) + "); retry later");
    send_error(e, 503, false);
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

  // Plain routes are answered whole (http_routes.cc); a generation streams from here.
  void route() {
    std::string target(req_.target());
    if (const auto q = target.find('?'); q != std::string::npos) target.resize(q);
    method_line_ = std::string(req_.method_string()) + " " + target;
    RouteResult r =
        route_request(ctx_, metrics_, req_.method(), req_.method_string(), target, req_.body());
    switch (r.kind) {
      case RouteResult::Kind::kAnswer:
        return send(r.status, r.content_type.c_str(), std::move(r.body), true);
      case RouteResult::Kind::kError:
        return send_error(r.error, r.status, true);
      case RouteResult::Kind::kGenerate:
        try {
          return start_generation(r.api);
        } catch (const std::exception& e) {
          return send_error(map_exception(e), 0, true);
        }
    }
  }

  // ---- Generation ----

  void start_generation(ApiKind kind) {
    ApiRequest api = parse_api_request(ctx_, kind, req_.body());
    ServingEngine& engine = ctx_.require_engine();
    // Parsed: the body (up to max_body_bytes) is not kept for the generation's lifetime.
    std::string().swap(req_.body());
    request_id_ = api.request.id;
    stream_mode_ = api.stream;
    // HTTP/1.0 has no chunked coding (RFC 9112 section 7): its stream ends with the connection.
    chunked_ = req_.version() >= 11;
    prompt_tokens_ = static_cast<int>(api.request.prompt.size());
    responder_.emplace(api, engine.tokenizer(), api.request.id);
    turn_ = std::move(api.turn);
    std::weak_ptr<HttpConnection> weak = weak_from_this();
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
    state_ = State::kGenerating;
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
      if (!self->awaiting_final()) return;
      if (ec) {
        spdlog::debug("{}: client disconnected ({}); cancelling", self->request_id_, ec.message());
        self->abort("client disconnected");
        return;
      }
      self->watch_disconnect();  // pipelined bytes: ignore
    });
  }

  void on_events() {
    if (!awaiting_final() || !handle_.valid()) return;
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
    if (stream_mode_ && f.reason != FinishReason::kError) begin_stream();  // none came before
    const bool headers_sent = state_ == State::kStreaming;
    state_ = State::kFinishing;
    // Before the answer goes out, so the client's next turn finds the history up to date.
    if (turn_) finish_session_turn(ctx_, *turn_, f, responder_->text());
    finish_reason_ = finish_reason_name(f.reason);
    completion_tokens_ = f.usage.completion_tokens;
    timings_ = f.timings;
    if (f.reason == FinishReason::kError) {
      const ErrorReply e = map_error(f.error_code, f.error_message);
      if (!headers_sent) return send_error(e, 0, false);
      status_ = e.http_status;
      append_body(sse_error(e));
    } else if (stream_mode_) {
      append_body(responder_->final(f));
    } else {
      return send(200, "application/json", responder_->final(f), false);
    }
    if (chunked_) pending_ += "0\r\n\r\n";  // the last chunk of the chunked body
  }

  // kGenerating -> kStreaming: the stream's head goes out before its first chunk.
  void begin_stream() {
    if (state_ != State::kGenerating) return;
    state_ = State::kStreaming;
    status_ = 200;
    pending_ += chunked_ ? "HTTP/1.1 200 OK\r\n" : "HTTP/1.0 200 OK\r\n";
    pending_ +=
        "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n";
    if (chunked_) pending_ += "Transfer-Encoding: chunked\r\n";
    pending_ += "X-Request-Id: " + request_id_ + "\r\n\r\n";
    append_body(responder_->start());
  }

  // Appends `data` to the body: one chunk of the chunked body, or as is (HTTP/1.0, whose body
  // the closing of the connection delimits).
  void append_body(const std::string& data) {
    if (data.empty()) return;
    if (!chunked_) {
      pending_ += data;
      return;
    }
    char size[20];
    std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    pending_ += size;
    pending_ += data;
    pending_ += "\r\n";
  }

  // One write in flight; what arrives meanwhile waits in pending_.
  void flush() {
    if (writing_ || state_ == State::kClosed || pending_.empty()) return;
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
    if (state_ == State::kFinishing) close();
  }

  void abort(const std::string& why) {
    if (handle_.valid() && awaiting_final()) {
      handle_.cancel();
      // The cache holds what was generated up to now: the session's history keeps it too.
      FinalEvent cancelled;
      cancelled.reason = FinishReason::kCancelled;
      if (turn_) finish_session_turn(ctx_, *turn_, cancelled, responder_->text());
    }
    if (finish_reason_.empty()) finish_reason_ = "cancelled";
    if (!status_) status_ = 499;
    spdlog::debug("{}: {}", request_id_, why);
    close();
  }

  // ---- Plain responses ----

  void send(int status, const char* content_type, std::string body, bool keep_alive) {
    auto res = std::make_shared<Response>(static_cast<http::status>(status), req_.version());
    res->set(http::field::server, "rill");
    res->set(http::field::content_type, content_type);
    if (!request_id_.empty()) res->set("X-Request-Id", request_id_);
    res->keep_alive(keep_alive && req_.keep_alive() && !in_generation());
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
    res->keep_alive(keep_alive && req_.keep_alive() && !in_generation());
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
    if (in_generation()) {
      state_ = State::kFinishing;  // logged when it closes
    } else {
      state_ = State::kAnswering;
      log_access();
    }
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, size_t) {
                        if (ec || !res->keep_alive()) {
                          if (!ec && !self->in_generation()) return self->linger_close();
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
    prompt_tokens_ = completion_tokens_ = 0;
    timings_ = {};
  }

  // One line per plain request (as it is answered) and per generation (as it closes).
  void log_access() {
    if (!conn_id_) return;  // refused connections: a throttled warning instead
    if (method_line_.find("/health") != std::string::npos ||
        method_line_.find("/metrics") != std::string::npos)
      return;  // probes and scrapes are not worth a line each
    ctx_.access_log(AccessRecord{"http", method_line_, request_id_, status_, finish_reason_,
                                 prompt_tokens_, completion_tokens_, timings_});
  }

  // Half-closes, then reads and discards what the client still sends (e.g. the rest of an
  // oversized body) for up to 5 s, so that it reads our answer instead of a connection reset.
  void linger_close() {
    state_ = State::kLingering;
    buffer_.clear();
    buffer_.shrink_to_fit();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(5));
    discard();
  }

  void discard() {
    // Only a lingering connection pays for a buffer this size (reading a refused megabyte 64
    // bytes at a time took 15,000 reads).
    if (!discard_buffer_) discard_buffer_ = std::make_unique<char[]>(kDiscardBytes);
    stream_.async_read_some(net::buffer(discard_buffer_.get(), kDiscardBytes),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->close();
                              self->discard();
                            });
  }

  // Any state -> kClosed. A generation leaves Registry::generating and writes its log line.
  void close() {
    if (state_ == State::kClosed) return;
    const bool generation = in_generation();
    state_ = State::kClosed;
    if (generation) {
      reg_.generating.fetch_sub(1);
      log_access();
    }
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
    // The handle (if the request is still running) cancels it when the connection is freed.
  }

  beast::tcp_stream stream_;
  ServingContext& ctx_;
  const MetricsRegistry& metrics_;
  Registry& reg_;
  std::shared_ptr<Gate> gate_;
  const uint64_t conn_id_;  // in reg_.connections; 0: refused
  beast::flat_buffer buffer_;
  std::optional<HttpRequestParser> parser_;
  http::request<http::string_body> req_;
  std::string method_line_;
  std::chrono::steady_clock::time_point started_;
  // Generation state (one request per connection: generation answers close the connection).
  RequestHandle handle_;
  std::optional<ApiResponder> responder_;
  std::optional<TurnPlan> turn_;  // a session turn: what to record when it ends
  std::vector<RequestEvent> events_;
  std::string pending_, inflight_;
  char probe_[64];  // an idle connection's first read; a generation's disconnect watch
  std::unique_ptr<char[]> discard_buffer_;  // linger_close's reads
  State state_ = State::kReading;
  bool writing_ = false;      // a generation's write is in flight (one at a time)
  bool stream_mode_ = false;  // the generation streams (SSE)
  bool chunked_ = true;       // the stream's body is chunked (an HTTP/1.1 client)
  int64_t body_charged_ = 0;  // bytes of the unfinished body charged to reg_.bodies
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
        reg_(connection_cap(ctx.config().max_connections, fd_limit()),
             ctx.config().max_buffered_body_bytes),
        gate_(std::make_shared<Gate>()),
        ioc_(threads),
        listener_(ioc_, host, port, reg_.connections, [this](tcp::socket socket, uint64_t id) {
          std::make_shared<HttpConnection>(std::move(socket), ctx_, metrics_, reg_, gate_, id)->start();
        }) {
    gate_->ioc = &ioc_;
    listener_.start();
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { ioc_.run(); });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(gate_->mu);
      gate_->ioc = nullptr;
    }
    ioc_.stop();
    for (auto& t : threads_) t.join();
    // The io_context's destructor frees the connections still queued (their requests cancelled).
  }

  static uint64_t fd_limit() {
    rlimit r{};
    if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
    return static_cast<uint64_t>(r.rlim_cur);
  }

  ServingContext& ctx_;
  const MetricsRegistry& metrics_;
  // Declared before the io_context: the connections its destructor frees still count themselves
  // out of reg_.
  Registry reg_;
  std::shared_ptr<Gate> gate_;
  net::io_context ioc_;
  HttpListener listener_;
  std::vector<std::thread> threads_;
};

HttpServer::HttpServer(ServingContext& ctx, const MetricsRegistry& metrics, const std::string& host,
                       int port, int threads)
    : impl_(std::make_unique<Impl>(ctx, metrics, host, port, threads)) {}
HttpServer::~HttpServer() = default;
int HttpServer::port() const {
  return impl_->listener_.port();
}
int HttpServer::max_connections() const {
  return impl_->reg_.connections.max_connections();
}
void HttpServer::stop_accepting() {
  impl_->listener_.stop();
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

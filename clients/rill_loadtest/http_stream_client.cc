// rill-loadtest over HTTP: one Beast tcp_stream per request on its own strand, every step an
// asynchronous operation (connect, write, read header, read_some of the SSE body), so a few
// event-loop threads drive any number of concurrent streams. Generation responses close the
// connection, so there is no connection reuse to manage.
#include <memory>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "clients/common/host_port.h"
#include "clients/common/openai_error.h"
#include "clients/common/sse_parser.h"
#include "clients/rill_loadtest/stream_client.h"

namespace rill::loadtest {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;
using rill::client::split_host_port;

json make_body(const RequestSpec& spec, const std::string& model) {
  json body = {{"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"return_token_ids", true},
               {"max_tokens", spec.max_tokens}};
  if (!model.empty()) body["model"] = model;
  if (spec.chat) {
    json messages = json::array();
    for (const ChatMessage& m : spec.messages)
      messages.push_back({{"role", m.role}, {"content", m.content}});
    body["messages"] = std::move(messages);
  } else if (!spec.prompt_ids.empty()) {
    body["prompt"] = spec.prompt_ids;
  } else {
    body["prompt"] = spec.prompt_text;
  }
  if (spec.ignore_eos) body["ignore_eos"] = true;
  if (spec.temperature) body["temperature"] = *spec.temperature;
  if (!spec.cache.empty())
    body["cache"] = {{"policy", spec.cache}, {"n_sink", spec.sink}, {"window", spec.window}};
  if (spec.ttft_target_ms) body["ttft_target_ms"] = *spec.ttft_target_ms;
  if (spec.tpot_target_ms) body["tpot_target_ms"] = *spec.tpot_target_ms;
  return body;
}

// One streamed request. Owned by the shared_ptrs its pending handlers hold.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(asio::io_context& io, const tcp::resolver::results_type& endpoints,
              const TransportOptions& options, Clock::time_point epoch, const RequestSpec& spec,
              RequestRecord record, DoneCallback done)
      : stream_(asio::make_strand(io)),
        endpoints_(endpoints),
        options_(options),
        epoch_(epoch),
        record_(std::move(record)),
        done_(std::move(done)),
        cancel_after_(spec.cancel_after_tokens),
        control_(spec.control),
        keep_text_(spec.keep_text),
        chat_(spec.chat) {
    request_ = {http::verb::post, chat_ ? "/v1/chat/completions" : "/v1/completions", 11};
    request_.set(http::field::host, split_host_port(options.target).first);
    request_.set(http::field::user_agent, "rill-loadtest");
    request_.set(http::field::content_type, "application/json");
    request_.set(http::field::accept, "text/event-stream");
    request_.keep_alive(false);  // the server closes generation responses anyway
    request_.body() = make_body(spec, options.model).dump();
    request_.prepare_payload();
    parser_.body_limit(boost::none);
  }

  void run() {
    // Start on the session's strand: every handler below then runs there too.
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      self->record_.start_s = seconds_since(self->epoch_);
      if (self->options_.timeout_s > 0)
        self->stream_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(self->options_.timeout_s)));
      self->stream_.async_connect(self->endpoints_,
                                  [self](beast::error_code ec, const tcp::endpoint&) {
                                    if (ec) return self->fail("connect", ec);
                                    self->write();
                                  });
    });
  }

 private:
  void write() {
    http::async_write(stream_, request_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->fail("write", ec);
      http::async_read_header(self->stream_, self->buffer_, self->parser_,
                              [self](beast::error_code ec2, size_t) {
                                if (ec2) return self->fail("read", ec2);
                                self->status_ = self->parser_.get().result_int();
                                self->read_body();
                              });
    });
  }

  void read_body() {
    if (parser_.is_done()) return body_ended();
    parser_.get().body().data = piece_;
    parser_.get().body().size = sizeof piece_;
    // read_some: hand each piece to the SSE parser as it arrives, not when a buffer fills.
    http::async_read_some(stream_, buffer_, parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                            if (ec == http::error::need_buffer) ec = {};
                            if (ec) return self->fail("read", ec);
                            const size_t n = sizeof self->piece_ - self->parser_.get().body().size;
                            self->on_bytes(std::string_view(self->piece_, n));
                          });
  }

  void on_bytes(std::string_view bytes) {
    if (status_ != 200) {
      error_body_.append(bytes);
      return read_body();
    }
    const double now = seconds_since(epoch_);
    for (const std::string& data : sse_.feed(bytes)) {
      if (data == "[DONE]") return finish();
      if (!on_event(data, now)) return;
    }
    read_body();
  }

  // Applies one event; false when the request ended here (error or client cancel).
  bool on_event(const std::string& data, double now) {
    const json j = json::parse(data, nullptr, false);
    if (!j.is_object() || j.contains("error")) {
      fail_with(j.is_object() ? "stream error" : "bad event",
                rill::client::openai_error_message(data));
      return false;
    }
    if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
      const json& c = j["choices"][0];
      int tokens = 0;
      if (c.contains("token_ids") && c["token_ids"].is_array())
        tokens = static_cast<int>(c["token_ids"].size());
      const json* text = chat_ ? (c.contains("delta") ? &c["delta"] : nullptr) : &c;
      if (text && text->contains(chat_ ? "content" : "text")) {
        const json& t = (*text)[chat_ ? "content" : "text"];
        if (t.is_string() && keep_text_) record_.text += t.get<std::string>();
      }
      if (tokens > 0) {
        record_.chunk_times_s.push_back(now);
        record_.chunk_tokens.push_back(tokens);
        if (control_) control_->started.store(true);
      }
      if (c.contains("finish_reason") && c["finish_reason"].is_string())
        record_.finish_reason = c["finish_reason"].get<std::string>();
      // A chunk with a finish reason ends the request: nothing left to cancel.
      const bool stop = (cancel_after_ > 0 && record_.tokens_received() >= cancel_after_) ||
                        (control_ && control_->stop.load());
      if (stop && record_.finish_reason.empty()) {
        record_.cancelled = true;
        // Closing the connection is how an HTTP client cancels: the server sees the disconnect.
        beast::error_code ignored;
        stream_.socket().close(ignored);
        finish();
        return false;
      }
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      record_.prompt_tokens = j["usage"].value("prompt_tokens", int64_t{0});
      record_.output_tokens = j["usage"].value("completion_tokens", int64_t{0});
      const json& details = j["usage"].value("prompt_tokens_details", json::object());
      if (details.is_object()) record_.cached_tokens = details.value("cached_tokens", int64_t{0});
      record_.usage_seen = true;
    }
    return true;
  }

  void body_ended() {
    if (status_ != 200) {
      return fail_with("HTTP " + std::to_string(status_),
                       rill::client::openai_error_message(error_body_));
    }
    fail_with("stream ended before [DONE]", "");
  }

  void fail(const char* what, const beast::error_code& ec) {
    fail_with(ec == beast::error::timeout ? std::string("timeout") : std::string(what) + " error",
              ec.message());
  }

  void fail_with(const std::string& code, const std::string& message) {
    record_.error = code;
    record_.error_message = message;
    finish();
  }

  void finish() {
    if (finished_) return;
    finished_ = true;
    record_.end_s = seconds_since(epoch_);
    if (!record_.usage_seen) record_.output_tokens = record_.tokens_received();
    done_(std::move(record_));
  }

  beast::tcp_stream stream_;
  const tcp::resolver::results_type& endpoints_;
  const TransportOptions& options_;
  Clock::time_point epoch_;
  RequestRecord record_;
  DoneCallback done_;
  int cancel_after_;
  std::shared_ptr<StreamControl> control_;
  bool keep_text_, chat_;
  bool finished_ = false;
  unsigned status_ = 0;
  http::request<http::string_body> request_;
  beast::flat_buffer buffer_;
  http::response_parser<http::buffer_body> parser_;
  char piece_[16384];
  std::string error_body_;
  rill::client::SseParser sse_;
};

class HttpStreamClient final : public StreamClient {
 public:
  HttpStreamClient(const TransportOptions& options, Clock::time_point epoch)
      : options_(options), epoch_(epoch), work_(asio::make_work_guard(io_)) {
    const auto [host, port] = split_host_port(options.target);
    tcp::resolver resolver(io_);
    endpoints_ = resolver.resolve(host, port);  // throws when the name does not resolve
    for (int i = 0; i < std::max(1, options.io_threads); ++i)
      threads_.emplace_back([this] { io_.run(); });
  }

  ~HttpStreamClient() override {
    work_.reset();
    io_.stop();
    for (std::thread& t : threads_) t.join();
  }

  void start(const RequestSpec& spec, RequestRecord record, DoneCallback done) override {
    std::make_shared<HttpSession>(io_, endpoints_, options_, epoch_, spec, std::move(record),
                                  std::move(done))
        ->run();
  }

 private:
  TransportOptions options_;
  Clock::time_point epoch_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  tcp::resolver::results_type endpoints_;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<StreamClient> make_http_client(const TransportOptions& options,
                                               Clock::time_point epoch) {
  return std::make_unique<HttpStreamClient>(options, epoch);
}

}  // namespace rill::loadtest

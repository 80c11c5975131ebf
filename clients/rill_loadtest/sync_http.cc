#include "clients/rill_loadtest/sync_http.h"

#include <chrono>
#include <stdexcept>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "clients/common/host_port.h"

namespace rill::loadtest {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

HttpReply http_call(const std::string& method, const std::string& url, const std::string& body,
                    double timeout_s) {
  std::string rest = url;
  if (rest.starts_with("http://")) rest = rest.substr(7);
  const size_t slash = rest.find('/');
  const std::string target = slash == std::string::npos ? "/" : rest.substr(slash);
  const auto [host, port] = rill::client::split_host_port(rest.substr(0, slash));

  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(timeout_s)));
  beast::error_code ec;
  asio::ip::tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(host, port, ec);
  if (!ec) stream.connect(endpoints, ec);
  if (ec) throw std::runtime_error("cannot reach " + url + ": " + ec.message());

  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, host);
  req.set(http::field::user_agent, "rill-loadtest");
  req.keep_alive(false);
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  http::write(stream, req, ec);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  if (!ec) http::read(stream, buffer, parser, ec);
  if (ec) throw std::runtime_error(method + " " + url + ": " + ec.message());
  return {parser.get().result_int(), parser.get().body()};
}

}  // namespace rill::loadtest

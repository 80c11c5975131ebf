// The HTTP accept loop: takes connections under the ConnectionTable's cap, hands the excess
// over to be refused, and survives descriptor exhaustion without spinning.
//
// When accept fails for want of descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM) the connection
// stays in the kernel's backlog and every retry fails at once: retrying immediately spins a core
// and writes a log line each time. Instead the loop frees a descriptor (it closes the
// longest-idle connection, else it sheds one waiting connection using a spare descriptor kept
// for that, so its client hears a close instead of hanging), retries after a delay that grows
// to 1 s while nothing can be freed, and logs at most one line per 10 s.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include <boost/asio.hpp>

#include "server/http_limits.h"

namespace rill::server {

class HttpListener {
 public:
  /// Called on the listener's strand for each new connection: `id` from ConnectionTable::admit,
  /// or 0 for one to refuse (ConnectionTable::begin_refusal was granted for it).
  using Handler = std::function<void(boost::asio::ip::tcp::socket socket, uint64_t id)>;

  /// Binds `host:port` (0: ephemeral) and listens; throws kInvalidArgument for a host that is not
  /// an IP address and kUnavailable when it cannot listen (the message names host:port).
  HttpListener(boost::asio::io_context& ioc, const std::string& host, int port,
               ConnectionTable& table, Handler on_connection);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  int port() const { return port_; }
  void start();
  /// Closes the listening socket (on its strand); open connections carry on.
  void stop();

 private:
  void accept();
  void on_accept(const boost::system::error_code& ec, boost::asio::ip::tcp::socket socket);
  void on_accept_error(const boost::system::error_code& ec);
  void refuse(boost::asio::ip::tcp::socket socket);
  /// Frees the spare descriptor, accepts one waiting connection with it and closes that at
  /// once, then takes the spare back. False when no connection could be taken.
  bool shed_one();
  void retry_after(std::chrono::milliseconds delay);

  boost::asio::io_context& ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer retry_;
  ConnectionTable& table_;
  Handler on_connection_;
  int port_ = 0;
  int spare_fd_ = -1;
  std::chrono::milliseconds backoff_{0};
  LogThrottle accept_errors_, refusals_;
};

}  // namespace rill::server

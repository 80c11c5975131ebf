#include "server/http_listener.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <spdlog/spdlog.h>

#include "engine/error.h"

namespace rill::server {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

constexpr std::chrono::milliseconds kMinBackoff{10};
constexpr std::chrono::milliseconds kMaxBackoff{1000};
// After closing an idle connection its descriptor is free as soon as its strand runs the close.
constexpr std::chrono::milliseconds kAfterEviction{2};

bool out_of_descriptors(const boost::system::error_code& ec) {
  if (ec.category() != boost::system::system_category()) return false;
  const int e = ec.value();
  return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}

int open_spare() {
  return ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

}  // namespace

HttpListener::HttpListener(net::io_context& ioc, const std::string& host, int port,
                           ConnectionTable& table, Handler on_connection)
    : ioc_(ioc),
      acceptor_(net::make_strand(ioc)),
      retry_(acceptor_.get_executor()),
      table_(table),
      on_connection_(std::move(on_connection)),
      spare_fd_(open_spare()) {
  boost::system::error_code ec;
  const auto addr = net::ip::make_address(host, ec);
  if (ec) throw Error(ErrorCode::kInvalidArgument, "host: '" + host + "' is not an IP address");
  const tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  // Non-blocking at the OS level too, so that shed_one's accept4 never waits.
  if (!ec) acceptor_.native_non_blocking(true, ec);
  if (ec)
    throw Error(ErrorCode::kUnavailable,
                "cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  port_ = acceptor_.local_endpoint().port();
}

HttpListener::~HttpListener() {
  if (spare_fd_ >= 0) ::close(spare_fd_);
}

void HttpListener::start() {
  net::dispatch(acceptor_.get_executor(), [this] { accept(); });
}

void HttpListener::stop() {
  net::post(acceptor_.get_executor(), [this] {
    boost::system::error_code ec;
    acceptor_.close(ec);
    retry_.cancel();
  });
}

void HttpListener::accept() {
  acceptor_.async_accept(net::make_strand(ioc_),
                         [this](const boost::system::error_code& ec, tcp::socket socket) {
                           on_accept(ec, std::move(socket));
                         });
}

void HttpListener::on_accept(const boost::system::error_code& ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
  if (ec) return on_accept_error(ec);
  backoff_ = std::chrono::milliseconds(0);
  if (spare_fd_ < 0) spare_fd_ = open_spare();
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  ConnectionTable::Evict evicted;
  const uint64_t id = table_.admit(&evicted);
  if (evicted) evicted();
  if (id)
    on_connection_(std::move(socket), id);
  else
    refuse(std::move(socket));
  accept();
}

void HttpListener::refuse(tcp::socket socket) {
  if (const int64_t n = refusals_.note())
    spdlog::warn(
        "HTTP: {} connection(s) refused since the last report: {} connections are open and busy "
        "(the limit: max_connections and the descriptor limit)",
        n, table_.max_connections());
  if (table_.begin_refusal()) return on_connection_(std::move(socket), 0);
  boost::system::error_code ignored;
  socket.close(ignored);  // too many refusals under way: close unanswered
}

void HttpListener::on_accept_error(const boost::system::error_code& ec) {
  std::chrono::milliseconds delay;
  const char* action;
  if (!out_of_descriptors(ec)) {
    // ECONNABORTED and the like concern one connection; anything else may repeat, so the loop
    // waits all the same rather than spin on it.
    delay = kMinBackoff;
    action = "retrying";
  } else if (ConnectionTable::Evict evict = table_.evict_longest_idle()) {
    evict();
    delay = kAfterEviction;
    action = "closed the longest-idle connection";
  } else if (shed_one()) {
    delay = kMinBackoff;
    action = "closed a waiting connection unanswered";
  } else {
    backoff_ = std::clamp(backoff_ * 2, kMinBackoff, kMaxBackoff);
    delay = backoff_;
    action = "waiting for a descriptor";
  }
  if (const int64_t n = accept_errors_.note())
    spdlog::warn("HTTP accept: {} ({} time(s) since the last report; {} open connections); {}",
                 ec.message(), n, table_.open(), action);
  retry_after(delay);
}

bool HttpListener::shed_one() {
  if (spare_fd_ < 0) spare_fd_ = open_spare();
  if (spare_fd_ < 0) return false;
  ::close(spare_fd_);
  const int fd = ::accept4(acceptor_.native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) ::close(fd);
  spare_fd_ = open_spare();
  return fd >= 0;
}

void HttpListener::retry_after(std::chrono::milliseconds delay) {
  retry_.expires_after(delay);
  retry_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !acceptor_.is_open()) return;
    accept();
  });
}

}  // namespace rill::server

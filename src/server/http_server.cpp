#include "server/http_server.h"

#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "base/error.h"

namespace cs {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Headers = std::vector<std::pair<std::string, std::string>>;

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX decoded ('+' as a space in a query).
std::string url_decode(std::string_view s, bool query) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_digit(s[i + 1]) >= 0 && hex_digit(s[i + 2]) >= 0) {
      out += char(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
      i += 2;
    } else {
      out += query && s[i] == '+' ? ' ' : s[i];
    }
  }
  return out;
}

void split_target(HttpRequest& r) {
  const size_t q = r.target.find('?');
  r.path = url_decode(std::string_view(r.target).substr(0, q), false);
  if (q == std::string::npos) return;
  std::string_view rest = std::string_view(r.target).substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view kv = rest.substr(0, amp);
    const size_t eq = kv.find('=');
    if (!kv.empty())
      r.query.emplace_back(url_decode(kv.substr(0, eq), true),
                           eq == std::string_view::npos ? "" : url_decode(kv.substr(eq + 1), true));
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
}

std::string reason(int status) {
  const auto r = http::obsolete_reason(http::int_to_status(unsigned(status)));
  const std::string s(r.data(), r.size());
  return s.empty() || s == "<unknown-status>" ? "Status" : s;
}

std::string head(int version, int status, const Headers& headers) {
  std::string out = (version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ") + std::to_string(status) + " " + reason(status) + "\r\n";
  for (const auto& [k, v] : headers) out += k + ": " + v + "\r\n";
  return out + "\r\n";
}

// A whole (not streamed) response's bytes.
std::string whole(int version, const HttpResponse& r, bool keep_alive) {
  Headers h = r.headers;
  h.emplace_back("Content-Type", r.content_type);
  h.emplace_back("Content-Length", std::to_string(r.body.size()));
  h.emplace_back("Connection", keep_alive ? "keep-alive" : "close");
  return head(version, r.status, h) + r.body;
}

struct Route {
  std::string method, path;
  bool prefix = false;
  HttpHandler handler;
};

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (beast::iequals(k, beast::string_view(name.data(), name.size()))) return v;
  return "";
}

const std::string* HttpRequest::param(std::string_view name) const {
  for (const auto& [k, v] : query)
    if (k == name) return &v;
  return nullptr;
}

class Connection;

struct HttpServer::Impl {
  explicit Impl(HttpOptions o) : opt(std::move(o)), acceptor(ioc) {}

  void accept();
  void dispatch(std::shared_ptr<Connection> c, HttpRequest req);
  void handle(Connection& c, HttpRequest& req);
  void close_connections(bool idle_only);
  void worker();
  HttpResponse error(const HttpRequest* req, int status, const std::string& message) {
    if (on_error) return on_error(req, status, message);
    HttpResponse r;
    r.status = status;
    r.content_type = "text/plain";
    r.body = message;
    return r;
  }

  HttpOptions opt;
  asio::io_context ioc{1};
  tcp::acceptor acceptor;
  std::vector<Route> routes;
  std::function<bool(const HttpRequest&, HttpResponse&)> before;
  std::function<HttpResponse(const HttpRequest*, int, const std::string&)> on_error;

  // I/O thread only: the open connections (closed between requests on stop).
  std::unordered_map<Connection*, std::weak_ptr<Connection>> connections;

  // State below is protected by `mu`: the workers' queue, the workers and the work guard.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::shared_ptr<Connection>, HttpRequest>> jobs;
  bool stopping = false;

  std::vector<std::thread> workers;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;  // while workers may write
  std::once_flag stopped;
};

// One client connection. Its socket is used by the I/O thread only; a
// worker's writes are posted there and waited for.
class Connection : public HttpExchange, public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpServer::Impl& s, tcp::socket sock) : srv_(s), stream_(std::move(sock)), deadline_(s.ioc) {}

  void start() { read_idle(); }
  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
    srv_.connections.erase(this);
  }
  bool in_handler() const { return in_handler_; }

  // HttpExchange (worker thread).
  bool client_gone() const override { return gone_; }
  bool begin_stream(int status, const Headers& headers) override {
    Headers h = headers;
    h.emplace_back(version_ == 10 ? "Connection" : "Transfer-Encoding", version_ == 10 ? "close" : "chunked");
    streamed_ = true;
    // A stream's pieces are small: a send buffer of 64 KiB (not the kernel's
    // autotuned megabytes) means a client that stops reading blocks the
    // handler after about that much, so the engine sees its unread events
    // pile up and pauses it (engine/scheduler.h) instead of generating
    // thousands of tokens nobody reads.
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      beast::error_code ignored;
      self->stream_.socket().set_option(asio::socket_base::send_buffer_size(64 << 10), ignored);
    });
    return send(head(version_, status, h));
  }
  bool write(std::string_view data) override {
    if (data.empty()) return !gone_;
    if (version_ == 10) return send(std::string(data));
    char size[20];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    return send(size + std::string(data) + "\r\n");
  }
  bool end() override {
    ended_ = version_ == 10 ? !gone_ : send("0\r\n\r\n");
    return ended_;
  }

  // After the handler (worker thread): the response, unless it was streamed;
  // then the next request or the close, on the I/O thread.
  void finish(const HttpResponse& res) {
    const bool reuse = streamed_ ? keep_alive_ && ended_ && version_ != 10
                                 : send(whole(version_, res, keep_alive_)) && keep_alive_;
    asio::post(stream_.get_executor(), [self = shared_from_this(), reuse] { self->next(reuse); });
  }

  // I/O thread: the request is complete; a worker takes it.
  void take(HttpRequest&& req, bool keep_alive) {
    keep_alive_ = keep_alive;
    version_ = req.version;
    in_handler_ = true;
    gone_ = false;
    streamed_ = ended_ = false;
    stream_.expires_never();
    watch_close();
    srv_.dispatch(shared_from_this(), std::move(req));
  }

 private:
  // Waiting for a request's first byte: a quiet keep-alive connection.
  void read_idle() {
    if (buffer_.size() > 0) return read_header();
    stream_.expires_after(srv_.opt.idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      if (ec) return self->close();  // closed by the client, idle too long, or stopping
      self->buffer_.commit(n);
      self->read_header();
    });
  }

  void read_header() {
    parser_.emplace();
    parser_->header_limit(std::uint32_t(srv_.opt.header_limit));
    parser_->body_limit(srv_.opt.body_limit);
    arm(srv_.opt.header_timeout);
    http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->deadline_.cancel();
      if (ec) return self->fail(ec, "headers", self->srv_.opt.header_timeout);
      self->on_header();
    });
  }

  void on_header() {
    auto& m = parser_->get();
    if (const auto n = parser_->content_length(); n && *n > srv_.opt.body_limit) return reject_large_body();
    if (beast::iequals(m[http::field::expect], "100-continue") && m.version() == 11) {
      auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      stream_.expires_after(srv_.opt.write_timeout);
      asio::async_write(stream_, asio::buffer(*cont), [self = shared_from_this(), cont](beast::error_code ec, size_t) {
        if (ec) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    arm(srv_.opt.body_timeout);
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->deadline_.cancel();
      if (ec) return self->fail(ec, "body", self->srv_.opt.body_timeout);
      auto msg = self->parser_->release();
      HttpRequest req;
      req.method = std::string(msg.method_string());
      req.target = std::string(msg.target());
      req.version = msg.version() == 10 ? 10 : 11;
      for (const auto& f : msg) req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
      req.body = std::move(msg.body());
      split_target(req);
      self->take(std::move(req), msg.keep_alive());
    });
  }

  void fail(beast::error_code ec, const char* part, std::chrono::milliseconds deadline) {
    if (ec == http::error::header_limit)
      return reject(431, "the request's headers are larger than " + std::to_string(srv_.opt.header_limit) + " bytes");
    if (ec == http::error::body_limit) return reject_large_body();
    if (timed_out_)
      return reject(408, std::string("the request's ") + part + " did not arrive within " +
                             std::to_string(deadline.count()) + " ms");
    const bool http_error = ec.category() == http::make_error_code(http::error::bad_method).category();
    if (http_error && ec != http::error::end_of_stream && ec != http::error::partial_message)
      return reject(400, "malformed HTTP request: " + ec.message());
    close();  // the client closed or the connection broke
  }

  void reject_large_body() {
    reject(413, "the body is larger than " + std::to_string(srv_.opt.body_limit) + " bytes");
  }

  // A request refused before it was read whole: answer and close.
  void reject(int status, const std::string& message) {
    auto bytes = std::make_shared<std::string>(whole(11, srv_.error(nullptr, status, message), false));
    stream_.expires_after(srv_.opt.write_timeout);
    asio::async_write(stream_, asio::buffer(*bytes), [self = shared_from_this(), bytes](beast::error_code ec, size_t) {
      if (ec) return self->close();
      beast::error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      self->stream_.expires_after(std::chrono::seconds(5));
      self->drain();
    });
  }

  // After a refusal: read and drop what the client still sends (a body we
  // did not want) until it closes, so that it reads our answer instead of a
  // reset; at most 5 s.
  void drain() {
    buffer_.clear();
    stream_.async_read_some(buffer_.prepare(64 << 10), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->drain();
    });
  }

  // A deadline for reading a request's headers or body. Not the stream's
  // own expiry: that closes the socket, and a late client is owed its 408.
  void arm(std::chrono::milliseconds limit) {
    stream_.expires_never();
    timed_out_ = false;
    deadline_.expires_after(limit);
    deadline_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec) return;  // cancelled: the read finished first
      self->timed_out_ = true;
      beast::error_code ignored;
      self->stream_.socket().cancel(ignored);
    });
  }

  // While a handler runs: notice the client closing (a readable socket
  // with nothing to read). Pipelined bytes end the watch; they stay queued.
  void watch_close() {
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      if (ec || !self->in_handler_) return;
      char c;
      const ssize_t n = ::recv(self->stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        self->gone_ = true;
      else if (n < 0)
        self->watch_close();
    });
  }

  // Worker thread: writes `data` through the I/O thread; false when the
  // client is gone or the write timed out.
  bool send(std::string data) {
    if (gone_) return false;
    auto done = std::make_shared<std::promise<bool>>();
    std::future<bool> result = done->get_future();
    auto bytes = std::make_shared<std::string>(std::move(data));
    asio::post(stream_.get_executor(), [self = shared_from_this(), bytes, done] {
      self->stream_.expires_after(self->srv_.opt.write_timeout);
      asio::async_write(self->stream_, asio::buffer(*bytes), [self, bytes, done](beast::error_code ec, size_t) {
        self->stream_.expires_never();
        if (ec) self->gone_ = true;
        done->set_value(!ec);
      });
    });
    return result.get();
  }

  // I/O thread, after a response: read the next request or close.
  void next(bool reuse) {
    in_handler_ = false;
    beast::error_code ec;
    stream_.socket().cancel(ec);  // the close watch
    bool stopping;
    {
      std::lock_guard lock(srv_.mu);
      stopping = srv_.stopping;
    }
    if (!reuse || gone_ || stopping) return close();
    read_idle();
  }

  HttpServer::Impl& srv_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  asio::steady_timer deadline_;
  bool timed_out_ = false;   // I/O thread
  std::optional<http::request_parser<http::string_body>> parser_;
  bool in_handler_ = false;  // I/O thread
  std::atomic<bool> gone_{false};
  // The request in progress (set on the I/O thread before a worker sees it).
  bool keep_alive_ = true, streamed_ = false, ended_ = false;
  int version_ = 11;
};

void HttpServer::Impl::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket sock) {
    if (!acceptor.is_open()) return;
    if (!ec) {
      beast::error_code ignored;
      sock.set_option(tcp::no_delay(true), ignored);
      auto c = std::make_shared<Connection>(*this, std::move(sock));
      connections[c.get()] = c;
      c->start();
    }
    accept();
  });
}

void HttpServer::Impl::dispatch(std::shared_ptr<Connection> c, HttpRequest req) {
  std::lock_guard lock(mu);
  jobs.emplace_back(std::move(c), std::move(req));
  cv.notify_one();
}

void HttpServer::Impl::close_connections(bool idle_only) {
  std::vector<std::shared_ptr<Connection>> closing;  // close() edits the map
  for (auto& [p, w] : connections)
    if (auto c = w.lock(); c && !(idle_only && c->in_handler())) closing.push_back(std::move(c));
  for (auto& c : closing) c->close();
}

void HttpServer::Impl::handle(Connection& c, HttpRequest& req) {
  HttpResponse res;
  try {
    if (!before || !before(req, res)) {
      const Route* found = nullptr;
      bool path_known = false;
      for (const Route& r : routes) {
        const bool match = r.prefix ? req.path.starts_with(r.path) && req.path.size() > r.path.size() : req.path == r.path;
        if (!match) continue;
        path_known = true;
        if (r.method == req.method) {
          found = &r;
          break;
        }
      }
      if (found) {
        if (found->prefix) req.rest = req.path.substr(found->path.size());
        found->handler(req, res, c);
      } else {
        res = path_known ? error(&req, 405, "method " + req.method + " not allowed on " + req.path)
                         : error(&req, 404, "no route for " + req.method + " " + req.path);
      }
    }
  } catch (const std::exception& e) {
    res = error(&req, 500, e.what());
  } catch (...) {
    res = error(&req, 500, "internal error");
  }
  c.finish(res);
}

void HttpServer::Impl::worker() {
  for (;;) {
    std::pair<std::shared_ptr<Connection>, HttpRequest> job;
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return stopping || !jobs.empty(); });
      if (jobs.empty()) return;
      job = std::move(jobs.front());
      jobs.pop_front();
    }
    handle(*job.first, job.second);
  }
}

HttpServer::HttpServer(HttpOptions opt) : impl_(std::make_shared<Impl>(std::move(opt))) {}
HttpServer::~HttpServer() { stop(); }

void HttpServer::route(const std::string& method, const std::string& path, HttpHandler h, bool prefix) {
  impl_->routes.push_back({method, path, prefix, std::move(h)});
}
void HttpServer::before(std::function<bool(const HttpRequest&, HttpResponse&)> f) { impl_->before = std::move(f); }
void HttpServer::on_error(std::function<HttpResponse(const HttpRequest*, int, const std::string&)> f) {
  impl_->on_error = std::move(f);
}

int HttpServer::bind() {
  Impl& m = *impl_;
  beast::error_code ec;
  const auto addr = asio::ip::make_address(m.opt.host, ec);
  if (ec) throw Error("cannot listen on " + m.opt.host + ": not an IP address (" + ec.message() + ")");
  const tcp::endpoint at(addr, static_cast<unsigned short>(m.opt.port));
  m.acceptor.open(at.protocol(), ec);
  if (!ec) m.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(at, ec);
  if (!ec) m.acceptor.listen(m.opt.backlog, ec);
  if (ec) throw Error("cannot listen on " + m.opt.host + ":" + std::to_string(m.opt.port) + " (" + ec.message() + ")");
  return m.acceptor.local_endpoint().port();
}

void HttpServer::run() {
  Impl& m = *impl_;
  {
    // A stop() before this point wins: nothing starts.
    std::lock_guard lock(m.mu);
    if (m.stopping) return;
    m.work.emplace(m.ioc.get_executor());
    for (int i = 0; i < std::max(1, m.opt.workers); ++i) m.workers.emplace_back([&m] { m.worker(); });
  }
  m.accept();
  m.ioc.run();
}

void HttpServer::stop() {
  std::shared_ptr<Impl> m = impl_;
  std::call_once(m->stopped, [&] {
    {
      std::lock_guard lock(m->mu);
      m->stopping = true;
    }
    m->cv.notify_all();
    // Stop accepting and close the connections between requests; those in
    // a handler close when it is done.
    // The posted handlers hold the Impl weakly: one that run() never gets to
    // (it returned first, or never ran) must not keep alive the Impl whose
    // io_context holds it (a cycle LeakSanitizer reports at exit).
    std::weak_ptr<Impl> weak = m;
    asio::post(m->ioc, [weak] {
      if (std::shared_ptr<Impl> m = weak.lock()) {
        beast::error_code ec;
        m->acceptor.close(ec);
        m->close_connections(true);
      }
    });
    // run() starts no worker after `stopping` was set, so this is all of them.
    std::vector<std::thread> workers;
    {
      std::lock_guard lock(m->mu);
      workers.swap(m->workers);
    }
    for (std::thread& t : workers) t.join();
    // Handlers are done and their last writes were waited for.
    std::lock_guard lock(m->mu);
    m->work.reset();
    // Close what is left; with nothing pending, run() returns.
    asio::post(m->ioc, [weak] {
      if (std::shared_ptr<Impl> m = weak.lock()) m->close_connections(false);
    });
  });
}

}  // namespace cs

// A small HTTP/1.1 server on Boost.Beast: the transport under the OpenAI API.
//
// Why not a thread per connection (cpp-httplib's model): a client that sends
// its headers one byte at a time would hold a thread each, and 140 of them
// starve everyone. Here one I/O thread accepts (backlog 4096) and reads every
// connection's headers and body asynchronously, under deadlines: a new
// request's first byte within `idle_timeout` (longer than the keep-alive
// expiry of common client pools, so a pooled connection is not closed under
// a client that is about to reuse it), its headers within `header_timeout`
// of that byte, its body within `body_timeout`. Only a complete request
// reaches a worker thread, which runs its handler; the response's bytes go
// back through the I/O thread. Limits: headers over `header_limit` get 431,
// bodies over `body_limit` (Content-Length or chunked) 413, malformed
// requests 400, all with the error body `on_error` makes. HTTP/1.0 clients
// get no chunked encoding: a stream ends by closing the connection.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cs {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // decoded, without the query
  std::string rest;    // a prefix route: the path after the prefix
  std::vector<std::pair<std::string, std::string>> query;    // decoded, in order
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent
  std::string body;
  int version = 11;  // 10 or 11

  // The first header of that name (case-insensitive), or "".
  std::string header(std::string_view name) const;
  const std::string* param(std::string_view name) const;  // the query parameter, or null
};

// A handler's end of its connection.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  // True once the client closed its connection (or it broke): a handler that
  // waits long checks it and gives up.
  virtual bool client_gone() const = 0;
  // Streamed responses: the status line and headers, then the body in
  // pieces (chunked in HTTP/1.1, up to the close in 1.0), then end().
  // Each returns false once the client is gone (or a write timed out).
  virtual bool begin_stream(int status, const std::vector<std::pair<std::string, std::string>>& headers) = 0;
  virtual bool write(std::string_view data) = 0;
  virtual bool end() = 0;
};

// A whole response. A handler that streamed through HttpExchange leaves
// these unsent (status may still say how the stream ended, for its log).
struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&, HttpExchange&)>;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  int workers = 16;
  int backlog = 4096;
  size_t header_limit = 32 << 10;
  size_t body_limit = 8 << 20;
  std::chrono::milliseconds idle_timeout{65000};
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{60000};
  std::chrono::milliseconds write_timeout{60000};
};

class HttpServer {
 public:
  explicit HttpServer(HttpOptions opt);
  ~HttpServer();

  // Routes: an exact path, or (prefix = true) every path starting with it
  // (the remainder in HttpRequest::rest). Registered before run().
  void route(const std::string& method, const std::string& path, HttpHandler h, bool prefix = false);
  // Runs before routing; returns true when it answered (authentication, a
  // draining server).
  void before(std::function<bool(const HttpRequest&, HttpResponse&)> f);
  // Unknown routes, wrong methods and malformed requests: the response for
  // a status and a message (the caller's error format, its counting).
  void on_error(std::function<HttpResponse(const HttpRequest*, int status, const std::string& message)> f);

  // Binds the listening socket; returns the port. Throws cs::Error.
  int bind();
  // Serves until stop(); returns after every handler returned.
  void run();
  // Thread-safe: stops accepting, closes connections between requests, and
  // lets run() return once handlers in progress are done.
  void stop();

  struct Impl;  // (and its connections) in http_server.cpp

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace cs

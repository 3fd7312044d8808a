#include "server/kv_events.h"

#include <chrono>
#include <msgpack.hpp>
#include <zmq.hpp>

#include "base/error.h"

namespace cs {

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void pack_str(Packer& p, const char* s) { p.pack(std::string(s)); }

void pack_hashes(Packer& p, std::span<const BlockEvent> run) {
  p.pack_array(uint32_t(run.size()));
  for (const BlockEvent& e : run) p.pack_uint64(e.hash);
}

// A run of stored blocks, each the parent of the next: one BlockStored.
void pack_stored(Packer& p, std::span<const BlockEvent> run, int block_size) {
  p.pack_map(8);
  pack_str(p, "type"), pack_str(p, "BlockStored");
  pack_str(p, "block_hashes"), pack_hashes(p, run);
  pack_str(p, "parent_block_hash");
  if (run.front().parent)
    p.pack_uint64(*run.front().parent);
  else
    p.pack_nil();
  pack_str(p, "token_ids");
  size_t n = 0;
  for (const BlockEvent& e : run) n += e.tokens.size();
  p.pack_array(uint32_t(n));
  for (const BlockEvent& e : run)
    for (int32_t t : e.tokens) p.pack_int32(t);
  pack_str(p, "block_size"), p.pack_int32(block_size);
  pack_str(p, "lora_id"), p.pack_nil();
  pack_str(p, "medium"), p.pack_nil();
  pack_str(p, "lora_name"), p.pack_nil();
}

void pack_removed(Packer& p, std::span<const BlockEvent> run) {
  p.pack_map(3);
  pack_str(p, "type"), pack_str(p, "BlockRemoved");
  pack_str(p, "block_hashes"), pack_hashes(p, run);
  pack_str(p, "medium"), p.pack_nil();
}

// Where the run starting at events[i] ends: stored blocks chain, removed ones just follow.
size_t run_end(std::span<const BlockEvent> events, size_t i) {
  size_t j = i + 1;
  while (j < events.size() && events[j].kind == events[i].kind &&
         (events[j].kind == BlockEvent::Kind::kRemoved || events[j].parent == std::optional(events[j - 1].hash)))
    ++j;
  return j;
}

std::string seq_bytes(int64_t seq) {
  std::string b(8, '\0');
  for (int i = 0; i < 8; ++i) b[size_t(i)] = char(uint64_t(seq) >> (56 - 8 * i));
  return b;
}

}  // namespace

std::string encode_kv_event_batch(double ts, std::span<const BlockEvent> events, int block_size, bool cleared) {
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t i = 0; i < events.size(); i = runs.back().second) runs.emplace_back(i, run_end(events, i));
  msgpack::sbuffer buf;
  Packer p(buf);
  p.pack_array(3);
  p.pack_double(ts);
  p.pack_array(uint32_t(runs.size() + (cleared ? 1 : 0)));
  if (cleared) {
    p.pack_map(1);
    pack_str(p, "type"), pack_str(p, "AllBlocksCleared");
  }
  for (const auto& [b, e] : runs) {
    const auto run = events.subspan(b, e - b);
    if (run.front().kind == BlockEvent::Kind::kStored)
      pack_stored(p, run, block_size);
    else
      pack_removed(p, run);
  }
  p.pack_int32(0);  // data_parallel_rank
  return std::string(buf.data(), buf.size());
}

struct KvEventPublisher::Sockets {
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  zmq::socket_t replay{ctx, zmq::socket_type::router};
  bool has_replay = false;
};

namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void bind_socket(zmq::socket_t& s, const std::string& endpoint, const char* what) {
  try {
    s.bind(endpoint);
  } catch (const zmq::error_t& e) {
    throw Error(std::string("cannot bind the ") + what + " socket to " + endpoint + ": " + e.what());
  }
}

}  // namespace

KvEventPublisher::KvEventPublisher(KvEventOptions opt) : opt_(std::move(opt)), sockets_(std::make_unique<Sockets>()) {
  sockets_->pub.set(zmq::sockopt::sndhwm, 100000);
  sockets_->pub.set(zmq::sockopt::linger, 500);
  bind_socket(sockets_->pub, opt_.endpoint, "KV events");
  if (!opt_.replay_endpoint.empty()) {
    sockets_->replay.set(zmq::sockopt::linger, 0);
    bind_socket(sockets_->replay, opt_.replay_endpoint, "KV events replay");
    sockets_->has_replay = true;
  }
  queue_.push_back({unix_seconds(), {}, true});
  thread_ = std::thread([this] { run(); });
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void KvEventPublisher::publish(std::vector<BlockEvent> events) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back({unix_seconds(), std::move(events), false});
  }
  cv_.notify_one();
}

void KvEventPublisher::run() {
  std::deque<std::pair<int64_t, std::string>> kept;  // for replays
  int64_t next_seq = 0;
  Sockets& s = *sockets_;
  for (;;) {
    std::deque<Pending> todo;
    bool stop = false;
    {
      std::unique_lock lock(mu_);
      // With a replay socket, wake now and then to answer requests.
      cv_.wait_for(lock, std::chrono::milliseconds(s.has_replay ? 10 : 1000),
                   [&] { return stopping_ || !queue_.empty(); });
      todo.swap(queue_);
      stop = stopping_;
    }
    for (const Pending& b : todo) {
      const int64_t seq = next_seq++;
      std::string payload = encode_kv_event_batch(b.ts, b.events, opt_.block_size, b.cleared);
      const std::string seq8 = seq_bytes(seq);
      s.pub.send(zmq::buffer(opt_.topic), zmq::send_flags::sndmore);
      s.pub.send(zmq::buffer(seq8), zmq::send_flags::sndmore);
      s.pub.send(zmq::buffer(payload), zmq::send_flags::none);
      kept.emplace_back(seq, std::move(payload));
      if (kept.size() > opt_.buffer) kept.pop_front();
    }
    while (s.has_replay) {
      // [client id, empty, start seq (8 bytes)]
      std::vector<zmq::message_t> req;
      zmq::message_t part;
      if (!s.replay.recv(part, zmq::recv_flags::dontwait)) break;
      req.push_back(std::move(part));
      while (req.back().more() && s.replay.recv(part, zmq::recv_flags::dontwait)) req.push_back(std::move(part));
      if (req.size() != 3 || req[2].size() != 8) continue;
      // The start sequence is unsigned: 2^63 and above are past every batch
      // (not negative numbers, which would replay them all).
      uint64_t start = 0;
      for (size_t i = 0; i < 8; ++i) start = (start << 8) | req[2].data<uint8_t>()[i];
      const std::string id(req[0].data<char>(), req[0].size());
      auto reply = [&](const std::string& seq8, const std::string& payload) {
        s.replay.send(zmq::buffer(id), zmq::send_flags::sndmore);
        s.replay.send(zmq::message_t(), zmq::send_flags::sndmore);
        s.replay.send(zmq::buffer(seq8), zmq::send_flags::sndmore);
        s.replay.send(zmq::buffer(payload), zmq::send_flags::none);
      };
      for (const auto& [seq, payload] : kept)
        if (uint64_t(seq) >= start) reply(seq_bytes(seq), payload);
      reply(seq_bytes(-1), "");
    }
    if (stop) break;
  }
}

}  // namespace cs

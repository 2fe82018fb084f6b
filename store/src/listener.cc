// Listener: LISTEN on a channel over a dedicated connection, reconnecting after a restart.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <pqxx/connection>
#include <pqxx/except>
#include <pqxx/notification>
#include <thread>
#include <utility>

#include "connection_pool.h"
#include "errors.h"
#include "ucudnn/core/backoff.h"
#include "ucudnn/store/store.h"

namespace ucudnn::store {

namespace {

// Collects the payloads libpqxx delivers while the listener waits.
class Receiver : public pqxx::notification_receiver {
 public:
  Receiver(pqxx::connection_base& conn, std::string_view channel,
           std::vector<std::string>* payloads)
      : pqxx::notification_receiver(conn, std::string(channel)), payloads_(payloads) {}
  void operator()(const std::string& payload, int /*backend_pid*/) override {
    payloads_->push_back(payload);
  }

 private:
  std::vector<std::string>* payloads_;
};

}  // namespace

class Listener::Impl {
 public:
  Impl(std::string url, std::string_view channel) : url_(std::move(url)), channel_(channel) {}
  ~Impl() { Disconnect(); }

  Status Connect() {
    try {
      conn_ = internal::ConnectionPool::ConnectOrThrow(url_, std::chrono::milliseconds(0));
      // Registering the receiver issues LISTEN.
      receiver_ = std::make_unique<Receiver>(*conn_, channel_, &payloads_);
      if (reconnects_++ > 0)
        spdlog::info("store listener ({}): reconnected, listening again", channel_);
      backoff_.Reset();
      return Status::Ok();
    } catch (...) {
      Disconnect();
      return internal::MapConnectException("listener connect");
    }
  }

  void Disconnect() {
    // The receiver unregisters itself from its connection, so it goes first.
    receiver_.reset();
    conn_.reset();
  }

  Result<std::vector<ProblemNotification>> Wait(std::chrono::milliseconds timeout) {
    if (conn_ == nullptr || !conn_->is_open()) {
      Disconnect();
      Status connected = Connect();
      if (!connected.ok()) {
        // Pace a caller that loops on errors, within the time it was willing to wait.
        std::this_thread::sleep_for(
            std::min(backoff_.Next(), std::max(timeout, std::chrono::milliseconds(0))));
        return connected;
      }
    }
    try {
      payloads_.clear();
      conn_->get_notifs();  // those already received
      if (payloads_.empty() && timeout.count() > 0) {
        const long seconds = static_cast<long>(timeout.count() / 1000);
        const long micros = static_cast<long>((timeout.count() % 1000) * 1000);
        conn_->await_notification(seconds, micros);
      }
    } catch (...) {
      internal::MappedError mapped = internal::MapCurrentException("listener wait");
      spdlog::warn("store listener ({}): {}; reconnecting on the next wait", channel_,
                   mapped.status.ToString());
      Disconnect();
      return mapped.connection_lost ? mapped.status : Unavailable(mapped.status.message());
    }
    std::vector<ProblemNotification> out;
    for (const std::string& payload : payloads_) {
      const size_t colon = payload.find(':');
      Result<uint64_t> device = ParseHash(payload.substr(0, colon));
      Result<uint64_t> problem = colon == std::string::npos
                                     ? Result<uint64_t>(InvalidArgument("no problem hash"))
                                     : ParseHash(payload.substr(colon + 1));
      if (!device.ok() || !problem.ok()) {
        spdlog::warn("store listener ({}): ignoring malformed payload \"{}\"", channel_, payload);
        continue;
      }
      ProblemNotification n{*device, *problem};
      if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
    }
    payloads_.clear();
    return out;
  }

 private:
  const std::string url_;
  const std::string channel_;
  std::unique_ptr<pqxx::connection> conn_;
  std::unique_ptr<Receiver> receiver_;
  std::vector<std::string> payloads_;
  Backoff backoff_{std::chrono::milliseconds(50), std::chrono::milliseconds(2000)};
  int reconnects_ = 0;
};

Listener::Listener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Listener::~Listener() = default;

Result<std::unique_ptr<Listener>> Listener::Open(const std::string& url, std::string_view channel) {
  auto impl = std::make_unique<Impl>(url, channel);
  UCUDNN_RETURN_IF_ERROR(impl->Connect());
  return std::unique_ptr<Listener>(new Listener(std::move(impl)));
}

Result<std::vector<ProblemNotification>> Listener::WaitForNotification(
    std::chrono::milliseconds timeout) {
  return impl_->Wait(timeout);
}

}  // namespace ucudnn::store

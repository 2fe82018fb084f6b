#include "connection_pool.h"

#include <spdlog/spdlog.h>

#include <libpq-fe.h>

#include <algorithm>
#include <cstdlib>
#include <pqxx/connection>
#include <pqxx/except>
#include <pqxx/nontransaction>
#include <set>
#include <utility>

#include "errors.h"

namespace ucudnn::store {

Result<std::string> WithConnectionDefaults(const std::string& url) {
  // Bounded connects, and dead peers noticed by TCP: without these a partitioned database leaves
  // a call blocked in recv() until the kernel gives up (hours).
  static constexpr std::pair<const char*, const char*> kDefaults[] = {
      {"connect_timeout", "10"},     {"keepalives", "1"},       {"keepalives_idle", "30"},
      {"keepalives_interval", "10"}, {"keepalives_count", "3"}, {"tcp_user_timeout", "60000"},
  };
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  if (options == nullptr) {
    std::string message = error != nullptr ? internal::FirstLine(error) : "out of memory";
    if (error != nullptr) PQfreemem(error);
    return InvalidArgument("database URL: " + message);
  }
  // Set by the URL, or by the environment variable libpq reads for it (PGCONNECT_TIMEOUT).
  std::set<std::string, std::less<>> given;
  for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    const bool in_url = o->val != nullptr && o->val[0] != '\0';
    const bool in_env = o->envvar != nullptr && std::getenv(o->envvar) != nullptr;
    if (in_url || in_env) given.insert(o->keyword);
  }
  PQconninfoFree(options);

  const bool uri = url.rfind("postgresql://", 0) == 0 || url.rfind("postgres://", 0) == 0;
  std::string out = url;
  char separator = uri ? (url.find('?') == std::string::npos ? '?' : '&') : ' ';
  for (const auto& [keyword, value] : kDefaults) {
    if (given.count(keyword) != 0) continue;
    if (!out.empty() || uri) out += separator;
    out += keyword;
    out += '=';
    out += value;
    if (uri) separator = '&';
  }
  return out;
}

std::string RedactConnectionString(std::string_view url) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(std::string(url).c_str(), &error);
  if (error != nullptr) PQfreemem(error);  // it may quote the string, secret included
  if (options == nullptr) return "<unparseable connection string>";
  bool has_secret = false;
  std::string out;
  for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val == nullptr || o->val[0] == '\0') continue;
    const std::string_view keyword(o->keyword);
    const bool secret = keyword == "password" || keyword == "sslpassword";
    has_secret = has_secret || secret;
    if (!out.empty()) out += ' ';
    out += keyword;
    out += '=';
    if (secret) {
      out += "***";
      continue;
    }
    // Quoted as libpq reads it back when it holds a space, quote or backslash.
    const std::string_view value(o->val);
    if (value.find_first_of(" '\\") == std::string_view::npos) {
      out += value;
      continue;
    }
    out += '\'';
    for (const char ch : value) {
      if (ch == '\'' || ch == '\\') out += '\\';
      out += ch;
    }
    out += '\'';
  }
  PQconninfoFree(options);
  return has_secret ? out : std::string(url);
}

}  // namespace ucudnn::store

namespace ucudnn::store::internal {

using Clock = std::chrono::steady_clock;

ConnectionPool::Lease::Lease(ConnectionPool* pool, std::unique_ptr<pqxx::connection> conn)
    : pool_(pool), conn_(std::move(conn)) {}

ConnectionPool::Lease::Lease(Lease&& other) noexcept
    : pool_(other.pool_), conn_(std::move(other.conn_)), lost_(other.lost_) {
  other.pool_ = nullptr;
}

ConnectionPool::Lease::~Lease() {
  if (pool_ != nullptr && conn_ != nullptr) pool_->Return(std::move(conn_), lost_);
}

ConnectionPool::ConnectionPool(Config config)
    : config_(std::move(config)), backoff_(config_.backoff_initial, config_.backoff_max) {}

ConnectionPool::~ConnectionPool() = default;

std::unique_ptr<pqxx::connection> ConnectionPool::ConnectOrThrow(
    const std::string& url, std::chrono::milliseconds statement_timeout) {
  // A URL libpq cannot parse is passed on as it is: the connect then fails with libpq's message.
  const Result<std::string> with_defaults = WithConnectionDefaults(url);
  auto conn = std::make_unique<pqxx::connection>(with_defaults.ok() ? *with_defaults : url);
  if (statement_timeout.count() > 0) {
    pqxx::nontransaction tx(*conn);
    tx.exec_params("SELECT set_config('statement_timeout', $1, false)",
                   std::to_string(statement_timeout.count()));
  }
  return conn;
}

Result<std::unique_ptr<pqxx::connection>> ConnectionPool::Connect() {
  {
    std::lock_guard lock(mu_);
    const auto now = Clock::now();
    if (now < next_connect_) {
      const auto wait =
          std::chrono::duration_cast<std::chrono::milliseconds>(next_connect_ - now).count();
      return Unavailable("database unreachable (" + last_connect_error_ +
                         "); next reconnect attempt in " + std::to_string(wait) + " ms");
    }
  }
  try {
    auto conn = ConnectOrThrow(config_.url, config_.statement_timeout);
    if (config_.on_connect) config_.on_connect(*conn);
    std::lock_guard lock(mu_);
    if (backoff_.attempts() > 0) spdlog::info("store: database reachable again, reconnected");
    backoff_.Reset();
    ++connects_;
    return conn;
  } catch (...) {
    MappedError mapped = MapCurrentException("connect");
    std::lock_guard lock(mu_);
    const std::chrono::milliseconds delay = backoff_.Next();
    next_connect_ = Clock::now() + delay;
    last_connect_error_ = mapped.status.message();
    spdlog::warn("store: {}; retrying in {} ms", mapped.status.message(), delay.count());
    return Unavailable(mapped.status.message());
  }
}

Result<ConnectionPool::Lease> ConnectionPool::Acquire() {
  std::unique_lock lock(mu_);
  const auto deadline = Clock::now() + config_.acquire_timeout;
  while (true) {
    while (!idle_.empty()) {
      std::unique_ptr<pqxx::connection> conn = std::move(idle_.back());
      idle_.pop_back();
      if (conn->is_open()) {
        ++in_use_;
        return Lease(this, std::move(conn));
      }
      --open_;  // closed while idle: drop it and look further
      ++lost_;
    }
    if (open_ < config_.size) {
      ++open_;  // reserve the slot while connecting without the lock
      ++in_use_;
      lock.unlock();
      Result<std::unique_ptr<pqxx::connection>> conn = Connect();
      if (!conn.ok()) {
        lock.lock();
        --open_;
        --in_use_;
        available_.notify_one();
        return conn.status();
      }
      return Lease(this, std::move(conn).value());
    }
    if (available_.wait_until(lock, deadline) == std::cv_status::timeout && idle_.empty() &&
        open_ >= config_.size) {
      return Unavailable("store: all " + std::to_string(config_.size) +
                         " database connections stayed busy for " +
                         std::to_string(config_.acquire_timeout.count()) + " ms");
    }
  }
}

void ConnectionPool::Return(std::unique_ptr<pqxx::connection> conn, bool lost) {
  std::vector<std::unique_ptr<pqxx::connection>> to_close;
  {
    std::lock_guard lock(mu_);
    --in_use_;
    if (lost || !conn->is_open()) {
      --open_;
      ++lost_;
      to_close.push_back(std::move(conn));
      // A lost connection usually means the server restarted, which killed the idle ones too:
      // drop them now instead of failing one call per idle connection.
      open_ -= static_cast<int>(idle_.size());
      lost_ += static_cast<int64_t>(idle_.size());
      for (auto& idle : idle_) to_close.push_back(std::move(idle));
      idle_.clear();
    } else {
      idle_.push_back(std::move(conn));
    }
  }
  available_.notify_all();
  // Closing (socket shutdown) happens outside the lock.
  to_close.clear();
}

PoolStats ConnectionPool::Stats() const {
  std::lock_guard lock(mu_);
  PoolStats stats;
  stats.size = config_.size;
  stats.open = open_;
  stats.in_use = in_use_;
  stats.connects = connects_;
  stats.broken = lost_;
  stats.backing_off = Clock::now() < next_connect_;
  return stats;
}

}  // namespace ucudnn::store::internal

#include "errors.h"

#include <exception>
#include <pqxx/except>
#include <string>

namespace ucudnn::store::internal {

std::string FirstLine(std::string_view message) {
  // libpq prefixes server errors with "ERROR:  "; the code says it already.
  for (std::string_view prefix : {"ERROR:  ", "FATAL:  "}) {
    if (message.substr(0, prefix.size()) == prefix) message.remove_prefix(prefix.size());
  }
  const size_t end = message.find('\n');
  std::string line(message.substr(0, end));
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
  return line;
}

namespace {

std::string Join(std::string_view operation, std::string_view text) {
  std::string s(operation);
  s += ": ";
  s += text;
  return s;
}

}  // namespace

MappedError MapSqlState(std::string_view operation, std::string_view sqlstate,
                        std::string_view message) {
  const std::string text = FirstLine(message);
  const std::string_view cls = sqlstate.substr(0, 2);
  // Connection exceptions, and the server going away under us (admin/crash shutdown, starting).
  if (cls == "08" || sqlstate == "57P01" || sqlstate == "57P02" || sqlstate == "57P03") {
    return {Unavailable(Join(operation, "database connection lost: " + text)), true};
  }
  if (sqlstate == "53100") {
    return {ResourceExhausted(Join(operation, "database disk is full: " + text)), false};
  }
  if (sqlstate == "53200" || sqlstate == "53300" || cls == "53" || cls == "54") {
    return {ResourceExhausted(Join(operation, "database out of resources: " + text)), false};
  }
  if (sqlstate == "25006") {
    return {FailedPrecondition(Join(operation,
                                    "database is read-only (a standby, or "
                                    "default_transaction_read_only is on): " +
                                        text)),
            false};
  }
  if (sqlstate == "23505") return {AlreadyExists(Join(operation, text)), false};
  if (cls == "23" || cls == "22") return {InvalidArgument(Join(operation, text)), false};
  if (sqlstate == "42P01" || sqlstate == "42703" || sqlstate == "42883") {
    return {FailedPrecondition(Join(operation,
                                    "database schema missing or outdated (run `ucudnn migrate` "
                                    "or start the server with migrations on): " +
                                        text)),
            false};
  }
  // Serialization failure, deadlock: retrying the whole operation is the fix.
  if (cls == "40") return {Unavailable(Join(operation, "transaction conflict: " + text)), false};
  if (sqlstate == "57014") {
    return {DeadlineExceeded(Join(operation, "statement timed out or was cancelled: " + text)),
            false};
  }
  return {Internal(Join(operation, "SQLSTATE " + std::string(sqlstate) + ": " + text)), false};
}

MappedError MapCurrentException(std::string_view operation) {
  try {
    throw;
  } catch (const pqxx::broken_connection& e) {
    return {Unavailable(Join(operation, "database unreachable: " + FirstLine(e.what()))), true};
  } catch (const pqxx::in_doubt_error& e) {
    return {Unavailable(Join(operation, "connection lost during commit, outcome unknown: " +
                                            FirstLine(e.what()))),
            true};
  } catch (const pqxx::sql_error& e) {
    return MapSqlState(operation, e.sqlstate(), e.what());
  } catch (const pqxx::transaction_rollback& e) {
    return {Unavailable(Join(operation, "transaction rolled back: " + FirstLine(e.what()))), false};
  } catch (const pqxx::failure& e) {
    // libpqxx reports some connection losses as plain failures.
    const std::string text = FirstLine(e.what());
    const bool lost = text.find("connection") != std::string::npos;
    return {lost ? Unavailable(Join(operation, "database connection lost: " + text))
                 : Internal(Join(operation, text)),
            lost};
  } catch (const std::exception& e) {
    return {Internal(Join(operation, FirstLine(e.what()))), false};
  } catch (...) {
    return {Internal(Join(operation, "unknown exception")), false};
  }
}

Status MapConnectException(std::string_view operation) {
  try {
    throw;
  } catch (const pqxx::broken_connection& e) {
    const std::string text = FirstLine(e.what());
    // libpq's words for a connection string it cannot parse.
    for (const char* marker :
         {"invalid connection option", "missing \"=\"", "invalid URI", "invalid integer value",
          "unterminated quoted string", "invalid sslmode", "invalid port number"}) {
      if (text.find(marker) != std::string::npos) return InvalidArgument("url: " + text);
    }
    return Unavailable(Join(operation, "database unreachable: " + text));
  } catch (...) {
    return MapCurrentException(operation).status;
  }
}

}  // namespace ucudnn::store::internal

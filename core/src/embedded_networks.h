// The built-in network tables, networks/*.csv verbatim: the generated embedded_networks.cc
// (core/cmake/embed_networks.cmake) defines EmbeddedNetworks(). Private to networks.cc.
#pragma once

#include <span>
#include <string_view>

namespace ucudnn {

struct EmbeddedNetwork {
  std::string_view name;  // the file name without ".csv"
  std::string_view text;  // the whole file
};

// Sorted by name.
std::span<const EmbeddedNetwork> EmbeddedNetworks();

}  // namespace ucudnn

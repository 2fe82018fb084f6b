// The C APIs' view of the counters: one conversion for ucudnn_c.h and ucudnn_shape.h.
#pragma once

#include "ucudnn/client/stats.h"
#include "ucudnn/client/ucudnn_types.h"

namespace ucudnn::client {

ucudnnStats_t ToCStats(const ClientStats& stats);

}  // namespace ucudnn::client

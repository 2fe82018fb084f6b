-- ucudnn schema 3: the plan cache. Plans are pure functions of (timings, request), so the
-- planner stores each serialised plan under the hash of its content and any replica reuses it.

CREATE TABLE plans (
  hash         BIGINT PRIMARY KEY,
  device_id    BIGINT NOT NULL REFERENCES devices (id) ON DELETE CASCADE,
  body         BYTEA NOT NULL CHECK (octet_length(body) BETWEEN 1 AND 67108864),
  created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
  last_used_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX plans_device_id ON plans (device_id);
-- Eviction of the least recently used plans.
CREATE INDEX plans_last_used_at ON plans (last_used_at);

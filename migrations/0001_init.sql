-- ucudnn schema 1: devices, convolution problems and their measured timings (docs/design.md,
-- "Data model"). 64-bit hashes are stored as BIGINT by bit-cast of the uint64.

CREATE TABLE devices (
  -- DeviceFingerprint::Hash(): FNV-1a of fingerprint_key.
  id                   BIGINT PRIMARY KEY,
  fingerprint_key      TEXT NOT NULL UNIQUE CHECK (fingerprint_key LIKE 'v%;backend=%'),
  backend              TEXT NOT NULL CHECK (backend IN ('cudnn', 'cpu')),
  name                 TEXT NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 256),
  cc_major             INTEGER NOT NULL CHECK (cc_major >= 0),
  cc_minor             INTEGER NOT NULL CHECK (cc_minor >= 0),
  sm_count             INTEGER NOT NULL CHECK (sm_count >= 0),
  memory_bytes         BIGINT NOT NULL CHECK (memory_bytes >= 0),
  cudnn_version        INTEGER NOT NULL CHECK (cudnn_version >= 0),
  cuda_runtime_version INTEGER NOT NULL CHECK (cuda_runtime_version >= 0),
  blas                 TEXT NOT NULL DEFAULT '' CHECK (octet_length(blas) <= 256),
  first_seen           TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE problems (
  -- StableHash(problem): FNV-1a of canonical_key.
  id            BIGINT PRIMARY KEY,
  canonical_key TEXT NOT NULL UNIQUE CHECK (canonical_key LIKE 'v%;op=%'),
  op            TEXT NOT NULL CHECK (op IN ('fwd', 'bwd_data', 'bwd_filter')),
  c             INTEGER NOT NULL CHECK (c BETWEEN 1 AND 65536),
  h             INTEGER NOT NULL CHECK (h BETWEEN 1 AND 32768),
  w             INTEGER NOT NULL CHECK (w BETWEEN 1 AND 32768),
  k             INTEGER NOT NULL CHECK (k BETWEEN 1 AND 65536),
  r             INTEGER NOT NULL CHECK (r BETWEEN 1 AND 1024),
  s             INTEGER NOT NULL CHECK (s BETWEEN 1 AND 1024),
  pad_h         INTEGER NOT NULL CHECK (pad_h >= 0),
  pad_w         INTEGER NOT NULL CHECK (pad_w >= 0),
  stride_h      INTEGER NOT NULL CHECK (stride_h BETWEEN 1 AND 1024),
  stride_w      INTEGER NOT NULL CHECK (stride_w BETWEEN 1 AND 1024),
  dilation_h    INTEGER NOT NULL CHECK (dilation_h BETWEEN 1 AND 1024),
  dilation_w    INTEGER NOT NULL CHECK (dilation_w BETWEEN 1 AND 1024),
  groups        INTEGER NOT NULL CHECK (groups >= 1),
  data_type     TEXT NOT NULL CHECK (data_type IN ('fp32', 'fp16', 'bf16')),
  compute_type  TEXT NOT NULL CHECK (compute_type IN ('fp32', 'fp16', 'bf16')),
  layout        TEXT NOT NULL CHECK (layout IN ('nchw', 'nhwc')),
  math          TEXT NOT NULL
                CHECK (math IN ('default', 'tensor_op', 'tensor_op_allow_conversion')),
  created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT problems_groups_divide CHECK (c % groups = 0 AND k % groups = 0)
);

-- One measurement per (device, problem, micro-batch size, algorithm); a re-measurement replaces
-- the row (upsert on the primary key).
CREATE TABLE timings (
  device_id       BIGINT NOT NULL REFERENCES devices (id) ON DELETE CASCADE,
  problem_id      BIGINT NOT NULL REFERENCES problems (id) ON DELETE CASCADE,
  micro_batch     INTEGER NOT NULL CHECK (micro_batch BETWEEN 1 AND 65536),
  algo            INTEGER NOT NULL CHECK (algo >= 0),
  -- In PostgreSQL NaN sorts above Infinity, so "< 'Infinity'" also rejects NaN.
  time_ms         DOUBLE PRECISION NOT NULL CHECK (time_ms >= 0 AND time_ms < 'Infinity'),
  spread_ms       DOUBLE PRECISION NOT NULL DEFAULT 0
                  CHECK (spread_ms >= 0 AND spread_ms < 'Infinity'),
  samples         INTEGER NOT NULL DEFAULT 0 CHECK (samples >= 0),
  workspace_bytes BIGINT NOT NULL DEFAULT 0 CHECK (workspace_bytes >= 0),
  status          TEXT NOT NULL CHECK (status IN ('ok', 'unsupported', 'failed')),
  error           TEXT NOT NULL DEFAULT '' CHECK (octet_length(error) <= 4096),
  measured_by     TEXT NOT NULL DEFAULT '' CHECK (octet_length(measured_by) <= 128),
  measured_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (device_id, problem_id, micro_batch, algo)
);
-- The primary key serves lookups by (device, problem); this one serves the problem foreign key.
CREATE INDEX timings_problem_id ON timings (problem_id);

-- ucudnn schema 2: GPU workers and the benchmark job queue.

CREATE TABLE workers (
  id             TEXT PRIMARY KEY CHECK (octet_length(id) BETWEEN 1 AND 128),
  host           TEXT NOT NULL DEFAULT '' CHECK (octet_length(host) <= 256),
  device_id      BIGINT NOT NULL REFERENCES devices (id) ON DELETE CASCADE,
  registered_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  last_heartbeat TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX workers_device_id ON workers (device_id);

-- A job asks for one problem to be benchmarked on one device. Life: queued -> running -> done,
-- or back to queued (failure with attempts left, expired lease, release), or failed.
CREATE TABLE jobs (
  id                      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  device_id               BIGINT NOT NULL REFERENCES devices (id) ON DELETE CASCADE,
  problem_id              BIGINT NOT NULL REFERENCES problems (id) ON DELETE CASCADE,
  state                   TEXT NOT NULL DEFAULT 'queued'
                          CHECK (state IN ('queued', 'running', 'done', 'failed')),
  max_micro_batch         INTEGER NOT NULL CHECK (max_micro_batch BETWEEN 1 AND 65536),
  policy                  TEXT NOT NULL CHECK (policy IN ('undivided', 'power_of_two', 'all')),
  -- What the lease holder was asked to measure when it claimed; a job widened since then by
  -- another request is re-queued on completion.
  claimed_max_micro_batch INTEGER CHECK (claimed_max_micro_batch BETWEEN 1 AND 65536),
  claimed_policy          TEXT CHECK (claimed_policy IN ('undivided', 'power_of_two', 'all')),
  -- The lease holder while running; the last holder afterwards.
  worker_id               TEXT REFERENCES workers (id) ON DELETE SET NULL,
  lease_expires_at        TIMESTAMPTZ,
  attempts                INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  error                   TEXT NOT NULL DEFAULT '' CHECK (octet_length(error) <= 4096),
  created_at              TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at              TIMESTAMPTZ NOT NULL DEFAULT now(),
  started_at              TIMESTAMPTZ,
  finished_at             TIMESTAMPTZ,
  CONSTRAINT jobs_running_holds_lease CHECK (
    state <> 'running' OR (worker_id IS NOT NULL AND lease_expires_at IS NOT NULL
                           AND claimed_max_micro_batch IS NOT NULL AND claimed_policy IS NOT NULL)),
  CONSTRAINT jobs_lease_only_while_running CHECK (state = 'running' OR lease_expires_at IS NULL)
);

-- At most one live (queued or running) job per (device, problem): concurrent enqueuers meet
-- here (INSERT ... ON CONFLICT on this index).
CREATE UNIQUE INDEX jobs_one_live_per_problem ON jobs (device_id, problem_id)
  WHERE state IN ('queued', 'running');
-- Claiming: the oldest live job of one device.
CREATE INDEX jobs_claimable ON jobs (device_id, created_at, id)
  WHERE state IN ('queued', 'running');
-- Listing by state, newest first.
CREATE INDEX jobs_state_created ON jobs (state, created_at DESC, id DESC);
CREATE INDEX jobs_worker_id ON jobs (worker_id) WHERE worker_id IS NOT NULL;
CREATE INDEX jobs_problem_id ON jobs (problem_id);

-- ucudnn schema 12: a benchmark job carries the per-kernel workspace limit it is measured for.
--
-- A search for one limit times only the micro-batch sizes that limit can use (engine/size_rule.h,
-- SizesForLimit), so a job says which limit it is for. NULL: every micro-batch size of the job's
-- policy (up to max_micro_batch), which is what every job before this schema asked for, so the
-- existing rows keep it. A smaller limit needs more sizes than a larger one: a live job asked
-- again is widened to the smaller limit, and to NULL by a request without one (store.cc,
-- enqueue_job).
-- claimed_workspace_limit is what the lease holder was asked to measure when it claimed, like
-- claimed_max_micro_batch and claimed_policy (0002_jobs_workers.sql): a job whose limit was
-- widened since the claim is re-queued on completion. NULL there is a claim for every size, so
-- a running job may hold it (jobs_running_holds_lease does not name it).
-- The bounds are the plan request contract's: 0 to 1 TiB.

ALTER TABLE jobs
  ADD COLUMN workspace_limit         BIGINT
    CHECK (workspace_limit IS NULL OR workspace_limit BETWEEN 0 AND 1099511627776),
  ADD COLUMN claimed_workspace_limit BIGINT
    CHECK (claimed_workspace_limit IS NULL OR claimed_workspace_limit BETWEEN 0 AND 1099511627776);

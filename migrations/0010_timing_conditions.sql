-- ucudnn schema 10: every timing records the conditions it was measured under.
--
-- Workers measured on GPUs where training jobs ran (issue 40): a native step went from 59 to
-- 103-110 ms while the worker benchmarked, and its own timings were taken under that contention.
-- A worker now measures only while its GPU runs no other work (--idle-gate) and stores with each
-- timing what it saw: the idle gate ("nvml", "idle", "off"), whether another process was on the
-- GPU right after the measurement, the utilization then, the relative spread of its samples, how
-- many times it was taken again for contention, and whether it is still contended. A contended
-- measurement is stored failed with a "worker limit: contended: ..." reason, so the planner never
-- plans with it and it never replaces an undisturbed one. Rows from before this schema, and from
-- writers that say nothing (imports, framework times), read {"idle_gate": "unknown"}.
--
-- (Numbered 0011 in the issue's plan, after the 3-D problems' migration: renumber on merge.)

ALTER TABLE timings
  ADD COLUMN conditions JSONB NOT NULL DEFAULT '{"idle_gate": "unknown"}'::jsonb
    CHECK (jsonb_typeof(conditions) = 'object');

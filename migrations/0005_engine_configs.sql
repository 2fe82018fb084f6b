-- ucudnn schema 5: timings of cuDNN graph-API engine configurations beside the legacy algorithms.
--
-- A timing names either a legacy algorithm (engine_config = '', algo = its enum value >= 0) or an
-- engine configuration (engine_config = its canonical key, EngineConfigKey(): "eng34" or
-- "eng34{k3=2;k14=-1}", and algo = -1). The key is only meaningful for the cuDNN version of the
-- row's device, which the device fingerprint already carries. Existing rows are legacy timings:
-- they get '' and keep their key.

ALTER TABLE timings
  ADD COLUMN engine_config TEXT NOT NULL DEFAULT ''
  CONSTRAINT timings_engine_config_check
  CHECK (engine_config = '' OR (engine_config LIKE 'eng%' AND octet_length(engine_config) <= 1024));

ALTER TABLE timings DROP CONSTRAINT timings_algo_check;
ALTER TABLE timings ADD CONSTRAINT timings_algo_check
  CHECK ((engine_config = '' AND algo >= 0) OR (engine_config <> '' AND algo = -1));

-- One measurement per (device, problem, micro-batch size, algorithm or engine configuration).
ALTER TABLE timings DROP CONSTRAINT timings_pkey;
ALTER TABLE timings ADD PRIMARY KEY (device_id, problem_id, micro_batch, algo, engine_config);

-- ucudnn schema 6: timings of the framework's own convolution (algo = -2) beside ucudnn's.
--
-- A training job measures what its framework runs for a kernel (e.g. PyTorch's own choice) at the
-- kernel's full mini-batch and submits it as algo = -2 with engine_config = the framework's
-- identity ("torch-2.11.0+cu130/benchmark": 1 to 128 bytes of printable ASCII). The primary key
-- (device_id, problem_id, micro_batch, algo, engine_config) already keeps the timings of two
-- frameworks apart; only the checks that knew two kinds of algorithm change.

ALTER TABLE timings DROP CONSTRAINT timings_engine_config_check;
ALTER TABLE timings ADD CONSTRAINT timings_engine_config_check
  CHECK (engine_config = ''
         OR (algo = -1 AND engine_config LIKE 'eng%' AND octet_length(engine_config) <= 1024)
         OR (algo = -2 AND octet_length(engine_config) <= 128
             AND engine_config ~ '^[ -~]+$'));

ALTER TABLE timings DROP CONSTRAINT timings_algo_check;
ALTER TABLE timings ADD CONSTRAINT timings_algo_check
  CHECK ((engine_config = '' AND algo >= 0) OR (engine_config <> '' AND algo IN (-1, -2)));

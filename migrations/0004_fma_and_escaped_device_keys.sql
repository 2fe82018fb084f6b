-- ucudnn schema 4: the fma math mode, and device keys that escape instead of replace.
--
-- 1. problems.math admits 'fma' (MATH_MODE_FMA of the proto; 0001 forgot it, so a request with
--    an fma kernel failed whole). Every other CHECK listing enum values already lists all of the
--    proto's (tests/store/enums_test.cc runs each through the database).
-- 2. DeviceFingerprint::Key() used to map ';' and '=' in the name and BLAS text to '_', so
--    "Evil;GPU=1" and "Evil_GPU_1" shared a key and timings. It now writes '%' as %25, ';' as
--    %3B and '=' as %3D (docs/problem-key.md). Keys of devices whose name and BLAS text hold
--    none of those three characters are unchanged; the others are rewritten here from the stored
--    columns, their id (FNV-1a-64 of the key) recomputed, and their timings, jobs and workers
--    moved to the new id. Their cached plans are dropped (a cache: recomputed on demand).

ALTER TABLE problems DROP CONSTRAINT problems_math_check;
ALTER TABLE problems ADD CONSTRAINT problems_math_check
  CHECK (math IN ('default', 'tensor_op', 'tensor_op_allow_conversion', 'fma'));

-- FNV-1a-64 of the UTF-8 bytes, as the BIGINT bit-cast the tables hold (numeric arithmetic:
-- exact modulo 2^64).
CREATE FUNCTION pg_temp.ucudnn_fnv1a64(key TEXT) RETURNS BIGINT LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  bytes BYTEA := convert_to(key, 'UTF8');
  h NUMERIC := 14695981039346656037;
  low INTEGER;
BEGIN
  FOR i IN 0 .. length(bytes) - 1 LOOP
    low := (h % 256)::INTEGER;
    h := h - low + (low # get_byte(bytes, i));
    h := (h * 1099511628211) % 18446744073709551616;
  END LOOP;
  IF h >= 9223372036854775808 THEN
    h := h - 18446744073709551616;
  END IF;
  RETURN h::BIGINT;
END $$;

CREATE FUNCTION pg_temp.ucudnn_key_escape(s TEXT) RETURNS TEXT LANGUAGE sql IMMUTABLE AS $$
  SELECT replace(replace(replace(s, '%', '%25'), ';', '%3B'), '=', '%3D')
$$;

CREATE TEMPORARY TABLE ucudnn_device_rekey ON COMMIT DROP AS
SELECT id AS old_id, new_key, pg_temp.ucudnn_fnv1a64(new_key) AS new_id
FROM (
  SELECT id,
         'v1;backend=' || pg_temp.ucudnn_key_escape(backend) ||
         ';name=' || pg_temp.ucudnn_key_escape(name) ||
         ';cc=' || cc_major || '.' || cc_minor || ';sm=' || sm_count ||
         ';mem=' || memory_bytes || ';cudnn=' || cudnn_version ||
         ';cuda=' || cuda_runtime_version || ';blas=' || pg_temp.ucudnn_key_escape(blas) AS new_key
  FROM devices
  WHERE name ~ '[%;=]' OR blas ~ '[%;=]'
) rekeyed;

-- The old row keeps its key until the new one exists: insert under a placeholder key first
-- (UNIQUE), move the children, drop the old row, then set the real key.
INSERT INTO devices (id, fingerprint_key, backend, name, cc_major, cc_minor, sm_count,
                     memory_bytes, cudnn_version, cuda_runtime_version, blas, first_seen)
SELECT r.new_id, 'v1;backend=rekey;' || r.old_id, d.backend, d.name, d.cc_major, d.cc_minor,
       d.sm_count, d.memory_bytes, d.cudnn_version, d.cuda_runtime_version, d.blas, d.first_seen
FROM ucudnn_device_rekey r JOIN devices d ON d.id = r.old_id;

UPDATE timings t SET device_id = r.new_id FROM ucudnn_device_rekey r WHERE t.device_id = r.old_id;
UPDATE jobs j SET device_id = r.new_id FROM ucudnn_device_rekey r WHERE j.device_id = r.old_id;
UPDATE workers w SET device_id = r.new_id FROM ucudnn_device_rekey r WHERE w.device_id = r.old_id;
DELETE FROM plans p USING ucudnn_device_rekey r WHERE p.device_id = r.old_id;
DELETE FROM devices d USING ucudnn_device_rekey r WHERE d.id = r.old_id;
UPDATE devices d SET fingerprint_key = r.new_key FROM ucudnn_device_rekey r WHERE d.id = r.new_id;

DROP FUNCTION pg_temp.ucudnn_key_escape(TEXT);
DROP FUNCTION pg_temp.ucudnn_fnv1a64(TEXT);

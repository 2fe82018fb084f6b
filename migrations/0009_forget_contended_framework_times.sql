-- ucudnn schema 9: the framework's own times taken while the problem was being benchmarked are
-- forgotten.
--
-- Training jobs before this schema timed their framework's own convolution (algo -2) a few
-- seconds after declaring their kernels, while a worker could still be benchmarking those very
-- problems on the same device (the README's stack, a cluster's first job): VGG-16 fp32's were
-- measured 1.8-2.5x slower than the framework runs them, and a framework time is kept as first
-- stored, so plans were chosen over a faster framework convolution for good (docs/torch-models.md,
-- session 29). Jobs now time it once the problems' plans are in. Here every framework time older
-- than a timing of the same device and problem is dropped: the next job of that framework times
-- it again. Cached plans need nothing: their key holds the digest of the timings they were
-- planned from.

DELETE FROM timings f
WHERE f.algo = -2
  AND EXISTS (SELECT 1 FROM timings t
              WHERE t.device_id = f.device_id AND t.problem_id = f.problem_id
                AND t.algo <> -2 AND t.measured_at > f.measured_at);

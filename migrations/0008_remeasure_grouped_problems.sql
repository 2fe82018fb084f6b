-- ucudnn schema 8: grouped and depthwise problems are measured again.
--
-- Workers before this schema probed a configuration at each micro-batch size without a warm-up
-- once it had run at a smaller size. A runtime-compiled cuDNN engine builds its code for each
-- size, so that first run paid the loading (0.5-1 ms against the 0.05 ms it takes): cuDNN's
-- fastest configurations for grouped and depthwise convolutions (the only problems whose
-- runtime-compiled engines workers measure) were kept at one slow sample and then skipped at
-- larger sizes, and plans ran configurations up to 10x slower than PyTorch's (docs/torch-models.md,
-- call 48). Their measured tables are dropped, so that the next plan request queues them again for
-- workers of this version. The framework's own times (algo -2) stay: a training job measured them.
-- Dense problems are unaffected. Cached plans need nothing: their key holds the digest of the
-- timings they were planned from.

DELETE FROM timings t
USING problems p
WHERE t.problem_id = p.id AND p.groups > 1 AND t.algo <> -2;

-- ucudnn schema 11: 3-D convolutions (issue 39).
--
-- A problem gains a depth: the input's (d), the filter's (t), and the depth's padding, stride and
-- dilation. Every row stored before is a 2-D problem, which is a 3-D one of depth 1, so the
-- defaults below describe them exactly; their canonical keys, hashes and timings stay valid (a
-- 2-D problem's key has no depth fields). A 1-D convolution is a 2-D one of height 1.
-- The CHECKs are core/problem.cc's bounds, as for the 2-D columns; a problem of depth 1 has no
-- depth stride or dilation but 1 (NormalizeDepth), so that it has one key.

ALTER TABLE problems
  ADD COLUMN d          INTEGER NOT NULL DEFAULT 1 CHECK (d BETWEEN 1 AND 32768),
  ADD COLUMN t          INTEGER NOT NULL DEFAULT 1 CHECK (t BETWEEN 1 AND 1024),
  ADD COLUMN pad_d      INTEGER NOT NULL DEFAULT 0 CHECK (pad_d >= 0),
  ADD COLUMN stride_d   INTEGER NOT NULL DEFAULT 1 CHECK (stride_d BETWEEN 1 AND 1024),
  ADD COLUMN dilation_d INTEGER NOT NULL DEFAULT 1 CHECK (dilation_d BETWEEN 1 AND 1024),
  ADD CONSTRAINT problems_depth_one_is_2d
    CHECK (d > 1 OR t > 1 OR pad_d > 0 OR (stride_d = 1 AND dilation_d = 1));

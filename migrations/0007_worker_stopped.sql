-- ucudnn schema 7: a worker that stops cleanly says so, so that the catalog shows it stopped at
-- once instead of alive until its heartbeat ages out. Registering again clears it.
ALTER TABLE workers ADD COLUMN stopped_at TIMESTAMPTZ;

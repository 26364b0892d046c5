-- Bodies of the four log trigger functions in log.sql, one per section, separated by
-- lines of the form "-- @name". Rendered with psycopg2.sql, then passed as string literals.

-- @insert
BEGIN
    INSERT INTO {log} ({key_cols}, "dmltype$$", "old_new$$")
    SELECT {new_keys}, 'I', 'N' FROM mvlog_new AS n;
    RETURN NULL;
END

-- @update
-- One FULL JOIN of the old and new keys: a key in both is an update (U, N); a key only in the
-- new rows was set by a key-changing UPDATE (I, N), one only in the old rows was left (D, O).
-- Primary key columns are NOT NULL, so a NULL key column means "no row on that side". A full
-- join cannot run as a nested loop, so the plan PL/pgSQL caches for the session's first call
-- stays linear in the rows of every later UPDATE (a nested loop made a 20k-row UPDATE after a
-- one-row UPDATE take 56 s instead of 0.35 s).
BEGIN
    INSERT INTO {log} ({key_cols}, "dmltype$$", "old_new$$")
    SELECT {either_keys},
           CASE WHEN {old_first_key} IS NULL THEN 'I' WHEN {new_first_key} IS NULL THEN 'D' ELSE 'U' END,
           CASE WHEN {new_first_key} IS NULL THEN 'O' ELSE 'N' END
    FROM mvlog_new AS n FULL JOIN mvlog_old AS o ON {keys_equal};
    RETURN NULL;
END

-- @delete
BEGIN
    INSERT INTO {log} ({key_cols}, "dmltype$$", "old_new$$")
    SELECT {old_keys}, 'D', 'O' FROM mvlog_old AS o;
    RETURN NULL;
END

-- @truncate
BEGIN
    INSERT INTO {log} ("dmltype$$", "old_new$$") VALUES ('T', 'O');
    RETURN NULL;
END

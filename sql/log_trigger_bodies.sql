-- Bodies of the four log trigger functions in log.sql, one per section, separated by
-- lines of the form "-- @name". Rendered with psycopg2.sql, then passed as string literals.

-- @insert
BEGIN
    INSERT INTO {log} ({key_cols}, "dmltype$$", "old_new$$")
    SELECT {new_keys}, 'I', 'N' FROM mvlog_new AS n;
    RETURN NULL;
END

-- @update
-- A key-changing UPDATE logs the old key as a delete and the new key as an insert.
BEGIN
    INSERT INTO {log} ({key_cols}, "dmltype$$", "old_new$$")
    SELECT {new_keys}, CASE WHEN {old_first_key} IS NULL THEN 'I' ELSE 'U' END, 'N'
    FROM mvlog_new AS n LEFT JOIN mvlog_old AS o ON {keys_equal}
    UNION ALL
    SELECT {old_keys}, 'D', 'O'
    FROM mvlog_old AS o WHERE NOT EXISTS (SELECT FROM mvlog_new AS n WHERE {keys_equal});
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

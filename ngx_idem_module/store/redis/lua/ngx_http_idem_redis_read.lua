-- A record as the status endpoint shows it, with the record prelude
-- before it: Redis's time, then the record's fields but the stored
-- answer; just the time when there is no record.  KEYS[1]: the record.
return fields({string.format('%.0f', now)})

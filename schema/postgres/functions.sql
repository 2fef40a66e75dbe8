-- durably-journal on PostgreSQL: the functions that let the journal's portable SQL read `json`
-- payloads as it reads SQLite's TEXT ones.
--
-- The journal caps a payload before reading it: `CASE WHEN octet_length(c) <= cap THEN c END,
-- octet_length(c)`, and a listing reads `substr(c, 1, 96)`. SQLite answers `octet_length` of a
-- stored text from the record header without reading the value, which a CAST around the column
-- would defeat, so the SQL stays as it is on both backends; PostgreSQL has no `octet_length` or
-- `substr` of `json`, so these two give them, as the same functions of its text. They are found
-- by the exact argument type before any cast, so they never shadow the built-in ones.
--
-- Applied with the journal's baseline, right after schema/postgres/0001_journal.sql. Every
-- statement replaces what it defines, so the file applies again to a schema that has it.

-- The size of a payload in bytes, as SQLite's `octet_length` counts stored text.
CREATE OR REPLACE FUNCTION octet_length(payload json) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN octet_length(payload::text);

-- The characters of a payload from `start` (1-based), `count` of them, as SQLite's `substr`.
CREATE OR REPLACE FUNCTION substr(payload json, start integer, count integer) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN substr(payload::text, start, count);
